//! `tally-scheduler`: Ballista's scheduler with Tally's codec, so that it can read the plans
//! a Tally server sends (its scans of files and its functions). It takes every option of
//! Ballista's scheduler (`tally-scheduler --help`); Tally changes two defaults so that an
//! executor that stops is noticed within seconds, not minutes: `--executor-timeout-seconds
//! 6` and `--expire-dead-executor-interval-seconds 1` (give your own to change them).

use std::sync::Arc;

use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::{Config, SchedulerConfig};
use ballista_scheduler::scheduler_process::{create_scheduler, start_grpc_service_with_listener};
use clap::Parser;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use tally_cluster::TallyCodec;

/// Tally's defaults, given before the arguments so that any given overrides them.
const DEFAULTS: [&str; 4] = [
    "--executor-timeout-seconds=6",
    "--expire-dead-executor-interval-seconds=1",
    "--bind-host=127.0.0.1",
    "--external-host=127.0.0.1",
];

fn main() -> std::process::ExitCode {
    let mut args: Vec<String> = std::env::args().collect();
    let rest = args.split_off(1);
    args.extend(DEFAULTS.iter().map(|s| s.to_string()));
    args.extend(rest);
    let opt = Config::parse_from(args);
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,ballista=info")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(32 * 1024 * 1024)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tally-scheduler: cannot start its runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(opt)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tally-scheduler: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(opt: Config) -> Result<(), String> {
    let address = format!("{}:{}", opt.bind_host, opt.bind_port);
    let address: std::net::SocketAddr = address
        .parse()
        .map_err(|e| format!("--bind-host/--bind-port `{address}`: {e}"))?;
    let mut config: SchedulerConfig = opt.try_into().map_err(|e| format!("{e}"))?;
    // The scheduler decodes plans to split them into stages; it never runs a scan.
    config.override_physical_codec = Some(Arc::new(TallyCodec::new(
        tally_storage::memory::Budget::new(0),
    )));
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| format!("{e}"))?;
    let config = Arc::new(config);
    config.validate().map_err(|e| format!("{e}"))?;
    let listener = listen(address)?;
    // The line Ballista's own `start_server` writes, under its target, so that a filter such
    // as `ballista=info` (the one docs/cluster.md and the tests use) still shows it.
    tracing::info!(
        target: "ballista_scheduler::scheduler_process",
        "Ballista Scheduler v{} (tally-scheduler) listening on {address:?}",
        ballista_core::BALLISTA_VERSION
    );
    let scheduler = create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, config)
        .await
        .map_err(|e| format!("{e}"))?;
    start_grpc_service_with_listener(listener, scheduler)
        .await
        .map_err(|e| format!("{e}"))
}

/// The scheduler's listening socket, its connections without the Nagle delay (Linux gives
/// an accepted connection its listener's setting; Ballista's own `start_server` leaves it
/// on, so each answer to a server or an executor waited for a delayed acknowledgement).
fn listen(address: std::net::SocketAddr) -> Result<tokio::net::TcpListener, String> {
    let bind = |e: std::io::Error| format!("cannot listen on {address}: {e}");
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(bind)?;
    socket.set_reuseaddr(true).map_err(bind)?;
    socket.set_nodelay(true).map_err(bind)?;
    socket.bind(address).map_err(bind)?;
    socket.listen(1024).map_err(bind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the scheduler answers on goes out at once: an accepted connection has no Nagle
    /// delay (set on the listener, which the connection inherits).
    #[tokio::test]
    async fn connections_to_the_scheduler_have_no_nagle_delay() {
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let at = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(at);
        let (accepted, client) = tokio::join!(listener.accept(), client);
        let (accepted, _) = accepted.unwrap();
        assert!(accepted.nodelay().unwrap());
        assert!(
            !client.unwrap().nodelay().unwrap(),
            "a plain connection has it on"
        );
    }
}
