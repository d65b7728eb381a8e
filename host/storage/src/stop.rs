//! Whether the call a piece of work is for has been given up: cancelled by its client, or
//! past its time budget.
//!
//! A call runs on a task of its own, which is aborted when its caller stops waiting. An abort
//! takes effect at the task's next `.await`; work that runs long between two (counting the
//! values of a dictionary, scanning text on threads of its own, decoding a row group) would
//! go on to its end. Such work asks [`stopped`] (or a [`Stop`] taken with [`current`] before
//! it leaves the task for threads of its own) every few thousand values and ends with
//! [`StorageError`] when it is set. Work outside a call (a preparation shared by every
//! caller) has no stop and always runs to its end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::StorageError;

tokio::task_local! {
    static STOP: Stop;
}

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
}

/// Runs `future` as the work of the call `stop` belongs to.
pub async fn scope<F: std::future::Future>(stop: Stop, future: F) -> F::Output {
    STOP.scope(stop, future).await
}

/// The stop of the call running on this task (one never set outside a call).
pub fn current() -> Stop {
    STOP.try_with(Stop::clone).unwrap_or_default()
}

/// Whether the call running on this task was given up.
pub fn stopped() -> bool {
    STOP.try_with(Stop::is_set).unwrap_or(false)
}

/// `Err` once the call running on this task was given up.
pub fn check() -> Result<(), StorageError> {
    if stopped() {
        Err(stopped_error())
    } else {
        Ok(())
    }
}

/// How many values work goes through between two looks at its stop.
pub const EVERY: usize = 4096;

/// The error work given up ends with. Its caller is gone, so no client reads it; it is what
/// the log says.
fn stopped_error() -> StorageError {
    StorageError::Limit {
        message: "the call was given up (cancelled by its client or past its time budget): its work was stopped".to_string(),
        hint: "call again".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_is_seen_inside_its_call_only() {
        assert!(!stopped(), "no call: never stopped");
        let stop = Stop::new();
        let seen = scope(stop.clone(), async {
            let before = stopped();
            current().set();
            (before, stopped(), check().is_err())
        })
        .await;
        assert_eq!(seen, (false, true, true));
        assert!(stop.is_set());
        assert!(!stopped() && check().is_ok());
    }
}
