//! Calls whose physical work runs on a cluster (Apache Arrow Ballista): what the engine
//! knows of it. The cluster itself (the codec, the client, the scheduler and executor
//! binaries) lives in the `tally-cluster` crate, which implements [`Cluster`].
//!
//! Only data read from its files at every call can be distributed: a prepared table lives in
//! this process's memory. In cluster mode the scan of such a table is a [`ScanExec`]: the
//! scan the single-node path makes, plus a description of its table ([`TableSource`]: the
//! definition, the files and the versions registered, the call's projection, conditions and
//! limit). An executor that receives it rebuilds the table from that description and makes
//! the very same scan (the same code, the same partitions), so the answers are those of the
//! single-node path. Name resolution, the semantic layer, budgets and the envelope stay on
//! the server; the executors only scan and compute.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties, displayable,
    replace_children_if_necessary,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion::prelude::SessionConfig;

use crate::error::StorageError;
use crate::memory::Budget;
use crate::source::TableSource;
use crate::store::{Layout, MapExec, Out, external};

/// A cluster the server sends the physical work of calls to.
pub trait Cluster: Send + Sync + fmt::Debug {
    /// Where it is, as the envelope names it (`df://host:port`).
    fn address(&self) -> &str;
    /// A plan that runs `plan` on the cluster and streams its answer back, or why `plan`
    /// cannot be sent (a node or function the cluster cannot rebuild).
    fn distribute(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        call: Arc<ClusterCall>,
    ) -> Result<Arc<dyn ExecutionPlan>, String>;
}

/// One call's view of the cluster, kept in its session config: where its plans went.
#[derive(Debug)]
pub struct ClusterCall {
    pub cluster: Arc<dyn Cluster>,
    /// How many of the call's plans ran on the cluster.
    distributed: Mutex<usize>,
    /// Why plans were computed here instead (each reason once).
    local: Mutex<Vec<String>>,
    /// The tasks the scheduler split the plans that ran there into, and whether it said so
    /// for every one of them.
    tasks: Mutex<(usize, bool)>,
    /// How its scans of files are split into partitions.
    pub split: Split,
}

/// How a scan of files sent to the cluster is split into partitions (the executors' tasks):
/// by the work it reads. A scan that reads little runs as one wave of tasks, one per slot of
/// the cluster (`--cluster-partitions`), so that a light call pays each task's fixed cost
/// (its share of the job, the footer compared, the page index decoded) once per slot. A scan
/// that reads more gets another wave for every `bytes_per_task` each slot would read, up to
/// [`Split::MOST_WAVES`]: with more tasks than slots, a slot that finishes early (an executor
/// on a core of its own) takes the next task instead of the call waiting for the slowest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// The cluster's task slots (executors times the tasks each runs at once).
    pub slots: usize,
    /// Column-chunk bytes (compressed, as stored) a task reads before a scan gets another wave.
    pub bytes_per_task: u64,
}

impl Split {
    /// The bytes a task reads before another wave, by default: 16 MiB, about 40 ms of
    /// decoding and grouping on one core, against a few milliseconds of a task's fixed cost.
    pub const BYTES_PER_TASK: u64 = 16 << 20;
    /// The most waves of tasks a scan is split into.
    pub const MOST_WAVES: u64 = 4;

    /// The split of a cluster of `slots` task slots.
    pub fn slots(slots: usize) -> Split {
        Split {
            slots: slots.max(1),
            bytes_per_task: Self::BYTES_PER_TASK,
        }
    }

    /// The partitions of a scan that reads `bytes` of column chunks.
    pub fn partitions(&self, bytes: u64) -> usize {
        let slots = self.slots.max(1);
        let wave = self.bytes_per_task.max(1).saturating_mul(slots as u64);
        let waves = bytes.div_ceil(wave).clamp(1, Self::MOST_WAVES);
        slots * waves as usize
    }
}

impl ClusterCall {
    pub fn new(cluster: Arc<dyn Cluster>, split: Split) -> ClusterCall {
        ClusterCall {
            split,
            cluster,
            distributed: Mutex::new(0),
            local: Mutex::new(Vec::new()),
            tasks: Mutex::new((0, true)),
        }
    }

    /// A plan of the call ran on the cluster (in `tasks`, when the scheduler said).
    pub fn ran_remotely(&self, tasks: Option<usize>) {
        if let Ok(mut n) = self.distributed.lock() {
            *n += 1;
        }
        if let Ok(mut counted) = self.tasks.lock() {
            match tasks {
                Some(t) => counted.0 += t,
                None => counted.1 = false,
            }
        }
    }

    /// The tasks the plans that ran on the cluster were split into, when known for each.
    pub fn tasks(&self) -> Option<usize> {
        self.tasks
            .lock()
            .ok()
            .and_then(|t| (t.1 && t.0 > 0).then_some(t.0))
    }

    /// A plan of the call was computed on this server, for `why`.
    pub fn ran_here(&self, why: impl Into<String>) {
        let why = why.into();
        if let Ok(mut local) = self.local.lock()
            && !local.contains(&why)
        {
            local.push(why);
        }
    }

    /// How many plans ran on the cluster, and why others did not.
    pub fn outcome(&self) -> (usize, Vec<String>) {
        (
            self.distributed.lock().map(|n| *n).unwrap_or(0),
            self.local.lock().map(|l| l.clone()).unwrap_or_default(),
        )
    }
}

/// The cluster a call's context sends its work to, if any.
pub fn of_session(state: &dyn Session) -> Option<Arc<ClusterCall>> {
    state.config().get_extension::<ClusterCall>()
}

/// The planner of a call in cluster mode: DataFusion's, then the plan sent to the cluster
/// when it scans files (a plan over a prepared table, or another backend's, stays here).
#[derive(Debug)]
pub struct ClusterPlanner;

#[async_trait::async_trait]
impl datafusion::execution::context::QueryPlanner for ClusterPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = DefaultPhysicalPlanner::default()
            .create_physical_plan(logical_plan, session)
            .await?;
        let Some(call) = of_session(session) else {
            return Ok(plan);
        };
        if !scans_files(&plan) {
            return Ok(plan);
        }
        if let Some(cut) = cut_at_exchanges(&plan, &scans_files, &mut |part| send(part, &call))? {
            tracing::debug!(plan = %displayable(cut.as_ref()).indent(true), "plan cut at its exchanges");
            return Ok(cut);
        }
        Ok(send(plan, &call))
    }
}

/// `plan` run on the cluster, or `plan` itself (said) when it cannot be sent.
fn send(plan: Arc<dyn ExecutionPlan>, call: &Arc<ClusterCall>) -> Arc<dyn ExecutionPlan> {
    // Text grouped on the executors' own codes (the server's live in its memory).
    let sent = crate::coded::group_on_codes(Arc::clone(&plan), &crate::coded::counts_capped)
        .unwrap_or_else(|e| {
            tracing::debug!(error = %e, "text grouped as text on the cluster");
            Arc::clone(&plan)
        });
    tracing::debug!(plan = %displayable(sent.as_ref()).indent(true), "sent to the cluster");
    match call.cluster.distribute(sent, Arc::clone(call)) {
        Ok(remote) => remote,
        Err(why) => {
            tracing::info!(%why, "plan computed on this server");
            call.ran_here(why);
            plan
        }
    }
}

/// The plan with what lies below its lowest exchanges sent to the cluster, and the exchanges
/// and all above them computed here; `None` when the plan has no exchange to cut at, or one
/// whose input is heavy to bring here (rows hashed for a join, not the partial groups of an
/// aggregate), so that it is sent whole.
///
/// Ballista runs each exchange as a stage of its own: the tasks below it write their output
/// to the executors' disks and report, then the stage above is scheduled, run, and its
/// output fetched. For the partial groups of an aggregate, or each partition's first rows in
/// order, that costs a stage's round trip and a shuffle to move a few rows. Cut at the lowest
/// exchanges, a call is one stage on the cluster (the scan, its conditions, the partial
/// groups: the work that grows with the data), and those rows come straight to the server,
/// which merges them as it merges its own partitions. A merge that keeps an order becomes a
/// sort of the rows brought, with the same limit: they come as one stream, partition after
/// partition.
///
/// `reads` says whether a part reads files (only such a part is sent); `send` sends a part,
/// returning it unchanged when it stays here.
fn cut_at_exchanges(
    plan: &Arc<dyn ExecutionPlan>,
    reads: &dyn Fn(&Arc<dyn ExecutionPlan>) -> bool,
    send: &mut dyn FnMut(Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan>,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    let mut heavy = false;
    let cut = Arc::clone(plan).transform_down(|node| {
        if !is_exchange(&node) {
            return Ok(Transformed::no(node));
        }
        let input = Arc::clone(node.children()[0]);
        if has_exchange(&input) {
            return Ok(Transformed::no(node));
        }
        if !reads(&input) {
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
        }
        if !light_exchange(&node) {
            heavy = true;
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Stop));
        }
        let remote = send(Arc::clone(&input));
        if Arc::ptr_eq(&remote, &input) {
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
        }
        let here: Arc<dyn ExecutionPlan> = match node.downcast_ref::<SortPreservingMergeExec>() {
            Some(merge) => {
                Arc::new(SortExec::new(merge.expr().clone(), remote).with_fetch(merge.fetch()))
            }
            None => replace_children_if_necessary(node, vec![remote])?,
        };
        Ok(Transformed::new(here, true, TreeNodeRecursion::Jump))
    })?;
    // A part that reads files but is below no exchange (or was not sent) would run here: the
    // plan is then sent whole, as it would be without exchanges.
    Ok((!heavy && cut.transformed && !reads(&cut.data)).then_some(cut.data))
}

/// A node where Ballista ends one stage and starts another.
fn is_exchange(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.is::<CoalescePartitionsExec>()
        || node.is::<SortPreservingMergeExec>()
        || node
            .downcast_ref::<RepartitionExec>()
            .is_some_and(|r| matches!(r.partitioning(), Partitioning::Hash(..)))
}

/// Whether `plan` has an exchange anywhere in it.
fn has_exchange(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        found = is_exchange(node);
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// Whether what flows through `exchange` is little enough to bring to the server: a merge of
/// partitions (an ordered one only with a limit: without, the server would sort every row
/// brought, where the executors merge sorted streams), or the hashing of an aggregate's
/// partial groups (a hash of rows, as a join makes, is not).
fn light_exchange(exchange: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(merge) = exchange.downcast_ref::<SortPreservingMergeExec>() {
        return merge.fetch().is_some();
    }
    if !exchange.is::<RepartitionExec>() {
        return true;
    }
    exchange.children()[0]
        .downcast_ref::<AggregateExec>()
        .is_some_and(|a| *a.mode() == AggregateMode::Partial)
}

/// Whether a plan reads files through a [`ScanExec`] (what the cluster can take).
fn scans_files(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if node.is::<ScanExec>() {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// One scan of a streamed table in cluster mode: the scan of the single-node path, and the
/// description an executor makes the same scan from.
///
/// A cluster's scheduler hands each task a slice of a stage's partitions and restricts the
/// leaves of the task's plan to that slice, renumbered from 0 (Ballista knows how for its own
/// and DataFusion's leaves, not for this one). So the scan's only child is a marker: a
/// DataFusion in-memory source with one partition per partition of the scan, each holding its
/// number. The scheduler restricts the marker like any in-memory source, and partition `i` of
/// the scan reads partition `i` of the marker to learn which of the scan's partitions it is.
pub struct ScanExec {
    pub source: Arc<TableSource>,
    pub projection: Option<Vec<usize>>,
    pub filters: Vec<Expr>,
    pub limit: Option<usize>,
    /// The partitions the scan was planned for (`target_partitions`).
    pub target_partitions: usize,
    /// The partitions of the whole scan, as the server planned it (a task may run some).
    pub scan_partitions: usize,
    /// Which of the scan's partitions each partition of this plan is (see above).
    marker: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    /// The scan itself: made here, or rebuilt by an executor when first executed.
    inner: tokio::sync::OnceCell<Arc<dyn ExecutionPlan>>,
    /// What an executor's reads draw from.
    budget: Option<Arc<Budget>>,
}

impl fmt::Debug for ScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScanExec")
            .field("dataset", &self.source.dataset)
            .field("files", &self.source.files.len())
            .field("projection", &self.projection)
            .field("filters", &self.filters)
            .finish_non_exhaustive()
    }
}

impl ScanExec {
    /// The scan `inner` made on this server, sendable as `source` with the call's choices.
    pub fn local(
        source: Arc<TableSource>,
        projection: Option<Vec<usize>>,
        filters: Vec<Expr>,
        limit: Option<usize>,
        target_partitions: usize,
        inner: Arc<dyn ExecutionPlan>,
    ) -> ScanExec {
        let properties = Arc::new(inner.properties().as_ref().clone());
        let scan_partitions = properties.partitioning.partition_count();
        ScanExec {
            source,
            projection,
            filters,
            limit,
            target_partitions,
            scan_partitions,
            marker: marker(scan_partitions),
            properties,
            inner: tokio::sync::OnceCell::new_with(Some(inner)),
            budget: None,
        }
    }

    /// The scan as an executor (or the scheduler) receives it: nothing is read until it is
    /// executed; `schema` and `scan_partitions` are what the server planned with, `marker`
    /// the partitions of it this plan runs (all of them, or a task's slice).
    #[allow(clippy::too_many_arguments)]
    pub fn remote(
        source: Arc<TableSource>,
        projection: Option<Vec<usize>>,
        filters: Vec<Expr>,
        limit: Option<usize>,
        target_partitions: usize,
        schema: SchemaRef,
        scan_partitions: usize,
        marker: Arc<dyn ExecutionPlan>,
        budget: Arc<Budget>,
    ) -> ScanExec {
        ScanExec {
            source,
            projection,
            filters,
            limit,
            target_partitions,
            scan_partitions,
            properties: properties_over(schema, &marker),
            marker,
            inner: tokio::sync::OnceCell::new(),
            budget: Some(budget),
        }
    }

    /// The partitions this plan runs.
    pub fn partitions(&self) -> usize {
        self.properties.partitioning.partition_count()
    }

    /// The marker of which of the scan's partitions this plan's partitions are.
    pub fn marker(&self) -> &Arc<dyn ExecutionPlan> {
        &self.marker
    }

    /// Rebuilds the table from its description and makes the scan, as the server did.
    async fn rebuild(&self, context: &TaskContext) -> DfResult<Arc<dyn ExecutionPlan>> {
        let budget = self.budget.clone().ok_or_else(|| {
            DataFusionError::Internal("a scan made on this server has its plan".into())
        })?;
        let started = std::time::Instant::now();
        let table = rebuild_table(&self.source, &budget)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        tracing::debug!(
            dataset = %self.source.dataset,
            micros = started.elapsed().as_micros() as u64,
            "table rebuilt for a task (definition loaded, files checked)"
        );
        // Planned as the server planned it; how partitions share files is the task context's
        // (`alone`), read when the scan runs.
        let config = SessionConfig::new().with_target_partitions(self.target_partitions);
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(context.runtime_env())
            .build();
        let plan = table
            .scan(&state, self.projection.as_ref(), &self.filters, self.limit)
            .await?;
        let made = plan.properties().partitioning.partition_count();
        if made != self.scan_partitions
            || plan.schema() != self.properties.eq_properties.schema().clone()
        {
            return Err(DataFusionError::Execution(format!(
                "dataset `{}`: this executor planned the scan in {made} partitions, or with another schema, than the server's {} (are the server and the executors the same Tally version?)",
                self.source.dataset, self.scan_partitions
            )));
        }
        Ok(plan)
    }
}

impl DisplayAs for ScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "TallyScan: {} files of `{}`",
            self.source.files.len(),
            self.source.dataset
        )
    }
}

impl ExecutionPlan for ScanExec {
    fn name(&self) -> &str {
        "TallyScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.marker]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        // The marker is not data: nothing is to be repartitioned under the scan.
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let [marker] = <[_; 1]>::try_from(children).map_err(|_| {
            DataFusionError::Internal("TallyScan has one input, its partition marker".into())
        })?;
        Ok(Arc::new(ScanExec {
            source: Arc::clone(&self.source),
            projection: self.projection.clone(),
            filters: self.filters.clone(),
            limit: self.limit,
            target_partitions: self.target_partitions,
            scan_partitions: self.scan_partitions,
            properties: properties_over(self.properties.eq_properties.schema().clone(), &marker),
            marker,
            inner: self.inner.clone(),
            budget: self.budget.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let partition = scan_partition(&self.marker, partition)?;
        if partition >= self.scan_partitions {
            return Err(DataFusionError::Internal(format!(
                "TallyScan has {} partitions, not {partition}",
                self.scan_partitions
            )));
        }
        if let Some(inner) = self.inner.get() {
            return inner.execute(partition, context);
        }
        let schema = self.properties.eq_properties.schema().clone();
        let this = ScanExec {
            source: Arc::clone(&self.source),
            projection: self.projection.clone(),
            filters: self.filters.clone(),
            limit: self.limit,
            target_partitions: self.target_partitions,
            scan_partitions: self.scan_partitions,
            marker: Arc::clone(&self.marker),
            properties: Arc::clone(&self.properties),
            inner: tokio::sync::OnceCell::new(),
            budget: self.budget.clone(),
        };
        let context = alone(&context);
        let stream = futures::stream::once(async move {
            let plan = this.rebuild(&context).await?;
            plan.execute(partition, context)
        });
        // What fails here reaches the server as text (Ballista sends a failed task's error in
        // its `Debug` form): a storage error goes as a tag the server reads back.
        let stream =
            futures::TryStreamExt::map_err(futures::TryStreamExt::try_flatten(stream), crossing);
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// A storage error raised on an executor, as it crosses to the server. The scheduler hands
/// the server a failed task's error as text, the `Debug` form of the error chain (a Rust dump
/// such as `DataFusionError(Shared(External(Backend { … })))`); this error's `Debug` and
/// `Display` are the same line, its words then a tag of fixed form that
/// [`Crossing::from_message`] reads back on the server, so the server answers with its own
/// error kinds (a file replaced is `dataset_changing`) and readable words. Its fields are
/// hex-encoded in the tag: whatever wraps or escapes the text on the way leaves them intact.
#[derive(Clone)]
pub struct Crossing(pub StorageError);

/// How the tag of a crossing error begins.
const CROSSING_TAG: &str = "[tally:storage:";

impl Crossing {
    fn tag(&self) -> String {
        let (kind, fields): (&str, Vec<&str>) = match &self.0 {
            StorageError::Backend { dataset, message } => ("backend", vec![dataset, message]),
            StorageError::Stale { dataset, message } => ("stale", vec![dataset, message]),
            StorageError::Limit { message, hint } => ("limit", vec![message, hint]),
            StorageError::Internal(message) => ("internal", vec![message]),
        };
        let fields: Vec<String> = fields.iter().map(|f| hex(f.as_bytes())).collect();
        format!("{CROSSING_TAG}{kind}:{}]", fields.join(":"))
    }

    /// The storage error whose tag is inside `text` (a failed job's error, as the scheduler
    /// reports it), if any.
    pub fn from_message(text: &str) -> Option<StorageError> {
        let at = text.find(CROSSING_TAG)? + CROSSING_TAG.len();
        let tag = &text[at..at + text[at..].find(']')?];
        let mut parts = tag.split(':');
        let kind = parts.next()?;
        let fields: Vec<String> = parts.map(unhex).collect::<Option<_>>()?;
        match (kind, fields.as_slice()) {
            ("backend", [dataset, message]) => Some(StorageError::Backend {
                dataset: dataset.clone(),
                message: message.clone(),
            }),
            ("stale", [dataset, message]) => Some(StorageError::Stale {
                dataset: dataset.clone(),
                message: message.clone(),
            }),
            ("limit", [message, hint]) => Some(StorageError::Limit {
                message: message.clone(),
                hint: hint.clone(),
            }),
            ("internal", [message]) => Some(StorageError::Internal(message.clone())),
            _ => None,
        }
    }
}

impl fmt::Display for Crossing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, self.tag())
    }
}

impl fmt::Debug for Crossing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Crossing {}

/// An error of a scan on an executor, made ready to cross: a storage error (or a memory
/// budget refused) as a [`Crossing`]; any other error as it is, so that Ballista still tells
/// the errors it retries (a lost shuffle, a transient I/O error) from the others.
fn crossing(e: DataFusionError) -> DataFusionError {
    match crate::error::carried(&e).or_else(|| crate::error::memory_limit(&e)) {
        Some(storage) => DataFusionError::External(Box::new(Crossing(storage))),
        None => e,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The name of the marker's one column.
const MARKER_COLUMN: &str = "tally_scan_partition";

/// The marker of a scan of `partitions` partitions: partition `i` holds the number `i`.
fn marker(partitions: usize) -> Arc<dyn ExecutionPlan> {
    use datafusion::arrow::array::UInt64Array;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    let schema = Arc::new(Schema::new(vec![Field::new(
        MARKER_COLUMN,
        DataType::UInt64,
        false,
    )]));
    let batches: Vec<Vec<RecordBatch>> = (0..partitions as u64)
        .map(|i| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(UInt64Array::from(vec![i]))],
            )
            .map(|b| vec![b])
        })
        .collect::<Result<_, _>>()
        .unwrap_or_default();
    // An in-memory source over batches of the schema it is given cannot fail; were it to, a
    // scan without partitions reads nothing, which the partition check of `rebuild` reports.
    match datafusion::datasource::memory::MemorySourceConfig::try_new_exec(&batches, schema, None) {
        Ok(exec) => exec,
        Err(_) => Arc::new(datafusion::physical_plan::empty::EmptyExec::new(Arc::new(
            Schema::empty(),
        ))),
    }
}

/// Which of the scan's partitions partition `local` of this plan is, read off the marker.
fn scan_partition(marker: &Arc<dyn ExecutionPlan>, local: usize) -> DfResult<usize> {
    use datafusion::arrow::array::UInt64Array;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    let number = marker
        .downcast_ref::<DataSourceExec>()
        .and_then(|exec| {
            let source: &dyn std::any::Any = exec.data_source().as_ref();
            source.downcast_ref::<MemorySourceConfig>()
        })
        .and_then(|memory| memory.partitions().get(local))
        .and_then(|batches| batches.first())
        .and_then(|batch| batch.column(0).as_any().downcast_ref::<UInt64Array>())
        .filter(|numbers| numbers.len() == 1)
        .map(|numbers| numbers.value(0) as usize);
    number.ok_or_else(|| {
        DataFusionError::Internal(format!(
            "TallyScan: its partition marker has no partition {local}"
        ))
    })
}

/// A scan's properties: its schema, in as many partitions as its marker.
fn properties_over(schema: SchemaRef, marker: &Arc<dyn ExecutionPlan>) -> Arc<PlanProperties> {
    use datafusion::physical_expr::EquivalenceProperties;
    use datafusion::physical_plan::Partitioning;
    use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(marker.properties().partitioning.partition_count()),
        EmissionType::Incremental,
        Boundedness::Bounded,
    ))
}

/// `context` for a partition that runs alone: an executor runs each partition of a scan as
/// its own task, on its own copy of the plan, so sibling partitions must not take files from
/// a queue they share (DataFusion's work stealing), or each task would read them all.
fn alone(context: &Arc<TaskContext>) -> Arc<TaskContext> {
    Arc::new(TaskContext::new(
        context.task_id(),
        context.session_id(),
        partitions_alone(context.session_config().clone()),
        context.scalar_functions().clone(),
        context.higher_order_functions().clone(),
        context.aggregate_functions().clone(),
        context.window_functions().clone(),
        context.runtime_env(),
    ))
}

/// `config` with DataFusion's work stealing between the partitions of one scan turned off: on
/// a cluster each task runs its partitions on its own copy of the plan (what `alone` gives a
/// partition on an executor, and what the server sends with a job).
pub fn partitions_alone(mut config: SessionConfig) -> SessionConfig {
    config
        .options_mut()
        .execution
        .enable_file_stream_work_stealing = false;
    config
}

/// The table an executor reads: the dataset's layout from its definition, its files checked
/// against the versions registered.
async fn rebuild_table(
    source: &TableSource,
    budget: &Arc<Budget>,
) -> Result<Arc<dyn TableProvider>, StorageError> {
    let started = std::time::Instant::now();
    let loaded = tally_semantic::definition::load_definition(
        "dataset.yaml",
        &source.dataset,
        &source.definition,
    )
    .map_err(|e| {
        StorageError::backend(
            &source.dataset,
            format!(
                "the definition sent with the plan does not load on this executor: {}",
                e.diagnostics
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
    })?;
    let def = loaded.dataset;
    let layout = Arc::new(crate::store::Layout::streamed(&def, &source.source_schema)?);
    let fields: Vec<(String, DataType)> = def
        .fields
        .iter()
        .zip(&layout.targets)
        .map(|(f, t)| (f.name.clone(), t.clone()))
        .collect();
    let loaded_at = std::time::Instant::now();
    let files = crate::parquet::reopen(source).await?;
    let opened_at = std::time::Instant::now();
    let stream = crate::parquet::stream::ParquetStream::new(
        &source.dataset,
        &fields,
        &source.keys,
        files,
        Vec::new(),
        None,
        budget,
    )?;
    let (inner, _counts) = crate::backend::Streaming::table(&stream);
    tracing::debug!(
        dataset = %source.dataset,
        definition_micros = (loaded_at - started).as_micros() as u64,
        files_micros = (opened_at - loaded_at).as_micros() as u64,
        table_micros = opened_at.elapsed().as_micros() as u64,
        "the parts of a task's table"
    );
    Ok(Arc::new(crate::cluster::StreamedTable::new(inner, layout)))
}

/// The table of data read from its files ([`crate::backend::Streaming`]): the backend's table
/// (the declared fields, then the row number) with the share columns of the layout made per
/// batch, as a prepared table has them.
#[derive(Debug)]
pub struct StreamedTable {
    inner: Arc<dyn TableProvider>,
    layout: Arc<Layout>,
    /// What an executor rebuilds this table from, when a call sends its scans to a cluster.
    source: Option<Arc<crate::source::TableSource>>,
}

impl StreamedTable {
    pub fn new(inner: Arc<dyn TableProvider>, layout: Arc<Layout>) -> StreamedTable {
        StreamedTable {
            inner,
            layout,
            source: None,
        }
    }

    /// The table whose scans a call in cluster mode can send to the cluster.
    pub fn with_source(mut self, source: Option<Arc<crate::source::TableSource>>) -> Self {
        self.source = source;
        self
    }
}

/// Plans the columns of a [`StreamedTable`]'s scan: the backend's columns to read (its own
/// indices: the fields, then the row), per output column what it is and where it comes from,
/// and the fields to read as dictionaries (their text numbered by a summary, or what a share
/// is decided on): each distinct value of a chunk decided once instead of every row.
#[allow(clippy::type_complexity)]
fn columns_of(
    layout: &Layout,
    indices: &[usize],
) -> DfResult<(Vec<usize>, Vec<(Out, usize)>, Vec<usize>)> {
    let fields = layout.targets.len();
    let mut read: Vec<usize> = Vec::new();
    let at = |i: usize, read: &mut Vec<usize>| match read.iter().position(|r| *r == i) {
        Some(p) => p,
        None => {
            read.push(i);
            read.len() - 1
        }
    };
    let mut outs: Vec<(Out, usize)> = Vec::with_capacity(indices.len());
    let mut dictionaries: Vec<usize> = Vec::new();
    for &c in indices {
        let out = layout.out(c).ok_or_else(|| {
            DataFusionError::Internal(format!("no column {c} in the streamed table"))
        })?;
        let from = match out {
            Out::Field(f) => at(f, &mut read),
            Out::Row => at(fields, &mut read),
            Out::Share(s) => {
                let share = &layout.shares[s];
                if share.separator.is_none() {
                    dictionaries.push(share.field.index());
                }
                at(share.field.index(), &mut read)
            }
            Out::Dict(f) => {
                dictionaries.push(f);
                at(f, &mut read)
            }
            Out::Code(_) => {
                return Err(DataFusionError::Internal(
                    "a streamed table has no code columns".into(),
                ));
            }
        };
        outs.push((out, from));
    }
    Ok((read, outs, dictionaries))
}

impl StreamedTable {
    /// The backend table's scan of `read`, with the fields `dictionaries` read as dictionary
    /// arrays where the backend is the Parquet stream (another backend's scan is as it is).
    async fn scan_inner(
        &self,
        state: &dyn Session,
        read: &[usize],
        dictionaries: &[usize],
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let stream = (self.inner.as_ref() as &dyn std::any::Any)
            .downcast_ref::<crate::parquet::stream::StreamTable>();
        match stream {
            Some(table) if !dictionaries.is_empty() => {
                table
                    .scan_with(state, read, dictionaries, filters, limit)
                    .await
            }
            _ => {
                let read = read.to_vec();
                self.inner.scan(state, Some(&read), filters, limit).await
            }
        }
    }
}

#[async_trait]
impl TableProvider for StreamedTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.layout.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<datafusion::logical_expr::TableProviderFilterPushDown>> {
        use datafusion::logical_expr::TableProviderFilterPushDown;
        // The backend's table prunes with conditions on its own columns; shares are ours.
        let inner = self.inner.schema();
        let own: Vec<bool> = filters
            .iter()
            .map(|f| {
                f.column_refs()
                    .iter()
                    .all(|c| inner.index_of(&c.name).is_ok())
            })
            .collect();
        let asked: Vec<&Expr> = filters
            .iter()
            .zip(&own)
            .filter(|(_, o)| **o)
            .map(|(f, _)| *f)
            .collect();
        let mut answers = self.inner.supports_filters_pushdown(&asked)?.into_iter();
        Ok(own
            .iter()
            .map(|o| {
                if *o {
                    answers
                        .next()
                        .unwrap_or(TableProviderFilterPushDown::Unsupported)
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let layout = &self.layout;
        let all: Vec<usize> = (0..layout.schema.fields().len()).collect();
        let indices = projection.unwrap_or(&all);
        let (read, outs, dictionaries) = columns_of(layout, indices)?;
        let inner_schema = self.inner.schema();
        let pushable: Vec<Expr> = filters
            .iter()
            .filter(|f| {
                f.column_refs()
                    .iter()
                    .all(|c| inner_schema.index_of(&c.name).is_ok())
            })
            .cloned()
            .collect();
        // Sent to a cluster, the scan is split by what it reads (`Split`); an executor makes
        // the same split from the number the scan carries.
        let sent = match (&self.source, crate::cluster::of_session(state)) {
            (Some(source), Some(call)) => Some((source, call)),
            _ => None,
        };
        let target = match &sent {
            Some((_, call)) => (self.inner.as_ref() as &dyn std::any::Any)
                .downcast_ref::<crate::parquet::stream::StreamTable>()
                .map(|table| call.split.partitions(table.bytes_read(&read)))
                .unwrap_or_else(|| state.config().target_partitions()),
            None => state.config().target_partitions(),
        };
        let scan = if target == state.config().target_partitions() {
            self.scan_inner(state, &read, &dictionaries, &pushable, limit)
                .await?
        } else {
            let mut split = state
                .as_any()
                .downcast_ref::<datafusion::execution::SessionState>()
                .ok_or_else(|| {
                    DataFusionError::Internal("a call's session is DataFusion's".into())
                })?
                .clone();
            split.config_mut().options_mut().execution.target_partitions = target;
            self.scan_inner(&split, &read, &dictionaries, &pushable, limit)
                .await?
        };
        let schema = Arc::new(
            layout
                .schema
                .project(indices)
                .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))?,
        );
        let out_schema = Arc::clone(&schema);
        let shares = layout.shares.clone();
        let map = move |batch: RecordBatch| -> DfResult<RecordBatch> {
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(outs.len());
            for (k, (out, from)) in outs.iter().enumerate() {
                let read = batch.column(*from);
                columns.push(match out {
                    Out::Share(s) => shares[*s].column(read.as_ref()).map_err(external)?,
                    // A field read in another type than this table's (text read as a
                    // dictionary for another column, a dictionary asked of a field a
                    // condition names, or of a backend without them).
                    _ => {
                        let want = out_schema.field(k).data_type();
                        if read.data_type() == want {
                            Arc::clone(read)
                        } else {
                            datafusion::arrow::compute::cast(read, want)?
                        }
                    }
                });
            }
            RecordBatch::try_new_with_options(
                Arc::clone(&out_schema),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
            )
            .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
        };
        let plan: Arc<dyn ExecutionPlan> = Arc::new(MapExec::new(
            "StreamedTable: share columns",
            scan,
            schema,
            Arc::new(map),
        ));
        // In cluster mode the scan goes as its description: an executor rebuilds this table
        // and makes this same scan.
        match sent {
            Some((source, _)) => Ok(Arc::new(crate::cluster::ScanExec::local(
                Arc::clone(source),
                projection.cloned(),
                filters.to_vec(),
                limit,
                target,
                plan,
            ))),
            None => Ok(plan),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_records_where_its_plans_ran() {
        #[derive(Debug)]
        struct Nowhere;
        impl Cluster for Nowhere {
            fn address(&self) -> &str {
                "df://127.0.0.1:1"
            }
            fn distribute(
                &self,
                _plan: Arc<dyn ExecutionPlan>,
                _call: Arc<ClusterCall>,
            ) -> Result<Arc<dyn ExecutionPlan>, String> {
                Err("nothing".into())
            }
        }
        let call = ClusterCall::new(Arc::new(Nowhere), Split::slots(2));
        call.ran_remotely(Some(4));
        call.ran_here("a reason");
        call.ran_here("a reason");
        call.ran_remotely(Some(3));
        assert_eq!(call.outcome(), (2, vec!["a reason".to_string()]));
        assert_eq!(call.tasks(), Some(7));
        call.ran_remotely(None);
        assert_eq!(call.tasks(), None);
    }

    #[test]
    fn a_scan_is_split_by_what_it_reads_in_whole_waves() {
        let split = Split::slots(2);
        let mib = 1u64 << 20;
        // Little or nothing read: one task per slot.
        assert_eq!(split.partitions(0), 2);
        assert_eq!(split.partitions(2 * mib), 2);
        assert_eq!(split.partitions(32 * mib), 2);
        // Another wave for every 16 MiB a slot would read, whole waves only.
        assert_eq!(split.partitions(32 * mib + 1), 4);
        assert_eq!(split.partitions(63 * mib), 4);
        assert_eq!(split.partitions(65 * mib), 6);
        // At most four waves, however much is read.
        assert_eq!(split.partitions(200 * mib), 8);
        assert_eq!(split.partitions(u64::MAX), 8);
        // No slot is taken as one; a test's small task size splits small files.
        assert_eq!(Split::slots(0).partitions(0), 1);
        let small = Split {
            slots: 3,
            bytes_per_task: 1000,
        };
        assert_eq!(small.partitions(2999), 3);
        assert_eq!(small.partitions(3001), 6);
    }

    /// A part "sent" in the cut tests: run here as the cluster runs it (its partitions one
    /// stream), its plan hidden as `ClusterExec` hides it.
    #[derive(Debug)]
    struct Sent {
        plan: Arc<dyn ExecutionPlan>,
        properties: Arc<PlanProperties>,
    }

    impl DisplayAs for Sent {
        fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "Sent")
        }
    }

    impl ExecutionPlan for Sent {
        fn name(&self) -> &str {
            "Sent"
        }
        fn properties(&self) -> &Arc<PlanProperties> {
            &self.properties
        }
        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            Vec::new()
        }
        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
        ) -> DfResult<TreeNodeRecursion> {
            Ok(TreeNodeRecursion::Continue)
        }
        fn with_new_children(
            self: Arc<Self>,
            _children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> DfResult<Arc<dyn ExecutionPlan>> {
            Ok(self)
        }
        fn execute(
            &self,
            _partition: usize,
            context: Arc<TaskContext>,
        ) -> DfResult<SendableRecordBatchStream> {
            CoalescePartitionsExec::new(Arc::clone(&self.plan)).execute(0, context)
        }
    }

    fn reads_memory(plan: &Arc<dyn ExecutionPlan>) -> bool {
        let mut found = false;
        let _ = plan.apply(|node| {
            found = node.name() == "DataSourceExec";
            Ok(if found {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        });
        found
    }

    /// The plan of `sql` cut at its exchanges (with the parts sent), and its answer beside the
    /// uncut plan's, as text.
    async fn cut_and_run(
        ctx: &datafusion::prelude::SessionContext,
        sql: &str,
    ) -> (
        Option<Arc<dyn ExecutionPlan>>,
        Vec<Arc<dyn ExecutionPlan>>,
        String,
        String,
    ) {
        use datafusion::arrow::util::pretty::pretty_format_batches;
        use datafusion::physical_plan::collect;
        // Two plans of the same call: a plan's state (a top-k's shared filter) is for one run.
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let again = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let mut sent = Vec::new();
        let cut = cut_at_exchanges(&plan, &reads_memory, &mut |part| {
            sent.push(Arc::clone(&part));
            let properties = Arc::new(PlanProperties::new(
                datafusion::physical_expr::EquivalenceProperties::new(part.schema()),
                Partitioning::UnknownPartitioning(1),
                datafusion::physical_plan::execution_plan::EmissionType::Final,
                datafusion::physical_plan::execution_plan::Boundedness::Bounded,
            ));
            Arc::new(Sent {
                plan: part,
                properties,
            })
        })
        .unwrap();
        let whole = collect(again, ctx.task_ctx()).await.unwrap();
        let parted = match &cut {
            Some(cut) => collect(Arc::clone(cut), ctx.task_ctx()).await.unwrap(),
            None => whole.clone(),
        };
        (
            cut,
            sent,
            pretty_format_batches(&whole).unwrap().to_string(),
            pretty_format_batches(&parted).unwrap().to_string(),
        )
    }

    #[tokio::test]
    async fn a_plan_is_cut_at_its_lowest_exchanges_into_one_stage_and_answers_the_same() {
        use datafusion::arrow::array::{Int64Array, StringArray};
        use datafusion::arrow::datatypes::{Field, Schema};
        use datafusion::datasource::MemTable;
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        // Four partitions, each with every key, so each key's groups are merged from all.
        let partitions = (0..4)
            .map(|p| {
                let keys: Vec<String> = (0..40).map(|i| format!("k{}", (i * 7 + p) % 13)).collect();
                let values: Vec<i64> = (0..40).map(|i| i * 10 + p).collect();
                vec![
                    RecordBatch::try_new(
                        Arc::clone(&schema),
                        vec![
                            Arc::new(StringArray::from(keys)),
                            Arc::new(Int64Array::from(values)),
                        ],
                    )
                    .unwrap(),
                ]
            })
            .collect();
        let ctx = datafusion::prelude::SessionContext::new_with_config(
            SessionConfig::new().with_target_partitions(4),
        );
        ctx.register_table(
            "t",
            Arc::new(MemTable::try_new(schema, partitions).unwrap()),
        )
        .unwrap();
        for sql in [
            "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k HAVING count(*) > 10 ORDER BY n DESC, k LIMIT 5",
            "SELECT k, v FROM t WHERE v > 100 ORDER BY v DESC, k LIMIT 7",
            "SELECT count(*) AS n, sum(v) AS s FROM t WHERE v % 3 = 0",
            "SELECT count(DISTINCT k) AS n FROM t",
        ] {
            let (cut, sent, whole, parted) = cut_and_run(&ctx, sql).await;
            let cut = cut.unwrap_or_else(|| panic!("{sql}: not cut"));
            assert_eq!(parted, whole, "{sql}");
            assert!(!sent.is_empty(), "{sql}");
            for part in &sent {
                assert!(!has_exchange(part), "{sql}: a part sent is one stage");
                assert!(reads_memory(part), "{sql}");
            }
            assert!(!reads_memory(&cut), "{sql}: nothing reads here");
        }
        // Every row in order, without a limit: the executors merge it (sent whole).
        let (cut, _, whole, parted) =
            cut_and_run(&ctx, "SELECT k, v FROM t WHERE v > 100 ORDER BY v DESC, k").await;
        assert!(cut.is_none());
        assert_eq!(parted, whole);
        // A join hashes rows, not partial groups: sent whole.
        let (cut, _, whole, parted) = cut_and_run(
            &ctx,
            "SELECT a.k, count(*) AS n FROM t a JOIN t b ON a.v = b.v + 1 GROUP BY a.k ORDER BY a.k",
        )
        .await;
        assert!(cut.is_none());
        assert_eq!(parted, whole);
    }

    #[test]
    fn a_storage_error_crosses_as_text_and_is_read_back() {
        let errors = [
            StorageError::Stale {
                dataset: "調査".into(),
                message: "its data file changed (`a \"b\".parquet`): ]:[".into(),
            },
            StorageError::backend("d", "no credentials\nin this executor's environment"),
            StorageError::Limit {
                message: "m".into(),
                hint: "".into(),
            },
            StorageError::Internal("x".into()),
        ];
        for error in errors {
            let crossed = crossing(DataFusionError::Shared(Arc::new(
                DataFusionError::External(Box::new(error.clone())),
            )));
            // As Ballista sends it: the Debug form of the chain, then quoted once more.
            let text = format!("Task failed: {:?}", format!("{crossed:?}"));
            let back = Crossing::from_message(&text).expect("a tag");
            assert_eq!(back.to_string(), error.to_string());
        }
        assert!(Crossing::from_message("DataFusionError(Execution(\"x\"))").is_none());
    }
}
