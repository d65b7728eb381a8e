//! Errors of the engine, named by who must act.

use datafusion::error::DataFusionError;
use serde_json::{Value, json};
use tally_semantic::definition::Diagnostic;
use tally_semantic::{ErrorCode, RequestError};
use tally_storage::StorageError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// The caller's arguments: fix the call.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The dataset's definition or data do not fit together: fix the dataset folder.
    #[error("dataset `{dataset}` cannot be served: {message}")]
    Dataset {
        dataset: String,
        message: String,
        diagnostics: Vec<Diagnostic>,
    },
    /// What reading the data met, as storage says it: the backend failing, the dataset's
    /// files replaced under the call (retried once on a fresh catalog), a memory budget, or a
    /// bug in storage.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// One of the engine's own per-call caps was met (time, groups, slots, sizes).
    #[error("{message}")]
    Limit { message: String, hint: String },
    /// A bug in Tally.
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    /// The message and hint of a cap or budget the call met: the engine's own or storage's
    /// (a memory budget, a size cap).
    pub fn limit(&self) -> Option<(&str, &str)> {
        match self {
            EngineError::Limit { message, hint }
            | EngineError::Storage(StorageError::Limit { message, hint }) => Some((message, hint)),
            _ => None,
        }
    }

    /// Whether the call was stopped at its time budget (as `past_deadline_named` says it).
    pub fn is_past_deadline(&self) -> bool {
        self.limit()
            .is_some_and(|(message, _)| message.contains("longer than its time budget"))
    }

    /// Whether the call needed more memory than one call may use (`--call-memory-mb`), as
    /// [`tally_storage::error::memory_limit`] says it: not the caller's share or the server's
    /// budget taken by others, which pass.
    pub fn is_over_call_memory(&self) -> bool {
        self.limit()
            .is_some_and(|(message, _)| message == tally_storage::error::OVER_CALL_BUDGET)
    }

    /// The backend of `dataset` failed (for DataFusion's errors, use [`EngineError::computing`],
    /// which tells a budget from a failure).
    pub fn backend(dataset: &str, e: impl std::fmt::Display) -> EngineError {
        StorageError::backend(dataset, e).into()
    }

    pub fn internal(e: impl std::fmt::Display) -> EngineError {
        EngineError::Internal(e.to_string())
    }

    /// True when the caller named a dataset that is not served.
    pub fn is_unknown_dataset(&self) -> bool {
        matches!(self, EngineError::Request(r) if r.code == ErrorCode::UnknownDataset)
    }

    /// The JSON body of a refused call: `{"error": {...}}`.
    pub fn to_json(&self) -> Value {
        let body = match self {
            EngineError::Request(r) => {
                serde_json::to_value(r).unwrap_or_else(|_| json!({ "message": r.message }))
            }
            EngineError::Dataset {
                dataset,
                message,
                diagnostics,
            } => json!({
                "code": "dataset_invalid",
                "message": format!("dataset `{dataset}` cannot be served: {message}"),
                "dataset_id": dataset,
                "diagnostics": diagnostics.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "hint": "the dataset's folder needs fixing; run `tally check` on the datasets directory",
            }),
            EngineError::Storage(StorageError::Backend { dataset, message }) => json!({
                "code": "backend_failed",
                "message": format!("the backend of dataset `{dataset}` failed: {message}"),
                "dataset_id": dataset,
            }),
            EngineError::Storage(StorageError::Stale { dataset, message }) => json!({
                "code": "dataset_changing",
                "message": format!("dataset `{dataset}` is being replaced: {message}"),
                "dataset_id": dataset,
                "hint": "retry the call in a moment",
            }),
            EngineError::Limit { message, hint }
            | EngineError::Storage(StorageError::Limit { message, hint }) => json!({
                "code": "limit_exceeded",
                "message": message,
                "hint": hint,
            }),
            EngineError::Internal(message)
            | EngineError::Storage(StorageError::Internal(message)) => json!({
                "code": "internal",
                "message": format!("internal error: {message}"),
            }),
        };
        json!({ "error": body })
    }
}

impl EngineError {
    /// A DataFusion error met while computing on `dataset`: a cap or a budget is the caller's
    /// limit, anything else the backend's failure.
    pub fn computing(dataset: &str, e: DataFusionError) -> EngineError {
        if let Some(inner) = carried(&e) {
            return inner;
        }
        if let Some(stopped) = crate::groups::stopped(&e) {
            return EngineError::Limit {
                message: stopped.message(),
                hint: match stopped {
                    crate::groups::Stopped::Groups { .. } => "group by fewer or coarser fields (each multi-value field multiplies the groups by its parts), add filters in `where`, or summarize the fields one at a time".to_string(),
                    crate::groups::Stopped::Rows { .. } => "explode fewer multi-value fields at once, or add filters in `where`".to_string(),
                },
            };
        }
        StorageError::computing(dataset, e).into()
    }
}

/// An engine error a plan raised inside DataFusion, or a storage error a table provider
/// raised (a damaged cache entry, a file replaced while it was read), unwrapped.
fn carried(e: &DataFusionError) -> Option<EngineError> {
    let mut current: &dyn std::error::Error = e;
    loop {
        if let Some(found) = current.downcast_ref::<EngineError>() {
            return Some(found.clone());
        }
        if let Some(found) = current.downcast_ref::<StorageError>() {
            return Some(found.clone().into());
        }
        if let Some(DataFusionError::External(inner)) = current.downcast_ref::<DataFusionError>() {
            if let Some(found) = inner.downcast_ref::<EngineError>() {
                return Some(found.clone());
            }
            if let Some(found) = inner.downcast_ref::<StorageError>() {
                return Some(found.clone().into());
            }
        }
        current = current.source()?;
    }
}

impl From<DataFusionError> for EngineError {
    fn from(e: DataFusionError) -> Self {
        if let Some(inner) = carried(&e) {
            return inner;
        }
        if crate::groups::stopped(&e).is_some() {
            return EngineError::computing("", e);
        }
        StorageError::from(e).into()
    }
}
