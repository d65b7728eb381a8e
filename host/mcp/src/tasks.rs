//! Long calls as MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663).
//!
//! A client that declares the extension on a `tools/call` may be answered with a task handle
//! instead of the result: when the call is estimated to take more than half its time budget
//! (a dataset read from its files at every call, a first preparation, a cluster), or when it
//! asks for a task with `_meta: {"tally/task": true}`. The call then runs with the task's own
//! budget (`--task-timeout-ms`, minutes, not the 10 s of a call); the client polls
//! `tasks/get`, which says what the call is doing (the progress a call reports) and, once it
//! is over, carries its `CallToolResult` with the validated envelope; `tasks/cancel` stops
//! its work. A client that did not declare the extension on the request is never given a
//! task (the specification requires it): its calls keep their budget.
//!
//! Bounds (docs/security.md): a task is seen only by the caller that created it (another
//! caller's id is answered as unknown, as an id that never existed); a caller holds at most
//! [`PER_CALLER`] tasks, of them [`RUNNING_PER_CALLER`] running, and the server
//! [`SERVER_WIDE`]; a task's time-to-live is its budget, the time its user may take to answer
//! its questions and [`KEPT`], and it stays readable until one time-to-live after it ended;
//! its result is at most `--max-result-bytes` and as much again (at least [`ALLOWANCE`]) of
//! JSON (rows within that bound, plus the provenance, the fields and a chart), and is held in the server-wide memory budget while it is kept, so
//! kept answers and the data and calls they compete with never hold more than the budget
//! together. A call that would become a task only by its estimate, when there is no room for
//! one, is answered within the call's budget.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, DetailedTask, Task};
use rmcp::task_manager::{TaskContext, TaskFuture, TaskManager, TaskOptions};
use serde_json::{Value, json};
use tally_storage::memory::{Budget, Reservation};

/// Tasks one caller may hold, running or finished and kept.
pub const PER_CALLER: usize = 8;
/// Of those, tasks of one caller running at once: each may run for the task's budget, past
/// the call budget that bounds a caller's other calls.
pub const RUNNING_PER_CALLER: usize = 2;
/// Tasks the whole server may hold.
pub const SERVER_WIDE: usize = 64;
/// How long a task is kept past its own time budget: its time-to-live is the budget plus
/// this, and a finished task stays readable for one more time-to-live at most.
pub const KEPT: Duration = Duration::from_secs(600);
/// What a kept result may hold beyond its rows (provenance, fields, a chart), at least.
pub const ALLOWANCE: usize = 4 * 1024 * 1024;
/// How often a client is asked to poll.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The `_meta` key with which a client asks for a task whatever the estimate.
pub const ASK: &str = "tally/task";

/// The tasks of all sessions, with the caller that owns each.
pub struct Tasks {
    manager: TaskManager,
    owners: Mutex<HashMap<String, Owned>>,
    /// The server-wide memory budget kept results are held in.
    budget: Arc<Budget>,
    /// The largest result a task keeps, as JSON.
    max_result_bytes: usize,
}

/// A task held for its caller.
#[derive(Debug)]
struct Owned {
    caller: String,
    created: Instant,
    ttl: Duration,
    finished: Arc<AtomicBool>,
    /// The memory its result is held in, once it has one: released when the task is let go.
    _kept: Arc<Mutex<Option<Reservation>>>,
}

impl Owned {
    /// Whether the manager may still hold it: a task ends by its time-to-live at the latest
    /// and is kept one time-to-live past its end.
    fn held(&self) -> bool {
        self.created.elapsed() < self.ttl * 2
    }

    fn running(&self) -> bool {
        !self.finished.load(Ordering::Relaxed) && self.created.elapsed() < self.ttl
    }
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("held", &self.owners.lock().map(|o| o.len()).unwrap_or(0))
            .finish()
    }
}

/// Why a task was refused: too many held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    pub message: String,
}

/// What a task's work keeps its result with: within its bound and held in the memory budget.
#[derive(Clone)]
pub struct Keeper {
    slot: Arc<Mutex<Option<Reservation>>>,
    budget: Arc<Budget>,
    max_result_bytes: usize,
}

impl Keeper {
    /// A finished call's result as the task keeps it: within the largest result a task keeps
    /// and held in the server's memory budget, else a tool error saying what would help.
    pub fn keep(&self, result: CallToolResult) -> CallToolResult {
        let size = serde_json::to_vec(&result).map_or(0, |v| v.len());
        if size > self.max_result_bytes {
            return refusal(
                format!(
                    "the answer of this task is {size} bytes of JSON; a task keeps at most {}",
                    self.max_result_bytes
                ),
                "ask for fewer rows or fields (limit, fields), or leave out the chart",
            );
        }
        let mut reservation = self.budget.reservation("the answer of a task");
        if let Err(e) = reservation.resize(size) {
            return refusal(
                format!("the answer of this task ({size} bytes of JSON) cannot be kept: {e}"),
                "call again when the server holds less, or ask for a smaller answer (limit, fields)",
            );
        }
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(reservation);
        result
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

impl Tasks {
    /// The tasks of a server whose memory budget is `budget` and whose answers hold at most
    /// `max_result_bytes` of rows: a task keeps a result of that and as much again (at least
    /// [`ALLOWANCE`]) at most.
    pub fn new(budget: Arc<Budget>, max_result_bytes: usize) -> Tasks {
        Tasks {
            manager: TaskManager::default(),
            owners: Mutex::default(),
            budget,
            max_result_bytes: max_result_bytes.saturating_add(max_result_bytes.max(ALLOWANCE)),
        }
    }

    /// Whether `caller` may start a task now: it holds fewer than [`PER_CALLER`] tasks, of
    /// them fewer than [`RUNNING_PER_CALLER`] running, and the server fewer than
    /// [`SERVER_WIDE`].
    pub fn room(&self, caller: &str) -> Result<(), Full> {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        Self::room_in(&mut owners, caller)
    }

    fn room_in(owners: &mut HashMap<String, Owned>, caller: &str) -> Result<(), Full> {
        // Tasks the manager has let go (kept past their time) are no longer held.
        owners.retain(|_, o| o.held());
        let mine: Vec<&Owned> = owners.values().filter(|o| o.caller == caller).collect();
        if mine.len() >= PER_CALLER {
            return Err(Full {
                message: format!(
                    "this caller already holds {} tasks, the most one caller may hold ({PER_CALLER}); a finished task stays readable until one time-to-live (`ttlMs`) after it ended, and `tasks/cancel` ends a running one",
                    mine.len()
                ),
            });
        }
        let running = mine.iter().filter(|o| o.running()).count();
        if running >= RUNNING_PER_CALLER {
            return Err(Full {
                message: format!(
                    "this caller already runs {running} tasks, the most one caller may run at once ({RUNNING_PER_CALLER})"
                ),
            });
        }
        if owners.len() >= SERVER_WIDE {
            return Err(Full {
                message: format!(
                    "the server holds {} tasks, the most it may hold ({SERVER_WIDE}); try again when some have finished",
                    owners.len()
                ),
            });
        }
        Ok(())
    }

    /// Runs the future `run` makes as a task of `caller` whose time-to-live is `ttl`: its
    /// seed state, already readable with [`Tasks::get`]. Refused when there is no
    /// [`Tasks::room`] for it.
    pub fn spawn<F>(
        &self,
        caller: &str,
        ttl: Duration,
        status: String,
        run: F,
    ) -> Result<Task, Full>
    where
        F: FnOnce(TaskContext, Keeper) -> TaskFuture,
    {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        Self::room_in(&mut owners, caller)?;
        let options = TaskOptions::new()
            .with_ttl_ms(ttl.as_millis() as u64)
            .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64)
            .with_status_message(status);
        let finished = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&finished);
        let keeper = Keeper {
            slot: Arc::default(),
            budget: Arc::clone(&self.budget),
            max_result_bytes: self.max_result_bytes,
        };
        let kept = Arc::clone(&keeper.slot);
        let task = self.manager.spawn(options, move |context| {
            let work = run(context, keeper);
            Box::pin(async move {
                let result = work.await;
                done.store(true, Ordering::Relaxed);
                result
            })
        });
        owners.insert(
            task.task_id.clone(),
            Owned {
                caller: caller.to_string(),
                created: Instant::now(),
                ttl,
                finished,
                _kept: kept,
            },
        );
        Ok(task)
    }

    /// The task `id` as its owner sees it; of another caller's task, the same error as of
    /// one that never existed.
    pub fn get(&self, caller: &str, id: &str) -> Result<DetailedTask, ErrorData> {
        self.owned(caller, id)?;
        self.manager.get_task(id).map_err(|_| self.let_go(id))
    }

    /// `tasks/cancel`: asks the task's work to stop (it stops within moments: its call is
    /// dropped, and the query work under it with it).
    pub fn cancel(&self, caller: &str, id: &str) -> Result<(), ErrorData> {
        self.owned(caller, id)?;
        self.manager.cancel_task(id).map_err(|_| self.let_go(id))
    }

    /// `tasks/update`: answers to what the task asked (it never asks today: a choice among
    /// ambiguous names is asked before a call becomes a task); unknown keys are ignored.
    pub fn update(
        &self,
        caller: &str,
        id: &str,
        responses: impl IntoIterator<Item = (String, Value)>,
    ) -> Result<(), ErrorData> {
        self.owned(caller, id)?;
        self.manager
            .update_task(id, responses)
            .map_err(|_| self.let_go(id))
    }

    /// Forgets a task the manager no longer holds; the error of an unknown task.
    fn let_go(&self, id: &str) -> ErrorData {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        unknown(id)
    }

    fn owned(&self, caller: &str, id: &str) -> Result<(), ErrorData> {
        let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        match owners.get(id) {
            Some(owner) if owner.caller == caller => Ok(()),
            _ => Err(unknown(id)),
        }
    }
}

/// The error of a task id this caller has no task under (unknown, let go, or another's).
fn unknown(id: &str) -> ErrorData {
    let shown: String = id.chars().take(crate::bounds::MAX_TASK_ID_CHARS).collect();
    ErrorData::invalid_params(
        format!(
            "no task `{shown}` for this caller: it never existed, was let go after its time-to-live, or belongs to another caller"
        ),
        Some(json!({ "taskId": shown })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keeper(budget: &Arc<Budget>, max_result_bytes: usize) -> Keeper {
        Keeper {
            slot: Arc::default(),
            budget: Arc::clone(budget),
            max_result_bytes,
        }
    }

    fn answer(bytes: usize) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text("x".repeat(bytes))])
    }

    fn refused(result: &CallToolResult) -> Option<String> {
        (result.is_error == Some(true)).then(|| format!("{:?}", result.content))
    }

    #[test]
    fn a_kept_result_is_held_in_the_memory_budget_until_the_task_is_let_go() {
        let budget = Budget::new(1 << 20);
        let keeper = keeper(&budget, 1 << 20);
        let kept = keeper.keep(answer(10_000));
        assert!(refused(&kept).is_none());
        let size = serde_json::to_vec(&kept).unwrap().len();
        assert_eq!(budget.used(), size);
        drop(keeper.slot.lock().unwrap().take());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_result_past_its_bound_or_the_budget_is_kept_as_a_refusal() {
        let budget = Budget::new(1 << 20);
        let too_large = keeper(&budget, 1_000).keep(answer(5_000));
        let message = refused(&too_large).expect("refused");
        assert!(
            message.contains("keeps at most 1000") && message.contains("limit_exceeded"),
            "{message}"
        );
        assert_eq!(budget.used(), 0);

        // The budget is held by data but for 2,000 bytes.
        let mut data = budget.reservation("a prepared table");
        data.resize((1 << 20) - 2_000).unwrap();
        let no_room = keeper(&budget, 1 << 20).keep(answer(5_000));
        let message = refused(&no_room).expect("refused");
        assert!(message.contains("cannot be kept"), "{message}");
        assert_eq!(budget.used(), (1 << 20) - 2_000);
    }

    #[test]
    fn the_bound_is_the_rows_bound_and_as_much_again() {
        let budget = Budget::new(1 << 30);
        assert_eq!(
            Tasks::new(Arc::clone(&budget), 4 << 20).max_result_bytes,
            8 << 20
        );
        assert_eq!(
            Tasks::new(Arc::clone(&budget), 1_000).max_result_bytes,
            1_000 + ALLOWANCE
        );
        assert_eq!(Tasks::new(budget, 10 << 20).max_result_bytes, 20 << 20);
    }
}
