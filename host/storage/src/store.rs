//! The prepared table of a dataset version: every declared field in its canonical type, text
//! dictionary-encoded with one dictionary per field for the whole table, held in memory or
//! mapped from the cache, and the table provider queries run on.
//!
//! What is stored is only the declared fields: numbers as `Int64`/`Float64`, text as `UInt32`
//! codes into its field's dictionary (code 0 is always `""`; a null keeps code 0 and its null
//! bit). A repeated value is one dictionary entry however many records hold it, so a survey of
//! 7.5 million records whose text fields repeat a few thousand values takes a few bytes per
//! field and record. Everything else a query needs is derived when the table is scanned, batch
//! by batch: the row number (file order), the integer code column of a groupable field (its
//! dictionary codes as they are, no copy), and the 0/1 column of a `count_where` measure (one
//! test per dictionary value, then a lookup per record).
//!
//! A mapped store decodes and checks a column the first time a call needs it (Arrow's
//! validation of its buffers, every code against its dictionary), so a start with a large
//! cached table costs the columns the first call touches, not all of them.

mod build;
mod intern;
mod layout;
mod plans;
mod scan;
mod share;
mod stats;
mod table;
#[cfg(test)]
mod tests;

pub use build::{Builder, CHUNK_ROWS, ChunkSink, InMemory};
pub use intern::Dictionary;
pub(crate) use layout::Out;
pub use layout::{
    Layout, RESERVED_PREFIX, ROW_COL, canonical_type, code_column, dictionary_column, share_column,
    text_type,
};
pub use plans::{BatchMap, MapExec, StreamPlan};
pub use scan::PreparedTable;
pub(crate) use scan::external;
pub use share::Share;
pub use stats::FieldStats;
pub use table::{Columns, Damage, Store};
