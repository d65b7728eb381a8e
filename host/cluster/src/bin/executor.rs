//! `tally-executor`: Ballista's executor with Tally's codec, so that it can run the scans of
//! files and the functions of the plans a Tally server sends. It takes every option of
//! Ballista's executor (`tally-executor --help`), and `--memory-budget` (bytes the scans it
//! runs may hold at once; `TALLY_EXECUTOR_MEMORY_BUDGET`, default 1 GiB). Tally changes the
//! heartbeat to every 2 s (`--executor-heartbeat-interval-seconds`), so that the scheduler
//! notices within seconds when an executor stops.
//!
//! An executor reads the dataset's files itself: at the same absolute paths as the server
//! (a shared file system), or from object storage with its own `AWS_*` credentials.

use std::sync::Arc;

use ballista_core::extension::SessionConfigExt;
use ballista_executor::config::Config;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use clap::Parser;
use tally_cluster::TallyCodec;

const DEFAULTS: [&str; 3] = [
    "--executor-heartbeat-interval-seconds=2",
    "--bind-host=127.0.0.1",
    "--scheduler-host=127.0.0.1",
];

/// Ballista's executor options, and Tally's.
#[derive(Parser, Debug)]
#[command(version, about = "A Ballista executor that runs Tally's plans")]
struct Options {
    /// Bytes the scans this executor runs may hold at once.
    #[arg(long, env = "TALLY_EXECUTOR_MEMORY_BUDGET", default_value_t = 1 << 30)]
    memory_budget: usize,
    #[command(flatten)]
    ballista: Config,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args: Vec<String> = std::env::args().collect();
    let rest = args.split_off(1);
    args.extend(DEFAULTS.iter().map(|s| s.to_string()));
    args.extend(rest);
    let opt = Options::parse_from(args);
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,ballista=info")),
        )
        .init();
    let budget = tally_storage::memory::Budget::new(opt.memory_budget);
    let mut config: ExecutorProcessConfig = match opt.ballista.try_into() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tally-executor: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    config.override_physical_codec = Some(Arc::new(TallyCodec::new(budget)));
    // Its reports to the scheduler and its reads of other executors' shuffles without the
    // Nagle delay (`tally_cluster::without_delay`).
    config.override_create_grpc_client_endpoint = Some(tally_cluster::without_delay());
    config.override_config_producer = Some(Arc::new(|| {
        ballista_core::utils::default_config_producer()
            .with_ballista_override_create_grpc_client_endpoint(tally_cluster::without_delay())
    }));
    match start_executor_process(Arc::new(config)).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tally-executor: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
