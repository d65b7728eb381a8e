//! What is served now: the fetch record that still describes the data (same file, same
//! definition), and the headers that make a download conditional on a change.

use std::path::Path;

use sha2::Digest;
use url::Url;

use super::model::{FetchOptions, FetchRecord};
use crate::folder::{DEFINITION_FILE, FETCH_RECORD};

/// The data served now and where it came from.
pub(super) struct Served {
    /// The SHA-256 of the folder's `dataset.yaml`.
    pub(super) definition_sha256: Option<String>,
    /// The folder's fetch record, when the data served was converted from the file it
    /// records, with this definition (and `--force` is not given).
    pub(super) current: Option<FetchRecord>,
    /// That record, when it is of the same link.
    pub(super) previous: Option<FetchRecord>,
}

/// What is served now: the fetch record that still describes the data, if any.
pub(super) fn served_now(
    options: &FetchOptions,
    folder: &Path,
    def: &tally_semantic::DatasetDef,
    asset: &Url,
) -> Served {
    let definition_sha256 = std::fs::read(folder.join(DEFINITION_FILE))
        .ok()
        .map(|b| sha256_text(&b));
    let served = served_source_hash(&folder.join(&def.data_file));
    let current = read_record(folder).filter(|r| {
        !options.force
            && served.as_deref() == Some(r.sha256.as_str())
            && r.definition_sha256 == definition_sha256
    });
    let previous = current.clone().filter(|r| r.asset_url == asset.as_str());
    Served {
        definition_sha256,
        current,
        previous,
    }
}

/// The headers that make the download conditional on the file having changed since the
/// previous fetch.
pub(super) fn conditional_headers(previous: Option<&FetchRecord>) -> Vec<(&'static str, String)> {
    let mut conditional: Vec<(&str, String)> = Vec::new();
    if let Some(p) = previous {
        if let Some(e) = &p.etag {
            conditional.push(("If-None-Match", e.clone()));
        }
        if let Some(m) = &p.last_modified {
            conditional.push(("If-Modified-Since", m.clone()));
        }
    }
    conditional
}

/// The SHA-256 of the file `tally add` converted the served data from (its footer record).
fn served_source_hash(data: &Path) -> Option<String> {
    let file = std::fs::File::open(data).ok()?;
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).ok()?;
    let kv = builder.metadata().file_metadata().key_value_metadata()?;
    let record = kv
        .iter()
        .find(|k| k.key == "tally.ingest")?
        .value
        .as_deref()?;
    let v: serde_json::Value = serde_json::from_str(record).ok()?;
    v.get("sha256")?.as_str().map(str::to_string)
}

fn sha256_text(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

fn read_record(folder: &Path) -> Option<FetchRecord> {
    // A fetch record is a few hundred bytes; the server reads it with the same cap.
    let text = tally_semantic::files::read_small(&folder.join(FETCH_RECORD), 64 * 1024).ok()?;
    serde_json::from_str(&text).ok()
}
