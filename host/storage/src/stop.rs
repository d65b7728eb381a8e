//! Whether the call a piece of work is for has been given up: cancelled by its client, or
//! past its time budget.
//!
//! A call's [`Stop`] is made by the engine's door with the call and travels with it
//! explicitly: in the call's context (`CallCtx`) and, for the work DataFusion runs, in the
//! call's session as a config extension ([`Stop::of`], [`Stop::of_task`]), so every operator,
//! scan and loop of the call reads the same flag. When the caller stops waiting the door sets
//! it and aborts the call's task: the abort takes effect at the task's next `.await`, and work
//! that runs long between two (counting the values of a dictionary, scanning text on threads
//! of its own, a scan handing out batches it never waits for) looks at the flag every few
//! thousand values or every batch and ends with [`StorageError`] when it is set. Work outside
//! a call (a preparation shared by every caller) has no stop and always runs to its end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::execution::TaskContext;
use datafusion::prelude::SessionContext;

use crate::error::StorageError;

/// The flag of one call: set when its caller stops waiting.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Says the call was given up.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err` once the call was given up.
    pub fn check(&self) -> Result<(), StorageError> {
        if self.is_set() {
            Err(stopped_error())
        } else {
            Ok(())
        }
    }

    /// The stop of the call whose session `ctx` is (one never set for a session that is no
    /// call's: the engine's own, a preparation's).
    pub fn of(ctx: &SessionContext) -> Stop {
        ctx.state_ref()
            .read()
            .config()
            .get_extension::<Stop>()
            .map(|s| (*s).clone())
            .unwrap_or_default()
    }

    /// The stop of the call a plan's partition runs for.
    pub fn of_task(task: &TaskContext) -> Stop {
        task.session_config()
            .get_extension::<Stop>()
            .map(|s| (*s).clone())
            .unwrap_or_default()
    }
}

/// How many values work goes through between two looks at its stop.
pub const EVERY: usize = 4096;

/// The error work given up ends with. Its caller is gone, so no client reads it; it is what
/// the log says.
pub fn stopped_error() -> StorageError {
    StorageError::Limit {
        message: "the call was given up (cancelled by its client or past its time budget): its work was stopped".to_string(),
        hint: "call again".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_travels_with_its_calls_session_only() {
        let plain = SessionContext::new();
        assert!(!Stop::of(&plain).is_set(), "no call: never stopped");
        let stop = Stop::new();
        let config =
            datafusion::prelude::SessionConfig::new().with_extension(Arc::new(stop.clone()));
        let call = SessionContext::new_with_config(config);
        assert!(!Stop::of(&call).is_set());
        stop.set();
        assert!(Stop::of(&call).is_set() && Stop::of(&call).check().is_err());
        assert!(Stop::of_task(&call.task_ctx()).is_set());
        assert!(!Stop::of(&plain).is_set());
    }
}
