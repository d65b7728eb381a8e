#![recursion_limit = "256"]
//! Tally's engine: the catalog of datasets, the backends that serve them as DataFusion table
//! providers, planning of resolved requests into DataFusion plans, execution, and the result
//! envelope.
//!
//! Architecture invariant: knows nothing of MCP or JSON-RPC, and never builds SQL text from
//! input: every plan is made with DataFusion's DataFrame and Expr API from a plan that
//! `tally-semantic` resolved against the dataset's own vocabulary.
//!
//! The one entry point for callers (CLI and MCP alike) is [`Engine::answer`] ([`door`]): a
//! caller, a request parsed once ([`Ask`]) and a time budget in, an envelope (`{"data",
//! "provenance"}`) out, run under the execution [`governor`].

pub mod aliases;
pub mod call;
pub mod compare;
pub mod cursor;
pub mod door;
pub mod envelope;
pub mod error;
pub mod estimate;
pub mod first_rows;
pub mod governor;
pub mod groups;
pub mod inspect;
pub mod json;
pub mod lookup;
pub mod meta;
pub mod multicode;
pub mod periods;
pub mod plan;
pub mod policy;
pub mod pregroup;
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
use tally_semantic::request::ListArgs;
use tally_storage::{Backends, Catalog, cache, catalog, cluster, dataset, memory, udf};

pub use door::{Ask, CallCtx, Caller, Cx, View};
pub use envelope::{Envelope, Provenance};
pub use error::EngineError;

use envelope::{TransformationType, dataset_source};
use results::{DatasetCard, ListResult};

/// Which datasets a caller may see. Outside its scope a dataset is neither listed nor
/// queryable, and asking for one gets the same "not found" as a dataset that does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    All,
    Only(Arc<std::collections::BTreeSet<String>>),
    /// Datasets as policies show them: some whole, some with fields hidden or rows
    /// restricted (see [`policy`]).
    Policy(Arc<policy::Policy>),
}

impl Scope {
    pub fn allows(&self, dataset: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(set) => set.contains(dataset),
            Scope::Policy(p) => p.allows(dataset),
        }
    }

    /// What of `dataset` a policy keeps from the caller, unless they see it whole.
    pub fn restriction(&self, dataset: &str) -> Option<&policy::Restriction> {
        match self {
            Scope::Policy(p) => p.restriction(dataset),
            _ => None,
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
    cluster: Option<(Arc<dyn cluster::Cluster>, cluster::Split)>,
    /// Where heavy calls run and when they may start.
    governor: Arc<governor::Governor>,
    /// The datasets as policies show them to restricted callers.
    twins: policy::Twins,
    /// Catalog changes served since the start (for `/metrics`).
    reloads: std::sync::atomic::AtomicU64,
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
            twins: Default::default(),
            reloads: Default::default(),
            limits,
            backends,
            cache: None,
            rescanning: std::sync::Mutex::new(()),
            cluster: None,
            governor: Arc::new(governor::Governor::new(
                limits.heavy_calls,
                limits.heavy_queue,
                limits.heavy_queue_per_caller,
            )),
        }
    }

    /// Sends the physical work of calls over data read from its files to `cluster`, each scan
    /// split into partitions (tasks) by `split`.
    pub fn with_cluster(
        mut self,
        cluster: Arc<dyn cluster::Cluster>,
        split: cluster::Split,
    ) -> Engine {
        self.cluster = Some((cluster, split));
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
    pub(crate) fn context_for(
        &self,
        rows: usize,
        call: Option<&CallCtx>,
    ) -> Result<SessionContext, EngineError> {
        // Operators that run out of memory stop the call rather than spill to disk: a
        // spilling aggregation of millions of groups would answer long after its deadline
        // and fill the disk.
        let mut pool =
            memory::CallPool::new(Arc::clone(&self.budget), self.limits.call_memory_bytes);
        if let Some(call) = call {
            pool = pool.for_caller(Arc::clone(call.memory()), self.budget.limit() / 2);
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
        // The call's stop, read by its scans, operators and loops (`tally_storage::stop`).
        if let Some(call) = call {
            config = config.with_extension(Arc::new(call.stop.clone()));
        }
        let mut builder =
            SessionStateBuilder::new_from_existing(self.ctx.state()).with_runtime_env(runtime);
        if let Some((cluster, split)) = &self.cluster {
            config = config.with_extension(Arc::new(cluster::ClusterCall::new(
                Arc::clone(cluster),
                *split,
            )));
            builder = builder.with_query_planner(Arc::new(cluster::ClusterPlanner));
        }
        let mut state = builder.with_config(config).build();
        if let Some((_, split)) = &self.cluster {
            // On a cluster every scan of files is split, whatever its size: the tasks are what
            // the executors share (each scan by what it reads, `cluster::Split`).
            state.config_mut().options_mut().execution.target_partitions = split.slots;
        } else if rows >= self.limits.partition_rows && self.limits.partitions > 1 {
            state.config_mut().options_mut().execution.target_partitions = self.limits.partitions;
        }
        Ok(SessionContext::new_with_state(state))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Catalog changes served since the start.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Heavy calls running and waiting now.
    pub fn heavy_load(&self) -> (usize, usize) {
        self.governor.load()
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
            self.reloads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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

    /// The memory counter of a caller's calls.
    pub(crate) fn caller_memory(&self, caller: &str) -> Arc<std::sync::atomic::AtomicUsize> {
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
    pub async fn prepare(&self, caller: &Caller, dataset_id: &str) {
        let catalog = self.catalog.load_full();
        let dataset_id = dataset_id.trim();
        if let Some(ds) = self.seen(&catalog, dataset_id, &caller.scope) {
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
    pub async fn known_values(
        self: &Arc<Self>,
        caller: &Caller,
        dataset_id: &str,
        field: &str,
    ) -> Option<Vec<String>> {
        let catalog = self.catalog.load_full();
        let ds = self.seen(&catalog, dataset_id, &caller.scope)?;
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
            None if ds.read_from_files(&**self) => return None,
            None => tokio::time::timeout(KNOWN_VALUES_WAIT, ds.prepared_whole(&**self))
                .await
                .ok()?
                .ok()?,
        };
        // Counted once per table and kept; a large table is counted as a heavy call is, on
        // the heavy runtime after its slot (within the completion's wait), never on the
        // threads serving requests.
        let (engine, ds_for_count) = (Arc::clone(self), Arc::clone(&ds));
        let count = async move {
            prepared
                .distinct_values(&engine.ctx, &ds_for_count.def, id)
                .await
        };
        let counts = if ds.record_count().unwrap_or(0) >= self.limits.partition_rows as u64 {
            let deadline = tokio::time::Instant::now() + KNOWN_VALUES_WAIT;
            let slot = self.governor.admit(&caller.id, deadline).await.ok()?;
            let runtime = self.governor.runtime().ok()?;
            runtime
                .spawn(async move {
                    let _slot = slot;
                    count.await
                })
                .await
                .ok()?
                .ok()?
        } else {
            count.await.ok()?
        };
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
        for id in catalog.datasets.keys() {
            let Some(ds) = self.seen(&catalog, id, scope) else {
                continue;
            };
            let def = &ds.def;
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
            let (source, warnings) = dataset_source(&ds, &[]);
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
        let mut broken: Vec<_> = catalog
            .broken
            .iter()
            .filter(|b| scope.allows(&b.folder))
            .cloned()
            .collect();
        // A dataset served whose data could not be read at its last whole read (a plugin
        // failing on reads its registration's probe did not make) is listed as `/health`
        // lists it, with the reason; it stays served, so its version is said.
        for ds in catalog.datasets.values() {
            if !scope.allows(&ds.def.id) || broken.iter().any(|b| b.folder == ds.def.id) {
                continue;
            }
            if let Some(reason) = ds.backend.read_failure() {
                broken.push(tally_storage::catalog::Broken {
                    folder: ds.def.id.clone(),
                    file: format!("{}/dataset.yaml", ds.def.id),
                    problems: vec![tally_storage::problem::Problem {
                        line: None,
                        key: String::new(),
                        reason: format!("its data could not be read at the last read of the whole of it: {reason}"),
                        fix: "the dataset is still listed and each call tries again; fix what the reason says (the plugin's author can reproduce it with `tally plugin test`)".to_string(),
                    }],
                    serving_version: Some(ds.version.clone()),
                });
            }
        }
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
