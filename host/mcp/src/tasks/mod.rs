//! Long calls as MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663).
//!
//! A client that declares the extension on a `tools/call` may be answered with a task handle
//! instead of the result: when the call is estimated to take more than half its time budget
//! (a dataset read from its files at every call, a first preparation, a cluster), or when it
//! asks for a task with `_meta: {"tally/task": true}`. The call then runs with the task's own
//! budget (`--task-timeout-ms`, minutes, not the 10 s of a call); the client polls
//! `tasks/get`, which says what the call is doing (the progress a call reports) and, once it
//! is over, carries its `CallToolResult` with the validated envelope; `tasks/cancel` stops
//! a running task's work, and deletes a finished one with its result. A client that did not
//! declare the extension on the request is never given a task (the specification requires
//! it): its calls keep their budget.
//!
//! The tasks are held here rather than in rmcp's `TaskManager`, which keeps a finished task
//! (and its result) for one more time-to-live after it ended and has no way to delete one:
//! a finished task held its caller's slot for twice its time-to-live, so eight tokens filled
//! the server in seconds and a stdio session's ninth task was refused.
//!
//! Bounds (docs/security.md): a task is seen only by the caller that created it (another
//! caller's id is answered as unknown, as an id that never existed). Running tasks and kept
//! results are counted apart:
//! - a caller runs at most [`RUNNING_PER_CALLER`] tasks at once and the server
//!   [`RUNNING_IN_ALL`]; a task frees its place the moment its work ends;
//! - a finished task's result is kept until its time-to-live (`createdAt + ttlMs`, at least
//!   [`KEPT`] after it ended), at most `--max-result-bytes` and as much again (at least
//!   [`ALLOWANCE`]) of JSON, held in the server-wide memory budget; a caller keeps at most
//!   [`RESULTS_PER_CALLER`] results and [`RESULT_BYTES_PER_CALLER`], the server
//!   [`RESULTS_IN_ALL`] and [`RESULT_BYTES_IN_ALL`]. A new result past a bound lets go of
//!   the oldest result of its caller first; past a server-wide bound, of the caller that
//!   keeps the most bytes. Kept results never stop a task from starting. `tasks/get` of a
//!   result let go says so (a JSON-RPC error naming the bound), for the last
//!   [`GONE`](bounds::GONE) ids.
//!
//! A call that would become a task only by its estimate, when there is no room for one, is
//! answered within the call's budget.
//!
//! The tasks' API is here; their bounds (`bounds`), what they hold through their lives
//! (`state`) and what a task's work is handed (`context`) beside it.

mod bounds;
mod context;
mod state;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::model::{DetailedTask, Task, TaskStatus};
use rmcp::task_manager::{TaskFuture, current_timestamp};
use serde_json::{Value, json};
use tally_engine::storage::Budget;

pub use bounds::{
    ALLOWANCE, ASK, Full, KEPT, POLL_INTERVAL, RESULT_BYTES_IN_ALL, RESULT_BYTES_PER_CALLER,
    RESULTS_IN_ALL, RESULTS_PER_CALLER, RUNNING_IN_ALL, RUNNING_PER_CALLER,
};
pub use context::Context;

use bounds::Bounds;
use state::{Entry, Inner, Run, State, Working};

/// The tasks of all sessions, with the caller that owns each.
pub struct Tasks {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("Tasks")
            .field("held", &state.tasks.len())
            .finish()
    }
}

impl Tasks {
    /// The tasks kept now, by state (`working`, `input_required`, `completed`, `failed`,
    /// `cancelled`).
    pub fn by_state(&self) -> BTreeMap<String, usize> {
        let state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut counts = BTreeMap::new();
        for entry in state.tasks.values() {
            let name = serde_json::to_value(entry.status())
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "unknown".to_string());
            *counts.entry(name).or_default() += 1;
        }
        counts
    }

    /// The tasks of a server whose memory budget is `budget` and whose answers hold at most
    /// `max_result_bytes` of rows: a task keeps a result of that and as much again (at least
    /// [`ALLOWANCE`]) at most.
    pub fn new(budget: Arc<Budget>, max_result_bytes: usize) -> Tasks {
        let max_result_bytes = max_result_bytes.saturating_add(max_result_bytes.max(ALLOWANCE));
        let per_caller = RESULT_BYTES_PER_CALLER.max(max_result_bytes);
        let bounds = Bounds {
            running_per_caller: RUNNING_PER_CALLER,
            running: RUNNING_IN_ALL,
            results_per_caller: RESULTS_PER_CALLER,
            result_bytes_per_caller: per_caller,
            results: RESULTS_IN_ALL,
            result_bytes: RESULT_BYTES_IN_ALL.max(per_caller),
        };
        Tasks::with_bounds(budget, max_result_bytes, bounds)
    }

    fn with_bounds(budget: Arc<Budget>, max_result_bytes: usize, bounds: Bounds) -> Tasks {
        Tasks {
            inner: Arc::new(Inner {
                state: Mutex::default(),
                budget,
                max_result_bytes,
                bounds,
            }),
        }
    }

    /// Whether `caller` may start a task now: it runs fewer than [`RUNNING_PER_CALLER`] and
    /// the server fewer than [`RUNNING_IN_ALL`]. Finished tasks never stand in the way.
    pub fn room(&self, caller: &str) -> Result<(), Full> {
        let mut state = self.inner.lock();
        self.room_in(&mut state, caller)
    }

    fn room_in(&self, state: &mut State, caller: &str) -> Result<(), Full> {
        Inner::sweep(state);
        let b = self.inner.bounds;
        let now = Instant::now();
        let running: Vec<(&String, &Entry)> =
            state.tasks.iter().filter(|(_, e)| e.running()).collect();
        let mine: Vec<&(&String, &Entry)> =
            running.iter().filter(|(_, e)| e.caller == caller).collect();
        if mine.len() >= b.running_per_caller {
            let ids: Vec<&str> = mine.iter().map(|(id, _)| id.as_str()).collect();
            let soonest = mine.iter().map(|(_, e)| e.stops_in(now)).min().unwrap_or(0);
            return Err(Full {
                message: format!(
                    "your {} running tasks ({}) are the most one caller may run at once ({}, RUNNING_PER_CALLER); the first of them stops within {soonest} s at the latest (its time budget and the time its questions wait)",
                    mine.len(),
                    ids.join(", "),
                    b.running_per_caller
                ),
                hint: "wait for one to finish (tasks/get), cancel one with tasks/cancel, or narrow the call so that it answers within its own budget".into(),
            });
        }
        if running.len() >= b.running {
            let soonest = running
                .iter()
                .map(|(_, e)| e.stops_in(now))
                .min()
                .unwrap_or(0);
            return Err(Full {
                message: format!(
                    "the server runs {} tasks, the most it runs at once ({}, RUNNING_IN_ALL); the first of them stops within {soonest} s at the latest",
                    running.len(),
                    b.running
                ),
                hint: "try again when one has finished, or narrow the call so that it answers within its own budget".into(),
            });
        }
        Ok(())
    }

    /// Runs the future `run` makes as a task of `caller` whose work stops within `limit` (its
    /// budget and its questions' waits): its seed state, already readable with
    /// [`Tasks::get`]. Its time-to-live is `limit` and [`KEPT`]. Refused when there is no
    /// [`Tasks::room`] for it.
    pub fn spawn<F>(
        &self,
        caller: &str,
        limit: Duration,
        status: String,
        run: F,
    ) -> Result<Task, Full>
    where
        F: FnOnce(Context) -> TaskFuture,
    {
        let id = uuid::Uuid::new_v4().to_string();
        let ttl = limit + KEPT;
        let now = current_timestamp();
        let task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now)
            .with_ttl_ms(ttl.as_millis() as u64)
            .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64)
            .with_status_message(status);
        let (cancel, cancelled) = tokio::sync::watch::channel(false);
        {
            let mut state = self.inner.lock();
            self.room_in(&mut state, caller)?;
            state.tasks.insert(
                id.clone(),
                Entry {
                    caller: caller.to_string(),
                    task: task.clone(),
                    created: Instant::now(),
                    limit,
                    ttl,
                    run: Run::Working(Working {
                        cancel,
                        inputs: BTreeMap::new(),
                        used_keys: HashSet::new(),
                        handle: None,
                    }),
                },
            );
        }
        let context = Context {
            id: id.clone(),
            inner: Arc::clone(&self.inner),
            cancel: cancelled,
        };
        let work = run(context);
        let inner = Arc::clone(&self.inner);
        let finished_id = id.clone();
        let handle = tokio::spawn(async move {
            let result = work.await;
            inner.finish(&finished_id, result);
        });
        let mut state = self.inner.lock();
        if let Some(entry) = state.tasks.get_mut(&id)
            && let Run::Working(working) = &mut entry.run
        {
            working.handle = Some(handle.abort_handle());
        }
        Ok(task)
    }

    /// The task `id` as its owner sees it; of another caller's task, the same error as of
    /// one that never existed; of a result let go to make room, an error saying so.
    pub fn get(&self, caller: &str, id: &str) -> Result<DetailedTask, ErrorData> {
        let mut state = self.inner.lock();
        Inner::sweep(&mut state);
        match state.tasks.get(id) {
            Some(entry) if entry.caller == caller => Ok(entry.detailed()),
            _ => Err(missing(&state, caller, id)),
        }
    }

    /// `tasks/cancel`: a running task's work is asked to stop (it stops within moments: its
    /// call is dropped, and the query work under it with it; its questions are withdrawn);
    /// a finished task is deleted with its result, and its id is then unknown.
    pub fn cancel(&self, caller: &str, id: &str) -> Result<(), ErrorData> {
        let mut state = self.inner.lock();
        Inner::sweep(&mut state);
        let Some(entry) = state.tasks.get_mut(id).filter(|e| e.caller == caller) else {
            // A result already let go is gone, as asked.
            let before = state.gone.len();
            state.gone.retain(|g| !(g.id == id && g.caller == caller));
            if state.gone.len() < before {
                return Ok(());
            }
            return Err(unknown(id));
        };
        match &mut entry.run {
            Run::Working(working) => {
                let _ = working.cancel.send(true);
                // The questions' senders dropped: their waits end as cancelled.
                working.inputs.clear();
                entry.touch();
            }
            Run::Finished(_) => {
                state.tasks.remove(id);
            }
        }
        Ok(())
    }

    /// `tasks/update`: answers to what the task asked (a choice among ambiguous names);
    /// unknown keys are ignored, as are answers to a task that has ended.
    pub fn update(
        &self,
        caller: &str,
        id: &str,
        responses: impl IntoIterator<Item = (String, Value)>,
    ) -> Result<(), ErrorData> {
        let mut state = self.inner.lock();
        Inner::sweep(&mut state);
        let Some(entry) = state.tasks.get_mut(id).filter(|e| e.caller == caller) else {
            return Err(missing(&state, caller, id));
        };
        if let Run::Working(working) = &mut entry.run {
            for (key, value) in responses {
                if let Some((_, answer)) = working.inputs.remove(&key) {
                    // A dropped receiver means the work moved on.
                    let _ = answer.send(value);
                }
            }
            entry.touch();
        }
        Ok(())
    }
}

/// The error of a task id this caller holds no task under: let go to make room (said), or
/// unknown (never existed, past its time-to-live, deleted, or another caller's).
fn missing(state: &State, caller: &str, id: &str) -> ErrorData {
    match state
        .gone
        .iter()
        .rev()
        .find(|g| g.id == id && g.caller == caller)
    {
        Some(gone) => ErrorData::invalid_params(
            format!(
                "task `{id}` finished, and its result was let go to make room: {}; call the tool again for its answer",
                gone.why
            ),
            Some(json!({ "taskId": id, "letGo": true })),
        ),
        None => unknown(id),
    }
}

/// The error of a task id this caller has no task under (unknown, let go, or another's).
fn unknown(id: &str) -> ErrorData {
    let shown: String = id.chars().take(crate::bounds::MAX_TASK_ID_CHARS).collect();
    ErrorData::invalid_params(
        format!(
            "no task `{shown}` for this caller: it never existed, was deleted (tasks/cancel of a finished task), was let go after its time-to-live, or belongs to another caller"
        ),
        Some(json!({ "taskId": shown })),
    )
}

#[cfg(test)]
mod tests;
