//! Errors of the engine, named by who must act.

use datafusion::error::DataFusionError;
use serde_json::{Value, json};
use tally_semantic::definition::Diagnostic;
use tally_semantic::{ErrorCode, RequestError};

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
    /// The backend failed while reading or computing.
    #[error("the backend of dataset `{dataset}` failed: {message}")]
    Backend { dataset: String, message: String },
    /// The dataset's files changed after the version being served was registered: the call
    /// is retried once on a fresh catalog; if that still fails, the caller retries.
    #[error("dataset `{dataset}` is being replaced: {message}")]
    Stale { dataset: String, message: String },
    /// A per-call budget was exceeded.
    #[error("{message}")]
    Limit { message: String, hint: String },
    /// The dataset is being read and prepared for its first use; the call stopped waiting at
    /// its deadline while the preparation goes on.
    #[error("{message}")]
    Preparing { dataset: String, message: String },
    /// A bug in Tally.
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    /// The backend of `dataset` failed (for DataFusion's errors, use [`EngineError::computing`],
    /// which tells a budget from a failure).
    pub fn backend(dataset: &str, e: impl std::fmt::Display) -> EngineError {
        EngineError::Backend {
            dataset: dataset.to_string(),
            message: e.to_string(),
        }
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
            EngineError::Backend { dataset, message } => json!({
                "code": "backend_failed",
                "message": format!("the backend of dataset `{dataset}` failed: {message}"),
                "dataset_id": dataset,
            }),
            EngineError::Stale { dataset, message } => json!({
                "code": "dataset_changing",
                "message": format!("dataset `{dataset}` is being replaced: {message}"),
                "dataset_id": dataset,
                "hint": "retry the call in a moment",
            }),
            EngineError::Preparing { dataset, message } => json!({
                "code": "dataset_preparing",
                "message": message,
                "dataset_id": dataset,
                "hint": "call again in a few seconds: the preparation goes on in the background, and later calls on this dataset are fast",
            }),
            EngineError::Limit { message, hint } => json!({
                "code": "limit_exceeded",
                "message": message,
                "hint": hint,
            }),
            EngineError::Internal(message) => json!({
                "code": "internal",
                "message": format!("internal error: {message}"),
            }),
        };
        json!({ "error": body })
    }
}

/// The memory refusal inside a DataFusion error, found by its variant however it was
/// wrapped (context, shared, collected, or carried through Arrow as an external error).
fn exhausted(e: &DataFusionError) -> Option<&str> {
    match e {
        DataFusionError::ResourcesExhausted(message) => Some(message),
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            exhausted(inner)
        }
        DataFusionError::Shared(inner) => exhausted(inner),
        DataFusionError::Collection(errors) => errors.iter().find_map(exhausted),
        DataFusionError::External(inner) => {
            inner.downcast_ref::<DataFusionError>().and_then(exhausted)
        }
        DataFusionError::ArrowError(arrow, _) => match arrow.as_ref() {
            datafusion::arrow::error::ArrowError::ExternalError(inner) => {
                inner.downcast_ref::<DataFusionError>().and_then(exhausted)
            }
            _ => None,
        },
        _ => None,
    }
}

/// A full memory pool is the caller's budget (or the server's, shared by every call), not a
/// broken backend. Which budget it was, the call pool says in its refusal
/// ([`crate::memory::Refused`]).
fn memory_limit(e: &DataFusionError) -> Option<EngineError> {
    let message = exhausted(e)?;
    Some(match crate::memory::Refused::of(message) {
        crate::memory::Refused::CallerShare => EngineError::Limit {
            message: "your other calls in flight hold your share of the server's memory (half of its budget), so this call was stopped".to_string(),
            hint: "wait for your other calls to finish, or make narrower calls (filters, fewer groups)".to_string(),
        },
        crate::memory::Refused::ServerBudget => EngineError::Limit {
            message: "the server's memory budget is taken by other calls and datasets right now, so this call was stopped".to_string(),
            hint: "try again in a moment; a narrower call (filters, fewer groups) needs less memory".to_string(),
        },
        crate::memory::Refused::CallBudget => EngineError::Limit {
            message: "the call needed more memory than its budget and was stopped".to_string(),
            hint: "narrow the call: add filters, group by fewer or coarser fields, or lower limit"
                .to_string(),
        },
    })
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
                message: stopped.to_string(),
                hint: match stopped {
                    crate::groups::Stopped::Groups { .. } => "group by fewer or coarser fields (each multi-value field multiplies the groups by its parts), add filters in `where`, or summarize the fields one at a time".to_string(),
                    crate::groups::Stopped::Rows { .. } => "explode fewer multi-value fields at once, or add filters in `where`".to_string(),
                },
            };
        }
        if let Some(limit) = memory_limit(&e) {
            return limit;
        }
        EngineError::backend(dataset, e)
    }
}

/// An engine error a table provider or plan raised inside DataFusion (a damaged cache entry,
/// a file replaced while it was read), unwrapped.
fn carried(e: &DataFusionError) -> Option<EngineError> {
    let mut current: &dyn std::error::Error = e;
    loop {
        if let Some(found) = current.downcast_ref::<EngineError>() {
            return Some(found.clone());
        }
        if let Some(DataFusionError::External(inner)) = current.downcast_ref::<DataFusionError>()
            && let Some(found) = inner.downcast_ref::<EngineError>()
        {
            return Some(found.clone());
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
        memory_limit(&e).unwrap_or_else(|| EngineError::Internal(e.to_string()))
    }
}
