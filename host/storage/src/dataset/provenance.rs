//! What a dataset version says of where its data comes from: the date it was retrieved, and
//! a change of its folder or source that could not be served.

use tally_semantic::definition::DateValue;

/// Where the retrieval date of a dataset comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retrieved {
    /// `.fetch.json` beside the data (`fetched_at`).
    FetchRecord(DateValue),
    /// `retrieved_at` in dataset.yaml.
    Definition(DateValue),
    /// Neither: the data file's modification time (said in a warning).
    FileModified(String),
    Unknown,
}

impl Retrieved {
    pub fn value(&self) -> Option<&str> {
        match self {
            Retrieved::FetchRecord(d) | Retrieved::Definition(d) => Some(d.as_str()),
            Retrieved::FileModified(s) => Some(s),
            Retrieved::Unknown => None,
        }
    }
}

/// A change of a served dataset's folder or source that could not be served: this version
/// goes on serving, and each answer from it says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedChange {
    /// When the change was first seen (RFC 3339).
    pub since: String,
    /// The problems, in words (`data: no Parquet object … is under s3://…`).
    pub reason: String,
    /// The data this version was read from is no longer at its source (deleted or moved).
    pub data_gone: bool,
}
