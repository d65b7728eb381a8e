//! Prepared tables on disk. The first preparation of a dataset version writes its prepared
//! table (every declared field in its canonical type, text as codes into one dictionary per
//! field) into the cache directory as it is built, one chunk at a time; later starts map that
//! file instead of preparing again, so the first answer after a restart costs a check of the
//! file's frame and of the columns the first call reads, not a pass over the data.
//!
//! An entry is one file, named by the dataset id and version, written under a temporary name
//! and renamed into place (two servers sharing a directory never see half a file), and never
//! changed after:
//!
//! ```text
//! "TALLYPR2" · padding to 64 · chunks: an Arrow IPC file (the stored columns, one record
//! batch per chunk) · padding · values: an Arrow IPC file (one batch per text field: its
//! dictionary, and each value's folded form where folding changes it, which text search reads)
//! · the header as JSON · its length (u64 LE) · "TALLYPR2"
//! ```
//!
//! A mapped entry is checked before it is served: the frame (magic at both ends, the header,
//! the sections inside the file), the header (format, Tally version, dataset, version, rows),
//! the stored schema the definition asks for, every chunk's row count, and every data file's
//! size, time and (when the time moved) hash. Each column is then checked when first read
//! (Arrow's validation, every code inside its dictionary). Anything that does not check out is
//! a miss or marks the entry damaged: it is removed and the data prepared anew.

mod directory;
mod format;
mod read;
mod write;

pub use directory::{Cache, check_private, create_private};
pub use format::{CachedFile, Header, Miss, Section, cached_files, digest};
pub use read::{Entry, HITS, MISSES, Mapped};
pub use write::Writer;
