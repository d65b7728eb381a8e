//! Which of a scan's partitions each partition of a plan sent to the cluster is (its marker),
//! and partitions that run alone, without taking files from a queue they share.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{ExecutionPlan, PlanProperties};
use datafusion::prelude::SessionConfig;

/// The name of the marker's one column.
const MARKER_COLUMN: &str = "tally_scan_partition";

/// The marker of a scan of `partitions` partitions: partition `i` holds the number `i`.
pub(super) fn marker(partitions: usize) -> Arc<dyn ExecutionPlan> {
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
pub(super) fn scan_partition(marker: &Arc<dyn ExecutionPlan>, local: usize) -> DfResult<usize> {
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
pub(super) fn properties_over(
    schema: SchemaRef,
    marker: &Arc<dyn ExecutionPlan>,
) -> Arc<PlanProperties> {
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
pub(super) fn alone(context: &Arc<TaskContext>) -> Arc<TaskContext> {
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
