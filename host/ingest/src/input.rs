//! What every reader shares: a cell as a file holds it, a row, the input file (its format,
//! encoding and bounds), and the refusals every format words the same way. The readers of each
//! format (`read` for text, `sheet` for workbooks, `columnar` for Parquet and JSON Lines) build
//! on this module; none of them imports another's.

use std::path::PathBuf;

use encoding_rs::Encoding;

use crate::error::{IngestError, Place};

/// One cell as the file holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Empty,
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A date or date-time the file stores as such (a sheet's date cell), as ISO 8601 text.
    Date(String),
    /// A sheet's error value such as `#N/A`.
    Error(String),
}

impl Cell {
    pub fn is_empty(&self) -> bool {
        matches!(self, Cell::Empty)
    }

    /// The cell as text, as a person reading the file would see it: integral numbers without
    /// a fraction, other numbers in their shortest exact form.
    pub fn as_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        use std::borrow::Cow;
        Some(match self {
            Cell::Empty => return None,
            Cell::Text(s) => Cow::Borrowed(s.as_str()),
            Cell::Int(i) => Cow::Owned(i.to_string()),
            Cell::Float(f) => Cow::Owned(float_text(*f)),
            Cell::Bool(b) => Cow::Borrowed(if *b { "TRUE" } else { "FALSE" }),
            Cell::Date(s) | Cell::Error(s) => Cow::Borrowed(s.as_str()),
        })
    }
}

/// `3` for 3.0, `0.1` for 0.1: a float as a sheet shows it when it is not formatted.
pub fn float_text(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// What the visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// A row handed to the visitor.
#[derive(Debug)]
pub struct Row<'a> {
    /// 1-based: the line of a text file where the record starts, the row of a sheet.
    pub number: u64,
    pub cells: &'a [Cell],
    /// Bytes of the file read so far (for progress).
    pub bytes_read: u64,
}

/// The formats `tally add` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv { delimiter: u8 },
    Xlsx,
    Parquet,
    JsonLines,
}

impl Format {
    pub fn name(&self) -> &'static str {
        match self {
            Format::Csv { delimiter: b'\t' } => "tsv",
            Format::Csv { .. } => "csv",
            Format::Xlsx => "xlsx",
            Format::Parquet => "parquet",
            Format::JsonLines => "jsonl",
        }
    }

    /// Whether rows are cells of a sheet (errors name cells such as `D17`).
    pub fn is_sheet(&self) -> bool {
        matches!(self, Format::Xlsx)
    }

    /// Whether the format has header rows (Parquet and JSON Lines name their columns).
    pub fn has_header_rows(&self) -> bool {
        matches!(self, Format::Csv { .. } | Format::Xlsx)
    }
}

/// How to read a file: what the command line said, or nothing to detect it.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// A WHATWG encoding label (`utf-8`, `shift_jis`, `cp932`, `euc-jp`, …).
    pub encoding: Option<String>,
    pub sheet: Option<String>,
    /// Cap on what a workbook may expand to, in bytes (0: [`DEFAULT_MAX_UNPACKED`](crate::DEFAULT_MAX_UNPACKED)).
    pub max_unpacked_bytes: u64,
    /// Cap on the columns read (0: [`DEFAULT_MAX_COLUMNS`]).
    pub max_columns: usize,
}

/// Columns read at most, unless `--max-columns` says otherwise. Every column costs memory
/// while a file is converted (its statistics, its builder and its Parquet column writer, a
/// few tens of KiB even when empty), and a `dataset.yaml` declaring more than about 20,000
/// fields is past what a definition may hold (4 MiB, 200,000 values): 10,000 is far beyond
/// any table a publisher ships (Excel itself stops at 16,384) and keeps the per-column part
/// of the memory budget in the hundreds of MiB.
pub const DEFAULT_MAX_COLUMNS: usize = 10_000;

/// The refusal of a row, a file or a key set with more columns than the cap.
pub(crate) fn too_many_columns(place: Place, what: String, cap: usize) -> IngestError {
    IngestError::limit(
        format!(
            "{place}: {what}, more than the {} columns tally add reads (--max-columns)",
            count_text(cap as u64)
        ),
        "if the file really has that many columns, raise the cap with --max-columns N (each column costs some tens of KiB while converting); otherwise check the delimiter, the header row, or the keys of the JSON objects",
    )
}

/// An input file, its format and how its text is decoded.
#[derive(Debug, Clone)]
pub struct Input {
    pub path: PathBuf,
    pub format: Format,
    /// The text encoding (text formats).
    pub encoding: Option<&'static Encoding>,
    /// How the encoding was chosen, for the summary.
    pub encoding_source: Option<&'static str>,
    /// The sheet read (workbooks).
    pub sheet: Option<String>,
    /// Sheets of the workbook (for the summary and errors).
    pub sheets: Vec<String>,
    pub size: u64,
    /// Columns read at most: a row, header or key set past it is refused as it is read.
    pub max_columns: usize,
}

/// The longest record a text file may hold. A quote that is never closed makes the rest of
/// the file one value; this stops reading it (and holding it) long before the end.
pub const MAX_RECORD_BYTES: u64 = 16 << 20;

/// A count with thousands separators ("12,345").
pub(crate) fn count_text(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
