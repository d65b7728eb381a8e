//! The format of an entry: its header, the sections it lies in, the checksum of each array,
//! and the files it was built from as it records them.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::backend::ServedFile;

/// What a cache file holds and how; a file of another format is not read.
pub(super) const FORMAT: &str = "tally-prepared/3";
/// The first and last bytes of an entry.
pub(super) const MAGIC: &[u8; 8] = b"TALLYPR2";
/// Sections start at multiples of this (Arrow buffers are aligned to it within a section).
pub(super) const ALIGN: u64 = 64;
/// The largest header read.
pub(super) const MAX_HEADER: u64 = 64 << 20;

/// A data file as the entry was built from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedFile {
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// Nanoseconds since the Unix epoch.
    pub modified: Option<u128>,
}

/// Where a section lies in the entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Section {
    pub offset: u64,
    pub len: u64,
}

/// What an entry says of itself, beside its table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    /// The Tally that wrote it: another release may prepare differently (folding, layout).
    pub tally: String,
    pub dataset: String,
    pub version: String,
    pub rows: usize,
    pub files: Vec<CachedFile>,
    pub extract: Option<String>,
    pub notes: Vec<String>,
    /// The fields (by index) whose dictionaries the values section holds, in its order.
    pub text_fields: Vec<usize>,
    pub chunks: Section,
    pub values: Section,
    /// Per chunk, the checksum of each stored column ([`digest`]).
    pub digests: Vec<Vec<u32>>,
    /// Per text field (in `text_fields` order), the checksum of its dictionary.
    pub value_digests: Vec<u32>,
    /// Per text field (in `text_fields` order), the checksum of its folded values.
    pub folded_digests: Vec<u32>,
    /// Per declared field, what preparing found of its values (`inspect_dataset` reads them
    /// instead of the records). Absent in entries written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Vec<crate::store::FieldStats>>,
}

impl Header {
    /// The header of a dataset version's table, written by this Tally (the rest filled by
    /// the writer).
    pub fn new(dataset: &str, version: &str) -> Header {
        Header {
            format: FORMAT.to_string(),
            tally: env!("CARGO_PKG_VERSION").to_string(),
            dataset: dataset.to_string(),
            version: version.to_string(),
            rows: 0,
            files: Vec::new(),
            extract: None,
            notes: Vec::new(),
            text_fields: Vec::new(),
            chunks: Section::default(),
            values: Section::default(),
            digests: Vec::new(),
            value_digests: Vec::new(),
            folded_digests: Vec::new(),
            stats: None,
        }
    }
}

/// The schema of the values section: per text field, its dictionary and the folded forms.
pub(super) fn values_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("value", DataType::Utf8, false),
        Field::new("folded", DataType::Utf8, true),
    ]))
}

/// A checksum of an array's contents (its values, offsets and null bits from its offset on,
/// never bytes past its end): what was written is what is read.
///
/// Null bits count only when some value is null. An array may carry a validity bitmap with
/// every bit set (a numeric cast such as `UInt32` → `Int64` or `Float32` → `Float64` always
/// makes one), but the Arrow IPC writer writes no bitmap when the null count is zero and the
/// reader gives such a column none: hashing those bits would make every such chunk fail its
/// check when read back. Without nulls the bits say nothing the values do not.
pub fn digest(array: &dyn Array) -> u32 {
    use datafusion::arrow::datatypes::ArrowNativeType;
    let mut h = crc32fast::Hasher::new();
    let data = array.to_data();
    let (offset, len) = (data.offset(), data.len());
    h.update(&(len as u64).to_le_bytes());
    match array.data_type() {
        DataType::Utf8 => {
            let s = array.as_string::<i32>();
            let offsets = s.value_offsets();
            let first = offsets.first().copied().unwrap_or(0);
            for o in offsets {
                h.update(&(*o - first).to_le_bytes());
            }
            let (start, end) = (
                first.as_usize(),
                offsets.last().copied().unwrap_or(0).as_usize(),
            );
            h.update(s.value_data().get(start..end).unwrap_or(&[]));
        }
        other => {
            if let (Some(width), Some(values)) = (other.primitive_width(), data.buffers().first()) {
                h.update(
                    values
                        .as_slice()
                        .get(offset * width..(offset + len) * width)
                        .unwrap_or(&[]),
                );
            }
        }
    }
    if let Some(nulls) = array.nulls().filter(|n| n.null_count() > 0) {
        for bits in nulls.inner().bit_chunks().iter_padded() {
            h.update(&bits.to_le_bytes());
        }
    }
    h.finalize()
}

pub(super) fn nanos(t: SystemTime) -> Option<u128> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_nanos())
}

/// The files a prepared table was built from, as an entry records them.
pub fn cached_files(files: &[ServedFile]) -> Vec<CachedFile> {
    files
        .iter()
        .map(|f| CachedFile {
            path: f.path.clone(),
            size: f.size,
            sha256: f.sha256.clone(),
            modified: f.modified.and_then(nanos),
        })
        .collect()
}

/// Why an entry was not used (logged, then the entry is removed).
#[derive(Debug)]
pub struct Miss(String);

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub(super) fn miss(why: impl Into<String>) -> Miss {
    Miss(why.into())
}
