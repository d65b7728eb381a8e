//! The scan of data read from its files: the streamed table (the backend's table with the
//! share columns made per batch), and its scan as it goes to the cluster ([`ScanExec`]),
//! which an executor rebuilds from the table's description and makes again.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion::prelude::SessionConfig;

use super::call::of_session;
use super::crossing::crossing;
use super::partitions::{alone, marker, properties_over, scan_partition};
use crate::error::StorageError;
use crate::memory::Budget;
use crate::source::TableSource;
use crate::store::{Layout, MapExec, Out, external};

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
    Ok(Arc::new(StreamedTable::new(inner, layout)))
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
        let sent = match (&self.source, of_session(state)) {
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
            Some((source, _)) => Ok(Arc::new(ScanExec::local(
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
