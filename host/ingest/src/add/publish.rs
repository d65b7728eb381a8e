//! The conversion made public: the record kept in the Parquet file's metadata, and the
//! staged data (and a skeleton written) moved into the dataset's folder.

use std::path::{Path, PathBuf};

use sha2::Digest;

use super::header::Header;
use super::open::Opened;
use super::options::AddOptions;
use crate::error::IngestError;
use crate::folder::{DEFINITION_FILE, FETCH_RECORD, Staging, rename, write_synced};
use crate::input::Input;

/// The record of the conversion kept in the Parquet file's metadata (`tally.ingest`): the
/// file converted, its hash, and how it was read.
pub(super) fn ingest_record(
    input: &Input,
    header: &Header,
    file_name: &str,
    sha256: &str,
) -> String {
    let converted_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let record = serde_json::json!({
        "tool": "tally add",
        "version": env!("CARGO_PKG_VERSION"),
        "converted_at": converted_at,
        "file": file_name,
        "sha256": sha256,
        "bytes": input.size,
        "format": input.format.name(),
        "encoding": input.encoding.map(|e| e.name()),
        "sheet": input.sheet,
        "header_rows": header.header_rows,
    });
    record.to_string()
}

/// Moves the staged data, and a skeleton written, into the dataset's folder, and returns
/// where the data is now.
pub(super) fn put_in_place(
    options: &AddOptions,
    opened: &Opened,
    mut staging: Staging,
    yaml: Option<&str>,
    file_name: &str,
    warnings: &mut Vec<String>,
) -> Result<PathBuf, IngestError> {
    let folder = &opened.folder;
    let staged_data = staging.dir.join(&opened.data_file);
    // Into place: a new folder appears whole; an existing one gets its data first and then
    // the definition (a folder without one is not served, so it is never seen half-made).
    let target_data = folder.join(&opened.data_file);
    if !folder.exists() {
        if let Some(text) = yaml {
            write_synced(&staging.dir.join(DEFINITION_FILE), text)?;
        }
        staging.release_lock();
        rename(&staging.dir, folder)?;
        staging.keep = true;
    } else {
        rename(&staged_data, &target_data)?;
        let record = folder.join(FETCH_RECORD);
        if !options.keep_fetch_record && record.exists() {
            match std::fs::remove_file(&record) {
                Ok(()) => warnings.push(format!(
                    "{} was removed: the data served is now converted from {file_name}, not from the file fetched",
                    FETCH_RECORD
                )),
                Err(e) => warnings.push(format!(
                    "{} could not be removed ({e}): answers will cite the file fetched before, not {file_name}",
                    FETCH_RECORD
                )),
            }
        }
        if let Some(text) = yaml {
            let staged_yaml = staging.dir.join(DEFINITION_FILE);
            write_synced(&staged_yaml, text)?;
            rename(&staged_yaml, &folder.join(DEFINITION_FILE))?;
        }
    }
    drop(staging);
    Ok(target_data)
}

pub(super) fn sha256_file(path: &Path) -> Result<String, IngestError> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| IngestError::io(format!("cannot read {}", path.display()), e))?;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hasher)
        .map_err(|e| IngestError::io(format!("cannot read {}", path.display()), e))?;
    Ok(format!("sha256:{:x}", hasher.finalize()))
}
