//! What the tasks hold: each task through its life (working with its questions, then
//! finished with its result kept in the memory budget), swept past its time-to-live, and
//! results let go to make room, oldest first.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, InputRequest, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::task_manager::{TaskExit, current_timestamp};
use serde_json::Value;
use tally_engine::storage::{Budget, Reservation};

use super::bounds::{Bounds, GONE, KEPT};

pub(super) struct Inner {
    pub(super) state: Mutex<State>,
    /// The server-wide memory budget kept results are held in.
    pub(super) budget: Arc<Budget>,
    /// The largest result a task keeps, as JSON.
    pub(super) max_result_bytes: usize,
    pub(super) bounds: Bounds,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) tasks: HashMap<String, Entry>,
    /// Results let go to make room, newest last: what `tasks/get` says of their ids.
    pub(super) gone: VecDeque<Gone>,
}

pub(super) struct Gone {
    pub(super) id: String,
    pub(super) caller: String,
    pub(super) why: String,
}

/// One task: its caller, its wire state and where it is in its life.
pub(super) struct Entry {
    pub(super) caller: String,
    pub(super) task: Task,
    pub(super) created: Instant,
    /// When its work must have stopped: its budget and its questions' waits.
    pub(super) limit: Duration,
    pub(super) ttl: Duration,
    pub(super) run: Run,
}

pub(super) enum Run {
    Working(Working),
    Finished(Finished),
}

pub(super) struct Working {
    pub(super) cancel: tokio::sync::watch::Sender<bool>,
    /// Questions waiting for the client's `tasks/update`, by key.
    pub(super) inputs: BTreeMap<String, (InputRequest, tokio::sync::oneshot::Sender<Value>)>,
    pub(super) used_keys: HashSet<String>,
    pub(super) handle: Option<tokio::task::AbortHandle>,
}

pub(super) struct Finished {
    payload: TaskPayload,
    at: Instant,
    /// The bytes of its payload as JSON, counted against the bounds on kept results.
    bytes: usize,
    /// The memory its result is held in: released when the task is let go.
    _held: Option<Reservation>,
}

impl Entry {
    pub(super) fn running(&self) -> bool {
        matches!(self.run, Run::Working(_))
    }

    pub(super) fn finished(&self) -> Option<&Finished> {
        match &self.run {
            Run::Finished(f) => Some(f),
            Run::Working(_) => None,
        }
    }

    /// Until when a finished task is kept: its time-to-live, and at least [`KEPT`] after it
    /// ended (a task stopped at its time limit ends close to its time-to-live).
    fn expires(&self, finished: &Finished) -> Instant {
        (self.created + self.ttl).max(finished.at + KEPT)
    }

    /// The seconds until its work stops at the latest (its budget and its questions).
    pub(super) fn stops_in(&self, now: Instant) -> u64 {
        (self.created + self.limit)
            .saturating_duration_since(now)
            .as_secs()
    }

    pub(super) fn detailed(&self) -> DetailedTask {
        let payload = match &self.run {
            Run::Working(w) if !w.inputs.is_empty() => TaskPayload::InputRequired {
                input_requests: w
                    .inputs
                    .iter()
                    .map(|(k, (request, _))| (k.clone(), request.clone()))
                    .collect(),
            },
            Run::Working(_) => TaskPayload::Working,
            Run::Finished(f) => f.payload.clone(),
        };
        DetailedTask::new(self.task.clone(), payload)
    }

    pub(super) fn status(&self) -> TaskStatus {
        match &self.run {
            Run::Working(w) if !w.inputs.is_empty() => TaskStatus::InputRequired,
            Run::Working(_) => TaskStatus::Working,
            Run::Finished(f) => f.payload.status(),
        }
    }

    pub(super) fn touch(&mut self) {
        self.task.last_updated_at = current_timestamp();
        self.task.status = self.status();
    }
}

/// The result a task keeps in place of an answer it cannot keep.
fn refusal(message: String, hint: &str) -> CallToolResult {
    let refusal = tally_engine::error::EngineError::Limit {
        message,
        hint: hint.into(),
    }
    .to_json();
    let mut r = CallToolResult::default();
    r.content = vec![ContentBlock::text(refusal.to_string())];
    r.is_error = Some(true);
    r
}

fn object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

impl Inner {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A finished call's result as the task keeps it: within the largest result a task
    /// keeps and held in the server's memory budget, else a tool error saying what would
    /// help.
    pub(super) fn keep(&self, result: CallToolResult) -> (CallToolResult, Option<Reservation>) {
        let size = serde_json::to_vec(&result).map_or(0, |v| v.len());
        if size > self.max_result_bytes {
            let refused = refusal(
                format!(
                    "the answer of this task is {size} bytes of JSON; a task keeps at most {}",
                    self.max_result_bytes
                ),
                "ask for fewer rows or fields (limit, fields), or leave out the chart",
            );
            return (refused, None);
        }
        let mut reservation = self.budget.reservation("the answer of a task");
        if let Err(e) = reservation.resize(size) {
            let refused = refusal(
                format!("the answer of this task ({size} bytes of JSON) cannot be kept: {e}"),
                "call again when the server holds less, or ask for a smaller answer (limit, fields)",
            );
            return (refused, None);
        }
        (result, Some(reservation))
    }

    /// Records how the task `id` ended, then lets go of the oldest results past the bounds.
    pub(super) fn finish(&self, id: &str, result: Result<CallToolResult, TaskExit>) {
        let (payload, held) = match result {
            Ok(result) => {
                let (result, held) = self.keep(result);
                (
                    TaskPayload::Completed {
                        result: object(&result),
                    },
                    held,
                )
            }
            Err(TaskExit::Cancelled) => (TaskPayload::Cancelled, None),
            Err(TaskExit::Error(error)) => (
                TaskPayload::Failed {
                    error: object(&error),
                },
                None,
            ),
        };
        let bytes = held.as_ref().map_or(0, Reservation::size);
        let mut state = self.lock();
        let Some(entry) = state.tasks.get_mut(id) else {
            return;
        };
        if !entry.running() {
            // Already failed past its time-to-live.
            return;
        }
        entry.run = Run::Finished(Finished {
            payload,
            at: Instant::now(),
            bytes,
            _held: held,
        });
        entry.touch();
        let caller = entry.caller.clone();
        self.make_room(&mut state, &caller);
    }

    /// Lets go of kept results past the bounds, oldest first: the caller's own past its
    /// bounds, then, past the server's, those of the caller that keeps the most bytes.
    fn make_room(&self, state: &mut State, caller: &str) {
        let b = self.bounds;
        loop {
            let (count, bytes) = kept(state, Some(caller));
            if count <= b.results_per_caller && bytes <= b.result_bytes_per_caller {
                break;
            }
            let why = format!(
                "its caller keeps at most {} finished results and {} bytes of them (RESULTS_PER_CALLER, RESULT_BYTES_PER_CALLER), and newer ones took its place",
                b.results_per_caller, b.result_bytes_per_caller
            );
            if !let_go_oldest(state, caller, why) {
                break;
            }
        }
        loop {
            let (count, bytes) = kept(state, None);
            if count <= b.results && bytes <= b.result_bytes {
                break;
            }
            let Some(largest) = largest_keeper(state) else {
                break;
            };
            let why = format!(
                "the server keeps at most {} finished results and {} bytes of them (RESULTS_IN_ALL, RESULT_BYTES_IN_ALL), and its caller kept the most",
                b.results, b.result_bytes
            );
            if !let_go_oldest(state, &largest, why) {
                break;
            }
        }
    }

    /// Fails the tasks past their time-to-live and forgets the finished tasks past theirs.
    pub(super) fn sweep(state: &mut State) {
        let now = Instant::now();
        for entry in state.tasks.values_mut() {
            if let Run::Working(working) = &mut entry.run
                && now >= entry.created + entry.ttl
            {
                // A safety valve: a task's work stops at its budget long before.
                if let Some(handle) = working.handle.take() {
                    handle.abort();
                }
                entry.run = Run::Finished(Finished {
                    payload: TaskPayload::Failed {
                        error: object(&ErrorData::internal_error(
                            "the task's time-to-live passed before it ended",
                            None,
                        )),
                    },
                    at: now,
                    bytes: 0,
                    _held: None,
                });
                entry.touch();
            }
        }
        state.tasks.retain(|_, entry| match entry.finished() {
            Some(finished) => now < entry.expires(finished),
            None => true,
        });
    }
}

/// The finished tasks kept (of `caller`, or of all) and the bytes of their results.
fn kept(state: &State, caller: Option<&str>) -> (usize, usize) {
    state
        .tasks
        .values()
        .filter(|e| caller.is_none_or(|c| e.caller == c))
        .filter_map(Entry::finished)
        .fold((0, 0), |(n, bytes), f| (n + 1, bytes + f.bytes))
}

/// The caller whose kept results hold the most bytes (the most results among equals).
fn largest_keeper(state: &State) -> Option<String> {
    let mut by_caller: HashMap<&str, (usize, usize)> = HashMap::new();
    for entry in state.tasks.values() {
        if let Some(f) = entry.finished() {
            let held = by_caller.entry(&entry.caller).or_default();
            held.0 += f.bytes;
            held.1 += 1;
        }
    }
    by_caller
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(caller, _)| caller.to_string())
}

/// Lets go of the result of `caller` that ended first, remembering why; false when it keeps
/// none.
fn let_go_oldest(state: &mut State, caller: &str, why: String) -> bool {
    let oldest = state
        .tasks
        .iter()
        .filter(|(_, e)| e.caller == caller)
        .filter_map(|(id, e)| e.finished().map(|f| (f.at, id)))
        .min()
        .map(|(_, id)| id.clone());
    let Some(id) = oldest else {
        return false;
    };
    state.tasks.remove(&id);
    tracing::info!(task = %id, caller = %caller, "let go of a finished task's result to make room: {why}");
    state.gone.push_back(Gone {
        id,
        caller: caller.to_string(),
        why,
    });
    while state.gone.len() > GONE {
        state.gone.pop_front();
    }
    true
}
