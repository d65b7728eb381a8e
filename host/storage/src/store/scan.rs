//! The table provider over a prepared table and its scan: a batch per chunk, the hidden
//! columns (row numbers, codes, shares) made batch by batch.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::{SchemaRef, UInt32Type};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use tally_semantic::definition::FieldId;

use super::layout::Out;
use super::share::share_of_codes;
use super::table::Store;
use crate::error::StorageError;

/// The table provider over a [`Store`]: the layout's columns, hidden ones derived on scan.
#[derive(Debug)]
pub struct PreparedTable {
    store: Arc<Store>,
}

impl PreparedTable {
    pub fn new(store: Arc<Store>) -> PreparedTable {
        PreparedTable { store }
    }
}

#[async_trait]
impl TableProvider for PreparedTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.store.layout().schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let layout = self.store.layout();
        let all: Vec<usize> = (0..layout.schema.fields().len()).collect();
        let indices = projection.unwrap_or(&all);
        let schema = Arc::new(
            layout
                .schema
                .project(indices)
                .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))?,
        );
        let mut outs = Vec::with_capacity(indices.len());
        for &c in indices {
            let out = layout.out(c).ok_or_else(|| {
                DataFusionError::Internal(format!("no column {c} in the prepared table"))
            })?;
            let loaded = match out {
                Out::Field(f) | Out::Code(f) => Loaded::Arrays(self.column(f)?),
                Out::Dict(_) => {
                    return Err(DataFusionError::Internal(
                        "a prepared table has code columns, not dictionary columns".into(),
                    ));
                }
                Out::Share(s) => Loaded::Share(
                    self.column(layout.shares[s].field.index())?,
                    self.store.mask(s).map_err(external)?,
                ),
                Out::Row => Loaded::Row,
            };
            outs.push((out, loaded));
        }
        // The chunks split between the call's partitions (one unless the table is large).
        let partitions = state.config().target_partitions().max(1);
        Ok(Arc::new(PreparedExec::new(
            Arc::clone(&self.store),
            schema,
            Arc::new(outs),
            limit,
            partitions,
        )))
    }
}

impl PreparedTable {
    fn column(&self, f: usize) -> DfResult<Arc<Vec<ArrayRef>>> {
        self.store.column(FieldId::at(f)).map_err(external)
    }
}

pub(crate) fn external(e: StorageError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// What a scan reads for one output column.
#[derive(Debug)]
enum Loaded {
    Arrays(Arc<Vec<ArrayRef>>),
    Share(Arc<Vec<ArrayRef>>, Arc<Vec<bool>>),
    Row,
}

/// A scan of a [`Store`]: a batch per chunk, hidden columns made per batch; the chunks split
/// into contiguous runs, one a partition.
struct PreparedExec {
    store: Arc<Store>,
    schema: SchemaRef,
    outs: Arc<Vec<(Out, Loaded)>>,
    limit: Option<usize>,
    partitions: usize,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for PreparedExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedExec")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl PreparedExec {
    fn new(
        store: Arc<Store>,
        schema: SchemaRef,
        outs: Arc<Vec<(Out, Loaded)>>,
        limit: Option<usize>,
        partitions: usize,
    ) -> PreparedExec {
        let partitions = partitions.clamp(1, store.chunks().len().max(1));
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        PreparedExec {
            store,
            schema,
            outs,
            limit,
            partitions,
            properties,
        }
    }

    /// The chunks of a partition.
    fn chunks_of(&self, partition: usize) -> std::ops::Range<usize> {
        let n = self.store.chunks().len();
        let each = n.div_ceil(self.partitions);
        (partition * each).min(n)..((partition + 1) * each).min(n)
    }
}

impl DisplayAs for PreparedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PreparedExec: {} rows in {} chunks",
            self.store.rows(),
            self.store.chunks().len()
        )
    }
}

/// The batch of chunk `c` with the columns `outs` asks for.
fn chunk_batch(
    store: &Store,
    schema: &SchemaRef,
    outs: &[(Out, Loaded)],
    c: usize,
) -> DfResult<RecordBatch> {
    let (first, n) = store.chunks()[c];
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(outs.len());
    for (out, loaded) in outs {
        columns.push(match (out, loaded) {
            (Out::Field(_), Loaded::Arrays(a)) => Arc::clone(&a[c]),
            (Out::Code(_), Loaded::Arrays(a)) => {
                let dict = a[c].as_dictionary_opt::<UInt32Type>().ok_or_else(|| {
                    DataFusionError::Internal("a code column of a field without codes".into())
                })?;
                // The codes as they are: a null has code 0, which is also "".
                Arc::new(UInt32Array::new(dict.keys().values().clone(), None))
            }
            (Out::Share(_), Loaded::Share(a, mask)) => {
                let dict = a[c].as_dictionary_opt::<UInt32Type>().ok_or_else(|| {
                    DataFusionError::Internal("a share of a field without codes".into())
                })?;
                Arc::new(share_of_codes(dict, mask))
            }
            (Out::Row, _) => Arc::new(UInt64Array::from_iter_values(first..first + n as u64)),
            _ => {
                return Err(DataFusionError::Internal(
                    "a scan column read the wrong way".into(),
                ));
            }
        });
    }
    RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(n)),
    )
    .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
}

#[allow(deprecated)]
impl ExecutionPlan for PreparedExec {
    fn name(&self) -> &str {
        "PreparedExec"
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
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition >= self.partitions {
            return Err(DataFusionError::Internal(format!(
                "PreparedExec has {} partitions, not {partition}",
                self.partitions
            )));
        }
        let store = Arc::clone(&self.store);
        let schema = Arc::clone(&self.schema);
        let outs = Arc::clone(&self.outs);
        let mut left = self.limit.unwrap_or(usize::MAX);
        let range = self.chunks_of(partition);
        let chunks = range.end;
        let stream_schema = Arc::clone(&schema);
        let mut c = range.start;
        // The batches are at hand and never awaited, so an abort of the call's task would not
        // reach a plan draining them: the call's stop is looked at before each one.
        let stop = crate::stop::Stop::of_task(&context);
        let batches = std::iter::from_fn(move || {
            if left == 0 || c >= chunks {
                return None;
            }
            if stop.is_set() {
                c = chunks;
                return Some(Err(DataFusionError::External(Box::new(
                    crate::stop::stopped_error(),
                ))));
            }
            let batch = chunk_batch(&store, &schema, &outs, c).map(|b| {
                if b.num_rows() > left {
                    let cut = b.slice(0, left);
                    left = 0;
                    cut
                } else {
                    left -= b.num_rows();
                    b
                }
            });
            c += 1;
            Some(batch)
        });
        let stream = futures::stream::iter(batches);
        Ok(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                stream_schema,
                futures::StreamExt::boxed(stream),
            ),
        ))
    }
}
