//! What is wrong with a dataset folder, said so that its owner can fix it: the problems a
//! registration meets (line, key, reason, fix), and the reading of the small files a folder
//! holds (definitions, fetch records), bounded before they are read.

use std::path::Path;

use serde::Serialize;
use tally_semantic::definition::Diagnostic;

/// One problem of a dataset folder: where, what is wrong, and what would work.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key: String,
    pub reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

impl Problem {
    pub(crate) fn from_diagnostic(d: &Diagnostic) -> Problem {
        Problem {
            line: Some(d.line),
            key: d.path.clone(),
            reason: d.message.clone(),
            fix: d.fix.clone(),
        }
    }

    pub fn plain(reason: impl Into<String>, fix: impl Into<String>) -> Problem {
        Problem {
            line: None,
            key: String::new(),
            reason: reason.into(),
            fix: fix.into(),
        }
    }
}

/// Why a folder could not be registered.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub problems: Vec<Problem>,
    /// The file may still be being written (YAML that does not parse, a Parquet file without
    /// a complete footer): retried once writes settle, not reported before.
    pub maybe_incomplete: bool,
    /// The data the definition names is not at its source (no object under `data:`): when
    /// an earlier version keeps serving, its data was deleted there or moved.
    pub data_gone: bool,
}

impl From<Vec<Problem>> for Refusal {
    fn from(problems: Vec<Problem>) -> Self {
        Refusal {
            problems,
            maybe_incomplete: false,
            data_gone: false,
        }
    }
}

/// A problem when `path` (a dataset folder, or a file of one) resolves, through symbolic
/// links, to a place outside `root`.
pub fn outside(root: &Path, path: &Path) -> Option<Problem> {
    let (Ok(root), Ok(resolved)) = (root.canonicalize(), path.canonicalize()) else {
        return None;
    };
    if resolved.starts_with(&root) {
        return None;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(Problem::plain(
        format!(
            "{} is a symbolic link to a place outside {}; Tally serves only what lies inside it",
            tally_semantic::definition::quote_name(&name),
            if path.is_dir() {
                "the datasets directory"
            } else {
                "its dataset folder"
            }
        ),
        "copy the data into the folder instead of linking to it",
    ))
}

pub use tally_semantic::files::{ReadError, read_small};
