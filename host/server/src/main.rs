//! The `tally` binary: the command line and (with the MCP issue) the MCP server.
//!
//! Architecture invariant: this is the only crate that knows MCP; it holds no query logic. The
//! CLI turns flags into the same JSON arguments an MCP client sends and prints the same
//! envelope, through the one entry point `Engine::call`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod check;
mod cli;

#[derive(Debug, Parser)]
#[command(
    name = "tally",
    version,
    about = "Answers questions over datasets; every number computed by the server, with its meaning and provenance.",
    after_help = "Examples:\n  tally list\n  tally inspect procedures\n  tally summarize procedures --group-by 所管府省庁 --metrics count --metrics avg:オンライン率\n  tally query procedures --where '{\"所管府省庁\": [\"デジタル庁\"]}' --select 手続名 --limit 5"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every data command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// The datasets directory.
    #[arg(long, global = true, default_value = "datasets")]
    datasets: PathBuf,
    /// Print the envelope on one line instead of indented.
    #[arg(long, global = true)]
    compact: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the datasets served (and those that cannot be served, with the reason).
    List {
        /// Case-insensitive substring of the dataset id or title.
        #[arg(long)]
        q: Option<String>,
        /// Case-insensitive substring of the publisher.
        #[arg(long)]
        publisher: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Describe a dataset: fields, meanings, codelists, fill rates, statistics.
    Inspect {
        dataset_id: String,
        #[command(flatten)]
        common: Common,
    },
    /// Records matching conditions, a page at a time.
    Query(cli::QueryFlags),
    /// Counts, sums, averages and computed measures, per group.
    Summarize(cli::SummarizeFlags),
    /// Validate every dataset definition in a directory; prints each problem with file, line,
    /// key and fix, and exits non-zero when any dataset cannot be served.
    Check {
        /// The datasets directory.
        #[arg(default_value = "datasets")]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TALLY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Check { dir } => check::run(&dir),
        Command::List {
            q,
            publisher,
            common,
        } => cli::list(q, publisher, &common),
        Command::Inspect { dataset_id, common } => cli::inspect(dataset_id, &common),
        Command::Query(flags) => cli::query(flags),
        Command::Summarize(flags) => cli::summarize(flags),
    }
}
