//! The bounds on tasks: how many run at once, how many results and bytes of them are kept,
//! how long a task is kept, and the refusal of a task there is no room for.

use std::time::Duration;

/// Tasks of one caller running at once: each may run for the task's budget, past the call
/// budget that bounds a caller's other calls.
pub const RUNNING_PER_CALLER: usize = 2;
/// Tasks of all callers running at once.
pub const RUNNING_IN_ALL: usize = 32;
/// Finished tasks whose results one caller keeps; a newer one lets go of its oldest.
pub const RESULTS_PER_CALLER: usize = 16;
/// The bytes (as JSON) of the results one caller keeps, at least one result of the largest
/// size a task keeps.
pub const RESULT_BYTES_PER_CALLER: usize = 32 * 1024 * 1024;
/// Finished tasks whose results all callers together keep.
pub const RESULTS_IN_ALL: usize = 256;
/// The bytes of the results all callers together keep, at least one caller's.
pub const RESULT_BYTES_IN_ALL: usize = 256 * 1024 * 1024;
/// Ids of results let go to make room that `tasks/get` still tells apart from ids it never
/// knew.
pub const GONE: usize = 1024;
/// How long a task is kept past its own time limit: its time-to-live is its budget, the time
/// its user may take to answer its questions, and this; a finished task is kept until its
/// time-to-live ends, and at least this long after it ended.
pub const KEPT: Duration = Duration::from_secs(600);
/// What a kept result may hold beyond its rows (provenance, fields, a chart), at least.
pub const ALLOWANCE: usize = 4 * 1024 * 1024;
/// How often a client is asked to poll.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The `_meta` key with which a client asks for a task whatever the estimate.
pub const ASK: &str = "tally/task";

/// The bounds on running tasks and kept results (the constants above; tests give smaller).
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) running_per_caller: usize,
    pub(super) running: usize,
    pub(super) results_per_caller: usize,
    pub(super) result_bytes_per_caller: usize,
    pub(super) results: usize,
    pub(super) result_bytes: usize,
}

/// Why a task was refused: which bound, when it frees, and what the caller may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    pub message: String,
    pub hint: String,
}
