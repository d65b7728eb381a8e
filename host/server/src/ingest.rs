//! `tally add` and `tally fetch`: flags → `tally_ingest` → a JSON summary on stdout, progress
//! on stderr (a bar on a terminal, plain lines otherwise), errors as JSON on stderr.

use std::cell::{Cell, RefCell};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use tally_ingest::{AddOptions, IngestError, Progress, ReadOptions};

/// How to read the input file (shared by add and fetch).
#[derive(Debug, Args)]
pub struct ReadFlags {
    /// The datasets directory.
    #[arg(long, default_value = "datasets")]
    datasets: PathBuf,
    /// The sheet of a workbook to read (default: the first).
    #[arg(long)]
    sheet: Option<String>,
    /// Rows above the data, the last of them the header (default: `source.csv_header_rows`
    /// of dataset.yaml, else 1, or 2 when the first row holds only a title).
    #[arg(long, value_name = "N")]
    header_rows: Option<u32>,
    /// The text encoding of a CSV file (utf-8, shift_jis or cp932, euc-jp, …); detected when
    /// not given.
    #[arg(long)]
    encoding: Option<String>,
    /// Convert even when the file's columns or types no longer match dataset.yaml (each
    /// difference is listed in the summary's warnings).
    #[arg(long)]
    accept_drift: bool,
    /// A value that means "no value" (e.g. `-`, `不明`): cells holding exactly it are stored
    /// as empty. Repeatable; beside source.null_markers of dataset.yaml.
    #[arg(long = "null-marker", value_name = "VALUE", allow_hyphen_values = true)]
    null_markers: Vec<String>,
    /// What a workbook may expand to when unpacked, in MiB (a guard against zip bombs); what
    /// the sheet reader holds in memory for its shared strings and styles is held to it too.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    max_unpacked_mb: u64,
    /// The most columns read (header fields, sheet columns, Parquet columns, distinct JSON
    /// keys); a file with more is refused. Each column costs memory while converting.
    #[arg(long, value_name = "N", default_value_t = tally_ingest::read::DEFAULT_MAX_COLUMNS as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_columns: u64,
    /// Print the summary on one line.
    #[arg(long)]
    compact: bool,
}

impl ReadFlags {
    fn options(&self, dataset_id: &str, file: PathBuf) -> AddOptions {
        AddOptions {
            dataset_id: dataset_id.to_string(),
            file,
            datasets: self.datasets.clone(),
            read: ReadOptions {
                encoding: self.encoding.clone(),
                sheet: self.sheet.clone(),
                max_unpacked_bytes: self.max_unpacked_mb.clamp(1, 1 << 30) * 1024 * 1024,
                max_columns: usize::try_from(self.max_columns).unwrap_or(usize::MAX),
            },
            header_rows: self.header_rows,
            accept_drift: self.accept_drift,
            null_markers: self.null_markers.clone(),
            keep_fetch_record: false,
        }
    }
}

#[derive(Debug, Args)]
pub struct AddFlags {
    /// The dataset's id: the folder `<datasets>/<id>` written (created when absent).
    dataset_id: String,
    /// The file to convert: CSV/TSV, XLSX/XLSM, Parquet or JSON Lines.
    file: PathBuf,
    #[command(flatten)]
    read: ReadFlags,
}

#[derive(Debug, Args)]
pub struct FetchFlags {
    /// The dataset's id; its dataset.yaml names the page (source.url) and the file's name
    /// pattern (source.asset_pattern).
    dataset_id: String,
    /// A server the file may come from besides the page's own (repeatable): `HOST` means
    /// https on port 443; another port is another server, given as `HOST:PORT`.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    allow_hosts: Vec<String>,
    /// The largest download accepted, in bytes.
    #[arg(long, default_value_t = tally_ingest::fetch::DEFAULT_MAX_BYTES)]
    max_bytes: u64,
    /// Trust this certificate authority (PEM) instead of the public ones, e.g. a private
    /// CA (repeatable). Certificates are always checked.
    #[arg(long = "ca-cert", value_name = "FILE")]
    ca_certs: Vec<PathBuf>,
    /// Time the page or the download may take, in seconds.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout: u64,
    /// Download and convert even when the file is the one already served (no conditional
    /// request, no same-bytes shortcut).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    read: ReadFlags,
}

/// Exit codes (`crate::exit`): 0 done (or unchanged), 1 the input or its drift, 5 the dataset
/// folder or its definition, 3 a failure (network, files, limits, a bug).
fn exit_code(e: &IngestError) -> ExitCode {
    ExitCode::from(match e {
        IngestError::Input { .. } | IngestError::Drift { .. } => crate::exit::BAD_INPUT,
        IngestError::Dataset { .. } => crate::exit::CONFIG,
        _ => crate::exit::FAILED,
    })
}

fn fail(command: &str, e: &IngestError) -> ExitCode {
    let mut body = json!({"kind": e.kind(), "message": e.to_string()});
    if let Some(h) = e.hint() {
        body["hint"] = json!(h);
    }
    if let IngestError::Drift { differences, .. } = e {
        body["differences"] = json!(differences);
    }
    eprintln!("tally {command}: {e}");
    if let Some(h) = e.hint() {
        eprintln!("  hint: {h}");
    }
    eprintln!("{}", json!({ "error": body }));
    exit_code(e)
}

fn print(value: &impl serde::Serialize, compact: bool) {
    let text = if compact {
        serde_json::to_string(value)
    } else {
        serde_json::to_string_pretty(value)
    };
    match text {
        Ok(t) => println!("{t}"),
        Err(e) => eprintln!("tally: cannot print the summary: {e}"),
    }
}

pub fn add(flags: AddFlags) -> ExitCode {
    let options = flags.read.options(&flags.dataset_id, flags.file.clone());
    let progress = Reporter::new("add");
    match tally_ingest::add(&options, &progress) {
        Ok(summary) => {
            progress.clear();
            for w in &summary.warnings {
                eprintln!("tally add: warning: {w}");
            }
            if !summary.questions.is_empty() {
                eprintln!(
                    "tally add: {} questions for you in the summary and in {} (# TODO (question))",
                    summary.questions.len(),
                    summary.definition_file.display()
                );
            }
            print(&summary, flags.read.compact);
            ExitCode::SUCCESS
        }
        Err(e) => {
            progress.clear();
            fail("add", &e)
        }
    }
}

pub fn fetch(flags: FetchFlags) -> ExitCode {
    let options = tally_ingest::fetch::FetchOptions {
        dataset_id: flags.dataset_id.clone(),
        datasets: flags.read.datasets.clone(),
        allow_hosts: flags.allow_hosts,
        max_bytes: flags.max_bytes,
        ca_certs: flags.ca_certs,
        timeout: Duration::from_secs(flags.timeout.clamp(1, 86_400)),
        add: flags.read.options(&flags.dataset_id, PathBuf::new()),
        force: flags.force,
    };
    let progress = Reporter::new("fetch");
    match tally_ingest::fetch::fetch(&options, &progress) {
        Ok(summary) => {
            progress.clear();
            eprintln!("tally fetch: {}", summary.message);
            print(&summary, flags.read.compact);
            ExitCode::SUCCESS
        }
        Err(e) => {
            progress.clear();
            fail("fetch", &e)
        }
    }
}

/// Progress on stderr: an `indicatif` bar on a terminal, a plain line every two seconds (and
/// at the end of each phase) otherwise, so logs of scripted runs stay readable.
struct Reporter {
    command: &'static str,
    bar: Option<indicatif::ProgressBar>,
    phase: RefCell<String>,
    total: Cell<u64>,
    last: Cell<Instant>,
    rows: Cell<u64>,
    bytes: Cell<u64>,
}

impl Reporter {
    fn new(command: &'static str) -> Reporter {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                None,
                indicatif::ProgressDrawTarget::stderr_with_hz(8),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix:>12} [{bar:30}] {bytes}/{total_bytes} {msg} ({elapsed})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar
        });
        Reporter {
            command,
            bar,
            phase: RefCell::new(String::new()),
            total: Cell::new(0),
            last: Cell::new(Instant::now()),
            rows: Cell::new(0),
            bytes: Cell::new(0),
        }
    }

    fn clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    fn line(&self) {
        let total = self.total.get();
        let bytes = self.bytes.get();
        let share = bytes
            .saturating_mul(100)
            .checked_div(total)
            .map(|p| format!(" ({p}%)"))
            .unwrap_or_default();
        let rows = self.rows.get();
        eprintln!(
            "tally {}: {} {}{} of {}{share}",
            self.command,
            self.phase.borrow(),
            if rows > 0 {
                format!("{} rows, ", rows)
            } else {
                String::new()
            },
            mb(bytes),
            if total > 0 {
                mb(total)
            } else {
                "?".to_string()
            },
        );
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

impl Progress for Reporter {
    fn begin(&self, phase: &str, total: u64) {
        *self.phase.borrow_mut() = phase.to_string();
        self.total.set(total);
        self.rows.set(0);
        self.bytes.set(0);
        self.last.set(Instant::now());
        if let Some(b) = &self.bar {
            b.reset();
            b.set_length(total);
            b.set_prefix(phase.to_string());
            b.set_position(0);
            b.set_message(String::new());
        }
    }

    fn update(&self, rows: u64, bytes: u64) {
        self.rows.set(rows);
        self.bytes.set(bytes);
        match &self.bar {
            Some(b) => {
                b.set_position(bytes);
                if rows > 0 {
                    b.set_message(format!("{rows} rows"));
                }
            }
            None => {
                if self.last.get().elapsed() >= Duration::from_secs(2) {
                    self.last.set(Instant::now());
                    self.line();
                }
            }
        }
    }

    fn end(&self) {
        match &self.bar {
            Some(b) => b.finish_and_clear(),
            None => self.line(),
        }
    }
}
