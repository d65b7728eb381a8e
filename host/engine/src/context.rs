//! Who calls and with what: the [`Caller`] (who, which datasets), the request parsed once
//! ([`Ask`]), the call's explicit context ([`CallCtx`], [`Cx`]) handed down to every phase,
//! and the [`View`] a caller has of the catalog. The entry points besides the door that read
//! the catalog for a caller (a view, a preparation, the values to complete) are here too:
//! each takes a caller.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::SessionContext;
use serde_json::Value;
use tally_semantic::request::{self, Request, Tool};
use tally_semantic::resolve::Choice;
use tally_storage::stop::Stop;
use tally_storage::{Catalog, Dataset, cache, cluster, dataset, memory};

use crate::engine::Engine;
use crate::error::EngineError;
use crate::policy::Scope;

/// Who is calling, as the engine sees it (never a token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's id, `ip:<address>` without authentication, `stdio`, or `cli`.
    pub id: String,
    pub scope: Scope,
}

impl Caller {
    /// A caller who may see every dataset.
    pub fn everyone(id: &str) -> Caller {
        Caller {
            id: id.to_string(),
            scope: Scope::All,
        }
    }

    /// The client that started a stdio server: it owns the process and sees everything.
    pub fn stdio() -> Caller {
        Caller::everyone("stdio")
    }

    /// A person at a shell running a one-shot command on their own datasets directory.
    pub fn operator() -> Caller {
        Caller::everyone("cli")
    }

    pub fn sees(&self, dataset: &str) -> bool {
        self.scope.allows(dataset)
    }
}

/// A call's request, parsed once at the edge: the tool, its arguments as sent (for the
/// estimate and the words of a refusal) and the typed request every phase reads.
#[derive(Debug, Clone)]
pub struct Ask {
    tool: Tool,
    arguments: Value,
    request: Request,
}

impl Ask {
    /// Parses `arguments` of `tool` (loose LLM forms accepted, sizes bounded): refused as the
    /// caller's input when they do not fit.
    pub fn parse(tool: Tool, arguments: Value) -> Result<Ask, EngineError> {
        let request = request::parse(tool, &arguments)?;
        Ok(Ask {
            tool,
            arguments,
            request,
        })
    }

    pub fn tool(&self) -> Tool {
        self.tool
    }

    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The dataset the call names, as typed.
    pub fn dataset_id(&self) -> Option<&str> {
        match &self.request {
            Request::InspectDataset(a) => Some(&a.dataset_id),
            Request::QueryRecords(a) => Some(&a.dataset_id),
            Request::SummarizeRecords(a) => Some(&a.dataset_id),
            Request::CiteProvisions(a) => Some(&a.dataset_id),
            Request::ListDatasets(_) | Request::VerifyAnswer(_) => None,
        }
    }

    /// Whether the answer is also asked as W3C PROV-O (`provenance_format: "prov"`).
    pub(crate) fn prov(&self) -> bool {
        self.arguments
            .get("provenance_format")
            .and_then(Value::as_str)
            .is_some_and(|f| f.trim().eq_ignore_ascii_case("prov"))
    }

    /// Whether the call searches text (`q`, `$contains`, `$not_contains`).
    pub(crate) fn searches(&self) -> bool {
        match &self.request {
            Request::QueryRecords(a) => a.q.is_some() || searching(&a.conditions),
            Request::SummarizeRecords(a) => searching(&a.conditions),
            _ => false,
        }
    }
}

fn searching(conditions: &[request::Condition]) -> bool {
    conditions
        .iter()
        .any(|c| matches!(c.op, request::Op::Contains(_) | request::Op::NotContains(_)))
}

/// Everything one call runs with, handed down explicitly to every phase.
#[derive(Debug)]
pub struct CallCtx {
    pub caller: Caller,
    /// The call's time budget, from `began`.
    pub budget: Duration,
    pub began: Instant,
    /// Set when the caller stops waiting; the call's work ends at its next look.
    pub stop: Stop,
    /// The names its user chose for ambiguous ones (said in `resolved_fields`).
    pub chosen: Arc<Vec<Choice>>,
    /// The operator memory the caller's calls in flight hold together.
    memory: Arc<AtomicUsize>,
    /// Set on a call run again once the preparation its first run outlasted its deadline
    /// waiting for has ended: when the call began (said in its extract step).
    pub waited_since: Option<Instant>,
}

impl CallCtx {
    /// The context of a call of `caller` with `budget`, beginning now.
    pub fn new(engine: &Engine, caller: Caller, budget: Duration, chosen: Vec<Choice>) -> Self {
        let memory = engine.caller_memory(&caller.id);
        CallCtx {
            caller,
            budget,
            began: Instant::now(),
            stop: Stop::new(),
            chosen: Arc::new(chosen),
            memory,
            waited_since: None,
        }
    }

    /// The operator memory the caller's calls in flight hold together.
    pub(crate) fn memory(&self) -> &Arc<AtomicUsize> {
        &self.memory
    }

    /// The same call run again after the preparation it waited for: from `began`.
    pub(crate) fn again(&self) -> CallCtx {
        CallCtx {
            caller: self.caller.clone(),
            budget: self.budget,
            began: Instant::now(),
            stop: self.stop.clone(),
            chosen: Arc::clone(&self.chosen),
            memory: Arc::clone(&self.memory),
            waited_since: Some(self.began),
        }
    }
}

/// The engine as one call uses it: the engine with the call's context.
#[derive(Debug, Clone, Copy)]
pub struct Cx<'a> {
    pub engine: &'a Engine,
    pub call: &'a CallCtx,
}

impl std::ops::Deref for Cx<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        self.engine
    }
}

impl tally_storage::Resources for Cx<'_> {
    fn budget(&self) -> &Arc<memory::Budget> {
        self.engine.budget()
    }
    fn cache(&self) -> Option<&Arc<cache::Cache>> {
        self.engine.cache()
    }
    fn context(&self) -> &SessionContext {
        self.engine.context()
    }
    fn preparations(&self) -> &Arc<tokio::sync::Semaphore> {
        self.engine.preparations()
    }
    fn serving(&self) -> dataset::Serving {
        self.engine.limits().serving
    }
}

impl Cx<'_> {
    /// A DataFusion context for this call over a table of `rows` records: a memory pool of
    /// its own within the caller's allowance, and the call's stop as a config extension.
    pub fn call_context(&self, rows: usize) -> Result<SessionContext, EngineError> {
        self.engine.context_for(rows, Some(self.call))
    }

    pub fn scope(&self) -> &Scope {
        &self.call.caller.scope
    }
}

/// One caller's view of one catalog snapshot: what that caller may see, and nothing else. A
/// hidden dataset and one that does not exist are the same absence to it.
#[derive(Debug, Clone)]
pub struct View {
    caller: Caller,
    catalog: Arc<Catalog>,
    /// The datasets the caller sees, as they see them (a policy's restricted twin).
    seen: std::collections::BTreeMap<String, Arc<Dataset>>,
}

impl View {
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Whether the caller may see everything (no scope on its token).
    pub fn sees_all(&self) -> bool {
        self.caller.scope == Scope::All
    }

    /// A dataset the caller may see, as they see it; `None` alike for a hidden one and one
    /// not served.
    pub fn dataset(&self, id: &str) -> Option<&Arc<Dataset>> {
        self.seen.get(id)
    }

    /// The datasets the caller may see, by id.
    pub fn datasets(&self) -> impl Iterator<Item = &Arc<Dataset>> + '_ {
        self.seen.values()
    }

    pub fn ids(&self) -> Vec<String> {
        self.seen.keys().cloned().collect()
    }

    /// The folders the caller may see whose files are still being written (retried when they
    /// settle).
    pub fn pending(&self) -> impl Iterator<Item = &String> + '_ {
        self.catalog
            .pending
            .iter()
            .filter(|folder| self.caller.sees(folder))
    }

    /// The refused folders the caller may see (by folder name, which is the dataset id).
    pub fn broken(&self) -> impl Iterator<Item = &tally_storage::catalog::Broken> + '_ {
        self.catalog
            .broken
            .iter()
            .filter(|b| self.caller.sees(&b.folder))
    }
}

impl Engine {
    /// The view of `caller` on the catalog as it is now.
    pub fn view(&self, caller: Caller) -> View {
        let catalog = self.catalog.load_full();
        let seen = catalog
            .datasets
            .keys()
            .filter_map(|id| Some((id.clone(), self.seen(&catalog, id, &caller.scope)?)))
            .collect();
        View {
            caller,
            catalog,
            seen,
        }
    }
}

/// The most values [`Engine::values_to_complete`] gives (completions rank at most these).
pub const KNOWN_VALUES: usize = 10_000;
/// How long a completion waits for a preparation it started (the preparation goes on after).
pub const KNOWN_VALUES_WAIT: Duration = Duration::from_secs(3);
/// How long a completion waits for a preparation estimated to take longer than
/// [`KNOWN_VALUES_WAIT`]: just long enough to start it; it answers at once that the values
/// are not ready, and when they may be.
const KNOWN_VALUES_START: Duration = Duration::from_millis(50);

/// The values a completion may offer for a field, or why it has none now.
#[derive(Debug, Clone, PartialEq)]
pub enum KnownValues {
    /// The values, most frequent first.
    Values(Vec<String>),
    /// Not ready yet: the dataset's data is being prepared (or its values counted), which
    /// goes on; `about` is the time it is estimated to need still, when known. The words say
    /// what to do.
    NotReady {
        message: String,
        about: Option<Duration>,
    },
    /// None to offer: an unknown dataset or field, numbers, data read from its files at
    /// every call (never scanned for a completion), or a preparation that failed.
    None,
}

impl Engine {
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
    /// [`KNOWN_VALUES_WAIT`], so the first completion after a start offers the values; a
    /// table whose preparation is estimated past that wait is not waited for (the preparation
    /// starts, and the answer says when to ask again), nor is one still being prepared past
    /// it. A table read from its files at every call is never scanned for a completion.
    pub async fn values_to_complete(
        self: &Arc<Self>,
        caller: &Caller,
        dataset_id: &str,
        field: &str,
    ) -> KnownValues {
        let catalog = self.catalog.load_full();
        let Some(ds) = self.seen(&catalog, dataset_id, &caller.scope) else {
            return KnownValues::None;
        };
        let Some(id) = ds.def.field_index(field) else {
            return KnownValues::None;
        };
        let f = &ds.def.fields[id];
        if let Some(tally_semantic::definition::Codelist::Static(codes)) = &f.codelist {
            return KnownValues::Values(codes.iter().map(|c| c.value.clone()).collect());
        }
        if f.data_type.is_numeric() {
            return KnownValues::None;
        }
        let not_ready = |what: &str, about: Option<Duration>| KnownValues::NotReady {
            message: format!(
                "the values of `{field}` are not ready: `{}` ({} records) is {what}{}; ask again then",
                ds.id(),
                ds.record_count()
                    .map_or_else(|| "its".to_string(), |n| n.to_string()),
                about.map_or_else(String::new, |t| format!(
                    ", about {} s more",
                    t.as_secs_f64().ceil().max(1.0)
                ))
            ),
            about,
        };
        let prepared = match ds.ready() {
            Some(p) => p,
            None if ds.read_from_files(&**self) => return KnownValues::None,
            None => {
                let about = self.preparation_left(&ds);
                let wait = if about.is_some_and(|t| t > KNOWN_VALUES_WAIT) {
                    KNOWN_VALUES_START
                } else {
                    KNOWN_VALUES_WAIT
                };
                // The preparation runs on a task of its own: it goes on after this wait.
                match tokio::time::timeout(wait, ds.prepared_whole(&**self)).await {
                    Ok(Ok(p)) => p,
                    Ok(Err(_)) => return KnownValues::None,
                    Err(_) => {
                        return not_ready("being prepared", self.preparation_left(&ds));
                    }
                }
            }
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
            let Ok(slot) = self.governor.admit(&caller.id, deadline).await else {
                return not_ready("waiting for a slot among heavy calls", None);
            };
            let Ok(runtime) = self.governor.runtime() else {
                return KnownValues::None;
            };
            // Counted once per table and kept: a count that outlasts the wait goes on, and
            // the next completion finds it.
            let counting = runtime.spawn(async move {
                let _slot = slot;
                count.await
            });
            match tokio::time::timeout(KNOWN_VALUES_WAIT, counting).await {
                Ok(Ok(Ok(counts))) => counts,
                Ok(_) => return KnownValues::None,
                Err(_) => return not_ready("having its values counted", None),
            }
        } else {
            match count.await {
                Ok(counts) => counts,
                Err(_) => return KnownValues::None,
            }
        };
        // The most frequent ones: a free-text field may hold a value per record.
        KnownValues::Values(
            counts
                .iter()
                .take(KNOWN_VALUES)
                .map(|(value, _)| value.clone())
                .collect(),
        )
    }
}

impl Engine {
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
}
