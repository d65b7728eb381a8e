//! The `tally` binary: command-line interface and (with the MCP issue) the MCP server.
//!
//! Architecture invariant: this is the only crate that knows MCP; it holds no query logic.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;

#[derive(Debug, Parser)]
#[command(
    name = "tally",
    version,
    about = "Answers questions over datasets; every number computed by the server, with its meaning and provenance."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate every dataset definition in a directory; prints each problem with file, line,
    /// key and fix, and exits non-zero when any dataset cannot be served.
    Check {
        /// The datasets directory.
        #[arg(default_value = "datasets")]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { dir } => check::run(Path::new(&dir)),
    }
}
