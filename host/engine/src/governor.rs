//! The execution governor: where a call's CPU work runs, and when it may start.
//!
//! Calls that read many records (a table read from its files, one being prepared, a large
//! prepared table, an inspection not yet computed, a check of an answer, provisions) are
//! *heavy*: they run on a runtime of their own, [`Governor::runtime`], whose threads are
//! not the ones that serve requests, and at most [`Limits::heavy_calls`](crate::limits::Limits) of
//! them run at once. The others wait for a slot, fairly: a freed slot goes to the waiting
//! call whose caller has the fewest heavy calls running (the earliest of those first), so one
//! caller sending many cannot keep the slots from the others; a caller may hold at most
//! [`Limits::heavy_queue_per_caller`](crate::limits::Limits) waiting and the server
//! [`Limits::heavy_queue`](crate::limits::Limits); past either, or at its deadline while waiting, a
//! call is refused with the cap it met and how many calls hold the slots.
//!
//! Light calls (lists, an inspection already computed, conditions on a small prepared table)
//! run where they are asked, on the serving runtime: they never wait behind heavy ones, and
//! the operating system shares the cores between the two runtimes' threads, which is the
//! share of the machine light calls keep while heavy ones run.
//!
//! A slot is held by the call's task until that task ends, not until its caller stops
//! waiting: a call given up (its deadline, its client's cancellation) has its stop set and its
//! task aborted, and only when its work has actually stopped does the next call start. So
//! the slots count the work running, never work that outlived its caller.

use crate::error::EngineError;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

/// Heavy calls, their slots and the runtime they run on.
pub struct Governor {
    slots: usize,
    queue: usize,
    queue_per_caller: usize,
    state: Mutex<State>,
    runtime: OnceLock<Heavy>,
}

impl std::fmt::Debug for Governor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (running, waiting) = self.load();
        f.debug_struct("Governor")
            .field("slots", &self.slots)
            .field("running", &running)
            .field("waiting", &waiting)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// Heavy calls running, per caller.
    running: HashMap<String, usize>,
    total: usize,
    /// Calls waiting for a slot, in the order they came.
    waiting: VecDeque<Waiter>,
    next: u64,
}

struct Waiter {
    id: u64,
    caller: String,
    wake: tokio::sync::oneshot::Sender<()>,
}

/// The runtime heavy calls run on. Dropped in the background: an engine may be dropped from
/// inside another runtime, where dropping a runtime that blocks is refused.
struct Heavy(Option<tokio::runtime::Runtime>);

impl Drop for Heavy {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// A heavy call's slot: given back when dropped, to the waiting call of the caller with the
/// fewest running.
#[derive(Debug)]
pub struct Slot {
    governor: Arc<Governor>,
    caller: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.governor.release(&self.caller);
    }
}

impl Governor {
    pub fn new(slots: usize, queue: usize, queue_per_caller: usize) -> Governor {
        Governor {
            slots: slots.max(1),
            queue,
            queue_per_caller: queue_per_caller.max(1),
            state: Mutex::new(State::default()),
            runtime: OnceLock::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Heavy calls running and waiting now.
    pub fn load(&self) -> (usize, usize) {
        let state = self.lock();
        (state.total, state.waiting.len())
    }

    /// The runtime heavy calls run on, made at the first one: one thread a slot, named
    /// `tally-heavy`, apart from the threads that serve requests.
    pub fn runtime(&self) -> Result<tokio::runtime::Handle, EngineError> {
        if let Some(Heavy(Some(runtime))) = self.runtime.get() {
            return Ok(runtime.handle().clone());
        }
        let built = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.slots)
            .thread_name("tally-heavy")
            .enable_all()
            .build()
            .map_err(|e| {
                EngineError::Internal(format!(
                    "the threads heavy calls run on could not be started: {e}"
                ))
            })?;
        // Two first heavy calls may each build one: the one not kept is shut down in the
        // background (dropping a runtime inside another panics).
        let mut built = Some(built);
        let heavy = self.runtime.get_or_init(|| Heavy(built.take()));
        if let Some(unused) = built {
            unused.shutdown_background();
        }
        match heavy {
            Heavy(Some(runtime)) => Ok(runtime.handle().clone()),
            Heavy(None) => Err(EngineError::internal("the heavy runtime was shut down")),
        }
    }

    /// A slot for a heavy call of `caller`: at once when one is free and nobody waits,
    /// else after the calls ahead of it (fairly, see the module's text), refused when the
    /// queue is full or `deadline` comes first.
    pub async fn admit(
        self: &Arc<Self>,
        caller: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Slot, EngineError> {
        let (id, woken) = {
            let mut state = self.lock();
            if state.total < self.slots && state.waiting.is_empty() {
                state.total += 1;
                *state.running.entry(caller.to_string()).or_default() += 1;
                return Ok(self.slot(caller));
            }
            let mine = state.waiting.iter().filter(|w| w.caller == caller).count();
            if mine >= self.queue_per_caller {
                return Err(self.full(
                    &state,
                    format!(
                        "you already have {mine} heavy calls waiting for a slot, the most one caller may have waiting"
                    ),
                ));
            }
            if state.waiting.len() >= self.queue {
                return Err(self.full(
                    &state,
                    format!(
                        "{} heavy calls are waiting for a slot, the most the server keeps waiting",
                        state.waiting.len()
                    ),
                ));
            }
            let (wake, woken) = tokio::sync::oneshot::channel();
            state.next += 1;
            let id = state.next;
            state.waiting.push_back(Waiter {
                id,
                caller: caller.to_string(),
                wake,
            });
            (id, woken)
        };
        let mut queued = Queued {
            governor: self,
            id,
            caller,
            done: false,
        };
        let woken = tokio::time::timeout_at(deadline, woken).await;
        queued.done = true;
        let mut state = self.lock();
        let still_waiting = state.waiting.iter().position(|w| w.id == id);
        match (woken, still_waiting) {
            (Ok(Ok(())), _) => Ok(self.slot(caller)),
            (_, Some(at)) => {
                state.waiting.remove(at);
                Err(self.full(
                    &state,
                    "its time budget ran out while it waited for a slot".to_string(),
                ))
            }
            // Given a slot as the deadline came: handed on at once.
            (_, None) => {
                drop(state);
                drop(self.slot(caller));
                let state = self.lock();
                Err(self.full(
                    &state,
                    "its time budget ran out while it waited for a slot".to_string(),
                ))
            }
        }
    }

    fn slot(self: &Arc<Self>, caller: &str) -> Slot {
        Slot {
            governor: Arc::clone(self),
            caller: caller.to_string(),
        }
    }

    fn full(&self, state: &State, why: String) -> EngineError {
        EngineError::Limit {
            message: format!(
                "the call reads many records and was not started: {why} ({} of {} slots for such calls are running, {} calls waiting)",
                state.total,
                self.slots,
                state.waiting.len()
            ),
            hint: "try again when the calls running end (most end within their time budget), narrow the call so it reads fewer records, or ask for it as a task where the client supports tasks".into(),
        }
    }

    /// Gives a slot back: to the waiting call whose caller runs the fewest heavy calls (the
    /// earliest of those), or free.
    fn release(&self, caller: &str) {
        let mut state = self.lock();
        if let Some(n) = state.running.get_mut(caller) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.running.remove(caller);
            }
        }
        state.total = state.total.saturating_sub(1);
        while state.total < self.slots {
            let Some(at) = next_in_line(&state) else {
                break;
            };
            let Some(waiter) = state.waiting.remove(at) else {
                break;
            };
            state.total += 1;
            *state.running.entry(waiter.caller.clone()).or_default() += 1;
            if waiter.wake.send(()).is_err() {
                // Gone before it was woken: its slot goes to the next.
                state.total -= 1;
                if let Some(n) = state.running.get_mut(&waiter.caller) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        state.running.remove(&waiter.caller);
                    }
                }
            }
        }
    }
}

/// The waiting call to start next: the earliest of those whose caller runs the fewest.
fn next_in_line(state: &State) -> Option<usize> {
    state
        .waiting
        .iter()
        .enumerate()
        .min_by_key(|(at, w)| (state.running.get(&w.caller).copied().unwrap_or(0), *at))
        .map(|(at, _)| at)
}

/// A call waiting for a slot. Given up before it was answered (its caller gone, its task
/// aborted), it leaves the queue, or gives back the slot it was handed meanwhile.
struct Queued<'a> {
    governor: &'a Governor,
    id: u64,
    caller: &'a str,
    done: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.governor.lock();
        match state.waiting.iter().position(|w| w.id == self.id) {
            Some(at) => {
                state.waiting.remove(at);
            }
            None => {
                drop(state);
                self.governor.release(self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn far() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(60)
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_caller_running_fewest() {
        let g = Arc::new(Governor::new(1, 8, 4));
        let held = g.admit("a", far()).await.expect("free slot");
        // `a` queues two more, then `b` one: `b` runs next, though it came last.
        let g2 = Arc::clone(&g);
        let a2 = tokio::spawn(async move { g2.admit("a", far()).await.map(|_| "a") });
        tokio::task::yield_now().await;
        let g3 = Arc::clone(&g);
        let b = tokio::spawn(async move {
            let slot = g3.admit("b", far()).await;
            slot.map(|s| {
                drop(s);
                "b"
            })
        });
        while g.load().1 < 2 {
            tokio::task::yield_now().await;
        }
        drop(held);
        assert_eq!(b.await.expect("joined").expect("admitted"), "b");
        assert_eq!(a2.await.expect("joined").expect("admitted"), "a");
        assert_eq!(g.load(), (0, 0));
    }

    #[tokio::test]
    async fn the_queue_and_the_deadline_refuse_with_the_cap_met() {
        let g = Arc::new(Governor::new(1, 1, 1));
        let _held = g.admit("a", far()).await.expect("free slot");
        let g2 = Arc::clone(&g);
        let waiting = tokio::spawn(async move { g2.admit("a", far()).await.map(|_| ()) });
        while g.load().1 < 1 {
            tokio::task::yield_now().await;
        }
        let refused = g
            .admit("a", far())
            .await
            .expect_err("one caller waits for one at most");
        assert!(
            refused.to_string().contains("one caller may have waiting"),
            "{refused}"
        );
        let refused = g
            .admit("b", far())
            .await
            .expect_err("the server keeps one waiting");
        assert!(
            refused
                .to_string()
                .contains("the most the server keeps waiting"),
            "{refused}"
        );
        waiting.abort();
        let _ = waiting.await;
        let soon = tokio::time::Instant::now() + Duration::from_millis(20);
        let refused = g.admit("c", soon).await.expect_err("past its deadline");
        assert!(
            refused.to_string().contains("time budget ran out"),
            "{refused}"
        );
        assert_eq!(g.load(), (1, 0));
    }
}
