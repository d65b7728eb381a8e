//! How the server runs one plan on the cluster: it submits the physical plan to the
//! scheduler, follows the job until it ends, and streams the partitions of its answer back from
//! the executors that hold them.
//!
//! Ballista's own client (`execute_physical_plan`) does the same but leaves a job running
//! when its caller stops waiting. A Tally call stops waiting at its deadline, when the client
//! cancels it, or when another part of the call failed; a job left behind would hold the
//! executors for nothing, so here a job whose answer is no longer wanted is cancelled.

use std::sync::Arc;
use std::time::Duration;

use ballista_core::client::BallistaClient;
use ballista_core::serde::protobuf::execute_query_failure_result::Failure;
use ballista_core::serde::protobuf::execute_query_params::Query;
use ballista_core::serde::protobuf::execute_query_result;
use ballista_core::serde::protobuf::get_job_status_result::FlightProxy;
use ballista_core::serde::protobuf::job_status::Status;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::{
    CancelJobParams, ExecuteQueryParams, GetJobStatusParams, KeyValuePair, PartitionLocation,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionConfig;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use futures::{StreamExt, TryStreamExt};
use tonic::transport::Channel;

use crate::{Address, CONNECT_TIMEOUT, TallyCodec};

/// The largest message either side sends (Ballista's default).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// How often the job's status is asked for, at first and at most.
const POLL_FIRST: Duration = Duration::from_millis(5);
const POLL_MOST: Duration = Duration::from_millis(50);
/// Answers without a status after which a job that never had one is taken as lost (about 30 s
/// of polls).
const LOST_AFTER: u32 = 600;
/// How long a cancellation may take before it is given up (it runs after the call ended).
const CANCEL_WITHIN: Duration = Duration::from_secs(3);

/// Runs `plan` on the cluster at `address`, through `scheduler`, and streams its answer (its
/// partitions in order).
pub async fn run(
    address: &Address,
    mut scheduler: SchedulerGrpcClient<Channel>,
    plan: Arc<dyn ExecutionPlan>,
    codec: &TallyCodec,
    session: &str,
    config: &SessionConfig,
) -> DfResult<SendableRecordBatchStream> {
    let schema = plan.schema();
    let encoded = encode(address, plan, codec)?;
    let (job_id, version) = submit(address, &mut scheduler, encoded, session, config).await?;
    // The job runs from here: until its answer is read, dropping this cancels it.
    let mut job = Job {
        scheduler: scheduler.clone(),
        id: Some(job_id.clone()),
    };
    if let Err(why) = ballista_core::version::check_compatibility(
        Some(ballista_core::BALLISTA_VERSION),
        version.as_deref(),
    ) {
        return Err(failed(address, why));
    }
    let (locations, proxy) = follow(address, &mut scheduler, &job_id, &mut job).await?;
    let address = address.clone();
    let partitions = futures::stream::iter(locations)
        .then(move |location| fetch(address.clone(), location, proxy.clone()))
        .try_flatten();
    Ok(Box::pin(RecordBatchStreamAdapter::new(
        SchemaRef::clone(&schema),
        partitions,
    )))
}

/// The physical plan as the scheduler reads it.
fn encode(
    address: &Address,
    plan: Arc<dyn ExecutionPlan>,
    codec: &TallyCodec,
) -> DfResult<Vec<u8>> {
    let mut encoded = Vec::new();
    PhysicalPlanNode::try_from_physical_plan(plan, codec)
        .and_then(|node| {
            node.try_encode(&mut encoded)
                .map_err(|e| DataFusionError::Internal(e.to_string()))
        })
        .map_err(|e| failed(address, format!("the plan could not be encoded: {e}")))?;
    Ok(encoded)
}

/// Submits the `encoded` plan with the session's settings: the id of the job the scheduler
/// took, and the Ballista version it answered with.
async fn submit(
    address: &Address,
    scheduler: &mut SchedulerGrpcClient<Channel>,
    encoded: Vec<u8>,
    session: &str,
    config: &SessionConfig,
) -> DfResult<(String, Option<String>)> {
    let settings = config
        .options()
        .entries()
        .into_iter()
        .map(|entry| KeyValuePair {
            key: entry.key,
            value: entry.value,
        })
        .collect();
    let mut request = tonic::Request::new(ExecuteQueryParams {
        session_id: session.to_string(),
        settings,
        operation_id: uuid::Uuid::new_v4().to_string(),
        query: Some(Query::PhysicalPlan(encoded)),
    });
    ballista_core::version::insert_version_header(request.metadata_mut());
    let response = scheduler
        .execute_query(request)
        .await
        .map_err(|e| failed(address, format!("it did not take the job: {}", e.message())))?;
    let version =
        ballista_core::version::version_from_metadata(response.metadata()).map(str::to_string);
    let accepted = match response.into_inner().result {
        Some(execute_query_result::Result::Success(accepted)) => accepted,
        Some(execute_query_result::Result::Failure(refused)) => {
            let why = match refused.failure {
                Some(Failure::PlanParsingFailure(why)) => format!(
                    "its scheduler could not read the plan (is it tally-scheduler, of the same version as this server?): {why}"
                ),
                Some(Failure::SessionNotFound(why) | Failure::SqlParsingFailure(why)) => why,
                None => "it refused the job without saying why".to_string(),
            };
            return Err(failed(address, why));
        }
        None => return Err(failed(address, "it answered the job with nothing".into())),
    };
    Ok((accepted.job_id, version))
}

/// Follows the job `job_id` until it ends: where the partitions of its answer are, and the
/// proxy to read them through, or why it failed. `job` is marked ended once it has.
async fn follow(
    address: &Address,
    scheduler: &mut SchedulerGrpcClient<Channel>,
    job_id: &str,
    job: &mut Job,
) -> DfResult<(Vec<PartitionLocation>, Option<FlightProxy>)> {
    let mut poll = POLL_FIRST;
    // A job the scheduler does not know (after it restarted, or expired the job) has no
    // status. A new job has none either while it is planned: one that had a status and lost
    // it, or that has none for long, is lost.
    let mut unknown = 0u32;
    let mut started = false;
    loop {
        let status = scheduler
            .get_job_status(GetJobStatusParams {
                job_id: job_id.to_string(),
            })
            .await
            .map_err(|e| {
                failed(
                    address,
                    format!("it stopped answering about job {job_id}: {}", e.message()),
                )
            })?
            .into_inner();
        match status.status.and_then(|s| s.status) {
            None if started || unknown >= LOST_AFTER => {
                return Err(failed(
                    address,
                    format!("its scheduler no longer knows job {job_id} (was it restarted?)"),
                ));
            }
            None => {
                unknown += 1;
                tokio::time::sleep(poll).await;
                poll = (poll * 2).min(POLL_MOST);
            }
            Some(Status::Queued(_)) | Some(Status::Running(_)) => {
                started = true;
                tokio::time::sleep(poll).await;
                poll = (poll * 2).min(POLL_MOST);
            }
            Some(Status::Failed(failure)) => {
                job.ended();
                return Err(job_failed(address, job_id, &failure.error));
            }
            Some(Status::Successful(done)) => {
                job.ended();
                return Ok((done.partition_location, status.flight_proxy));
            }
        }
    }
}

/// A connection to the scheduler, within [`CONNECT_TIMEOUT`], or why there is none.
pub async fn connect(address: &Address) -> Result<SchedulerGrpcClient<Channel>, String> {
    let endpoint = tonic::transport::Endpoint::from_shared(address.url())
        .map_err(|e| format!("`{address}` is not an address a connection can be made to: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    let channel = match tokio::time::timeout(CONNECT_TIMEOUT, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(e)) => {
            let cause =
                std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
            return Err(format!(
                "the Ballista scheduler at {address} cannot be reached ({cause})"
            ));
        }
        Err(_) => {
            return Err(format!(
                "the Ballista scheduler at {address} did not accept a connection within {} s",
                CONNECT_TIMEOUT.as_secs()
            ));
        }
    };
    Ok(SchedulerGrpcClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE))
}

/// One partition of the answer, read from the executor that holds it (or the proxy the
/// scheduler names).
async fn fetch(
    address: Address,
    location: PartitionLocation,
    proxy: Option<FlightProxy>,
) -> DfResult<SendableRecordBatchStream> {
    let layout = location.layout();
    let (Some(executor), Some(partition)) = (location.executor_meta, location.partition_id) else {
        return Err(failed(
            &address,
            "it named a partition of the answer without its executor".into(),
        ));
    };
    let (host, port) = match &proxy {
        Some(FlightProxy::External(at)) => match at.rsplit_once(':') {
            Some((host, port)) => (
                host.to_string(),
                port.parse::<u16>().map_err(|_| {
                    failed(&address, format!("its flight proxy `{at}` has no port"))
                })?,
            ),
            None => {
                return Err(failed(
                    &address,
                    format!("its flight proxy `{at}` has no port"),
                ));
            }
        },
        Some(FlightProxy::Local(true)) => (address.host.clone(), address.port),
        _ => (executor.host.clone(), executor.port as u16),
    };
    let mut client = BallistaClient::try_new(
        &host,
        port,
        MAX_MESSAGE,
        false,
        None,
        3,
        100,
        0,
        0,
    )
    .await
    .map_err(|e| {
        failed(
            &address,
            format!("the executor at {host}:{port} that holds part of the answer cannot be reached ({e})"),
        )
    })?;
    client
        .fetch_partition_proxied(
            &executor.id,
            &partition.into(),
            location.file_id,
            layout,
            &executor.host,
            executor.port as u16,
            true,
        )
        .await
        .map_err(|e| {
            failed(
                &address,
                format!("part of the answer could not be read from {host}:{port} ({e})"),
            )
        })
}

/// A job on the cluster whose answer is still wanted; dropped before [`Job::ended`], it is
/// cancelled.
struct Job {
    scheduler: SchedulerGrpcClient<Channel>,
    id: Option<String>,
}

impl Job {
    fn ended(&mut self) {
        self.id = None;
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let Some(job_id) = self.id.take() else {
            return;
        };
        let mut scheduler = self.scheduler.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let cancelled = tokio::time::timeout(
                    CANCEL_WITHIN,
                    scheduler.cancel_job(CancelJobParams {
                        job_id: job_id.clone(),
                    }),
                )
                .await;
                match cancelled {
                    Ok(Ok(_)) => tracing::info!(job = %job_id, "cluster job cancelled: its answer is no longer wanted"),
                    Ok(Err(e)) => tracing::warn!(job = %job_id, error = %e.message(), "a cluster job could not be cancelled"),
                    Err(_) => tracing::warn!(job = %job_id, "a cluster job's cancellation was not answered in time"),
                }
            });
        }
    }
}

/// An error of the cluster at `address`.
fn failed(address: &Address, why: String) -> DataFusionError {
    DataFusionError::Execution(format!("the cluster at {address}: {why}"))
}

/// A job that failed: a cap the executors stopped at is the caller's limit (said as on one
/// process), anything else the cluster's failure, in the scheduler's words.
fn job_failed(address: &Address, job: &str, error: &str) -> DataFusionError {
    if let Some(stopped) = tally_engine::groups::Stopped::from_message(error) {
        return DataFusionError::External(Box::new(stopped));
    }
    let error = error
        .replace("DataFusion error: ", "")
        .replace("Execution error: ", "")
        .replace("External error: ", "");
    failed(address, format!("job {job} failed: {error}"))
}
