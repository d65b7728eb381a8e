//! The catalog: every dataset folder of a datasets directory, registered or reported broken.
//!
//! Registration reads the definition and the data's metadata (for Parquet, the footer), and
//! checks that they fit: every declared field is a column of the data with a usable type.
//! A dataset that does not fit is listed as broken with its reasons; it never stops the
//! others from being served.

mod register;
mod scan;
mod snapshot;

pub use register::{DEFINITION_FILE, FETCH_RECORD, Options, read_every_page, register};
pub use scan::{QUIET, REGISTRATIONS_AT_ONCE, WRITING_MARKER, dataset_folders};
pub use snapshot::{Broken, Catalog, Changes};
