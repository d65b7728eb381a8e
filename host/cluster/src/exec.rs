//! The cluster as the server sends plans to it: [`BallistaCluster`] and the plan node that
//! runs a scan's part on the executors.

use std::fmt;
use std::sync::Arc;

use ballista_core::extension::SessionConfigExt;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::prelude::SessionConfig;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use tally_storage::cluster::{Cluster, ClusterCall};
use tally_storage::memory::Budget;

use crate::address::Address;
use crate::client;
use crate::codec::TallyCodec;

/// Whether the scheduler at `address` answers (within 3 s), or why not.
pub async fn reachable(address: &Address) -> Result<(), String> {
    client::connect(address).await.map(|_| ())
}

/// A Ballista cluster, as the server sends plans to it.
#[derive(Debug)]
pub struct BallistaCluster {
    address: Address,
    shown: String,
    codec: Arc<TallyCodec>,
    /// Compute a call here when the scheduler cannot be reached (else the call fails).
    fallback: bool,
    /// One Ballista session for the server's calls.
    session: String,
}

impl BallistaCluster {
    pub fn new(address: Address, fallback: bool) -> BallistaCluster {
        BallistaCluster {
            shown: address.to_string(),
            address,
            // The server never runs a scan it decoded: it encodes only.
            codec: Arc::new(TallyCodec::new(Budget::new(0))),
            fallback,
            session: uuid::Uuid::new_v4().to_string(),
        }
    }
}

impl Cluster for BallistaCluster {
    fn address(&self) -> &str {
        &self.shown
    }

    fn distribute(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        call: Arc<ClusterCall>,
    ) -> Result<Arc<dyn ExecutionPlan>, String> {
        // What cannot be encoded cannot be sent: said, and computed here.
        PhysicalPlanNode::try_from_physical_plan(Arc::clone(&plan), self.codec.as_ref())
            .map_err(|e| format!("the plan cannot be sent to the cluster: {}", short(&e)))?;
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(plan.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Ok(Arc::new(ClusterExec {
            plan,
            address: self.address.clone(),
            codec: Arc::clone(&self.codec),
            fallback: self.fallback,
            session: self.session.clone(),
            call,
            properties,
        }))
    }
}

/// A DataFusion error's message, without the layers of context it gathered on its way.
fn short(e: &DataFusionError) -> String {
    e.to_string()
        .replace("Internal error: ", "")
        .replace(
            ".\nThis issue was likely caused by a bug in DataFusion's code. Please help us to resolve this by filing a bug report in our issue tracker: https://github.com/apache/datafusion/issues",
            "",
        )
}

/// A plan run on the cluster: its one partition streams the answer of the whole plan.
struct ClusterExec {
    plan: Arc<dyn ExecutionPlan>,
    address: Address,
    codec: Arc<TallyCodec>,
    fallback: bool,
    session: String,
    call: Arc<ClusterCall>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for ClusterExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterExec")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl DisplayAs for ClusterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "BallistaCluster: {}", self.address)
    }
}

impl ExecutionPlan for ClusterExec {
    fn name(&self) -> &str {
        "BallistaCluster"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        // The plan runs elsewhere: nothing here optimizes or executes it as a child.
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
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "BallistaCluster has no inputs".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "BallistaCluster has one partition, not {partition}"
            )));
        }
        let plan = Arc::clone(&self.plan);
        let address = self.address.clone();
        let codec = Arc::clone(&self.codec);
        let fallback = self.fallback;
        let session = self.session.clone();
        let call = Arc::clone(&self.call);
        let partitions = context.session_config().target_partitions();
        let schema = plan.schema();
        let stream = futures::stream::once(async move {
            let scheduler = match client::connect(&address).await {
                Ok(scheduler) => scheduler,
                Err(why) if fallback => {
                    call.ran_here(format!("{why} (--cluster-fallback local)"));
                    return CoalescePartitionsExec::new(plan).execute(0, context);
                }
                Err(why) => {
                    return Err(DataFusionError::Execution(format!(
                        "{why}; start it (docs/cluster.md), or serve with --cluster-fallback local to compute on this server while it is down"
                    )));
                }
            };
            // Each task of a scan runs on its own copy of the plan (ScanExec's marker says
            // which partitions): nothing is shared between the partitions of one task.
            let config = tally_storage::cluster::partitions_alone(
                SessionConfig::new_with_ballista().with_target_partitions(partitions),
            );
            let (stream, tasks) =
                client::run(&address, scheduler, plan, codec.as_ref(), &session, &config).await?;
            call.ran_remotely(tasks);
            Ok(stream)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::TryStreamExt::try_flatten(stream),
        )))
    }
}
