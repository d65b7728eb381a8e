//! Tally on an Apache Arrow Ballista cluster.
//!
//! The server plans each call as it does alone; the part of a plan that scans files
//! (`tally_storage::cluster::ScanExec`), below its lowest exchanges
//! (`tally_storage::cluster::ClusterPlanner`), is sent as a physical plan to the Ballista
//! scheduler, which hands its tasks to the executors. Its answer streams back to the server,
//! which merges it (the exchanges and what is above them) and shapes it into the envelope as
//! for any call.
//!
//! - [`codec`]: how Tally's scans and functions travel (the scheduler and every executor
//!   must use it: `tally-scheduler` and `tally-executor` are Ballista's with it).
//! - [`BallistaCluster`]: what `tally serve --cluster df://HOST:PORT` sends plans to.

mod client;
pub mod codec;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

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

pub use codec::TallyCodec;

/// How long the scheduler has to accept a connection.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// What every gRPC connection a Tally process opens to the cluster sets: no Nagle delay.
///
/// Ballista's clients to executors (the answer's partitions, an executor's reports to the
/// scheduler, one executor reading another's shuffle) and its scheduler's listener leave
/// Nagle's algorithm on. A request or an answer written in two parts (its headers, then its
/// message) then waits for the peer's delayed acknowledgement of the first part: 40 ms on
/// Linux, at each of a call's exchanges (measured: a count of 7.5M records through two
/// executors took 120 ms, of which the job was 25 ms).
pub fn without_delay() -> ballista_core::extension::EndpointOverrideFn {
    Arc::new(|endpoint: tonic::transport::Endpoint| Ok(endpoint.tcp_nodelay(true)))
}

/// A scheduler's address: `df://host:port` (the form Ballista's clients take).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub host: String,
    pub port: u16,
}

impl Address {
    /// Reads `df://host:port`, saying what would work when it is not that.
    pub fn parse(text: &str) -> Result<Address, String> {
        let example = "write it as df://HOST:PORT, for example df://127.0.0.1:50050";
        let rest = text
            .trim()
            .strip_prefix("df://")
            .ok_or_else(|| format!("`{text}` is not a cluster address: {example}"))?;
        let rest = rest.trim_end_matches('/');
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("`{text}` names no port: {example}"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("`{text}` has no port number after `:`: {example}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.contains(['/', '@', '?', '#']) {
            return Err(format!("`{text}` names no host: {example}"));
        }
        Ok(Address {
            host: host.to_string(),
            port,
        })
    }

    pub(crate) fn url(&self) -> String {
        if self.host.contains(':') {
            format!("http://[{}]:{}", self.host, self.port)
        } else {
            format!("http://{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "df://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "df://{}:{}", self.host, self.port)
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_and_bad_ones_refused_with_an_example() {
        assert_eq!(
            Address::parse("df://127.0.0.1:50050"),
            Ok(Address {
                host: "127.0.0.1".into(),
                port: 50050
            })
        );
        assert_eq!(
            Address::parse("df://[::1]:7/").map(|a| a.to_string()),
            Ok("df://[::1]:7".to_string())
        );
        for bad in [
            "127.0.0.1:50050",
            "df://host",
            "df://:50050",
            "df://h:port",
            "http://h:1",
        ] {
            let e = Address::parse(bad).expect_err(bad);
            assert!(e.contains("df://127.0.0.1:50050"), "{bad}: {e}");
        }
    }
}
