//! The built-in Parquet backend's file access.
//!
//! Registration reads the footer only (schema and row count), so a datasets directory with
//! many large files is listed at once; the data is read when a dataset is first queried. The
//! bytes are read once into memory and parsed from there, so the hash the envelope reports
//! (`contentHash`) is of exactly the bytes that were served.
//!
//! Architecture invariant: knows nothing of the host beyond file access; the engine adapts it
//! to its backend trait.

mod file;
pub mod groups;
pub mod pages;
pub mod set;

pub use file::{
    Blob, ChunkAt, Data, Error, Footer, Footers, MAX_FOOTER_BYTES, Meter, SETTLED, Stamp, clock_ns,
    decode, new_bytes, read_at, read_data, read_footer, read_footer_of,
};
pub use pages::MAX_EXPANSION;
