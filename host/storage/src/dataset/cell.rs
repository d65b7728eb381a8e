//! The cell a prepared table is built in, once, by a task of its own: idle, running (shared by
//! every call that waits for it), ready, or failed in a way that would repeat.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::prepared::Prepared;
use crate::error::StorageError;
use crate::memory::Progress;

/// A prepared table, built once, in the background, by a task of its own: a call waits for
/// it only until its own deadline, and the next call finds it further along (or done).
#[derive(Debug, Default)]
pub(super) struct PreparedCell {
    /// Shared with the task preparing it, which records its outcome.
    pub(super) state: Arc<std::sync::Mutex<PrepState>>,
    /// Set when the cell is dropped (its dataset version replaced, or a subset evicted): a
    /// preparation still running for it stops at its next batch.
    pub(super) cancel: Arc<AtomicBool>,
    /// Numbers the preparations of this cell, so a late waiter of one never records its
    /// outcome over a newer one's.
    pub(super) generation: std::sync::atomic::AtomicU64,
}

impl Drop for PreparedCell {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// The preparation running for a cell, awaited by every call that needs it.
#[derive(Clone)]
pub(super) struct Preparing(
    pub(super)  futures::future::Shared<
        futures::future::BoxFuture<'static, Result<Arc<Prepared>, StorageError>>,
    >,
);

impl std::fmt::Debug for Preparing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Preparing")
    }
}

/// Where a cell's preparation is.
#[derive(Debug, Default)]
pub(super) enum PrepState {
    #[default]
    Idle,
    Running {
        done: Preparing,
        progress: Arc<Progress>,
        generation: u64,
    },
    Ready(Arc<Prepared>),
    /// A failure that would repeat: the same bytes fail the same way, and a dataset over
    /// the memory budget stays over it while the budget is as full (`free` bytes then).
    Failed {
        error: StorageError,
        free: usize,
    },
}

/// What starting a preparation found.
pub(super) enum Started {
    Ready(Arc<Prepared>),
    Running(Preparing),
}
