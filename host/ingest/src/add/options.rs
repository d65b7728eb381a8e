//! What `tally add` is asked to do, and whom it tells how far it has got.

use std::path::PathBuf;

use crate::read::ReadOptions;

/// Told how far reading has got. The command line draws a bar on a terminal and writes
/// plain lines otherwise.
pub trait Progress {
    /// A new phase (`reading`, `converting`, `downloading`) over `total` bytes.
    fn begin(&self, phase: &str, total: u64);
    /// Rows and bytes done in this phase so far.
    fn update(&self, rows: u64, bytes: u64);
    /// The phase is over.
    fn end(&self);
}

/// No progress reports (tests, libraries).
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn begin(&self, _: &str, _: u64) {}
    fn update(&self, _: u64, _: u64) {}
    fn end(&self) {}
}

/// What `tally add` was asked to do.
#[derive(Debug, Clone)]
pub struct AddOptions {
    pub dataset_id: String,
    pub file: PathBuf,
    pub datasets: PathBuf,
    pub read: ReadOptions,
    /// Rows above the data (the last is the header); default `source.csv_header_rows`, else
    /// 1 (with a one-cell title row above the header detected when there is no definition).
    pub header_rows: Option<u32>,
    /// Convert even when the file no longer matches `dataset.yaml`.
    pub accept_drift: bool,
    /// Values to store as empty, beside `source.null_markers`.
    pub null_markers: Vec<String>,
    /// Keep `.fetch.json` (set by `fetch`, which writes a new one). Otherwise replacing the
    /// data removes it: the data no longer comes from the fetched file.
    pub keep_fetch_record: bool,
}
