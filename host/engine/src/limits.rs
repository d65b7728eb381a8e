//! The per-call budgets: each holds for every call, whatever the transport.

use std::time::Duration;

use tally_storage::{dataset, memory};

/// Per-call budgets. Each holds for every call, whatever the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time one call may take.
    pub call_timeout: Duration,
    /// Wall-clock time a call run as an MCP task may take (a client that opted in polls
    /// for its answer, so it may run past the call's own budget).
    pub task_timeout: Duration,
    /// Memory the operators of one call may reserve (sorts, aggregations).
    pub call_memory_bytes: usize,
    /// Size of the serialised rows of one result; rows past it are left out and that is said.
    pub max_result_bytes: usize,
    /// Estimated tokens of the rows of one result (a model's context is the scarce thing);
    /// rows past it are left out, with a cursor where there are pages, and that is said.
    pub max_result_tokens: usize,
    /// Memory the whole server may hold for data and calls: prepared tables, files being
    /// read, and the operators of every call in flight (see [`memory`]).
    pub memory_budget_bytes: usize,
    /// Groups one summary may build; past it the summary stops while aggregating.
    pub max_groups: usize,
    /// Rows one summary may add by exploding multi-value fields, beyond one row per record
    /// (every combination of a record's parts is a row).
    pub max_explode_rows: u64,
    /// Whether datasets whose files can be read at every call are prepared, read so, or
    /// either as their size and the budget decide.
    pub serving: dataset::Serving,
    /// Partitions a large table is scanned in (one a core, at most four by default).
    pub partitions: usize,
    /// Records from which a table counts as large: a smaller one is scanned in one partition,
    /// since splitting and merging 75k records costs more than the second core saves (at
    /// 750k, two partitions halve a summary's time).
    pub partition_rows: usize,
    /// Size of an answer given to `verify_answer` or `tally verify` to check, as JSON text;
    /// a larger one is refused before it is read.
    pub max_envelope_bytes: usize,
    /// Heavy calls (reading many records, [`governor`]) that run at once, each on a thread of
    /// the heavy runtime; the others wait for a slot.
    pub heavy_calls: usize,
    /// Heavy calls that may wait for a slot, in all and per caller; past either a call is
    /// refused with the cap it met.
    pub heavy_queue: usize,
    pub heavy_queue_per_caller: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Generous for in-memory data; a call that takes longer is almost surely a bug
            // or an abuse, and a model waiting longer gains nothing.
            call_timeout: Duration::from_secs(10),
            // A scan of 75M records with a text search takes minutes on two cores.
            task_timeout: Duration::from_secs(600),
            call_memory_bytes: 512 * 1024 * 1024,
            max_result_bytes: 4 * 1024 * 1024,
            // About 6,000 tokens: a useful page that leaves most of a context window for the
            // question, the other results and the answer.
            max_result_tokens: 6_000,
            memory_budget_bytes: memory::default_budget(),
            // A model reads at most `limit` (≤ 10,000) groups; 100,000 leaves room for
            // totals and `having` over fine groupings while keeping one call's hash table
            // and result small.
            max_groups: 100_000,
            max_explode_rows: 10_000_000,
            serving: dataset::Serving::Auto,
            partitions: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            partition_rows: 250_000,
            // An answer holds at most `max_result_bytes` (4 MiB) of rows, and by default
            // 6,000 tokens of them (tens of KiB), plus its provenance (KiB). Printed indented,
            // as `tally` prints by default, rows grow by their indentation: the largest page
            // of the real survey (5,000 records of all 38 fields, 3.4 MB of rows) prints as
            // 5.2 MB, and 4 MiB of one-character cells would print as about 13 MiB. 16 MiB
            // holds any of them; a parsed JSON value takes several times its text, so the
            // checking process stays within hundreds of MiB.
            max_envelope_bytes: 16 * 1024 * 1024,
            // One a core: a heavy call keeps its thread busy, and the threads serving requests
            // and light calls share the cores with them.
            heavy_calls: std::thread::available_parallelism().map_or(1, |n| n.get()),
            // A client waits at most its call's budget in the queue; 32 waiting calls of 10 s
            // each are minutes of work already promised.
            heavy_queue: 32,
            heavy_queue_per_caller: 8,
        }
    }
}
