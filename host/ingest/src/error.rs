//! Errors of getting data in, named by who must act.

use std::fmt;
use std::path::PathBuf;

/// Where in an input file something was found: a line of a text file, or a cell of a sheet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub file: PathBuf,
    /// 1-based row: the line of a CSV record (its first line when a quoted value spans
    /// several), the row of a sheet, the line of a JSON Lines file.
    pub row: Option<u64>,
    /// 0-based column index.
    pub column: Option<usize>,
    /// The column's header, when known.
    pub header: Option<String>,
    /// Sheets name cells (`D17`) rather than columns.
    pub sheet: bool,
}

impl Place {
    pub fn file(file: impl Into<PathBuf>) -> Place {
        Place {
            file: file.into(),
            row: None,
            column: None,
            header: None,
            sheet: false,
        }
    }

    pub fn row(mut self, row: u64) -> Place {
        self.row = Some(row);
        self
    }

    pub fn column(mut self, column: usize, header: Option<&str>) -> Place {
        self.column = Some(column);
        self.header = header.map(str::to_string);
        self
    }
}

/// `A`, `B`, …, `Z`, `AA`: a sheet's name for the 0-based column `index`.
pub fn column_letters(index: usize) -> String {
    let mut n = index + 1;
    let mut out = Vec::new();
    while n > 0 {
        let rem = (n - 1) % 26;
        out.push(b'A' + rem as u8);
        n = (n - 1) / 26;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        match (self.sheet, self.row, self.column) {
            (true, Some(r), Some(c)) => write!(f, ", cell {}{r}", column_letters(c))?,
            (_, Some(r), Some(c)) => write!(f, ", row {r}, column {}", c + 1)?,
            (_, Some(r), None) => write!(f, ", row {r}")?,
            (true, None, Some(c)) => write!(f, ", column {}", column_letters(c))?,
            (false, None, Some(c)) => write!(f, ", column {}", c + 1)?,
            (_, None, None) => {}
        }
        if let Some(h) = &self.header {
            write!(f, " ({h})")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The input file: its bytes, its layout or its values. Fix the file or say how to read
    /// it (`--encoding`, `--header-rows`, `--sheet`).
    #[error("{place}: {message}")]
    Input {
        place: Place,
        message: String,
        /// What would work.
        hint: String,
    },
    /// The file no longer has the shape `dataset.yaml` declares (each difference listed).
    #[error(
        "{file} does not match {definition}:\n{}",
        differences.iter().map(|d| format!("  - {d}")).collect::<Vec<_>>().join("\n")
    )]
    Drift {
        file: PathBuf,
        definition: PathBuf,
        differences: Vec<String>,
    },
    /// The dataset folder or its definition: fix `dataset.yaml` or pick another id.
    #[error("{message}")]
    Dataset { message: String, hint: String },
    /// A limit that protects the machine (expanded size, download size, time).
    #[error("{message}")]
    Limit { message: String, hint: String },
    /// Fetching from the publisher failed or was refused.
    #[error("{message}")]
    Fetch { message: String, hint: String },
    /// Reading or writing local files failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A bug in Tally.
    #[error("internal error: {0}")]
    Internal(String),
}

impl IngestError {
    pub fn input(place: Place, message: impl Into<String>, hint: impl Into<String>) -> Self {
        IngestError::Input {
            place,
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        IngestError::Io {
            context: context.into(),
            source,
        }
    }

    pub fn dataset(message: impl Into<String>, hint: impl Into<String>) -> Self {
        IngestError::Dataset {
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn fetch(message: impl Into<String>, hint: impl Into<String>) -> Self {
        IngestError::Fetch {
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn limit(message: impl Into<String>, hint: impl Into<String>) -> Self {
        IngestError::Limit {
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// What would work, when there is something to say.
    pub fn hint(&self) -> Option<&str> {
        match self {
            IngestError::Input { hint, .. }
            | IngestError::Dataset { hint, .. }
            | IngestError::Limit { hint, .. }
            | IngestError::Fetch { hint, .. } => Some(hint.as_str()).filter(|h| !h.is_empty()),
            IngestError::Drift { .. } => Some(
                "update dataset.yaml to the file's columns (`tally add` on a copy of the folder without dataset.yaml writes a skeleton to compare), or pass --accept-drift to convert anyway",
            ),
            IngestError::Io { .. } | IngestError::Internal(_) => None,
        }
    }

    /// A short machine-readable kind for the JSON error body.
    pub fn kind(&self) -> &'static str {
        match self {
            IngestError::Input { .. } => "bad_input",
            IngestError::Drift { .. } => "schema_drift",
            IngestError::Dataset { .. } => "dataset",
            IngestError::Limit { .. } => "limit_exceeded",
            IngestError::Fetch { .. } => "fetch_failed",
            IngestError::Io { .. } => "io",
            IngestError::Internal(_) => "internal",
        }
    }
}
