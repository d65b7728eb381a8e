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
use ballista_core::extension::BallistaConfigGrpcEndpoint;
use ballista_core::serde::protobuf::execute_query_failure_result::Failure;
use ballista_core::serde::protobuf::execute_query_params::Query;
use ballista_core::serde::protobuf::execute_query_result;
use ballista_core::serde::protobuf::get_job_status_result::FlightProxy;
use ballista_core::serde::protobuf::job_status::Status;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::{
    CancelJobParams, ExecuteQueryParams, GetJobMetricsParams, GetJobStatusParams, KeyValuePair,
    PartitionLocation,
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

use crate::address::{Address, CONNECT_TIMEOUT, without_delay};
use crate::codec::TallyCodec;

/// The largest message either side sends (Ballista's default).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// How often the job's status is asked for, at first and at most.
const POLL_FIRST: Duration = Duration::from_millis(2);
const POLL_MOST: Duration = Duration::from_millis(10);
/// Answers without a status after which a job that never had one is taken as lost (about 30 s
/// of polls).
const LOST_AFTER: u32 = 3000;
/// How long the scheduler has to say how many tasks a job ran.
const TASKS_WITHIN: Duration = Duration::from_secs(1);
/// How long a cancellation may take before it is given up (it runs after the call ended).
const CANCEL_WITHIN: Duration = Duration::from_secs(3);
/// The partitions of an answer asked for at once (each a connection whose buffers fill
/// before it is read).
const FETCH_AHEAD: usize = 4;

/// Runs `plan` on the cluster at `address`, through `scheduler`, and streams its answer (its
/// partitions in order), with the tasks the scheduler split it into (when it says).
pub async fn run(
    address: &Address,
    mut scheduler: SchedulerGrpcClient<Channel>,
    plan: Arc<dyn ExecutionPlan>,
    codec: &TallyCodec,
    session: &str,
    config: &SessionConfig,
) -> DfResult<(SendableRecordBatchStream, Option<usize>)> {
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
    let (mut locations, proxy) = follow(address, &mut scheduler, &job_id, &mut job).await?;
    let tasks = tasks(&mut scheduler, &job_id).await;
    // The scheduler lists the partitions as their tasks ended; they are read in the plan's
    // order (a merge on the server keeps the first of equal rows as one server would), a few
    // asked for ahead of the one read, each from the executor holding it.
    locations.sort_by_key(|l| l.partition_id.as_ref().map(|p| p.partition_id));
    let address = address.clone();
    let partitions = futures::stream::iter(locations)
        .map(move |location| fetch(address.clone(), location, proxy.clone()))
        .buffered(FETCH_AHEAD)
        .try_flatten();
    Ok((
        Box::pin(RecordBatchStreamAdapter::new(
            SchemaRef::clone(&schema),
            partitions,
        )),
        tasks,
    ))
}

/// The tasks of the ended job `job_id` (each stage's partitions, one task each), as its
/// scheduler's metrics say; `None` when it does not answer at once (the envelope then counts
/// plans only).
async fn tasks(scheduler: &mut SchedulerGrpcClient<Channel>, job_id: &str) -> Option<usize> {
    let asked = scheduler.get_job_metrics(GetJobMetricsParams {
        job_id: job_id.to_string(),
    });
    let metrics = tokio::time::timeout(TASKS_WITHIN, asked)
        .await
        .ok()?
        .ok()?
        .into_inner();
    let tasks: usize = metrics.stages.iter().map(|s| s.partitions as usize).sum();
    (tasks > 0).then_some(tasks)
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
        Some(Arc::new(BallistaConfigGrpcEndpoint::new(without_delay()))),
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

/// A job that failed, decoded back into Tally's own errors: a cap the executors stopped at is
/// the caller's limit and a storage error (a file replaced, a backend that failed, missing
/// credentials) the same error as on one process, said with the cluster that met it;
/// anything else the cluster's failure, in readable words (never the `Debug` dump of an error
/// chain the scheduler reports).
fn job_failed(address: &Address, job: &str, error: &str) -> DataFusionError {
    if let Some(stopped) = tally_engine::groups::Stopped::from_message(error) {
        return DataFusionError::External(Box::new(stopped));
    }
    if let Some(storage) = tally_storage::cluster::Crossing::from_message(error) {
        use tally_storage::StorageError;
        let on = format!("; met by an executor of the cluster at {address}");
        let storage = match storage {
            StorageError::Backend { dataset, message } => StorageError::Backend {
                dataset,
                message: message + &on,
            },
            StorageError::Stale { dataset, message } => StorageError::Stale {
                dataset,
                message: message + &on,
            },
            other => other,
        };
        return DataFusionError::External(Box::new(storage));
    }
    // An executor's memory refused to an operator above the scan (an aggregate's state): the
    // call's budget, as on one server (a scan's own refusal crosses as a storage error).
    if error.contains("ResourcesExhausted") {
        return DataFusionError::ResourcesExhausted(format!(
            "{} (job {job} on the cluster at {address})",
            readable(error)
        ));
    }
    failed(address, format!("job {job} failed: {}", readable(error)))
}

/// What the scheduler says of a failed job, in words: its own prefixes dropped, and an error
/// chain in Rust's `Debug` form (`DataFusionError(Execution("…"))`, how Ballista sends a
/// task's error) read as the messages it holds.
fn readable(error: &str) -> String {
    let mut messages: Vec<String> = Vec::new();
    for line in error.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut line = line;
        for prefix in [
            "Job failed due to stage ",
            "Task failed due to runtime execution error: ",
            "Task failed due to IO error: ",
        ] {
            if let Some(rest) = line.strip_prefix(prefix) {
                // "Job failed due to stage 2 failed: …"
                line = rest.split_once("failed: ").map_or(rest, |(_, r)| r);
            }
        }
        if let Some(rest) = line.strip_prefix("Task failed due to runtime execution error: ") {
            line = rest;
        }
        let quoted = debug_strings(line);
        let said = if quoted.is_empty() {
            unwrapped(line)
        } else {
            quoted.join(": ")
        };
        let said = said
            .replace("DataFusion error: ", "")
            .replace("Execution error: ", "")
            .replace("External error: ", "");
        if !messages.contains(&said) {
            messages.push(said);
        }
    }
    messages.join("; ")
}

/// The string literals of a `Debug` dump, unescaped, in order (none when `text` holds none).
fn debug_strings(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut literal = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => literal.push('\n'),
                    Some('t') => literal.push('\t'),
                    Some('r') => literal.push('\r'),
                    Some('0') => literal.push('\0'),
                    Some('u') => {
                        let code: String = chars
                            .by_ref()
                            .skip_while(|c| *c == '{')
                            .take_while(|c| *c != '}')
                            .collect();
                        if let Some(c) =
                            u32::from_str_radix(&code, 16).ok().and_then(char::from_u32)
                        {
                            literal.push(c);
                        }
                    }
                    Some(other) => literal.push(other),
                    None => break,
                },
                other => literal.push(other),
            }
        }
        let literal = literal.trim().to_string();
        if !literal.is_empty() && !out.contains(&literal) {
            out.push(literal);
        }
    }
    out
}

/// `text` without the `Name(` … `)` wrappers of a `Debug` dump that holds no string.
fn unwrapped(text: &str) -> String {
    let mut text = text.trim();
    while let Some(open) = text.find('(') {
        let name = &text[..open];
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || !text.ends_with(')')
        {
            break;
        }
        text = text[open + 1..text.len() - 1].trim();
    }
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Debug` dump of an error chain (`Name(`, `Name {`) left in a message.
    fn dumped(text: &str) -> bool {
        text.contains("Error(")
            || text.contains("External(")
            || text.contains("Shared(")
            || text.contains("Execution(")
            || text.contains(" { ")
            || text.contains("\\\"")
    }

    fn address() -> Address {
        Address::parse("df://127.0.0.1:50050").expect("an address")
    }

    #[test]
    fn a_failed_job_is_said_in_words_never_as_a_debug_dump() {
        let cases = [
            (
                "Job failed due to stage 2 failed: Task failed due to runtime execution error: DataFusionError(Execution(\"dataset `d`: this executor planned the scan in 3 partitions\"))\n",
                "dataset `d`: this executor planned the scan in 3 partitions",
            ),
            (
                "Job failed due to stage 1 failed: Task failed due to runtime execution error: DataFusionError(Shared(ArrowError(ExternalError(Execution(\"a \\\"quoted\\\" name\")), None)))",
                "a \"quoted\" name",
            ),
            (
                "Job failed due to stage 1 failed: Task failed due to runtime execution error: Internal(\"\\\"boom\\\"\")",
                "\"boom\"",
            ),
            (
                "Job failed due to stage 3 failed: Task failed due to runtime execution error: DataFusionError(ResourcesExhausted)",
                "ResourcesExhausted",
            ),
        ];
        for (sent, said) in cases {
            let failed = job_failed(&address(), "j1", sent);
            let e = failed.to_string();
            assert!(e.contains(said), "{sent}\n→ {e}");
            // A memory refusal is the call's budget, as on one server.
            assert_eq!(
                tally_storage::error::memory_limit(&failed).is_some(),
                said == "ResourcesExhausted",
                "{e}"
            );
            assert!(!dumped(&e), "{sent}\n→ {e}");
            assert!(e.contains("df://127.0.0.1:50050"), "{e}");
        }
    }

    #[test]
    fn a_storage_error_of_an_executor_is_the_servers_own_again() {
        use tally_storage::StorageError;
        use tally_storage::cluster::Crossing;
        let stale = StorageError::Stale {
            dataset: "survey".into(),
            message: "its data file changed (`data.parquet`)".into(),
        };
        let chain = DataFusionError::Shared(std::sync::Arc::new(DataFusionError::External(
            Box::new(Crossing(stale)),
        )));
        let sent = format!(
            "Job failed due to stage 1 failed: Task failed due to runtime execution error: DataFusionError({chain:?})\n"
        );
        let e = job_failed(&address(), "j1", &sent);
        let back = tally_storage::error::carried(&e).expect("a storage error");
        match &back {
            StorageError::Stale { dataset, message } => {
                assert_eq!(dataset, "survey");
                assert!(
                    message.contains("`data.parquet`") && message.contains("df://127.0.0.1:50050"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(!dumped(&back.to_string()), "{back}");
    }
}
