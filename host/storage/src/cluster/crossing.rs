//! A storage error raised on an executor as it crosses to the server: said as text with a
//! tag of fixed form, and read back on the server as the error it was.

use std::fmt;

use datafusion::common::DataFusionError;

use crate::error::StorageError;

/// A storage error raised on an executor, as it crosses to the server. The scheduler hands
/// the server a failed task's error as text, the `Debug` form of the error chain (a Rust dump
/// such as `DataFusionError(Shared(External(Backend { … })))`); this error's `Debug` and
/// `Display` are the same line, its words then a tag of fixed form that
/// [`Crossing::from_message`] reads back on the server, so the server answers with its own
/// error kinds (a file replaced is `dataset_changing`) and readable words. Its fields are
/// hex-encoded in the tag: whatever wraps or escapes the text on the way leaves them intact.
#[derive(Clone)]
pub struct Crossing(pub StorageError);

/// How the tag of a crossing error begins.
const CROSSING_TAG: &str = "[tally:storage:";

impl Crossing {
    fn tag(&self) -> String {
        let (kind, fields): (&str, Vec<&str>) = match &self.0 {
            StorageError::Backend { dataset, message } => ("backend", vec![dataset, message]),
            StorageError::Stale { dataset, message } => ("stale", vec![dataset, message]),
            StorageError::Limit { message, hint } => ("limit", vec![message, hint]),
            StorageError::Internal(message) => ("internal", vec![message]),
        };
        let fields: Vec<String> = fields.iter().map(|f| hex(f.as_bytes())).collect();
        format!("{CROSSING_TAG}{kind}:{}]", fields.join(":"))
    }

    /// The storage error whose tag is inside `text` (a failed job's error, as the scheduler
    /// reports it), if any.
    pub fn from_message(text: &str) -> Option<StorageError> {
        let at = text.find(CROSSING_TAG)? + CROSSING_TAG.len();
        let tag = &text[at..at + text[at..].find(']')?];
        let mut parts = tag.split(':');
        let kind = parts.next()?;
        let fields: Vec<String> = parts.map(unhex).collect::<Option<_>>()?;
        match (kind, fields.as_slice()) {
            ("backend", [dataset, message]) => Some(StorageError::Backend {
                dataset: dataset.clone(),
                message: message.clone(),
            }),
            ("stale", [dataset, message]) => Some(StorageError::Stale {
                dataset: dataset.clone(),
                message: message.clone(),
            }),
            ("limit", [message, hint]) => Some(StorageError::Limit {
                message: message.clone(),
                hint: hint.clone(),
            }),
            ("internal", [message]) => Some(StorageError::Internal(message.clone())),
            _ => None,
        }
    }
}

impl fmt::Display for Crossing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, self.tag())
    }
}

impl fmt::Debug for Crossing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Crossing {}

/// An error of a scan on an executor, made ready to cross: a storage error (or a memory
/// budget refused) as a [`Crossing`]; any other error as it is, so that Ballista still tells
/// the errors it retries (a lost shuffle, a transient I/O error) from the others.
pub(super) fn crossing(e: DataFusionError) -> DataFusionError {
    match crate::error::carried(&e).or_else(|| crate::error::memory_limit(&e)) {
        Some(storage) => DataFusionError::External(Box::new(Crossing(storage))),
        None => e,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_storage_error_crosses_as_text_and_is_read_back() {
        let errors = [
            StorageError::Stale {
                dataset: "調査".into(),
                message: "its data file changed (`a \"b\".parquet`): ]:[".into(),
            },
            StorageError::backend("d", "no credentials\nin this executor's environment"),
            StorageError::Limit {
                message: "m".into(),
                hint: "".into(),
            },
            StorageError::Internal("x".into()),
        ];
        for error in errors {
            let crossed = crossing(DataFusionError::Shared(Arc::new(
                DataFusionError::External(Box::new(error.clone())),
            )));
            // As Ballista sends it: the Debug form of the chain, then quoted once more.
            let text = format!("Task failed: {:?}", format!("{crossed:?}"));
            let back = Crossing::from_message(&text).expect("a tag");
            assert_eq!(back.to_string(), error.to_string());
        }
        assert!(Crossing::from_message("DataFusionError(Execution(\"x\"))").is_none());
    }
}
