//! The `tally` binary: the command line, wired to the MCP layer (`tally-mcp`) for serving.
//!
//! Architecture invariant: thin. It parses flags, builds the engine and its backends (plugins
//! included), and hands serving to `tally_mcp::serve`; the CLI's data commands turn flags into
//! the same JSON arguments an MCP client sends and print the same envelope, through the
//! caller's view (`tally_mcp::view`) and the engine's one entry point `Engine::call`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tally_mcp::{audit, serve};

use crate::flags::{Common, HttpFlags};
use crate::runtime::runtime;

mod allocator;
mod chart_file;
mod check;
mod cli;
mod cluster;
mod completions;
mod exit;
mod flags;
mod ingest;
mod plugin;
mod plugin_api;
mod plugin_python;
mod runtime;
mod schema;
mod settings;

/// The optional parts of this build, each with whether it was built in: `tally --version`
/// says them, so that a refusal's "built without" can be checked before rebuilding.
const FEATURES: [(&str, bool); 4] = [
    ("s3", cfg!(feature = "s3")),
    ("native-plugins", cfg!(feature = "native-plugins")),
    ("png-charts", cfg!(feature = "png-charts")),
    ("cluster", cfg!(feature = "cluster")),
];

/// `tally --version`: the version, then the optional parts built in and left out.
fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let list = |built: bool| {
            let names: Vec<&str> = FEATURES
                .iter()
                .filter(|(_, b)| *b == built)
                .map(|(n, _)| *n)
                .collect();
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        };
        format!(
            "{}\nbuilt with: {}\nbuilt without: {}",
            env!("CARGO_PKG_VERSION"),
            list(true),
            list(false)
        )
    })
}

#[derive(Debug, Parser)]
#[command(
    name = "tally",
    version,
    long_version = long_version(),
    about = "Answers questions over datasets; every number computed by the server, with its meaning and provenance.",
    after_help = "Examples:\n  tally add survey survey.xlsx\n  tally list\n  tally inspect procedures\n  tally summarize procedures --group-by 所管府省庁 --metrics count --metrics avg:オンライン率\n  tally query procedures --where '{\"所管府省庁\": [\"デジタル庁\"]}' --select 手続名 --limit 5"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How the server's log (on stderr) is written: `text` lines, or `json`, one object a
    /// line with the same `caller` and `request` ids as the audit log.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "TALLY_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum WatchArg {
    Events,
    Poll,
    Off,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the datasets over MCP: stdio by default, streamable HTTP with --http.
    Serve {
        /// Listen for streamable HTTP at this address (path /mcp, the browser front at /,
        /// health at /health), e.g. 127.0.0.1:8765 or localhost:8765. Any other than a
        /// loopback address needs bearer tokens (--token-file or --token-env).
        #[arg(long, value_name = "ADDR", value_parser = listen_address)]
        http: Option<std::net::SocketAddr>,
        #[command(flatten)]
        guard: Box<HttpFlags>,
        /// Write one JSON line per tool call to this file (appended), or `-` for stderr.
        #[arg(long, value_name = "FILE")]
        audit_log: Option<PathBuf>,
        /// A further Origin allowed to call the HTTP endpoint (repeatable); the server's own
        /// loopback origins are always allowed, requests without Origin are not browsers.
        #[arg(long = "allow-origin", value_name = "ORIGIN")]
        allow_origin: Vec<String>,
        /// How changes in the datasets directory are noticed: file system events (falling
        /// back to polling where they are not delivered), polling, or not at all.
        #[arg(long, value_enum, default_value_t = WatchArg::Events)]
        watch: WatchArg,
        /// Polling interval in milliseconds (with --watch poll, and for the fallback).
        #[arg(long, default_value_t = 2000)]
        poll_interval_ms: u64,
        /// How often the objects of object-store datasets (`data: s3://…`) are listed again
        /// to see changes (a bucket sends no events): `60s`, `500ms`, `5m`, or `off`.
        #[arg(long, value_name = "INTERVAL", default_value = "60s", value_parser = poll_duration)]
        object_poll: PollEvery,
        /// A settings file (TOML) holding any of these flags by their long names
        /// (`max-body-bytes = 4096`, `[oauth] issuer = "…"`); the environment (`TALLY_<FLAG>`)
        /// and the command line override it (docs/operations.md).
        #[arg(long, value_name = "FILE", env = "TALLY_CONFIG")]
        config: Option<PathBuf>,
        /// Print the settings in effect (file, environment, command line, defaults) as a
        /// settings file, and exit.
        #[arg(long)]
        print_settings: bool,
        /// Send the spans of tool calls to this OpenTelemetry collector (OTLP over HTTP,
        /// JSON), e.g. http://127.0.0.1:4318; a client's `traceparent` is their parent.
        #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
        otlp_endpoint: Option<String>,
        #[command(flatten)]
        common: Common,
    },
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
    /// The provisions (of a linked law dataset) the matching records rest on, with the
    /// records per provision and the references that found none, by reason.
    Cite(cli::CiteFlags),
    /// Check a saved answer again: run its recorded call (provenance.query) on the data of
    /// now and compare number by number. Prints a summary on stderr and the check as JSON;
    /// exits 0 when identical, 1 when the data changed or the answer was altered, 2 when it
    /// is not reproducible (its dataset or a field is gone, or the semantics changed).
    Verify {
        /// The answer, as a tool or `tally query`/`summarize` wrote it (`-` for stdin).
        envelope: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Convert a CSV/TSV (UTF-8, Shift_JIS/cp932, EUC-JP), XLSX, Parquet or JSON Lines file
    /// into the dataset folder `<datasets>/<id>`: its data.parquet, and a skeleton
    /// dataset.yaml (guesses marked TODO) when the folder has none. With a dataset.yaml, the
    /// file's columns are taken as it declares them and any drift is an error. Prints a JSON
    /// summary; a running server reloads the dataset once.
    Add(ingest::AddFlags),
    /// Download a dataset's current file from its publisher's page (source.url, the link
    /// matching source.asset_pattern), convert it as `add` does, and record where and when it
    /// came from in .fetch.json. https only; unchanged files are not downloaded again.
    Fetch(ingest::FetchFlags),
    /// Validate every dataset definition in a directory; prints each problem with file, line,
    /// key and fix, and exits non-zero when any dataset cannot be served.
    Check {
        /// The datasets directory (as `--datasets DIR`, which every command that reads
        /// datasets takes).
        #[arg(value_name = "DIR", conflicts_with = "datasets")]
        dir: Option<PathBuf>,
        /// The datasets directory (default `datasets`).
        #[arg(long, value_name = "DIR")]
        datasets: Option<PathBuf>,
        /// Also load native plugins to check them (they run with this process's rights).
        #[arg(long, env = "TALLY_ALLOW_NATIVE", value_parser = clap::builder::FalseyValueParser::new())]
        allow_native: bool,
        /// Also prepare every dataset as the server's first call would (plugins scanned),
        /// within the memory budget: finds data that expands beyond the budget. (Every check
        /// decodes every page of every data file once, so corrupt pages are always found.)
        #[arg(long)]
        deep: bool,
        /// Also scan every plugin dataset once through its plugin (within the default plugin
        /// limits of `serve`): finds a plugin that describes itself but fails to read, such as a
        /// wrong folder in its backend.config.
        #[arg(long)]
        scan: bool,
        /// The memory budget in MiB, as `serve --memory-budget` (default: half the machine's
        /// memory).
        #[arg(long, value_name = "MIB")]
        memory_budget: Option<usize>,
    },
    /// Print the JSON Schema of dataset.yaml, for editors to complete and check definitions.
    ///
    /// The repository publishes the same text as schemas/dataset.schema.json, which the
    /// skeletons `tally add` writes name on their first line; `tally schema >
    /// dataset.schema.json` keeps a copy of this version's schema (offline, or pinned).
    Schema,
    /// Tooling for plugin authors: a new project from the template, a release build of its
    /// component, and a test of it on a dataset folder through the real sandbox (see
    /// docs/plugins.md).
    Plugin {
        #[command(subcommand)]
        command: plugin::PluginCommand,
    },
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell, e.g.
    /// `tally completions bash > ~/.local/share/bash-completion/completions/tally` or
    /// `tally completions fish > ~/.config/fish/completions/tally.fish`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// The dataset ids of a datasets directory, one a line (what the completion scripts ask
    /// at each TAB).
    #[command(name = "__datasets", hide = true)]
    DatasetIds {
        /// The datasets directory.
        #[arg(long, default_value = "datasets")]
        datasets: PathBuf,
    },
}

/// How `tally serve`'s options are read again on SIGHUP: the settings file and the
/// environment as they are then, under the same command line.
fn reread_serve_options(command: clap::Command) -> serve::Reread {
    use clap::FromArgMatches;
    // The command line as typed, without what the settings added at start.
    let typed: Vec<std::ffi::OsString> = global_flags_after_subcommand(std::env::args_os());
    serve::Reread(std::sync::Arc::new(move || {
        let applied = settings::apply(typed.clone(), &command)?;
        let matches = command
            .clone()
            .try_get_matches_from(&applied.args)
            .map_err(|e| e.to_string())?;
        match Cli::from_arg_matches(&matches)
            .map_err(|e| e.to_string())?
            .command
        {
            Command::Serve { guard, .. } => Ok((*guard).into()),
            _ => Err("not a serve command line".to_string()),
        }
    }))
}

/// Logs go to stderr (stdout is the protocol in stdio mode); TALLY_LOG overrides the level.
/// With an OTLP endpoint, the spans of tool calls go there too (whatever the log's level).
fn init_log(cli: &Cli) -> Result<(), String> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let default_level = if matches!(cli.command, Command::Serve { .. }) {
        "info"
    } else {
        "error"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TALLY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // The log is written apart from what native plugins write (`native_stderr`).
    let log = tracing_subscriber::fmt::layer()
        .with_writer(tally_plugin_host::native_stderr::log)
        .with_ansi(false);
    let log = match cli.log_format {
        LogFormat::Text => log.boxed(),
        LogFormat::Json => log.json().flatten_event(true).boxed(),
    };
    // Only Tally's own spans are looked at: the registry keeps no span of other crates for it.
    let otlp = match &cli.command {
        Command::Serve {
            otlp_endpoint: Some(endpoint),
            ..
        } => Some(tally_mcp::otlp::layer(endpoint)?.with_filter(
            tracing_subscriber::filter::filter_fn(|meta| meta.target().starts_with("tally")),
        )),
        _ => None,
    };
    tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .with(otlp)
        .init();
    Ok(())
}

fn main() -> ExitCode {
    use clap::CommandFactory;
    allocator::tune();
    let mut command = Cli::command();
    command.build();
    let applied =
        match settings::apply(global_flags_after_subcommand(std::env::args_os()), &command) {
            Ok(applied) => applied,
            Err(e) => {
                eprintln!("tally serve: {e}");
                return ExitCode::from(exit::CONFIG);
            }
        };
    let cli = match Cli::try_parse_from(&applied.args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; every usage error is exit code 2.
            return if e.use_stderr() {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // What native plugins write is captured before any is loaded (and before anything holds
    // stdout), so a failed call can show it.
    let captured = native_streams(&cli.command).map(tally_plugin_host::native_stderr::install);
    if let Err(e) = init_log(&cli) {
        eprintln!("tally serve: {e}");
        return ExitCode::from(exit::CONFIG);
    }
    let protocol = match captured {
        Some(Ok(protocol)) => {
            flush_after_panics();
            protocol
        }
        Some(Err(e)) => {
            tracing::warn!("what native plugins write to stderr is not captured: {e}");
            None
        }
        None => None,
    };
    let code = run(cli, command, applied, protocol);
    // The end of what a plugin (or this process) wrote to stderr is forwarded before it ends.
    tally_plugin_host::native_stderr::flush();
    code
}

/// Whether a command may load native plugins (`Some`), and then whether it serves MCP: its
/// stdout is the protocol's alone, and a plugin's writes to it are captured with its stderr.
fn native_streams(command: &Command) -> Option<bool> {
    let common = match command {
        Command::Serve {
            common,
            print_settings,
            ..
        } => return common.budgets.allow_native.then_some(!print_settings),
        Command::Check { allow_native, .. } => return allow_native.then_some(false),
        Command::List { common, .. }
        | Command::Inspect { common, .. }
        | Command::Verify { common, .. } => common,
        Command::Query(flags) => &flags.common,
        Command::Summarize(flags) => &flags.common,
        Command::Cite(flags) => &flags.common,
        _ => return None,
    };
    common.budgets.allow_native.then_some(false)
}

/// A panic's message goes through the captured stderr: it is forwarded before the process
/// may abort.
fn flush_after_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        tally_plugin_host::native_stderr::flush();
    }));
}

/// Runs the command parsed (`applied` the command line with the settings file's flags in it;
/// `protocol` the stdout a stdio server writes to, when the process's own was redirected).
fn run(
    cli: Cli,
    command: clap::Command,
    applied: settings::Applied,
    protocol: Option<std::fs::File>,
) -> ExitCode {
    match cli.command {
        Command::Serve {
            http,
            guard,
            audit_log,
            allow_origin,
            watch,
            poll_interval_ms,
            object_poll,
            config: _,
            print_settings,
            otlp_endpoint,
            common,
        } => {
            if print_settings {
                let matches = command.clone().get_matches_from(&applied.args);
                settings::print(&matches, &command, &applied.sources);
                return ExitCode::SUCCESS;
            }
            let interval = std::time::Duration::from_millis(poll_interval_ms.max(50));
            let watch = match watch {
                WatchArg::Events => Some(tally_engine::watch::WatchMode::Events),
                WatchArg::Poll => Some(tally_engine::watch::WatchMode::Poll(interval)),
                WatchArg::Off => None,
            };
            let mut guard: serve::HttpOptions = (*guard).into();
            guard.reread = Some(reread_serve_options(command.clone()));
            let code = serve(
                http,
                guard,
                audit_log,
                allow_origin,
                watch,
                interval,
                object_poll.0,
                &common,
                protocol,
            );
            if otlp_endpoint.is_some() {
                tally_mcp::otlp::flush(std::time::Duration::from_secs(3));
            }
            code
        }
        Command::Check {
            dir,
            datasets,
            allow_native,
            deep,
            scan,
            memory_budget,
        } => {
            let mut limits = tally_engine::Limits::default();
            if let Some(m) = memory_budget {
                limits.memory_budget_bytes = m.max(16) * 1024 * 1024;
            }
            let dir = dir
                .or(datasets)
                .unwrap_or_else(|| PathBuf::from("datasets"));
            check::run(
                &dir,
                &check::CheckOptions {
                    backends: tally_plugin_host::backends(tally_plugin_host::PluginOptions {
                        allow_native,
                        ..Default::default()
                    }),
                    deep,
                    scan,
                    limits,
                },
            )
        }
        Command::List {
            q,
            publisher,
            common,
        } => cli::list(q, publisher, &common),
        Command::Inspect { dataset_id, common } => cli::inspect(dataset_id, &common),
        Command::Verify { envelope, common } => cli::verify(&envelope, &common),
        Command::Cite(flags) => cli::cite(flags),
        Command::Query(flags) => cli::query(flags),
        Command::Add(flags) => ingest::add(flags),
        Command::Fetch(flags) => ingest::fetch(flags),
        Command::Summarize(flags) => cli::summarize(flags),
        Command::Plugin { command } => plugin::run(command),
        Command::Schema => schema::run(),
        Command::Completions { shell } => match completions::print::<Cli>(shell) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tally completions: cannot write the script: {e}");
                ExitCode::from(exit::FAILED)
            }
        },
        Command::DatasetIds { datasets } => {
            let _ = completions::list_ids(&datasets, &mut std::io::stdout().lock());
            ExitCode::SUCCESS
        }
    }
}

/// Flags written before the subcommand (`tally --compact --datasets d summarize …`) moved
/// after it, where clap reads them: the options every data command takes may be given on
/// either side. Only flags the subcommand knows are moved (with their value); anything else
/// is left for clap to report.
fn global_flags_after_subcommand(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let args: Vec<std::ffi::OsString> = args.into_iter().collect();
    // Built, so that the global flags (`--log-format`) are among each subcommand's.
    let mut command = Cli::command();
    command.build();
    let takes_value = |sub: Option<&clap::Command>, long: &str| -> Option<bool> {
        let mut all = command
            .get_subcommands()
            .filter(|c| sub.is_none_or(|s| s.get_name() == c.get_name()));
        all.find_map(|c| {
            c.get_arguments()
                .find(|a| a.get_long() == Some(long))
                .map(|a| a.get_action().takes_values())
        })
    };
    // Find the subcommand: the first word that is not a flag or a flag's value.
    let mut i = 1;
    let mut sub = None;
    while i < args.len() {
        let word = args[i].to_string_lossy();
        if let Some(flag) = word.strip_prefix("--") {
            if !flag.contains('=') && takes_value(None, flag) == Some(true) {
                i += 1;
            }
            i += 1;
            continue;
        }
        sub = command
            .find_subcommand(word.as_ref())
            .map(|c| (i, c.clone()));
        break;
    }
    let Some((at, sub)) = sub else { return args };
    if at == 1 {
        return args;
    }
    // Every word before the subcommand must be one of its flags, else clap reports it.
    let mut moved = Vec::new();
    let mut j = 1;
    while j < at {
        let word = args[j].to_string_lossy();
        let Some(flag) = word.strip_prefix("--") else {
            return args;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, _)) => (name, true),
            None => (flag, false),
        };
        match takes_value(Some(&sub), name) {
            Some(true) if !inline => {
                moved.extend_from_slice(&args[j..(j + 2).min(at)]);
                j += 2;
            }
            Some(_) => {
                moved.push(args[j].clone());
                j += 1;
            }
            None => return args,
        }
    }
    let mut out = vec![args[0].clone(), args[at].clone()];
    out.extend(moved);
    out.extend_from_slice(&args[at + 1..]);
    out
}

/// `--http`: an address, or a host name with a port. A name that resolves to a loopback
/// address listens there (IPv4 first); any other name listens on its first address, which
/// then needs tokens like any non-loopback address.
fn listen_address(given: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = given.parse::<std::net::SocketAddr>() {
        return Ok(addr);
    }
    if !given.contains(':') {
        return Err(format!(
            "`{given}` has no port; give HOST:PORT, e.g. 127.0.0.1:8765 or localhost:8765"
        ));
    }
    let resolved: Vec<std::net::SocketAddr> = given
        .to_socket_addrs()
        .map_err(|e| {
            format!("cannot resolve `{given}` ({e}); give an address such as 127.0.0.1:8765")
        })?
        .collect();
    resolved
        .iter()
        .find(|a| a.ip().is_loopback() && a.is_ipv4())
        .or_else(|| resolved.iter().find(|a| a.ip().is_loopback()))
        .or_else(|| resolved.first())
        .copied()
        .ok_or_else(|| format!("`{given}` resolves to no address; give one such as 127.0.0.1:8765"))
}

#[allow(clippy::too_many_arguments)]
fn serve(
    http: Option<std::net::SocketAddr>,
    guard: serve::HttpOptions,
    audit_log: Option<PathBuf>,
    allow_origin: Vec<String>,
    watch: Option<tally_engine::watch::WatchMode>,
    poll_interval: std::time::Duration,
    object_poll: Option<std::time::Duration>,
    common: &Common,
    protocol: Option<std::fs::File>,
) -> ExitCode {
    let sign_in = guard.sign_in_given();
    if http.is_none() && !sign_in.is_empty() {
        eprintln!(
            "tally serve: {} appl{} to serving over HTTP only: a stdio server's client started it and sees every dataset. Add --http 127.0.0.1:8765 (or another address), or leave {} out.",
            sign_in.join(", "),
            if sign_in.len() == 1 { "ies" } else { "y" },
            if sign_in.len() == 1 { "it" } else { "them" }
        );
        return ExitCode::from(exit::CONFIG);
    }
    if !common.datasets.is_dir() {
        eprintln!(
            "tally serve: the datasets directory {} does not exist; run from the repository root or pass --datasets DIR",
            common.datasets.display()
        );
        return ExitCode::from(exit::CONFIG);
    }
    let audit = match audit_log.as_deref().map(audit::Audit::open).transpose() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tally serve: {e}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    // What a killed `tally add` left (never the folder of one still running): the catalog
    // never reads such folders, but they hold disk until removed.
    for removed in tally_ingest::remove_stale_staging(&common.datasets) {
        tracing::info!(folder = %removed.display(), "removed the staging folder of an add that did not finish");
    }
    let Some(runtime) = runtime() else {
        return ExitCode::from(crate::exit::FAILED);
    };
    let cache = common.budgets.cache(&common.datasets);
    // Cursors signed with the key kept in the cache: a page is asked for again after a
    // restart, and checked by another process (`tally verify`), with the same checks.
    if let Some(key) = cache.as_ref().and_then(|c| c.cursor_key()) {
        tally_engine::cursor::set_key(key);
    }
    let engine = tally_engine::Engine::open_with_backends(
        &common.datasets,
        common.limits(),
        common.budgets.backends(cache.as_ref()),
    )
    .with_cache(cache);
    let engine = match runtime.block_on(common.cluster.apply(engine, true)) {
        Ok(engine) => std::sync::Arc::new(engine),
        Err(e) => {
            eprintln!("tally serve: {e}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    let view = tally_mcp::view::View::of(&engine, tally_mcp::view::Caller::operator());
    tracing::info!(
        datasets = view.datasets().count(),
        broken = view.broken().count(),
        dir = %common.datasets.display(),
        "catalog loaded"
    );
    let served = runtime.block_on(async move {
        // Dropping the handle stops watching; keep it for the life of the server.
        let _watching = watch.map(|mode| {
            tally_engine::watch::spawn(
                std::sync::Arc::clone(&engine),
                tally_engine::watch::WatchConfig {
                    mode,
                    poll_interval,
                    ..Default::default()
                },
            )
        });
        let _polling = object_poll.map(|every| {
            tally_engine::watch::poll_objects(
                std::sync::Arc::clone(&engine),
                every,
                tally_engine::watch::WatchConfig::default().settle,
            )
        });
        match http {
            Some(addr) => {
                serve::http(engine, addr, allow_origin, guard, audit, |bound| {
                    eprintln!(
                        "tally: serving MCP at http://{bound}/mcp (browser front: http://{bound}/, health: http://{bound}/health)"
                    );
                })
                .await
            }
            None => serve::stdio(engine, audit, protocol).await,
        }
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(serve::ServeError::Setup(why)) => {
            eprintln!("tally serve: {why}");
            ExitCode::from(exit::CONFIG)
        }
        Err(serve::ServeError::Failed(why)) => {
            tracing::error!("{why}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// An interval of `--object-poll`, or none (`off`).
#[derive(Debug, Clone, Copy)]
struct PollEvery(Option<std::time::Duration>);

/// `60s`, `500ms`, `5m`, `1h`, a number of seconds, or `off` / `0`.
fn poll_duration(text: &str) -> Result<PollEvery, String> {
    let t = text.trim().to_ascii_lowercase();
    if t == "off" || t == "0" || t == "never" {
        return Ok(PollEvery(None));
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: u64 = number.parse().map_err(|_| {
        format!("`{text}` is not an interval: write e.g. `60s`, `500ms`, `5m` or `off`")
    })?;
    let ms = match unit.trim() {
        "ms" => n,
        "" | "s" => n.saturating_mul(1000),
        "m" | "min" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        other => {
            return Err(format!(
                "`{other}` is not a unit of --object-poll: write ms, s, m or h (e.g. `60s`), or `off`"
            ));
        }
    };
    if ms < 100 {
        return Err(format!(
            "`{text}` is shorter than 100 ms: every poll lists every object-store dataset; write e.g. `1s`"
        ));
    }
    Ok(PollEvery(Some(std::time::Duration::from_millis(ms))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tally --version` names every optional part once, as built in or left out, and the
    /// features it names are the manifest's.
    #[test]
    fn the_long_version_says_what_the_build_has() {
        let text = long_version();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(env!("CARGO_PKG_VERSION")));
        let with = lines
            .next()
            .and_then(|l| l.strip_prefix("built with: "))
            .unwrap();
        let without = lines
            .next()
            .and_then(|l| l.strip_prefix("built without: "))
            .unwrap();
        let manifest = include_str!("../Cargo.toml");
        for (name, built) in FEATURES {
            assert!(
                manifest.contains(&format!("\n{name} = [")),
                "`{name}` is a feature of the manifest"
            );
            let (yes, no) = if built {
                (with, without)
            } else {
                (without, with)
            };
            assert!(yes.split(", ").any(|n| n == name), "{text}");
            assert!(!no.split(", ").any(|n| n == name), "{text}");
        }
        // Under the test command (`--features tally/full,tally/cluster`) everything is built.
        if std::env::var_os("CI").is_some() {
            assert_eq!(without, "none", "CI tests the full build: {text}");
        }
    }

    /// The tool table (`tally_semantic::request::TOOLS`) names the CLI command of each tool:
    /// a tool added there without a command here fails.
    #[test]
    fn every_tool_has_its_cli_command() {
        use clap::CommandFactory;
        let cli = Cli::command();
        for info in tally_semantic::request::TOOLS {
            let command = cli.find_subcommand(info.command).unwrap_or_else(|| {
                panic!("`{}` has no command `tally {}`", info.name, info.command)
            });
            assert!(
                command.get_about().is_some(),
                "`tally {}` says what it does",
                info.command
            );
        }
    }

    /// One set of global flags: every command that reads a datasets directory takes
    /// `--datasets` (and those that serve or answer, `--cache-dir` and the budgets), before
    /// its name or after it.
    #[test]
    fn every_command_that_reads_datasets_takes_the_global_flags_before_or_after_it() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        cli.build();
        let no_datasets = ["completions", "plugin", "schema", "help"];
        let answering = [
            "serve",
            "list",
            "inspect",
            "query",
            "summarize",
            "cite",
            "verify",
        ];
        let mut checked = 0;
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            if no_datasets.contains(&name) {
                continue;
            }
            let longs: Vec<&str> = sub.get_arguments().filter_map(|a| a.get_long()).collect();
            let mut global = vec!["datasets", "log-format"];
            if answering.contains(&name) {
                global.extend(["cache-dir", "memory-budget", "call-timeout-ms", "compact"]);
            }
            for flag in global {
                assert!(
                    longs.contains(&flag),
                    "`tally {name}` does not take --{flag}: {longs:?}"
                );
            }
            let moved = global_flags_after_subcommand(
                ["tally", "--datasets", "DIR", "--log-format=json", name, "x"].map(Into::into),
            );
            let moved: Vec<String> = moved
                .iter()
                .map(|w| w.to_string_lossy().into_owned())
                .collect();
            assert_eq!(
                moved,
                ["tally", name, "--datasets", "DIR", "--log-format=json", "x"],
                "flags before `{name}` are taken as its own"
            );
            checked += 1;
        }
        assert!(checked >= 11, "the commands were found: {checked}");
    }

    #[test]
    fn object_poll_intervals_are_read_and_bad_ones_refused_with_an_example() {
        let ms = |t: &str| poll_duration(t).map(|p| p.0.map(|d| d.as_millis()));
        assert_eq!(ms("60s"), Ok(Some(60_000)));
        assert_eq!(ms("500ms"), Ok(Some(500)));
        assert_eq!(ms("5m"), Ok(Some(300_000)));
        assert_eq!(ms("2"), Ok(Some(2_000)));
        assert_eq!(ms("off"), Ok(None));
        assert_eq!(ms("0"), Ok(None));
        for bad in ["soon", "10 parsecs", "-5s", "50ms", ""] {
            let e = poll_duration(bad).unwrap_err();
            assert!(e.contains("60s") || e.contains("1s"), "{bad}: {e}");
        }
    }

    #[test]
    fn global_flags_may_come_before_the_subcommand() {
        let words = |v: &[&str]| -> Vec<std::ffi::OsString> { v.iter().map(Into::into).collect() };
        assert_eq!(
            global_flags_after_subcommand(words(&[
                "tally",
                "--compact",
                "--datasets",
                "d",
                "list",
                "--q",
                "x"
            ])),
            words(&["tally", "list", "--compact", "--datasets", "d", "--q", "x"])
        );
        assert_eq!(
            global_flags_after_subcommand(words(&["tally", "--datasets=d", "inspect", "p"])),
            words(&["tally", "inspect", "--datasets=d", "p"])
        );
        // Already in place, unknown flags, and no subcommand are left to clap.
        for v in [
            &["tally", "list", "--compact"][..],
            &["tally", "--bogus", "list"],
            &["tally", "--version"],
            &["tally", "--compact", "completions", "bash"],
        ] {
            assert_eq!(global_flags_after_subcommand(words(v)), words(v), "{v:?}");
        }
        let cli = Cli::try_parse_from(global_flags_after_subcommand(words(&[
            "tally",
            "--compact",
            "--datasets",
            "d",
            "summarize",
            "p",
            "--metrics",
            "count",
        ])))
        .unwrap();
        let Command::Summarize(flags) = cli.command else {
            panic!("not summarize")
        };
        assert!(flags.common.compact);
        assert_eq!(flags.common.datasets, PathBuf::from("d"));
    }

    #[test]
    fn http_takes_addresses_and_loopback_names() {
        assert_eq!(
            listen_address("127.0.0.1:8765").unwrap(),
            "127.0.0.1:8765".parse().unwrap()
        );
        assert_eq!(
            listen_address("[::1]:8765").unwrap(),
            "[::1]:8765".parse().unwrap()
        );
        let local = listen_address("localhost:8765").unwrap();
        assert!(local.ip().is_loopback() && local.port() == 8765, "{local}");
        assert!(listen_address("localhost").unwrap_err().contains("no port"));
    }
}
