//! Errors of the storage layer: a dataset that cannot be read or prepared, a file replaced
//! under a read, a memory budget refused. Named by who must act, like the engine's, which
//! wraps it as it is (`tally_engine::EngineError::Storage`).

use datafusion::error::DataFusionError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    /// The backend failed while reading or computing.
    #[error("the backend of dataset `{dataset}` failed: {message}")]
    Backend { dataset: String, message: String },
    /// The dataset's files changed after the version being served was registered: the call
    /// is retried once on a fresh catalog; if that still fails, the caller retries.
    #[error("dataset `{dataset}` is being replaced: {message}")]
    Stale { dataset: String, message: String },
    /// A memory budget or a size cap was exceeded.
    #[error("{message}")]
    Limit { message: String, hint: String },
    /// A bug in Tally.
    #[error("internal error: {0}")]
    Internal(String),
}

impl StorageError {
    /// The backend of `dataset` failed (for DataFusion's errors, use
    /// [`StorageError::computing`], which tells a budget from a failure).
    pub fn backend(dataset: &str, e: impl std::fmt::Display) -> StorageError {
        StorageError::Backend {
            dataset: dataset.to_string(),
            message: e.to_string(),
        }
    }

    pub fn internal(e: impl std::fmt::Display) -> StorageError {
        StorageError::Internal(e.to_string())
    }

    /// A DataFusion error met while reading `dataset`: a storage error a table provider
    /// raised, a memory budget (the caller's limit), or else the backend's failure.
    pub fn computing(dataset: &str, e: DataFusionError) -> StorageError {
        if let Some(inner) = carried(&e) {
            return inner;
        }
        memory_limit(&e).unwrap_or_else(|| StorageError::backend(dataset, e))
    }
}

/// Which budget refused a call's memory. The call pool answers DataFusion with its
/// `ResourcesExhausted` error (so operators behave as with any full pool) whose message
/// starts with the refusal's tag; [`Refused::of`] reads the tag back. Tags and reading live
/// here together (the memory pool writes them, errors read them), so no other module depends
/// on the wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The call's own budget (`--call-memory-mb`).
    CallBudget,
    /// The caller's other calls in flight hold its share of the server's budget.
    CallerShare,
    /// The server's budget is in use by other work.
    ServerBudget,
}

impl Refused {
    fn tag(self) -> &'static str {
        match self {
            Refused::CallBudget => "[tally:call-budget]",
            Refused::CallerShare => "[tally:caller-share]",
            Refused::ServerBudget => "[tally:server-budget]",
        }
    }

    /// The refusal a pool's message carries (a full pool that is not ours: the call's).
    pub fn of(message: &str) -> Refused {
        [Refused::CallerShare, Refused::ServerBudget]
            .into_iter()
            .find(|r| message.starts_with(r.tag()))
            .unwrap_or(Refused::CallBudget)
    }

    pub(crate) fn error(self, detail: String) -> DataFusionError {
        DataFusionError::ResourcesExhausted(format!("{} {detail}", self.tag()))
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

/// What a call stopped at its own memory budget (`--call-memory-mb`) is told.
pub const OVER_CALL_BUDGET: &str = "the call needed more memory than its budget and was stopped";

/// A full memory pool is the caller's budget (or the server's, shared by every call), not a
/// broken backend. Which budget it was, the call pool says in its refusal ([`Refused`]).
pub fn memory_limit(e: &DataFusionError) -> Option<StorageError> {
    let message = exhausted(e)?;
    Some(match Refused::of(message) {
        Refused::CallerShare => StorageError::Limit {
            message: "your other calls in flight hold your share of the server's memory (half of its budget), so this call was stopped".to_string(),
            hint: "wait for your other calls to finish, or make narrower calls (filters, fewer groups)".to_string(),
        },
        Refused::ServerBudget => StorageError::Limit {
            message: "the server's memory budget is taken by other calls and datasets right now, so this call was stopped".to_string(),
            hint: "try again in a moment; a narrower call (filters, fewer groups) needs less memory".to_string(),
        },
        Refused::CallBudget => StorageError::Limit {
            message: OVER_CALL_BUDGET.to_string(),
            hint: "narrow the call: add filters, group by fewer or coarser fields, or lower limit"
                .to_string(),
        },
    })
}

/// A storage error a table provider or plan raised inside DataFusion (a damaged cache entry,
/// a file replaced while it was read), unwrapped.
pub fn carried(e: &DataFusionError) -> Option<StorageError> {
    let mut current: &dyn std::error::Error = e;
    loop {
        if let Some(found) = current.downcast_ref::<StorageError>() {
            return Some(found.clone());
        }
        if let Some(DataFusionError::External(inner)) = current.downcast_ref::<DataFusionError>()
            && let Some(found) = inner.downcast_ref::<StorageError>()
        {
            return Some(found.clone());
        }
        current = current.source()?;
    }
}

impl From<DataFusionError> for StorageError {
    fn from(e: DataFusionError) -> Self {
        if let Some(inner) = carried(&e) {
            return inner;
        }
        memory_limit(&e).unwrap_or_else(|| StorageError::Internal(e.to_string()))
    }
}
