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
//!   result let go says so (a JSON-RPC error naming the bound), for the last [`GONE`] ids.
//!
//! A call that would become a task only by its estimate, when there is no room for one, is
//! answered within the call's budget.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, InputRequest, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::task_manager::{TaskExit, TaskFuture, current_timestamp};
use serde_json::{Value, json};
use tally_engine::storage::{Budget, Reservation};

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

/// The tasks of all sessions, with the caller that owns each.
pub struct Tasks {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// The server-wide memory budget kept results are held in.
    budget: Arc<Budget>,
    /// The largest result a task keeps, as JSON.
    max_result_bytes: usize,
    bounds: Bounds,
}

/// The bounds on running tasks and kept results (the constants above; tests give smaller).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    running_per_caller: usize,
    running: usize,
    results_per_caller: usize,
    result_bytes_per_caller: usize,
    results: usize,
    result_bytes: usize,
}

#[derive(Default)]
struct State {
    tasks: HashMap<String, Entry>,
    /// Results let go to make room, newest last: what `tasks/get` says of their ids.
    gone: VecDeque<Gone>,
}

struct Gone {
    id: String,
    caller: String,
    why: String,
}

/// One task: its caller, its wire state and where it is in its life.
struct Entry {
    caller: String,
    task: Task,
    created: Instant,
    /// When its work must have stopped: its budget and its questions' waits.
    limit: Duration,
    ttl: Duration,
    run: Run,
}

enum Run {
    Working(Working),
    Finished(Finished),
}

struct Working {
    cancel: tokio::sync::watch::Sender<bool>,
    /// Questions waiting for the client's `tasks/update`, by key.
    inputs: BTreeMap<String, (InputRequest, tokio::sync::oneshot::Sender<Value>)>,
    used_keys: HashSet<String>,
    handle: Option<tokio::task::AbortHandle>,
}

struct Finished {
    payload: TaskPayload,
    at: Instant,
    /// The bytes of its payload as JSON, counted against the bounds on kept results.
    bytes: usize,
    /// The memory its result is held in: released when the task is let go.
    _held: Option<Reservation>,
}

impl Entry {
    fn running(&self) -> bool {
        matches!(self.run, Run::Working(_))
    }

    fn finished(&self) -> Option<&Finished> {
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
    fn stops_in(&self, now: Instant) -> u64 {
        (self.created + self.limit)
            .saturating_duration_since(now)
            .as_secs()
    }

    fn detailed(&self) -> DetailedTask {
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

    fn status(&self) -> TaskStatus {
        match &self.run {
            Run::Working(w) if !w.inputs.is_empty() => TaskStatus::InputRequired,
            Run::Working(_) => TaskStatus::Working,
            Run::Finished(f) => f.payload.status(),
        }
    }

    fn touch(&mut self) {
        self.task.last_updated_at = current_timestamp();
        self.task.status = self.status();
    }
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("Tasks")
            .field("held", &state.tasks.len())
            .finish()
    }
}

/// Why a task was refused: which bound, when it frees, and what the caller may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    pub message: String,
    pub hint: String,
}

/// What a task's work is handed: its id, its status message, its questions to the user and
/// its cancellation.
#[derive(Clone)]
pub struct Context {
    id: String,
    inner: Arc<Inner>,
    cancel: tokio::sync::watch::Receiver<bool>,
}

impl Context {
    /// Asks the client (the task shows `input_required` with the question under `key` until
    /// `tasks/update` answers it); `TaskExit::Cancelled` when the task is cancelled first.
    /// Dropping the future withdraws the question.
    pub async fn request_input(
        &self,
        key: impl Into<String>,
        request: InputRequest,
    ) -> Result<Value, TaskExit> {
        let key = key.into();
        let (answer, answered) = tokio::sync::oneshot::channel();
        {
            let mut state = self.inner.lock();
            let Some(entry) = state.tasks.get_mut(&self.id) else {
                return Err(TaskExit::Cancelled);
            };
            let Run::Working(working) = &mut entry.run else {
                return Err(TaskExit::Cancelled);
            };
            if *working.cancel.borrow() {
                return Err(TaskExit::Cancelled);
            }
            if !working.used_keys.insert(key.clone()) {
                return Err(TaskExit::Error(ErrorData::internal_error(
                    format!("the question `{key}` was already asked in this task"),
                    None,
                )));
            }
            working.inputs.insert(key.clone(), (request, answer));
            entry.touch();
        }
        let _withdrawn = Withdraw {
            context: self,
            key: &key,
        };
        answered.await.map_err(|_| TaskExit::Cancelled)
    }

    /// The task's status message, as `tasks/get` shows it while it runs.
    pub fn set_status_message(&self, message: impl Into<String>) {
        let mut state = self.inner.lock();
        if let Some(entry) = state.tasks.get_mut(&self.id)
            && entry.running()
        {
            entry.task.status_message = Some(message.into());
            entry.touch();
        }
    }

    /// Resolves when `tasks/cancel` asks the task to stop (or the task is gone).
    pub async fn cancelled(&self) {
        let mut cancel = self.cancel.clone();
        let _ = cancel.wait_for(|asked| *asked).await;
    }
}

/// A question withdrawn when its wait ends (answered, timed out or dropped): the task no
/// longer shows it.
struct Withdraw<'a> {
    context: &'a Context,
    key: &'a str,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut state = self.context.inner.lock();
        if let Some(entry) = state.tasks.get_mut(&self.context.id)
            && let Run::Working(working) = &mut entry.run
            && working.inputs.remove(self.key).is_some()
        {
            entry.touch();
        }
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
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A finished call's result as the task keeps it: within the largest result a task
    /// keeps and held in the server's memory budget, else a tool error saying what would
    /// help.
    fn keep(&self, result: CallToolResult) -> (CallToolResult, Option<Reservation>) {
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
    fn finish(&self, id: &str, result: Result<CallToolResult, TaskExit>) {
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
    fn sweep(state: &mut State) {
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
mod tests {
    use super::*;

    fn answer(bytes: usize) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text("x".repeat(bytes))])
    }

    fn refused(result: &CallToolResult) -> Option<String> {
        (result.is_error == Some(true)).then(|| format!("{:?}", result.content))
    }

    fn small(running_per_caller: usize, running: usize) -> Bounds {
        Bounds {
            running_per_caller,
            running,
            results_per_caller: 3,
            result_bytes_per_caller: 1 << 20,
            results: 5,
            result_bytes: 1 << 20,
        }
    }

    fn tasks(bounds: Bounds) -> Tasks {
        Tasks::with_bounds(Budget::new(1 << 30), 1 << 20, bounds)
    }

    /// Starts a task of `caller` answering `bytes` at once, or when `gate` opens.
    fn start(
        tasks: &Tasks,
        caller: &str,
        bytes: usize,
        gate: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Result<String, Full> {
        tasks
            .spawn(
                caller,
                Duration::from_secs(60),
                "started".into(),
                move |context| {
                    Box::pin(async move {
                        if let Some(mut gate) = gate {
                            tokio::select! {
                                _ = gate.wait_for(|open| *open) => {}
                                () = context.cancelled() => return Err(TaskExit::Cancelled),
                            }
                        }
                        Ok(answer(bytes))
                    })
                },
            )
            .map(|task| task.task_id)
    }

    async fn settled(tasks: &Tasks, caller: &str, id: &str) -> DetailedTask {
        for _ in 0..500 {
            let got = tasks.get(caller, id).expect("known");
            if got.status().is_terminal() {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("task {id} did not settle");
    }

    #[test]
    fn a_kept_result_is_held_in_the_memory_budget_until_the_task_is_let_go() {
        let budget = Budget::new(1 << 20);
        let tasks = Tasks::with_bounds(Arc::clone(&budget), 1 << 20, small(2, 4));
        let (kept, held) = tasks.inner.keep(answer(10_000));
        assert!(refused(&kept).is_none());
        let size = serde_json::to_vec(&kept).unwrap().len();
        assert_eq!(budget.used(), size);
        drop(held);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_result_past_its_bound_or_the_budget_is_kept_as_a_refusal() {
        let budget = Budget::new(1 << 20);
        let tasks = Tasks::with_bounds(Arc::clone(&budget), 1_000, small(2, 4));
        let (too_large, _) = tasks.inner.keep(answer(5_000));
        let message = refused(&too_large).expect("refused");
        assert!(
            message.contains("keeps at most 1000") && message.contains("limit_exceeded"),
            "{message}"
        );
        assert_eq!(budget.used(), 0);

        // The budget is held by data but for 2,000 bytes.
        let mut data = budget.reservation("a prepared table");
        data.resize((1 << 20) - 2_000).unwrap();
        let tasks = Tasks::with_bounds(Arc::clone(&budget), 1 << 20, small(2, 4));
        let (no_room, _) = tasks.inner.keep(answer(5_000));
        let message = refused(&no_room).expect("refused");
        assert!(message.contains("cannot be kept"), "{message}");
        assert_eq!(budget.used(), (1 << 20) - 2_000);
    }

    #[test]
    fn the_bound_is_the_rows_bound_and_as_much_again() {
        let budget = Budget::new(1 << 30);
        let bound = |rows| Tasks::new(Arc::clone(&budget), rows).inner.max_result_bytes;
        assert_eq!(bound(4 << 20), 8 << 20);
        assert_eq!(bound(1_000), 1_000 + ALLOWANCE);
        assert_eq!(bound(10 << 20), 20 << 20);
        // A caller may always keep one result of the largest size.
        let large = Tasks::new(Arc::clone(&budget), 64 << 20).inner.bounds;
        assert_eq!(large.result_bytes_per_caller, 128 << 20);
        assert!(large.result_bytes >= large.result_bytes_per_caller);
    }

    /// Regression (issue 54, "first come holds the slots"): a finished task held its slot
    /// for twice its time-to-live, so a caller's ninth task was refused.
    #[tokio::test]
    async fn a_finished_task_frees_its_place_at_once() {
        let tasks = tasks(small(2, 4));
        for _ in 0..10 {
            let id = start(&tasks, "a", 10, None).expect("room: the others finished");
            assert_eq!(
                settled(&tasks, "a", &id).await.status(),
                TaskStatus::Completed
            );
        }
    }

    #[tokio::test]
    async fn running_tasks_are_bounded_per_caller_and_in_all_and_say_when_they_free() {
        let tasks = tasks(small(2, 3));
        let (open, gate) = tokio::sync::watch::channel(false);
        let a1 = start(&tasks, "a", 10, Some(gate.clone())).unwrap();
        let a2 = start(&tasks, "a", 10, Some(gate.clone())).unwrap();
        let mine = start(&tasks, "a", 10, Some(gate.clone())).unwrap_err();
        assert!(
            mine.message.contains("your 2 running tasks")
                && mine.message.contains(&a1)
                && mine.message.contains(&a2)
                && mine.message.contains("RUNNING_PER_CALLER")
                && mine.message.contains("stops within ")
                && mine.message.contains(" s at the latest")
                && mine.hint.contains("tasks/cancel"),
            "{mine:?}"
        );
        start(&tasks, "b", 10, Some(gate.clone())).expect("b has its own share");
        let all = start(&tasks, "c", 10, Some(gate.clone())).unwrap_err();
        assert!(
            all.message.contains("the server runs 3 tasks")
                && all.message.contains("RUNNING_IN_ALL"),
            "{all:?}"
        );
        // A cancelled task frees its place once its work has stopped.
        tasks.cancel("a", &a1).unwrap();
        assert_eq!(
            settled(&tasks, "a", &a1).await.status(),
            TaskStatus::Cancelled
        );
        start(&tasks, "c", 10, Some(gate.clone())).expect("room again");
        open.send(true).unwrap();
        assert_eq!(
            settled(&tasks, "a", &a2).await.status(),
            TaskStatus::Completed
        );
    }

    #[tokio::test]
    async fn cancelling_a_finished_task_deletes_it_and_gives_back_its_memory() {
        let budget = Budget::new(1 << 30);
        let tasks = Tasks::with_bounds(Arc::clone(&budget), 1 << 20, small(2, 4));
        let id = start(&tasks, "a", 10_000, None).unwrap();
        settled(&tasks, "a", &id).await;
        assert!(budget.used() > 10_000);
        // Another caller cannot delete it: to it the id is unknown.
        assert_eq!(
            tasks.cancel("b", &id).unwrap_err().message,
            unknown(&id).message
        );
        tasks.cancel("a", &id).unwrap();
        assert_eq!(budget.used(), 0);
        let gone = tasks.get("a", &id).unwrap_err();
        assert_eq!(gone.message, unknown(&id).message);
        assert!(tasks.cancel("a", &id).is_err(), "deleted: unknown now");
    }

    #[tokio::test]
    async fn kept_results_are_bounded_per_caller_oldest_let_go_first() {
        let tasks = tasks(small(2, 8));
        let mut ids = Vec::new();
        for _ in 0..5 {
            let id = start(&tasks, "a", 10, None).unwrap();
            settled(&tasks, "a", &id).await;
            ids.push(id);
        }
        // Three kept: the two oldest let go, and said so to their owner only.
        for id in &ids[..2] {
            let gone = tasks.get("a", id).unwrap_err();
            assert!(
                gone.message.contains("was let go to make room")
                    && gone.message.contains("RESULTS_PER_CALLER"),
                "{}",
                gone.message
            );
            assert_eq!(tasks.get("b", id).unwrap_err().message, unknown(id).message);
        }
        for id in &ids[2..] {
            assert_eq!(tasks.get("a", id).unwrap().status(), TaskStatus::Completed);
        }
        // tasks/cancel of a result let go: gone as asked, and unknown from then on.
        tasks.cancel("a", &ids[0]).unwrap();
        assert_eq!(
            tasks.get("a", &ids[0]).unwrap_err().message,
            unknown(&ids[0]).message
        );
    }

    #[tokio::test]
    async fn past_the_server_bound_the_largest_keeper_lets_go_first() {
        let tasks = tasks(Bounds {
            results_per_caller: 4,
            results: 5,
            ..small(2, 8)
        });
        let mut of_a = Vec::new();
        for _ in 0..4 {
            let id = start(&tasks, "a", 10, None).unwrap();
            settled(&tasks, "a", &id).await;
            of_a.push(id);
        }
        let b1 = start(&tasks, "b", 10, None).unwrap();
        settled(&tasks, "b", &b1).await;
        // The server's sixth result: `a` keeps the most, and lets go of its oldest.
        let b2 = start(&tasks, "b", 10, None).unwrap();
        settled(&tasks, "b", &b2).await;
        let gone = tasks.get("a", &of_a[0]).unwrap_err();
        assert!(gone.message.contains("RESULTS_IN_ALL"), "{}", gone.message);
        for id in [&b1, &b2] {
            assert!(tasks.get("b", id).is_ok());
        }
        assert!(tasks.get("a", &of_a[1]).is_ok());
    }

    #[tokio::test]
    async fn a_question_is_shown_until_answered_or_withdrawn() {
        let tasks = tasks(small(2, 4));
        let question: InputRequest = serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": {"message": "which?", "requestedSchema": {"type": "object", "properties": {}}}
        }))
        .unwrap();
        let id = tasks
            .spawn("a", Duration::from_secs(60), "asking".into(), move |c| {
                Box::pin(async move {
                    // Not answered in time: withdrawn, then answered.
                    let late = tokio::time::timeout(
                        Duration::from_millis(50),
                        c.request_input("first", question.clone()),
                    )
                    .await;
                    assert!(late.is_err());
                    c.set_status_message("asking again");
                    let answer = c.request_input("second", question).await?;
                    Ok(CallToolResult::success(vec![ContentBlock::text(
                        answer.to_string(),
                    )]))
                })
            })
            .unwrap()
            .task_id;
        let mut seen_first = false;
        loop {
            let got = tasks.get("a", &id).unwrap();
            if let TaskPayload::InputRequired { input_requests } = &got.payload {
                seen_first |= input_requests.contains_key("first");
                if input_requests.contains_key("second") {
                    assert_eq!(input_requests.len(), 1, "the first was withdrawn");
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert!(seen_first);
        tasks
            .update("a", &id, [("second".to_string(), json!("yes"))])
            .unwrap();
        let done = settled(&tasks, "a", &id).await;
        assert_eq!(done.status(), TaskStatus::Completed);
    }
}
