//! Two plans that readers of data build on: a leaf whose batches come from a stream made when
//! it runs, and a plan that turns each batch of its input into another.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

/// A leaf plan whose batches come from a stream made when it is executed (one partition).
pub struct StreamPlan {
    label: String,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    make: Box<dyn Fn() -> SendableRecordBatchStream + Send + Sync>,
}

impl fmt::Debug for StreamPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPlan")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl StreamPlan {
    pub fn new(
        label: impl Into<String>,
        schema: SchemaRef,
        make: impl Fn() -> SendableRecordBatchStream + Send + Sync + 'static,
    ) -> StreamPlan {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        StreamPlan {
            label: label.into(),
            schema,
            properties,
            make: Box::new(make),
        }
    }
}

impl DisplayAs for StreamPlan {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.label)
    }
}

#[allow(deprecated)]
impl ExecutionPlan for StreamPlan {
    fn name(&self) -> &str {
        &self.label
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
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "{} has one partition, not {partition}",
                self.label
            )));
        }
        let _ = &self.schema;
        Ok((self.make)())
    }
}

/// What a [`MapExec`] does to each batch.
pub type BatchMap = dyn Fn(RecordBatch) -> DfResult<RecordBatch> + Send + Sync;

/// A plan that turns each batch of its input into another of `schema` (columns derived,
/// reordered or left out), partition by partition.
pub struct MapExec {
    label: String,
    input: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    map: Arc<BatchMap>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for MapExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapExec")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl MapExec {
    pub fn new(
        label: impl Into<String>,
        input: Arc<dyn ExecutionPlan>,
        schema: SchemaRef,
        map: Arc<BatchMap>,
    ) -> MapExec {
        let partitions = input.properties().partitioning.partition_count();
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        MapExec {
            label: label.into(),
            input,
            schema,
            map,
            properties,
        }
    }
}

impl DisplayAs for MapExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.label)
    }
}

#[allow(deprecated)]
impl ExecutionPlan for MapExec {
    fn name(&self) -> &str {
        &self.label
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
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
        let input = children
            .into_iter()
            .next()
            .ok_or_else(|| DataFusionError::Internal(format!("{} takes one input", self.label)))?;
        Ok(Arc::new(MapExec::new(
            self.label.clone(),
            input,
            Arc::clone(&self.schema),
            Arc::clone(&self.map),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let map = Arc::clone(&self.map);
        let stream = futures::StreamExt::map(input, move |batch| batch.and_then(|b| map(b)));
        Ok(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                stream,
            ),
        ))
    }
}
