//! The download: the answer checked, the body written to the staging folder within
//! `--max-bytes` and verified to be what its name says, then converted and recorded.

use std::io::{Read, Write};
use std::path::Path;

use sha2::Digest;
use url::Url;

use super::model::{FetchOptions, FetchRecord};
use crate::add::{Progress, Summary};
use crate::error::IngestError;
use crate::folder::{FETCH_RECORD, Staging, rename, write_synced};

/// Refuses an answer other than 200, and a file whose `Content-Length` is past `--max-bytes`.
pub(super) fn check_answer(
    final_asset: &Url,
    status: u16,
    length: Option<u64>,
    max_bytes: u64,
) -> Result<(), IngestError> {
    if status != 200 {
        return Err(IngestError::fetch(
            format!("{final_asset} answered HTTP {status}; nothing was changed"),
            "try again later, or check the link on the publisher's page",
        ));
    }
    if let Some(n) = length
        && n > max_bytes
    {
        return Err(IngestError::limit(
            format!(
                "{final_asset} is {n} bytes, more than --max-bytes {max_bytes}; nothing was downloaded"
            ),
            "raise --max-bytes if the file is expected to be this large",
        ));
    }
    Ok(())
}

/// The file's name as it may be written in the staging folder: no separators or control
/// characters, and not hidden.
pub(super) fn safe_file_name(name: &str) -> String {
    let safe_name: String = name
        .chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if safe_name.is_empty() || safe_name.starts_with('.') {
        format!("download{safe_name}")
    } else {
        safe_name
    }
}

/// Writes the body of `resp` to `download` (synced), stopping past `max_bytes`; refuses a
/// body shorter than its `Content-Length`. Returns its size and SHA-256.
pub(super) fn download_to(
    download: &Path,
    resp: &mut ureq::http::Response<ureq::Body>,
    final_asset: &Url,
    length: Option<u64>,
    max_bytes: u64,
    progress: &dyn Progress,
) -> Result<(u64, String), IngestError> {
    let mut file = std::fs::File::create(download)
        .map_err(|e| IngestError::io(format!("cannot write {}", download.display()), e))?;
    let mut hasher = sha2::Sha256::new();
    let mut size: u64 = 0;
    progress.begin("downloading", length.unwrap_or(0));
    {
        let mut reader = resp
            .body_mut()
            .with_config()
            .limit(max_bytes.saturating_add(1))
            .reader();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = reader.read(&mut buf).map_err(|e| {
                let text = e.to_string();
                if text.contains("limit") || text.contains("exceeds") {
                    IngestError::limit(
                        format!("{final_asset} sends more than --max-bytes {max_bytes}; the download was stopped and nothing was changed"),
                        "raise --max-bytes if the file is expected to be this large",
                    )
                } else {
                    IngestError::fetch(
                        format!("the download of {final_asset} broke off after {size} bytes ({text}); nothing was changed"),
                        "try again later",
                    )
                }
            })?;
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > max_bytes {
                return Err(IngestError::limit(
                    format!(
                        "{final_asset} sends more than --max-bytes {max_bytes}; the download was stopped and nothing was changed"
                    ),
                    "raise --max-bytes if the file is expected to be this large",
                ));
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| IngestError::io(format!("cannot write {}", download.display()), e))?;
            progress.update(0, size);
        }
    }
    progress.end();
    file.sync_all()
        .map_err(|e| IngestError::io(format!("cannot write {}", download.display()), e))?;
    drop(file);
    if let Some(n) = length
        && n != size
    {
        return Err(IngestError::fetch(
            format!(
                "the download of {final_asset} is truncated: {size} of {n} bytes arrived; nothing was changed"
            ),
            "try again later",
        ));
    }
    Ok((size, format!("sha256:{:x}", hasher.finalize())))
}

/// Checks that the downloaded bytes are what the file's name says.
pub(super) fn verify_kind(
    path: &Path,
    name: &str,
    content_type: Option<&str>,
) -> Result<(), IngestError> {
    let mut head = [0u8; 512];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| IngestError::io("cannot read the downloaded file", e))?;
    let head = &head[..n];
    let html = crate::read::looks_like_html(head);
    let ext = Path::new(name)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let what = crate::read::describe_head(head);
    let ok = match ext.as_str() {
        // A compound file is an encrypted (or old) workbook: `add` says which.
        "xlsx" | "xlsm" => {
            head.starts_with(b"PK\x03\x04")
                || head.starts_with(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1])
        }
        "parquet" => head.starts_with(b"PAR1"),
        _ => {
            !html && !content_type.is_some_and(|t| t.to_ascii_lowercase().starts_with("text/html"))
        }
    };
    if !ok {
        return Err(IngestError::fetch(
            format!(
                "the server sent {what}{} instead of the .{ext} file {name}; nothing was changed",
                content_type.map(|t| format!(" ({t})")).unwrap_or_default()
            ),
            "the publisher's link may be broken or need a login; open it in a browser, or download the file yourself and use tally add",
        ));
    }
    Ok(())
}

/// Converts the downloaded file through [`add`](crate::add), then writes the fetch record
/// beside the data.
pub(super) fn convert_and_record(
    options: &FetchOptions,
    staging: &Staging,
    download: &Path,
    folder: &Path,
    record: &FetchRecord,
    progress: &dyn Progress,
) -> Result<Summary, IngestError> {
    // Convert, then record: the data is in place before the record that describes it.
    let mut add = options.add.clone();
    add.dataset_id = options.dataset_id.clone();
    add.datasets = options.datasets.clone();
    add.file = download.to_path_buf();
    add.keep_fetch_record = true;
    let added = crate::add::add(&add, progress)?;
    let text = serde_json::to_string_pretty(record)
        .map_err(|e| IngestError::io("cannot write the fetch record", std::io::Error::other(e)))?;
    let staged = staging.dir.join(FETCH_RECORD);
    write_synced(&staged, &format!("{text}\n"))?;
    rename(&staged, &folder.join(FETCH_RECORD))?;
    Ok(added)
}
