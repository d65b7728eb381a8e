//! The engine: one per process, shared by every call. It holds the catalog (swapped whole
//! when the datasets change), the session, the memory budget, the cache, the cluster and the
//! governor; the tools and the door reach them through it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::prelude::{SessionConfig, SessionContext};
use tally_storage::{Backends, Catalog, cache, catalog, cluster, dataset, memory, udf};

use crate::governor;
use crate::limits::Limits;
use crate::policy;

/// Computes every answer: one per process, shared by all calls.
pub struct Engine {
    pub(crate) dir: PathBuf,
    /// The current catalog; a change swaps in a new one whole. A call loads it once and works
    /// on that snapshot to the end, even if a newer one is swapped in meanwhile.
    pub(crate) catalog: arc_swap::ArcSwap<Catalog>,
    /// Told of every change, for `notifications/resources/list_changed`.
    pub(crate) changes: tokio::sync::broadcast::Sender<catalog::Changes>,
    pub(crate) ctx: SessionContext,
    pub(crate) functions: udf::Functions,
    pub(crate) limits: Limits,
    /// The server-wide memory budget every prepared table and call draws from.
    pub(crate) budget: Arc<memory::Budget>,
    /// Preparations of data that may run at once.
    pub(crate) preparations: Arc<tokio::sync::Semaphore>,
    /// Per caller, the operator memory its calls in flight hold.
    pub(crate) callers:
        std::sync::Mutex<std::collections::HashMap<String, Arc<std::sync::atomic::AtomicUsize>>>,
    /// The backends datasets may name, by kind.
    pub(crate) backends: Backends,
    /// Where prepared tables are kept across restarts, if anywhere.
    pub(crate) cache: Option<Arc<cache::Cache>>,
    /// Held while the datasets directory is scanned.
    pub(crate) rescanning: std::sync::Mutex<()>,
    /// Where the physical work of calls over files goes, with the partitions it is split in.
    pub(crate) cluster: Option<(Arc<dyn cluster::Cluster>, cluster::Split)>,
    /// Where heavy calls run and when they may start.
    pub(crate) governor: Arc<governor::Governor>,
    /// The datasets as policies show them to restricted callers.
    pub(crate) twins: policy::Twins,
    /// Catalog changes served since the start (for `/metrics`).
    pub(crate) reloads: std::sync::atomic::AtomicU64,
    /// `inspect_dataset`'s description of each dataset version, computed once.
    pub(crate) descriptions: crate::descriptions::Descriptions,
    /// How far calls have taken from their estimates on this machine.
    pub(crate) calibration: crate::calibration::Calibration,
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
            descriptions: Default::default(),
            calibration: Default::default(),
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
