//! The server-wide memory budget.
//!
//! Everything a dataset or a call can make the server hold in memory for long is reserved
//! here before it is allocated: the bytes of a data file being read, its decoded columns, the
//! prepared table kept for a dataset version, and the operators of every call (through
//! [`CallPool`], a DataFusion memory pool that draws from this budget). A reservation that
//! does not fit is refused with an error that says how much was asked, how much is in use and
//! what would help, so a dataset that does not fit is refused instead of taking the process
//! down, and one caller's calls cannot take the memory every other caller needs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::Result as DfResult;
use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool, MemoryReservation};

use crate::error::{Refused, StorageError};

const MIB: usize = 1024 * 1024;

/// The budget when none is given: half of the memory this process may use (the machine's,
/// or its control group's limit when lower), else 4 GiB where neither can be read. Half
/// leaves room for what is not accounted (the runtime, caches of compiled plugins, result
/// JSON) and for the rest of the machine.
pub fn default_budget() -> usize {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .map(|kib| kib * 1024)
    });
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok());
    match (machine, cgroup) {
        (Some(m), Some(c)) => m.min(c) / 2,
        (Some(m), None) => m / 2,
        (None, Some(c)) => c / 2,
        (None, None) => 4096 * MIB,
    }
}

/// The memory the server may use for data and calls.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
    /// The most held since freed memory was last handed back to the system ([`release`]).
    high: AtomicUsize,
}

impl Budget {
    pub fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget {
            limit: limit.max(MIB),
            used: AtomicUsize::new(0),
            high: AtomicUsize::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn free(&self) -> usize {
        self.limit.saturating_sub(self.used())
    }

    /// Takes `bytes` from the budget if they fit.
    fn try_take(&self, bytes: usize) -> bool {
        match self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            }) {
            Ok(before) => {
                self.high.fetch_max(before + bytes, Ordering::AcqRel);
                true
            }
            Err(_) => false,
        }
    }

    /// Takes `bytes` whether or not they fit (memory already allocated, e.g. by an operator
    /// that cannot refuse).
    fn take(&self, bytes: usize) {
        let before = self.used.fetch_add(bytes, Ordering::AcqRel);
        self.high
            .fetch_max(before.saturating_add(bytes), Ordering::AcqRel);
    }

    fn give_back(&self, bytes: usize) {
        // Never below zero, whatever the order of releases.
        let before = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            })
            .unwrap_or_else(|used| used);
        if self.freed_much(before.saturating_sub(bytes)) {
            release::wake();
        }
    }

    /// Whether, now that `now` bytes are held, at least [`release::AFTER`] were freed since
    /// the last hand-back (a preparation's columns and dictionaries, a large call's
    /// operators); if so the high-water mark starts again from `now`.
    fn freed_much(&self, now: usize) -> bool {
        let high = self.high.load(Ordering::Acquire);
        high.saturating_sub(now) >= release::AFTER
            && self
                .high
                .compare_exchange(high, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// An empty reservation, grown as memory is needed and released when dropped.
    pub fn reservation(self: &Arc<Self>, purpose: impl Into<String>) -> Reservation {
        Reservation {
            budget: Arc::clone(self),
            purpose: purpose.into(),
            bytes: 0,
        }
    }
}

/// Memory held from the [`Budget`] for one purpose (reading a file, a prepared table).
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    purpose: String,
    bytes: usize,
}

impl Reservation {
    pub fn size(&self) -> usize {
        self.bytes
    }

    /// Grows the reservation by `bytes`, or says why it cannot.
    pub fn grow(&mut self, bytes: usize) -> Result<(), StorageError> {
        if self.budget.try_take(bytes) {
            self.bytes += bytes;
            return Ok(());
        }
        Err(StorageError::Limit {
            message: format!(
                "{} needs more memory than the server's memory budget allows: {} MiB more on top of the {} MiB it holds, while {} MiB of the budget of {} MiB are in use",
                self.purpose,
                bytes.div_ceil(MIB),
                self.bytes.div_ceil(MIB),
                self.budget.used().div_ceil(MIB),
                self.budget.limit() / MIB,
            ),
            hint: "serve a smaller extract of the data, or start the server with a larger --memory-budget (if the machine has the memory); calls on other datasets are unaffected".into(),
        })
    }

    /// Sets the reservation to exactly `bytes` (shrinking always succeeds).
    pub fn resize(&mut self, bytes: usize) -> Result<(), StorageError> {
        if bytes >= self.bytes {
            self.grow(bytes - self.bytes)
        } else {
            self.budget.give_back(self.bytes - bytes);
            self.bytes = bytes;
            Ok(())
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// How far a preparation has come, for the answer of a call that stops waiting for it.
#[derive(Debug, Default)]
pub struct Progress {
    /// Rows read (or prepared) so far.
    pub rows: std::sync::atomic::AtomicU64,
    /// Whether the rows are being prepared (after reading).
    pub preparing: std::sync::atomic::AtomicBool,
    /// When the rows began to be prepared: with `rows`, the rate a call weighs the rest by.
    pub since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Progress {
    /// Marks the start of preparing the rows (after reading, or again after a failed start).
    pub fn preparing_from_now(&self) {
        self.rows.store(0, Ordering::Relaxed);
        self.preparing.store(true, Ordering::Relaxed);
        if let Ok(mut since) = self.since.lock() {
            *since = Some(std::time::Instant::now());
        }
    }

    /// Rows prepared so far and the time they took, once the rows are being prepared.
    pub fn prepared_so_far(&self) -> Option<(u64, std::time::Duration)> {
        if !self.preparing.load(Ordering::Relaxed) {
            return None;
        }
        let since = (*self.since.lock().ok()?)?;
        Some((self.rows.load(Ordering::Relaxed), since.elapsed()))
    }
}

/// What a backend reading data, and the preparation after it, account their memory with:
/// every batch is reserved from the budget before the next is read, and a cancelled
/// preparation (its dataset version replaced, its time used up) stops at the next batch.
#[derive(Debug, Clone)]
pub struct Meter {
    inner: Arc<MeterInner>,
}

#[derive(Debug)]
struct MeterInner {
    reservation: std::sync::Mutex<Reservation>,
    cancel: Arc<std::sync::atomic::AtomicBool>,
    progress: Arc<Progress>,
    /// Why metering refused, kept whole for the caller (a backend may only pass on text).
    refusal: std::sync::Mutex<Option<StorageError>>,
}

impl Meter {
    pub fn new(
        reservation: Reservation,
        cancel: Arc<std::sync::atomic::AtomicBool>,
        progress: Arc<Progress>,
    ) -> Meter {
        Meter {
            inner: Arc::new(MeterInner {
                reservation: std::sync::Mutex::new(reservation),
                cancel,
                progress,
                refusal: std::sync::Mutex::new(None),
            }),
        }
    }

    /// Reserves `bytes` more for data being read (`rows` of it), or refuses.
    pub fn account(&self, bytes: usize, rows: usize) -> Result<(), StorageError> {
        if self.inner.cancel.load(Ordering::Relaxed) {
            return Err(self.refuse(StorageError::Limit {
                message: "the preparation was stopped: its dataset version was replaced or its time ran out".into(),
                hint: "call again; the current version of the dataset is prepared anew".into(),
            }));
        }
        let grown = match self.inner.reservation.lock() {
            Ok(mut r) => r.grow(bytes),
            Err(_) => Err(StorageError::internal(
                "the memory meter's lock is poisoned",
            )),
        };
        grown.map_err(|e| self.refuse(e))?;
        self.inner
            .progress
            .rows
            .fetch_add(rows as u64, Ordering::Relaxed);
        Ok(())
    }

    fn refuse(&self, e: StorageError) -> StorageError {
        if let Ok(mut slot) = self.inner.refusal.lock() {
            *slot = Some(e.clone());
        }
        e
    }

    /// The error that stopped metering, if any.
    pub fn refusal(&self) -> Option<StorageError> {
        self.inner.refusal.lock().ok().and_then(|s| s.clone())
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.inner.reservation.lock().map(|r| r.size()).unwrap_or(0)
    }

    /// Sets what is held to `bytes` (after data is dropped or measured exactly).
    pub fn resize(&self, bytes: usize) -> Result<(), StorageError> {
        match self.inner.reservation.lock() {
            Ok(mut r) => r.resize(bytes).map_err(|e| self.refuse(e)),
            Err(_) => Err(StorageError::internal(
                "the memory meter's lock is poisoned",
            )),
        }
    }

    pub fn cancelled(&self) -> bool {
        self.inner.cancel.load(Ordering::Relaxed)
    }

    pub fn progress(&self) -> &Arc<Progress> {
        &self.inner.progress
    }
}

/// The memory pool of one call: its operators may reserve up to the per-call limit, and
/// every byte also comes out of the server-wide [`Budget`], so concurrent calls together
/// never hold more than the budget.
#[derive(Debug)]
pub struct CallPool {
    budget: Arc<Budget>,
    limit: usize,
    used: AtomicUsize,
    /// What all calls of this call's caller hold, and how much they may (so one caller's
    /// concurrent calls cannot take the memory every other caller needs).
    caller: Option<(Arc<AtomicUsize>, usize)>,
}

impl CallPool {
    pub fn new(budget: Arc<Budget>, limit: usize) -> CallPool {
        CallPool {
            budget,
            limit,
            used: AtomicUsize::new(0),
            caller: None,
        }
    }

    /// The pool of a call made by a caller whose calls together may hold `share` bytes.
    pub fn for_caller(mut self, held: Arc<AtomicUsize>, share: usize) -> CallPool {
        self.caller = Some((held, share));
        self
    }

    fn caller_take(&self, bytes: usize) -> bool {
        match &self.caller {
            None => true,
            Some((held, share)) => held
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                    h.checked_add(bytes).filter(|t| t <= share)
                })
                .is_ok(),
        }
    }

    fn caller_give_back(&self, bytes: usize) {
        if let Some((held, _)) = &self.caller {
            let _ = held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                Some(h.saturating_sub(bytes))
            });
        }
    }
}

impl std::fmt::Display for CallPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tally call pool (limit {} bytes, server budget {} bytes)",
            self.limit,
            self.budget.limit()
        )
    }
}

impl MemoryPool for CallPool {
    fn name(&self) -> &str {
        "tally-call"
    }

    fn grow(&self, _reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::AcqRel);
        self.budget.take(additional);
        if let Some((held, _)) = &self.caller {
            held.fetch_add(additional, Ordering::AcqRel);
        }
    }

    fn shrink(&self, _reservation: &MemoryReservation, shrink: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(shrink))
            });
        self.budget.give_back(shrink);
        self.caller_give_back(shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DfResult<()> {
        let fits_call = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(additional).filter(|t| *t <= self.limit)
            })
            .is_ok();
        if !fits_call {
            return Err(Refused::CallBudget.error(format!(
                "{} needs {additional} more bytes; the call's budget is {} bytes",
                reservation.consumer().name(),
                self.limit
            )));
        }
        let undo_call = || {
            let _ = self
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                    Some(u.saturating_sub(additional))
                });
        };
        if !self.caller_take(additional) {
            undo_call();
            return Err(Refused::CallerShare.error(format!(
                "this caller's calls together hold their share ({} bytes)",
                self.caller.as_ref().map_or(0, |(_, share)| *share)
            )));
        }
        if !self.budget.try_take(additional) {
            undo_call();
            self.caller_give_back(additional);
            return Err(Refused::ServerBudget.error(format!(
                "the server's memory budget is in use by other work ({} of {} bytes used)",
                self.budget.used(),
                self.budget.limit()
            )));
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

impl Drop for CallPool {
    fn drop(&mut self) {
        // Operators release what they reserved; whatever is left goes back with the pool.
        let left = self.used.load(Ordering::Relaxed);
        self.budget.give_back(left);
        self.caller_give_back(left);
    }
}

/// Handing memory the process freed back to the system. The allocator is the binary's to
/// choose and tune, so what hands it back is set by the binary ([`give_back_with`]); storage
/// says when: after every preparation, and once [`AFTER`] bytes or more of the budget were
/// freed since the last time (a large call's operators). glibc's
/// malloc keeps what a thread freed in that thread's arena for its next allocations, so
/// after a preparation or a large call the process would otherwise hold, for as long as it
/// runs, the high-water mark of its busiest moment. It runs on a thread of its own (handing
/// back walks every arena under its lock), at most once per [`PAUSE`].
pub mod release {
    use std::sync::{Condvar, Mutex, OnceLock};
    use std::time::Duration;

    /// Bytes freed (in the budget's count) that are worth handing back.
    pub const AFTER: usize = 16 * super::MIB;
    /// The least time between two hand-backs.
    pub const PAUSE: Duration = Duration::from_millis(500);

    static HOOK: OnceLock<fn()> = OnceLock::new();
    static WANTED: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());
    static STARTED: std::sync::Once = std::sync::Once::new();

    /// Sets what hands freed memory back (once; later calls change nothing). Without it,
    /// freed memory is left to the allocator.
    pub fn give_back_with(hook: fn()) {
        let _ = HOOK.set(hook);
    }

    /// Asks for a hand-back soon (no-op without a hook).
    pub(crate) fn wake() {
        let Some(hook) = HOOK.get().copied() else {
            return;
        };
        STARTED.call_once(|| {
            let started = std::thread::Builder::new()
                .name("tally-give-back".into())
                .spawn(move || run(hook));
            if let Err(e) = started {
                tracing::warn!("freed memory will not be handed back: {e}");
            }
        });
        let (wanted, wake) = &WANTED;
        if let Ok(mut w) = wanted.lock() {
            *w = true;
            wake.notify_one();
        }
    }

    fn run(hook: fn()) {
        let (wanted, wake) = &WANTED;
        loop {
            {
                let Ok(mut w) = wanted.lock() else { return };
                while !*w {
                    w = match wake.wait(w) {
                        Ok(w) => w,
                        Err(_) => return,
                    };
                }
                *w = false;
            }
            let started = std::time::Instant::now();
            hook();
            tracing::debug!(
                took_us = started.elapsed().as_micros() as u64,
                "handed freed memory back to the system"
            );
            std::thread::sleep(PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::DataFusionError;

    /// Freeing a preparation's worth hands memory back once, through the hook the binary
    /// set; small releases do not, and the count starts again from what is held.
    #[test]
    fn much_freed_memory_is_handed_back_through_the_hook() {
        static HANDED: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>> =
            std::sync::Mutex::new(None);
        let (tx, rx) = std::sync::mpsc::channel();
        *HANDED.lock().expect("lock") = Some(tx);
        release::give_back_with(|| {
            if let Some(tx) = HANDED.lock().expect("lock").as_ref() {
                let _ = tx.send(());
            }
        });
        let budget = Budget::new(1024 * MIB);
        let mut small = budget.reservation("small");
        small.grow(release::AFTER / 2).expect("fits");
        drop(small);
        assert_eq!(budget.high.load(Ordering::Acquire), release::AFTER / 2);
        let mut prep = budget.reservation("a preparation");
        prep.grow(3 * release::AFTER).expect("fits");
        let mut kept = budget.reservation("the prepared table");
        kept.grow(MIB).expect("fits");
        drop(prep);
        assert_eq!(
            budget.high.load(Ordering::Acquire),
            MIB,
            "counted again from what is held"
        );
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the hook ran");
        drop(kept);
        assert!(!budget.freed_much(0), "one MiB freed is not worth it");
    }

    #[test]
    fn reservations_are_bounded_and_released() {
        let budget = Budget::new(10 * MIB);
        let mut a = budget.reservation("dataset `a`");
        a.grow(6 * MIB).expect("fits");
        let mut b = budget.reservation("dataset `b`");
        let err = b.grow(6 * MIB).expect_err("over the budget");
        assert!(err.to_string().contains("dataset `b`"), "{err}");
        assert_eq!(budget.used(), 6 * MIB);
        drop(a);
        assert_eq!(budget.used(), 0);
        b.grow(6 * MIB).expect("fits once a is gone");
        b.resize(MIB).expect("shrinks");
        assert_eq!(budget.used(), MIB);
    }

    #[test]
    fn call_pools_draw_from_the_budget() {
        use datafusion::execution::memory_pool::MemoryConsumer;
        let budget = Budget::new(8 * MIB);
        let pool: Arc<dyn MemoryPool> = Arc::new(CallPool::new(Arc::clone(&budget), 6 * MIB));
        let r = MemoryConsumer::new("agg").register(&pool);
        r.try_grow(5 * MIB).expect("within the call");
        assert!(r.try_grow(2 * MIB).is_err(), "over the call's own limit");
        let other: Arc<dyn MemoryPool> = Arc::new(CallPool::new(Arc::clone(&budget), 6 * MIB));
        let r2 = MemoryConsumer::new("agg2").register(&other);
        let err = r2
            .try_grow(4 * MIB)
            .expect_err("the server is out of budget");
        match &err {
            DataFusionError::ResourcesExhausted(m) => {
                assert_eq!(Refused::of(m), Refused::ServerBudget, "{m}")
            }
            other => panic!("not a full pool: {other}"),
        }
        // Wrapped as DataFusion wraps it, it is still the server's budget to the caller.
        let wrapped = DataFusionError::Context(
            "aggregating".into(),
            Box::new(DataFusionError::Shared(Arc::new(err))),
        );
        assert!(
            matches!(crate::error::StorageError::from(wrapped), crate::error::StorageError::Limit { ref message, .. } if message.contains("server's memory budget")),
        );
        drop(r);
        r2.try_grow(4 * MIB)
            .expect("fits once the first call is done");
    }
}
