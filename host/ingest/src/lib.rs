//! Getting data into Tally.
//!
//! [`add`] converts a file a publisher ships — CSV or TSV in UTF-8, Shift_JIS (cp932) or
//! EUC-JP, an XLSX workbook, Parquet, JSON Lines — into a dataset folder's Parquet file. When
//! the folder has a `dataset.yaml`, the file's columns are taken as it declares them (by
//! `csv_col_index` and name, after `source.csv_header_rows` header rows) and any drift is an
//! error listing each difference; when it has none, a skeleton is written with every guess a
//! person must confirm marked `# TODO`. [`fetch`](fetch::fetch) downloads the publisher's
//! current file from the page `source.url` names and converts it the same way.
//!
//! Architecture invariant: this crate knows files, encodings and HTTP, never MCP or the query
//! engine. Everything it writes appears atomically (written under a hidden name in the
//! datasets directory, synced, then renamed), so a running server reloads once and never
//! reads half a file; on any error what was served stays as it was.

mod add;
mod answers;
mod columnar;
pub mod error;
pub mod fetch;
mod folder;
mod infer;
mod input;
pub mod read;
mod sheet;
pub mod skeleton;
pub mod values;
mod write;

pub use add::{AddOptions, ColumnSummary, InputSummary, Progress, Silent, Summary, add};
pub use error::{IngestError, Place};
pub use folder::{DEFINITION_FILE, remove_stale_staging};
pub use read::{Format, ReadOptions};
pub use sheet::DEFAULT_MAX_UNPACKED;
