#![recursion_limit = "256"]
//! Tally's engine: the catalog of datasets, the backends that serve them as DataFusion table
//! providers, planning of resolved requests into DataFusion plans, execution, and the result
//! envelope.
//!
//! Architecture invariant: knows nothing of MCP or JSON-RPC, and never builds SQL text from
//! input: every plan is made with DataFusion's DataFrame and Expr API from a plan that
//! `tally-semantic` resolved against the dataset's own vocabulary.
//!
//! The one entry point for callers (CLI and MCP alike) is [`Engine::call`]: a tool name and
//! its JSON arguments in, an envelope (`{"data", "provenance"}`) out.

pub mod aliases;
pub mod call;
mod chosen;
pub mod compare;
pub mod cursor;
pub mod envelope;
pub mod error;
pub mod estimate;
pub mod groups;
pub mod inspect;
pub mod json;
pub mod lookup;
pub mod meta;
pub mod multicode;
pub mod plan;
pub mod provisions;
pub mod query;
pub mod results;
pub mod schema;
pub mod summarize;
pub mod values;
pub mod verify;
/// Watching the datasets directory lives in storage; the engine is what it reloads.
pub use tally_storage::watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use serde_json::Value;
use tally_semantic::request::{self, ListArgs, Request, Tool};
use tally_semantic::resolve::{
    Choice, Resolution, resolve_dataset_choosing, resolve_query, resolve_summarize,
};
use tally_storage::{Backends, Catalog, Dataset, cache, catalog, cluster, dataset, memory, udf};

pub use envelope::{Envelope, Provenance};
pub use error::EngineError;

use envelope::{TransformationType, dataset_source};
use results::{DatasetCard, InspectResult, ListResult};

/// How long a half-written file may settle when a call finds its dataset replaced.
const STALE_SETTLE: Duration = Duration::from_secs(2);
/// Before the second retry of a call whose files changed under it.
const STALE_PAUSE: Duration = Duration::from_millis(250);

/// Which datasets a caller may see. Outside its scope a dataset is neither listed nor
/// queryable, and asking for one gets the same "not found" as a dataset that does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    All,
    Only(Arc<std::collections::BTreeSet<String>>),
}

impl Scope {
    pub fn allows(&self, dataset: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(set) => set.contains(dataset),
        }
    }
}

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
        }
    }
}

/// Computes every answer: one per process, shared by all calls.
pub struct Engine {
    dir: PathBuf,
    /// The current catalog; a change swaps in a new one whole. A call loads it once and works
    /// on that snapshot to the end, even if a newer one is swapped in meanwhile.
    catalog: arc_swap::ArcSwap<Catalog>,
    /// Told of every change, for `notifications/resources/list_changed`.
    changes: tokio::sync::broadcast::Sender<catalog::Changes>,
    ctx: SessionContext,
    functions: udf::Functions,
    limits: Limits,
    /// The server-wide memory budget every prepared table and call draws from.
    budget: Arc<memory::Budget>,
    /// Preparations of data that may run at once.
    preparations: Arc<tokio::sync::Semaphore>,
    /// Per caller, the operator memory its calls in flight hold.
    callers:
        std::sync::Mutex<std::collections::HashMap<String, Arc<std::sync::atomic::AtomicUsize>>>,
    /// The backends datasets may name, by kind.
    backends: Backends,
    /// Where prepared tables are kept across restarts, if anywhere.
    cache: Option<Arc<cache::Cache>>,
    /// Held while the datasets directory is scanned.
    rescanning: std::sync::Mutex<()>,
    /// Where the physical work of calls over files goes, with the partitions it is split in.
    cluster: Option<(Arc<dyn cluster::Cluster>, usize)>,
}

/// What storage draws on to prepare a dataset, the engine's own.
impl tally_storage::Resources for Engine {
    fn budget(&self) -> &Arc<memory::Budget> {
        &self.budget
    }
    fn cache(&self) -> Option<&Arc<cache::Cache>> {
        self.cache.as_ref()
    }
    fn context(&self) -> &SessionContext {
        &self.ctx
    }
    fn preparations(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.preparations
    }
    fn serving(&self) -> dataset::Serving {
        self.limits.serving
    }
}

tokio::task_local! {
    /// The memory counter of the caller whose call runs on this task.
    static CALLER_MEMORY: Arc<std::sync::atomic::AtomicUsize>;
    /// Set on a call run again once the preparation its first run outlasted its deadline
    /// waiting for has ended: when the call began (said in its extract step).
    static WAITED_SINCE: std::time::Instant;
    /// The time budget of the call on this task, when it is not the call's default (a call
    /// run as a task has the task's).
    static BUDGET: Duration;
}

/// When the call on this task began, if it is a call run again after waiting for its
/// dataset's preparation.
pub(crate) fn waited_since() -> Option<std::time::Instant> {
    WAITED_SINCE.try_with(|since| *since).ok()
}

impl tally_storage::watch::Reload for Engine {
    fn dir(&self) -> &Path {
        &self.dir
    }

    fn rescan_folders(&self, settle: Duration) -> bool {
        self.reload(settle).1
    }

    fn rescan_objects(&self, settle: Duration) {
        self.reload_objects(settle);
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("dir", &self.dir)
            .field(
                "datasets",
                &self.catalog.load().datasets.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The most values [`Engine::known_values`] gives (completions rank at most these).
pub const KNOWN_VALUES: usize = 10_000;
/// How long a completion waits for a preparation it started (the preparation goes on after).
pub const KNOWN_VALUES_WAIT: Duration = Duration::from_secs(3);
impl Engine {
    /// Opens the datasets directory `dir` (registration reads metadata only).
    pub fn open(dir: &Path) -> Engine {
        Engine::open_with(dir, Limits::default())
    }

    /// Opens `dir` with the given per-call budgets and the built-in backends only.
    pub fn open_with(dir: &Path, limits: Limits) -> Engine {
        Engine::open_with_backends(dir, limits, Backends::builtin())
    }

    /// Opens `dir` with the given budgets, serving datasets of the kinds `backends` builds.
    pub fn open_with_backends(dir: &Path, limits: Limits, backends: Backends) -> Engine {
        // One partition unless a call reads a large table ([`Engine::call_context`]); no scan
        // is split round-robin (a prepared table splits its chunks between partitions, a
        // file read at every call is split by byte ranges).
        // One optimizer pass: the plans are small and built from already-resolved requests,
        // and further passes cost more planning time than they save.
        let mut config = SessionConfig::new()
            .with_target_partitions(1)
            .with_information_schema(false);
        config.options_mut().optimizer.max_passes = 1;
        config
            .options_mut()
            .optimizer
            .enable_round_robin_repartition = false;
        let catalog = Catalog::load(
            dir,
            &catalog::Options {
                backends: backends.clone(),
                memory_budget: limits.memory_budget_bytes,
                serving: limits.serving,
                check_objects: false,
            },
        );
        warn_relations(&catalog);
        Engine {
            dir: dir.to_path_buf(),
            catalog: arc_swap::ArcSwap::from_pointee(catalog),
            changes: tokio::sync::broadcast::channel(64).0,
            ctx: SessionContext::new_with_config(config),
            functions: udf::Functions,
            budget: memory::Budget::new(limits.memory_budget_bytes),
            callers: Default::default(),
            // Two at a time: preparing is CPU-bound, and the machines Tally targets have
            // few cores; a third waits its turn (its calls wait for it, or read the files).
            preparations: Arc::new(tokio::sync::Semaphore::new(2)),
            limits,
            backends,
            cache: None,
            rescanning: std::sync::Mutex::new(()),
            cluster: None,
        }
    }

    /// Sends the physical work of calls over data read from its files to `cluster`, split in
    /// `partitions` partitions (tasks) per scan.
    pub fn with_cluster(mut self, cluster: Arc<dyn cluster::Cluster>, partitions: usize) -> Engine {
        self.cluster = Some((cluster, partitions.max(1)));
        self
    }

    /// The cluster calls are sent to, if any.
    pub fn cluster(&self) -> Option<&Arc<dyn cluster::Cluster>> {
        self.cluster.as_ref().map(|(c, _)| c)
    }

    /// Keeps prepared tables in `cache` (mapped on later starts instead of prepared again).
    pub fn with_cache(mut self, cache: Option<cache::Cache>) -> Engine {
        self.cache = cache.map(Arc::new);
        self.sweep_cache();
        self
    }

    /// Removes the cache entries of dataset versions the catalog no longer serves.
    fn sweep_cache(&self) {
        let Some(cache) = &self.cache else { return };
        let catalog = self.catalog.load();
        let removed = cache.sweep(
            catalog
                .datasets
                .values()
                .map(|d| (d.id(), d.version.as_str())),
        );
        if removed > 0 {
            tracing::info!(
                removed,
                "removed cached data of dataset versions no longer served"
            );
        }
    }

    /// Where prepared tables are kept, if anywhere.
    pub fn cache(&self) -> Option<&Arc<cache::Cache>> {
        self.cache.as_ref()
    }

    /// The server-wide memory budget.
    pub fn budget(&self) -> &Arc<memory::Budget> {
        &self.budget
    }

    /// The slots preparations of data take.
    pub fn preparations(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.preparations
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A context for one call over a table of `rows` records: the shared session state with
    /// a memory pool of its own, so one call's budget is not another's, and as many
    /// partitions as [`Limits::partitions`] when the table is large.
    pub fn call_context(&self, rows: usize) -> Result<SessionContext, EngineError> {
        // Operators that run out of memory stop the call rather than spill to disk: a
        // spilling aggregation of millions of groups would answer long after its deadline
        // and fill the disk.
        let mut pool =
            memory::CallPool::new(Arc::clone(&self.budget), self.limits.call_memory_bytes);
        if let Ok(held) = CALLER_MEMORY.try_with(Arc::clone) {
            pool = pool.for_caller(held, self.budget.limit() / 2);
        }
        let pool: Arc<dyn datafusion::execution::memory_pool::MemoryPool> = Arc::new(pool);
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool))
            .with_disk_manager_builder(
                datafusion::execution::disk_manager::DiskManagerBuilder::default()
                    .with_mode(datafusion::execution::disk_manager::DiskManagerMode::Disabled),
            )
            .build_arc()?;
        // What the call reads of objects is kept for its later scans (an inspection scans
        // every object once per field), within the call's memory.
        let mut config = self.ctx.state().config().clone().with_extension(Arc::new(
            tally_storage::parquet::CallReads::new(&pool, self.limits.call_memory_bytes),
        ));
        let mut builder =
            SessionStateBuilder::new_from_existing(self.ctx.state()).with_runtime_env(runtime);
        if let Some((cluster, _)) = &self.cluster {
            config =
                config.with_extension(Arc::new(cluster::ClusterCall::new(Arc::clone(cluster))));
            builder = builder.with_query_planner(Arc::new(cluster::ClusterPlanner));
        }
        let mut state = builder.with_config(config).build();
        if let Some((_, partitions)) = &self.cluster {
            // On a cluster every scan of files is split, whatever its size: the tasks are what
            // the executors share.
            state.config_mut().options_mut().execution.target_partitions = *partitions;
        } else if rows >= self.limits.partition_rows && self.limits.partitions > 1 {
            state.config_mut().options_mut().execution.target_partitions = self.limits.partitions;
        }
        Ok(SessionContext::new_with_state(state))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The catalog as it is now (a snapshot).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Rescans the datasets directory and swaps in the new catalog if anything changed.
    /// Returns what changed and whether some folder is still being written (retry later).
    pub fn reload(&self, settle: Duration) -> (catalog::Changes, bool) {
        self.rescan(settle, false)
    }

    /// [`Engine::reload`] that also lists the objects of every object-store dataset (and
    /// retries those that could not be registered): what `--object-poll` runs.
    pub fn reload_objects(&self, settle: Duration) -> (catalog::Changes, bool) {
        self.rescan(settle, true)
    }

    fn rescan(&self, settle: Duration, check_objects: bool) -> (catalog::Changes, bool) {
        // One scan at a time: two would each build on the same previous catalog, and the
        // second to finish would undo the first's changes.
        let _one = self.rescanning.lock().unwrap_or_else(|p| p.into_inner());
        let previous = self.catalog.load_full();
        let options = catalog::Options {
            backends: self.backends.clone(),
            memory_budget: self.limits.memory_budget_bytes,
            serving: self.limits.serving,
            check_objects,
        };
        let (next, changes) = Catalog::scan(&self.dir, &previous, settle, &options);
        let pending = !next.pending.is_empty();
        if !changes.is_empty() {
            for id in &changes.added {
                tracing::info!(dataset = %id, "dataset added");
            }
            for id in &changes.updated {
                tracing::info!(dataset = %id, "dataset changed");
            }
            for id in &changes.removed {
                tracing::info!(dataset = %id, "dataset removed");
            }
            for folder in &changes.broken {
                tracing::warn!(folder = %folder, "dataset folder cannot be served; see list_datasets broken_datasets");
            }
            for folder in &changes.cleared {
                tracing::info!(folder = %folder, "dataset folder no longer broken");
            }
            warn_relations(&next);
            self.catalog.store(Arc::new(next));
            if !changes.updated.is_empty() || !changes.removed.is_empty() {
                self.sweep_cache();
            }
            let _ = self.changes.send(changes.clone());
        } else {
            // Nothing a client sees changed, but the folder states (stamps, pending files)
            // may have: keep them, or the next scan compares against stale ones.
            self.catalog.store(Arc::new(next));
        }
        (changes, pending)
    }

    /// Changes of the catalog, as they happen.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<catalog::Changes> {
        self.changes.subscribe()
    }

    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    pub fn functions(&self) -> &udf::Functions {
        &self.functions
    }

    /// Runs a tool within the call's time budget and checks the envelope against the tool's
    /// output schema before it is returned: `arguments` as a client sends them.
    pub async fn call(&self, tool: Tool, arguments: &Value) -> Result<Value, EngineError> {
        self.call_as(tool, arguments, &Scope::All).await
    }

    /// [`Engine::call`] for a caller who may see only the datasets of `scope`.
    pub async fn call_as(
        &self,
        tool: Tool,
        arguments: &Value,
        scope: &Scope,
    ) -> Result<Value, EngineError> {
        let timeout = self.time_budget();
        let began = std::time::Instant::now();
        // A dataset whose table is being prepared when the call comes: the call is not
        // refused at its deadline (see below).
        let named = self.dataset_named(arguments, scope, &chosen::chosen());
        let was_preparing = named.as_ref().is_some_and(|ds| ds.preparing().is_some());
        let mut attempt = Box::pin(self.attempt(tool, arguments, scope));
        let envelope = match tokio::time::timeout(timeout, &mut attempt).await {
            Ok(result) => result?,
            Err(_)
                if was_preparing || named.as_ref().is_some_and(|ds| ds.preparing().is_some()) =>
            {
                // Past its deadline while its dataset's table is (or was, at the call's
                // start) being prepared: not refused. The call goes on until the preparation
                // ends (bounded by the memory budget and its own time), then has a time budget
                // of its own from there: a call waiting for the prepared table answers from
                // it; one still reading the files races the same call run again on the
                // prepared table, and the first to finish answers.
                let ended = named.and_then(|ds| ds.running_preparation());
                let ended = async move {
                    if let Some(ended) = ended {
                        ended.await;
                    }
                };
                tokio::select! {
                    biased;
                    result = &mut attempt => result?,
                    () = ended => {
                        let again =
                            WAITED_SINCE.scope(began, self.attempt(tool, arguments, scope));
                        let first = async {
                            tokio::select! {
                                biased;
                                result = &mut attempt => result,
                                result = again => result,
                            }
                        };
                        match tokio::time::timeout(timeout, first).await {
                            Ok(result) => result?,
                            Err(_) => return Err(past_deadline(tool, timeout)),
                        }
                    }
                }
            }
            Err(_) => return Err(self.too_slow(tool, arguments, named.as_deref(), timeout)),
        };
        let mut envelope = envelope;
        if arguments
            .get("provenance_format")
            .and_then(Value::as_str)
            .is_some_and(|f| f.trim().eq_ignore_ascii_case("prov"))
        {
            envelope["prov"] = envelope::prov_jsonld(&envelope);
        }
        if let Err(problems) = schema::validate(tool, &envelope) {
            tracing::error!(
                tool = tool.name(),
                ?problems,
                "a result failed its output schema; it was not sent"
            );
            return Err(EngineError::Internal(format!(
                "the result of {} failed its own output schema, so it was not sent (a bug in Tally): {}",
                tool.name(),
                problems.join("; ")
            )));
        }
        Ok(envelope)
    }

    /// Rescans after a call found `dataset`'s files (or objects) changed under it. An object
    /// removed or rewritten is seen only by listing it again. The scan blocks (on files, or
    /// on the store): off the async worker.
    fn rescan_for(&self, dataset: &str) {
        let objects = self
            .catalog
            .load()
            .datasets
            .get(dataset)
            .is_some_and(|d| d.def.data_url.is_some());
        let rescan = || {
            if objects {
                self.reload_objects(STALE_SETTLE)
            } else {
                self.reload(STALE_SETTLE)
            }
        };
        match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::CurrentThread => rescan(),
            _ => tokio::task::block_in_place(rescan),
        };
    }

    /// The memory counter of a caller's calls.
    fn caller_memory(&self, caller: &str) -> Arc<std::sync::atomic::AtomicUsize> {
        let mut callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        // Forget callers with nothing in flight once there are many.
        if callers.len() > 10_000 {
            callers.retain(|_, held| Arc::strong_count(held) > 1);
        }
        Arc::clone(callers.entry(caller.to_string()).or_default())
    }

    /// Prepares a dataset's data now, waiting as long as the preparation takes (bounded by
    /// the memory budget and the preparation's own time). For one-shot callers (the command
    /// line), whose process would end before a preparation left in the background finished.
    pub async fn prepare(&self, dataset_id: &str) {
        let catalog = self.catalog.load_full();
        if let Some(ds) = catalog.datasets.get(dataset_id.trim()) {
            // With a cache, the whole table is prepared (and kept) for the next command; else,
            // or when it would not fit the budget, the call itself reads what it needs.
            if (self.cache.is_some() || !ds.backend.streams()) && !ds.read_from_files(self) {
                let _ = ds.prepared_whole(self).await;
            }
        }
    }

    /// The values a text field of a dataset holds (at most [`KNOWN_VALUES`]), most frequent
    /// first, for completing a condition on it: the codes of a static codelist, else the
    /// distinct values of the prepared data. A table not yet prepared that fits the memory
    /// budget is prepared now (as a call's would be), waited for at most
    /// [`KNOWN_VALUES_WAIT`]: the first completion after a start offers the values instead of
    /// none. A table read from its files at every call is never scanned for a completion.
    /// `None` when the values are not at hand (unknown dataset or field, numbers, data read
    /// from its files, a preparation still running or failed).
    pub async fn known_values(&self, dataset_id: &str, field: &str) -> Option<Vec<String>> {
        let catalog = self.catalog.load_full();
        let ds = catalog.datasets.get(dataset_id)?;
        let id = ds.def.field_index(field)?;
        let f = &ds.def.fields[id];
        if let Some(tally_semantic::definition::Codelist::Static(codes)) = &f.codelist {
            return Some(codes.iter().map(|c| c.value.clone()).collect());
        }
        if f.data_type.is_numeric() {
            return None;
        }
        let prepared = match ds.ready() {
            Some(p) => p,
            None if ds.read_from_files(self) => return None,
            None => tokio::time::timeout(KNOWN_VALUES_WAIT, ds.prepared_whole(self))
                .await
                .ok()?
                .ok()?,
        };
        let counts = prepared
            .distinct_values(&self.ctx, &ds.def, id)
            .await
            .ok()?;
        // The most frequent ones: a free-text field may hold a value per record.
        Some(
            counts
                .iter()
                .take(KNOWN_VALUES)
                .map(|(value, _)| value.clone())
                .collect(),
        )
    }

    /// Waits (at most `grace`) for the preparations of whole tables still running into the
    /// cache, so an entry begun is finished before the process ends.
    pub async fn finish_preparations(&self, grace: Duration) {
        if self.cache.is_none() {
            return;
        }
        let catalog = self.catalog.load_full();
        let running: Vec<_> = catalog
            .datasets
            .values()
            .filter_map(|ds| ds.running_preparation())
            .collect();
        if running.is_empty() {
            return;
        }
        tracing::info!(
            preparations = running.len(),
            "finishing the preparation of data into the cache before exiting (at most {} s)",
            grace.as_secs()
        );
        let _ = tokio::time::timeout(grace, futures::future::join_all(running)).await;
    }

    /// The error of a call stopped at its deadline, with what would make it fit: a text
    /// search over data read from its files (over the memory budget, or served so) reads
    /// every text value at every call, so it is told to name its fields or narrow first.
    fn too_slow(
        &self,
        tool: Tool,
        arguments: &Value,
        ds: Option<&tally_storage::Dataset>,
        timeout: Duration,
    ) -> EngineError {
        let searches = arguments.get("q").is_some_and(|q| !q.is_null())
            || arguments.get("where").is_some_and(|w| {
                let w = w.to_string();
                w.contains("\"$contains\"") || w.contains("\"$not_contains\"")
            });
        match ds {
            Some(ds) if searches && ds.read_from_files(self) => EngineError::Limit {
                message: format!(
                    "{} took longer than its time budget of {} ms and was stopped: dataset `{}` is read from its files at every call (its prepared table would not fit the memory budget, or the server reads files at every call), so a text search folds and scans every text value of its {} records",
                    tool.name(),
                    timeout.as_millis(),
                    ds.def.id,
                    ds.record_count()
                        .map_or_else(|| "many".to_string(), |n| n.to_string())
                ),
                hint: "search fewer fields (`search_fields` names the fields `q` searches; `$contains` one field), or add conditions on coded fields or numbers first, which rule out row groups before any text is read".into(),
            },
            _ => past_deadline(tool, timeout),
        }
    }

    /// The dataset a call's arguments name (`dataset_id`) as the call resolves it (a spelling
    /// corrected, or the one its user `chosen`), if the catalog serves it within the caller's
    /// `scope` (what a call waits for and says is of datasets the caller sees).
    fn dataset_named(
        &self,
        arguments: &Value,
        scope: &Scope,
        chosen: &[Choice],
    ) -> Option<Arc<tally_storage::Dataset>> {
        let id = arguments.get("dataset_id")?.as_str()?;
        self.dataset_choosing(id, scope, chosen)
            .ok()
            .map(|(ds, _)| ds)
    }

    /// One run of a call. Files replaced under a live version: take the new catalog and try
    /// again. A folder caught half-removed (its definition still there, its data gone) keeps
    /// its version for a moment; the second retry comes after a short pause, when such writes
    /// are over.
    async fn attempt(
        &self,
        tool: Tool,
        arguments: &Value,
        scope: &Scope,
    ) -> Result<Value, EngineError> {
        let mut tries = 0;
        loop {
            match self.run(tool, arguments, scope).await {
                Err(EngineError::Stale { dataset, message }) => {
                    tries += 1;
                    if tries > 2 {
                        return Err(self.gone_or_stale(dataset, message));
                    }
                    if tries == 2 {
                        tokio::time::sleep(STALE_PAUSE).await;
                    }
                    self.rescan_for(&dataset);
                }
                other => return other,
            }
        }
    }

    /// The error of a call whose data kept changing under it through its retries: a
    /// deletion when the source no longer holds the data (the catalog found nothing where
    /// `data:` points, and keeps the version served before), else a replacement to retry.
    fn gone_or_stale(&self, dataset: String, message: String) -> EngineError {
        let refused = self
            .catalog
            .load()
            .datasets
            .get(&dataset)
            .and_then(|ds| ds.refused_change());
        match refused {
            Some(r) if r.data_gone => EngineError::Dataset {
                message: format!(
                    "its data was deleted at its source or moved ({}; seen at {}), and this call must read it ({message}); put the data back, or point the definition at where it is now",
                    r.reason, r.since
                ),
                dataset,
                diagnostics: Vec::new(),
            },
            _ => EngineError::Stale { dataset, message },
        }
    }

    /// Like [`Engine::call`], on a task of its own: a panic inside the call is answered as an
    /// internal error and the engine keeps serving.
    pub async fn call_guarded(
        self: &Arc<Self>,
        tool: Tool,
        arguments: Value,
    ) -> Result<Value, EngineError> {
        self.call_guarded_as(tool, arguments, Scope::All).await
    }

    /// [`Engine::call_guarded`] for a caller limited to `scope`.
    pub async fn call_guarded_as(
        self: &Arc<Self>,
        tool: Tool,
        arguments: Value,
        scope: Scope,
    ) -> Result<Value, EngineError> {
        self.call_guarded_for(tool, arguments, scope, "").await
    }

    /// [`Engine::call_guarded_as`] for the caller `caller` (a token id, an address): all its
    /// calls in flight together hold at most half of the memory budget, so one caller's
    /// concurrent calls cannot starve the others.
    pub async fn call_guarded_for(
        self: &Arc<Self>,
        tool: Tool,
        arguments: Value,
        scope: Scope,
        caller: &str,
    ) -> Result<Value, EngineError> {
        self.call_guarded_within(
            tool,
            arguments,
            scope,
            caller,
            self.limits.call_timeout,
            Vec::new(),
        )
        .await
    }

    /// [`Engine::call_guarded_for`] with a time budget of its own instead of the call's (a
    /// call run as an MCP task has the task's, [`Limits::task_timeout`]), and the names its
    /// user chose for ambiguous ones (said in the answer's `resolved_fields`).
    pub async fn call_guarded_within(
        self: &Arc<Self>,
        tool: Tool,
        arguments: Value,
        scope: Scope,
        caller: &str,
        budget: Duration,
        chosen: Vec<Choice>,
    ) -> Result<Value, EngineError> {
        let held = self.caller_memory(caller);
        let engine = Arc::clone(self);
        // A backstop a little past the call's own deadline, kept by this (waiting) task: if
        // the call's task were stuck in work that does not yield, it is abandoned and the
        // caller answered anyway.
        let backstop = budget + Duration::from_secs(2);
        let name = tool.name();
        let named = self.dataset_named(&arguments, &scope, &chosen);
        let call = guard(chosen::CHOSEN.scope(
            Arc::new(chosen),
            BUDGET.scope(
                budget,
                CALLER_MEMORY.scope(held, async move {
                    engine.call_as(tool, &arguments, &scope).await
                }),
            ),
        ));
        tokio::pin!(call);
        // While the call's dataset is being prepared the call waits for it (see
        // [`Engine::call_as`]): the backstop is a full one past the last moment the preparation
        // was seen running.
        let mut deadline = tokio::time::Instant::now() + backstop;
        loop {
            let tick = (deadline - tokio::time::Instant::now()).min(Duration::from_secs(1));
            tokio::select! {
                result = &mut call => return result,
                () = tokio::time::sleep(tick) => {
                    let now = tokio::time::Instant::now();
                    if named.as_ref().is_some_and(|ds| ds.preparing().is_some()) {
                        deadline = deadline.max(now + backstop);
                    } else if now >= deadline {
                        return Err(past_deadline_named(name, budget));
                    }
                }
            }
        }
    }

    /// The time budget of the call running on this task: the call's own, unless it runs
    /// with another (a task's).
    pub fn time_budget(&self) -> Duration {
        BUDGET
            .try_with(|budget| *budget)
            .unwrap_or(self.limits.call_timeout)
    }

    async fn run(
        &self,
        tool: Tool,
        arguments: &Value,
        scope: &Scope,
    ) -> Result<Value, EngineError> {
        let mut request = request::parse(tool, arguments)?;
        let chosen = chosen::chosen();
        match &mut request {
            Request::QueryRecords(args) => args.chosen = chosen.to_vec(),
            Request::SummarizeRecords(args) => args.chosen = chosen.to_vec(),
            Request::CiteProvisions(args) => args.chosen = chosen.to_vec(),
            _ => {}
        }
        match request {
            Request::ListDatasets(args) => {
                let mut call = serde_json::Map::new();
                if let Some(q) = &args.q {
                    call.insert("q".into(), Value::from(q.as_str()));
                }
                if let Some(p) = &args.publisher {
                    call.insert("publisher".into(), Value::from(p.as_str()));
                }
                let (data, mut provenance) = self.list(args, scope);
                provenance.query = Some(normalized(tool, Value::Object(call)));
                seal(data, provenance)
            }
            Request::InspectDataset(args) => {
                let (ds, resolution) = self.dataset(&args.dataset_id, scope)?;
                let call = serde_json::json!({
                    "dataset_id": ds.def.id,
                    "detail": if args.full { "full" } else { "compact" },
                });
                let (data, mut provenance) = self.inspect(&ds, resolution, args.full).await?;
                provenance.query = Some(normalized(tool, call));
                seal(data, provenance)
            }
            Request::QueryRecords(args) => {
                let (ds, resolution) = self.dataset(&args.dataset_id, scope)?;
                let select_given = !args.select.is_empty();
                let mut plan = resolve_query(&ds.def, args)?;
                plan.resolved_fields.splice(0..0, resolution);
                let mut call = plan.to_call(&ds.def);
                if !select_given && let Some(m) = call.as_object_mut() {
                    // The default columns stay the default: asked again, the call is the same.
                    m.remove("select");
                }
                let used: Vec<tally_semantic::definition::FieldId> =
                    plan.filters.iter().map(|f| f.field).collect();
                let lookups = lookup::read(self, &ds.def, used, scope).await?;
                lookup::rewrite(&ds.def, &mut plan.filters, &lookups)?;
                let (data, mut provenance) =
                    query::run(self, &ds, plan, select_given, &mut call).await?;
                lookup::cite(&mut provenance, &lookups);
                provenance.query = Some(normalized(tool, call));
                seal(data, provenance)
            }
            Request::SummarizeRecords(args) => {
                let (ds, resolution) = self.dataset(&args.dataset_id, scope)?;
                let mut plan = resolve_summarize(&ds.def, args)?;
                plan.resolved_fields.splice(0..0, resolution);
                let mut call = plan.to_call(&ds.def);
                let used: Vec<tally_semantic::definition::FieldId> = plan
                    .group_by
                    .iter()
                    .copied()
                    .chain(plan.filters.iter().map(|f| f.field))
                    .collect();
                let lookups = lookup::read(self, &ds.def, used, scope).await?;
                let (data, mut provenance) =
                    summarize::run(self, &ds, plan, &mut call, &lookups).await?;
                provenance.query = Some(normalized(tool, call));
                seal(data, provenance)
            }
            Request::CiteProvisions(args) => {
                let (ds, resolution) = self.dataset(&args.dataset_id, scope)?;
                let mut plan = tally_semantic::resolve::resolve_cite(&ds.def, args)?;
                plan.records.resolved_fields.splice(0..0, resolution);
                let target = self
                    .catalog
                    .load()
                    .datasets
                    .get(&plan.link.to)
                    .filter(|_| scope.allows(&plan.link.to))
                    .cloned()
                    .ok_or_else(|| {
                        EngineError::Request(
                            tally_semantic::error::RequestError::new(
                                tally_semantic::error::ErrorCode::UnknownDataset,
                                format!(
                                    "dataset `{}` links to `{}`, which is not served",
                                    ds.def.id, plan.link.to
                                ),
                            )
                            .at("link")
                            .hint(format!(
                                "serve the dataset `{}` (a folder of that name in the datasets directory), or check `tally check` for why it is refused",
                                plan.link.to
                            )),
                        )
                    })?;
                let call = plan.to_call(&ds.def);
                let (data, mut provenance) = provisions::run(self, &ds, &target, plan).await?;
                provenance.query = Some(normalized(tool, call));
                seal(data, provenance)
            }
            Request::VerifyAnswer(args) => {
                let (data, mut provenance) = Box::pin(self.verify(&args.envelope, scope)).await?;
                provenance.query = Some(normalized(
                    tool,
                    serde_json::json!({ "envelope": "(the answer checked)" }),
                ));
                seal(data, provenance)
            }
        }
    }

    fn dataset(
        &self,
        input: &str,
        scope: &Scope,
    ) -> Result<(Arc<Dataset>, Option<Resolution>), EngineError> {
        self.dataset_choosing(input, scope, &chosen::chosen())
    }

    /// The dataset `input` names for a caller of `scope`, with the names its user `chosen`.
    fn dataset_choosing(
        &self,
        input: &str,
        scope: &Scope,
        chosen: &[Choice],
    ) -> Result<(Arc<Dataset>, Option<Resolution>), EngineError> {
        let catalog = self.catalog.load_full();
        // Names outside the caller's scope are never matched, suggested or described.
        let ids: Vec<&str> = catalog
            .ids()
            .into_iter()
            .filter(|id| scope.allows(id))
            .collect();
        let titles = |id: &str| {
            catalog
                .datasets
                .get(id)
                .filter(|_| scope.allows(id))
                .map(|d| d.def.title.clone())
        };
        let (id, resolution) =
            resolve_dataset_choosing(input, &ids, &titles, chosen).map_err(|mut e| {
                if let Some(b) = catalog
                    .broken
                    .iter()
                    .find(|b| b.folder == input && scope.allows(&b.folder))
                {
                    // Why, in the message itself: a store refusing credentials is not a typo.
                    let reasons = b
                        .problems
                        .iter()
                        .map(|p| p.reason.clone())
                        .collect::<Vec<_>>()
                        .join("; ");
                    let fixes = b
                        .problems
                        .iter()
                        .map(|p| p.fix.clone())
                        .filter(|f| !f.is_empty())
                        .collect::<Vec<_>>()
                        .join("; ");
                    e.message = format!("dataset `{input}` is not served: {reasons}");
                    e.hint = Some(if fixes.is_empty() {
                        format!("{}: {reasons}", b.file)
                    } else {
                        format!("{}: {fixes}", b.file)
                    });
                }
                e
            })?;
        let ds = catalog
            .datasets
            .get(id)
            .cloned()
            .ok_or_else(|| EngineError::internal("resolved dataset vanished"))?;
        Ok((ds, resolution))
    }

    fn list(&self, args: ListArgs, scope: &Scope) -> (ListResult, Provenance) {
        let q = args
            .q
            .as_deref()
            .map(str::to_lowercase)
            .filter(|s| !s.trim().is_empty());
        let publisher = args
            .publisher
            .as_deref()
            .map(str::to_lowercase)
            .filter(|s| !s.trim().is_empty());
        let mut provenance = Provenance::default();
        let mut listed = Vec::new();
        let catalog = self.catalog.load_full();
        for ds in catalog.datasets.values() {
            let def = &ds.def;
            if !scope.allows(&def.id) {
                continue;
            }
            let haystack = format!("{} {}", def.id, def.title).to_lowercase();
            if q.as_ref().is_some_and(|q| !haystack.contains(q.as_str())) {
                continue;
            }
            if publisher.as_ref().is_some_and(|p| {
                !def.publisher
                    .as_deref()
                    .unwrap_or("")
                    .to_lowercase()
                    .contains(p.as_str())
            }) {
                continue;
            }
            let (source, warnings) = dataset_source(ds, &[]);
            let source_ref = provenance.cite(source);
            for w in warnings {
                provenance.warn(w);
            }
            listed.push(DatasetCard {
                dataset_id: def.id.clone(),
                version: ds.version.clone(),
                title: def.title.clone(),
                publisher: def.publisher.clone(),
                record_count: ds.record_count(),
                field_count: def.fields.len(),
                backend: ds.backend.kind(),
                source_ref,
                description: def.description.clone(),
                as_of_date: def.as_of_date.as_ref().map(|d| d.as_str().to_string()),
                published_at: def.published_at.as_ref().map(|d| d.as_str().to_string()),
                license: def.license.clone(),
                tags: def.tags.clone(),
            });
        }
        if listed.is_empty() {
            provenance.warn(if catalog.datasets.is_empty() {
                "no dataset is served, so no source is cited".to_string()
            } else {
                "no dataset matches q/publisher, so no source is cited".to_string()
            });
        }
        let broken: Vec<_> = catalog
            .broken
            .iter()
            .filter(|b| scope.allows(&b.folder))
            .cloned()
            .collect();
        if !broken.is_empty() {
            provenance.warn(format!(
                "{} dataset folder(s) cannot be served; see broken_datasets",
                broken.len()
            ));
        }
        provenance.step(
            TransformationType::Filter,
            match (&args.q, &args.publisher) {
                (None, None) => "listed every served dataset".to_string(),
                _ => format!(
                    "listed datasets whose id or title contains {:?} and whose publisher contains {:?} (case-insensitive)",
                    args.q.unwrap_or_default(),
                    args.publisher.unwrap_or_default()
                ),
            },
        );
        let data = ListResult {
            total: listed.len(),
            datasets: listed,
            broken_datasets: broken,
        };
        (data, provenance)
    }

    async fn inspect(
        &self,
        ds: &Dataset,
        resolution: Option<Resolution>,
        full: bool,
    ) -> Result<(InspectResult, Provenance), EngineError> {
        let (body, ran) = ds.memo(|| inspect::compute(self, ds)).await?;
        let mut data = if full { body } else { inspect::compact(body) };
        let prepared = ds.prepared_for_every_value(self).await?;
        let mut provenance = Provenance::default();
        let (source, warnings) = dataset_source(ds, &prepared.files);
        let source_ref = provenance.cite(source);
        for w in warnings {
            provenance.warn(w);
        }
        data.resolved_fields = results::resolved_names(resolution.as_slice());
        if let Some(r) = &resolution {
            provenance.warn(format!(
                "`{}` in dataset_id was read as `{}`",
                r.input, r.canonical
            ));
        }
        data.source_refs = vec![source_ref];
        if let Some(ran) = ran {
            // Computed once per version: where the plans of that computation ran.
            provenance.step(
                TransformationType::Extract,
                format!(
                    "read the {} records of dataset `{}` {ran}",
                    prepared.rows, ds.def.id
                ),
            );
        }
        provenance.step(
            TransformationType::Aggregate,
            format!(
                "computed fill rates, numeric statistics and value counts over all {} records of `{}`",
                prepared.rows, ds.def.id
            ),
        );
        Ok((data, provenance))
    }
}

/// A tool's result and provenance as the envelope sent.
/// The call as resolved, for the envelope (`provenance.query`).
fn normalized(tool: Tool, arguments: Value) -> envelope::NormalizedCall {
    envelope::NormalizedCall {
        tool: tool.name().to_string(),
        arguments: match arguments {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        },
        tool_version: envelope::tool_version(),
    }
}

fn seal<T: serde::Serialize>(data: T, provenance: Provenance) -> Result<Value, EngineError> {
    Envelope::seal_value(data, provenance)
        .map_err(|e| EngineError::Internal(format!("a result could not be written as JSON: {e}")))
}

/// Says in the log the relations of `catalog` that cannot be followed, when the datasets are
/// read (a call that uses one is refused with the same reason; a related dataset's repeated
/// keys are found where its data is read: at such a call, and by `tally check`).
fn warn_relations(catalog: &Catalog) {
    for ds in catalog.datasets.values() {
        let problems = ds
            .def
            .relation_problems(|id| catalog.datasets.get(id).map(|d| &d.def));
        for (field, reason, fix) in problems {
            tracing::warn!(dataset = %ds.def.id, field = %field.name, "relation cannot be followed: {reason}; {fix}");
        }
    }
}

/// Runs a future on a task of its own and turns a panic into an error, so one broken call
/// never takes the server down or leaves its client waiting.
pub async fn guard<F>(future: F) -> Result<Value, EngineError>
where
    F: std::future::Future<Output = Result<Value, EngineError>> + Send + 'static,
{
    /// Stops the call's task when the caller stops waiting (a deadline, a cancelled request):
    /// work nobody will read is not left running. The abort takes effect at the task's next
    /// `.await`; the stop flag ends work that runs long between two (`tally_storage::stop`).
    struct AbortOnDrop(tokio::task::AbortHandle, tally_storage::stop::Stop);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.1.set();
            self.0.abort();
        }
    }
    let stop = tally_storage::stop::Stop::new();
    let task = tokio::spawn(tally_storage::stop::scope(stop.clone(), future));
    let _abort = AbortOnDrop(task.abort_handle(), stop);
    match task.await {
        Ok(result) => result,
        Err(e) if e.is_panic() => {
            let message = e
                .into_panic()
                .downcast::<String>()
                .map(|s| *s)
                .or_else(|p| p.downcast::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|_| "unknown panic".to_string());
            tracing::error!("a call panicked: {message}");
            Err(EngineError::Internal(format!(
                "the call failed unexpectedly ({message}); the server keeps serving, and the next call is unaffected"
            )))
        }
        Err(e) => Err(EngineError::Internal(format!(
            "the call was cancelled: {e}"
        ))),
    }
}

/// The error of a call stopped at its time budget.
fn past_deadline(tool: Tool, timeout: Duration) -> EngineError {
    past_deadline_named(tool.name(), timeout)
}

fn past_deadline_named(name: &str, timeout: Duration) -> EngineError {
    EngineError::Limit {
        message: format!(
            "{name} took longer than its time budget of {} ms and was stopped",
            timeout.as_millis()
        ),
        hint: "narrow the call (filters, fewer groups, a smaller limit) or try again".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_panic_becomes_an_error_and_the_next_call_works() {
        let panicked = guard(async { panic!("boom") }).await;
        assert!(
            matches!(&panicked, Err(EngineError::Internal(m)) if m.contains("boom")),
            "{panicked:?}"
        );
        let next = guard(async { Ok(json!({"ok": true})) }).await;
        assert_eq!(next.ok(), Some(json!({"ok": true})));
    }
}
