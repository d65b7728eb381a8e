//! The data commands: flags → the tool's JSON arguments → `Engine::call` → the envelope.

use std::process::ExitCode;

use clap::Args;
use serde_json::{Map, Value, json};
use tally_engine::{Engine, EngineError};
use tally_semantic::Tool;

use crate::flags::Common;

/// Exit code for a refused call (bad arguments).
const EXIT_BAD_INPUT: u8 = crate::exit::BAD_INPUT;
/// Exit code for a dataset that is not served.
const EXIT_UNKNOWN_DATASET: u8 = crate::exit::UNKNOWN_DATASET;
/// Exit code when the server failed (backend or internal error).
const EXIT_FAILED: u8 = crate::exit::FAILED;

#[derive(Debug, Args)]
pub struct QueryFlags {
    pub dataset_id: String,
    /// Case-insensitive substring over every text field (or --search-fields).
    #[arg(long)]
    pub q: Option<String>,
    /// Fields `q` searches (repeat the flag, or give a JSON array).
    #[arg(long = "search-fields")]
    pub search_fields: Vec<String>,
    /// Fields to return (repeat the flag, or give a JSON array).
    #[arg(long)]
    pub select: Vec<String>,
    /// Conditions as a JSON object, e.g. '{"所管府省庁": ["デジタル庁"], "総手続件数": {"$gte": 100}}'.
    #[arg(long = "where")]
    pub where_: Option<String>,
    /// `F` or `-F` (descending); repeat the flag or give a JSON array.
    #[arg(long = "order-by", allow_hyphen_values = true)]
    pub order_by: Vec<String>,
    /// Rows per page (1–5000, default 50).
    #[arg(long, allow_hyphen_values = true)]
    pub limit: Option<String>,
    /// The next_cursor of the previous page.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Datasets with revisions (law texts): read each in the revision in force on this date
    /// (YYYY-MM-DD). Default: the latest.
    #[arg(long = "as-of", value_name = "DATE")]
    pub as_of: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct CiteFlags {
    pub dataset_id: String,
    /// Conditions on the dataset's records as a JSON object.
    #[arg(long = "where")]
    pub where_: Option<String>,
    /// Fields to count the records per provision by (repeat or JSON array).
    #[arg(long = "group-by")]
    pub group_by: Vec<String>,
    /// The linked dataset to cite from (default: the dataset's only link).
    #[arg(long)]
    pub link: Option<String>,
    /// The provisions as they stood on this date (YYYY-MM-DD). Default: the latest revision.
    #[arg(long = "as-of", value_name = "DATE")]
    pub as_of: Option<String>,
    /// Provisions to return (1–10000, default 200), most records first.
    #[arg(long, allow_hyphen_values = true)]
    pub limit: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct SummarizeFlags {
    pub dataset_id: String,
    /// `count`, `sum:F`, `avg:F`, `min:F`, `max:F`, `last:F` (F at each group's latest period with a value, a stock over time), `avg:<computed measure>` (repeat or JSON array).
    #[arg(long)]
    pub metrics: Vec<String>,
    /// Fields to group by (repeat or JSON array).
    #[arg(long = "group-by")]
    pub group_by: Vec<String>,
    /// Conditions as a JSON object.
    #[arg(long = "where")]
    pub where_: Option<String>,
    /// Conditions on result columns as a JSON object, e.g. '{"count": {"$gte": 10}}'.
    #[arg(long)]
    pub having: Option<String>,
    /// Multi-value fields to split into parts (repeat or JSON array).
    #[arg(long)]
    pub explode: Vec<String>,
    /// Periods of the time field side by side: `FROM,TO` (e.g. `2010,2020` or `2010,latest`: each metric at
    /// both, the change and the percent change per group) or `previous` (each period against
    /// the one before it).
    #[arg(long, value_name = "FROM,TO|previous")]
    pub compare: Option<String>,
    /// Each group's rank by the first metric (within its period).
    #[arg(long)]
    pub rank: bool,
    /// Result columns to order by, `-` first for descending (repeat or JSON array).
    #[arg(long = "order-by", allow_hyphen_values = true)]
    pub order_by: Vec<String>,
    /// Groups to return (1–10000, default 200).
    #[arg(long, allow_hyphen_values = true)]
    pub limit: Option<String>,
    /// Datasets with revisions (law texts): read each in the revision in force on this date
    /// (YYYY-MM-DD). Default: the latest.
    #[arg(long = "as-of", value_name = "DATE")]
    pub as_of: Option<String>,
    /// Also draw the result into FILE: `.svg` or `.png` (drawn here, the chart the views
    /// choose for the result's shape), `.html` (the interactive view, opens in any browser).
    #[arg(long, value_name = "FILE")]
    pub chart: Option<std::path::PathBuf>,
    /// A font file to draw PNG text with, before the installed ones (repeatable), e.g. a CJK
    /// font where none is installed.
    #[arg(long = "font", value_name = "FILE")]
    pub fonts: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

/// A repeatable list flag: each occurrence is a name or a JSON array of names.
fn list_arg(values: &[String]) -> Option<Value> {
    if values.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for v in values {
        match serde_json::from_str::<Value>(v.trim()) {
            Ok(Value::Array(items)) if v.trim_start().starts_with('[') => out.extend(items),
            _ => out.push(Value::String(v.clone())),
        }
    }
    Some(Value::Array(out))
}

/// A JSON object flag; a parse error is reported as the tool would report bad arguments.
fn object_arg(flag: &str, value: &Option<String>) -> Result<Option<Value>, Value> {
    let Some(text) = value else { return Ok(None) };
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(other) => Err(json!({ "error": {
            "code": "invalid_argument",
            "message": format!("--{flag} must be a JSON object, found {other}"),
            "parameter": flag,
            "hint": format!("e.g. --{flag} '{{\"所管府省庁\": [\"デジタル庁\"]}}'"),
        }})),
        Err(e) => Err(json!({ "error": {
            "code": "invalid_argument",
            "message": format!("--{flag} is not valid JSON: {e}"),
            "parameter": flag,
            "hint": format!("quote the whole object for the shell, e.g. --{flag} '{{\"所管府省庁\": [\"デジタル庁\"]}}'"),
        }})),
    }
}

fn limit_arg(value: &Option<String>) -> Option<Value> {
    value.as_ref().map(|v| match v.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(v),
    })
}

fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.to_string(), v);
    }
}

fn print_error(body: &Value) {
    eprintln!(
        "{}",
        serde_json::to_string_pretty(body).unwrap_or_else(|_| body.to_string())
    );
}

fn run(tool: Tool, arguments: Value, common: &Common) -> ExitCode {
    match call(tool, arguments, common) {
        Ok(envelope) => print_envelope(&envelope, common),
        Err(code) => code,
    }
}

fn print_envelope(envelope: &Value, common: &Common) -> ExitCode {
    let text = if common.compact {
        serde_json::to_string(envelope)
    } else {
        serde_json::to_string_pretty(envelope)
    };
    write_stdout(&text.unwrap_or_default())
}

/// Runs one call; a refusal is printed (stderr) and becomes the exit code.
fn call(tool: Tool, mut arguments: Value, common: &Common) -> Result<Value, ExitCode> {
    if let (Some(format), Some(args)) = (&common.provenance, arguments.as_object_mut())
        && tool.parameter("provenance_format").is_some()
    {
        args.insert("provenance_format".into(), Value::String(format.clone()));
    }
    let Some(runtime) = crate::runtime::runtime() else {
        return Err(ExitCode::from(EXIT_FAILED));
    };
    if !common.datasets.is_dir() {
        print_error(&json!({ "error": {
            "code": "invalid_argument",
            "message": format!("the datasets directory {} does not exist", common.datasets.display()),
            "hint": "run from the repository root, or pass --datasets DIR",
        }}));
        return Err(ExitCode::from(crate::exit::CONFIG));
    }
    // Cursors printed by one invocation must be accepted by the next, and by a server of the
    // same datasets directory: the key kept with the cache, else one derived from the
    // directory.
    let cache = common.budgets.cache(&common.datasets);
    match cache.as_ref().and_then(|c| c.cursor_key()) {
        Some(key) => tally_engine::cursor::set_key(key),
        None => {
            let seed = common
                .datasets
                .canonicalize()
                .unwrap_or_else(|_| common.datasets.clone());
            tally_engine::cursor::derive_key(seed.to_string_lossy().as_bytes());
        }
    }
    let engine = Engine::open_with_backends(
        &common.datasets,
        common.limits(),
        common.budgets.backends(cache.as_ref()),
    )
    .with_cache(cache);
    let engine = match runtime.block_on(common.cluster.apply(engine, false)) {
        Ok(engine) => std::sync::Arc::new(engine),
        Err(e) => {
            print_error(&json!({"error": {
                "code": "invalid_argument",
                "message": e,
                "hint": "start the cluster (docs/cluster.md), pass --cluster-fallback local, or leave out --cluster",
            }}));
            return Err(ExitCode::from(crate::exit::CONFIG));
        }
    };
    // A one-shot process cannot leave the data to be prepared in the background for a later
    // call: it prepares first (as long as that takes), then the call has its whole budget.
    if let Some(id) = arguments
        .get("dataset_id")
        .or_else(|| arguments.pointer("/envelope/provenance/query/arguments/dataset_id"))
        .and_then(Value::as_str)
    {
        runtime.block_on(engine.prepare(&tally_mcp::view::Caller::operator(), id));
    }
    runtime
        .block_on(
            tally_mcp::view::View::of(&engine, tally_mcp::view::Caller::operator())
                .call(&engine, tool, arguments),
        )
        .map_err(|e| {
            print_error(&e.to_json());
            ExitCode::from(match &e {
                e if e.is_unknown_dataset() => EXIT_UNKNOWN_DATASET,
                EngineError::Request(_) => EXIT_BAD_INPUT,
                _ => EXIT_FAILED,
            })
        })
}

/// Prints the envelope. A reader that went away (`tally query … | head`) ends the command
/// quietly, as other command-line tools do, instead of a panic on the closed pipe.
fn write_stdout(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tally: cannot write the result: {e}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

pub fn list(q: Option<String>, publisher: Option<String>, common: &Common) -> ExitCode {
    let mut args = Map::new();
    put(&mut args, "q", q.map(Value::String));
    put(&mut args, "publisher", publisher.map(Value::String));
    run(Tool::ListDatasets, Value::Object(args), common)
}

pub fn inspect(dataset_id: String, common: &Common) -> ExitCode {
    run(
        Tool::InspectDataset,
        json!({ "dataset_id": dataset_id }),
        common,
    )
}

pub fn query(f: QueryFlags) -> ExitCode {
    let mut args = Map::new();
    args.insert("dataset_id".into(), Value::String(f.dataset_id.clone()));
    put(&mut args, "q", f.q.clone().map(Value::String));
    put(&mut args, "search_fields", list_arg(&f.search_fields));
    put(&mut args, "select", list_arg(&f.select));
    match object_arg("where", &f.where_) {
        Ok(v) => put(&mut args, "where", v),
        Err(body) => {
            print_error(&body);
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    put(&mut args, "order_by", list_arg(&f.order_by));
    put(&mut args, "limit", limit_arg(&f.limit));
    put(&mut args, "cursor", f.cursor.clone().map(Value::String));
    put(&mut args, "as_of", f.as_of.clone().map(Value::String));
    run(Tool::QueryRecords, Value::Object(args), &f.common)
}

/// `tally cite`: the provisions the matching records rest on (`cite_provisions`).
pub fn cite(f: CiteFlags) -> ExitCode {
    let mut args = Map::new();
    args.insert("dataset_id".into(), Value::String(f.dataset_id.clone()));
    match object_arg("where", &f.where_) {
        Ok(v) => put(&mut args, "where", v),
        Err(body) => {
            print_error(&body);
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    put(&mut args, "group_by", list_arg(&f.group_by));
    put(&mut args, "link", f.link.clone().map(Value::String));
    put(&mut args, "as_of", f.as_of.clone().map(Value::String));
    put(&mut args, "limit", limit_arg(&f.limit));
    run(Tool::CiteProvisions, Value::Object(args), &f.common)
}

/// `--compare FROM,TO` as the tool's `{"from": FROM, "to": TO}` (whole numbers as numbers);
/// any other text (`previous`, a JSON object) as written, for the tool to read.
fn compare_arg(text: &str) -> Value {
    let period = |p: &str| {
        let p = p.trim();
        p.parse::<i64>()
            .map_or_else(|_| Value::String(p.to_string()), Value::from)
    };
    match text.split_once(',') {
        Some((from, to)) if !text.trim_start().starts_with('{') => {
            json!({ "from": period(from), "to": period(to) })
        }
        _ => Value::String(text.to_string()),
    }
}

pub fn summarize(f: SummarizeFlags) -> ExitCode {
    let mut args = Map::new();
    args.insert("dataset_id".into(), Value::String(f.dataset_id.clone()));
    put(&mut args, "metrics", list_arg(&f.metrics));
    put(&mut args, "group_by", list_arg(&f.group_by));
    for (flag, value) in [("where", &f.where_), ("having", &f.having)] {
        match object_arg(flag, value) {
            Ok(v) => put(&mut args, flag, v),
            Err(body) => {
                print_error(&body);
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    put(&mut args, "explode", list_arg(&f.explode));
    put(&mut args, "compare", f.compare.as_deref().map(compare_arg));
    if f.rank {
        put(&mut args, "rank", Some(Value::Bool(true)));
    }
    put(&mut args, "order_by", list_arg(&f.order_by));
    put(&mut args, "limit", limit_arg(&f.limit));
    put(&mut args, "as_of", f.as_of.clone().map(Value::String));
    let Some(path) = &f.chart else {
        return run(Tool::SummarizeRecords, Value::Object(args), &f.common);
    };
    // The file's kind is checked before anything is computed.
    let format = match crate::chart_file::Format::of_path(path) {
        Ok(format) => format,
        Err(message) => {
            print_error(&json!({ "error": {
                "code": "invalid_argument",
                "message": message,
                "hint": "name the chart file FILE.svg, FILE.png or FILE.html",
            }}));
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let arguments = Value::Object(args);
    let envelope = match call(Tool::SummarizeRecords, arguments.clone(), &f.common) {
        Ok(envelope) => envelope,
        Err(code) => return code,
    };
    // The answer is printed whether or not it could be drawn.
    let drawn = crate::chart_file::write(path, format, &arguments, &envelope, &f.fonts);
    let printed = print_envelope(&envelope, &f.common);
    match drawn {
        Ok(said) => {
            said.iter().for_each(|line| eprintln!("tally: {line}"));
            printed
        }
        Err(message) => {
            print_error(&json!({ "error": { "code": "chart_failed", "message": message } }));
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// Why the answer to check could not be read: the error to print and the exit code.
struct Unread {
    body: Value,
    exit: u8,
}

/// The text of the answer `tally verify` checks (`-`: stdin), refused past `cap` bytes before
/// it is read: a file by its size, stdin (or a file that is not a regular file, whose size
/// says nothing) by reading at most `cap + 1` bytes.
fn read_envelope_text(file: &std::path::Path, cap: usize) -> Result<String, Unread> {
    use std::io::Read;
    let shown = file.display();
    let unreadable = |e: std::io::Error| Unread {
        body: json!({ "error": {
            "code": "invalid_argument",
            "message": format!("cannot read {shown}: {e}"),
            "hint": "name a file holding a whole answer of Tally (as `tally query … > answer.json` writes it), or - for stdin",
        }}),
        exit: EXIT_BAD_INPUT,
    };
    let too_large = |bytes: u64, exact: bool| Unread {
        body: tally_engine::verify::envelope_size(bytes, exact, cap)
            .err()
            .map(|e| e.to_json())
            .unwrap_or(Value::Null),
        exit: EXIT_FAILED,
    };
    let limit = (cap as u64).saturating_add(1);
    let mut bytes = Vec::new();
    if file == std::path::Path::new("-") {
        std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
    } else {
        let opened = std::fs::File::open(file).map_err(unreadable)?;
        let size = opened.metadata().map_err(unreadable)?.len();
        if size > cap as u64 {
            return Err(too_large(size, true));
        }
        // Bounded again: a file that grew since, or one whose size is not its length (a pipe,
        // a device).
        opened
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
    }
    if bytes.len() > cap {
        return Err(too_large(bytes.len() as u64, false));
    }
    String::from_utf8(bytes).map_err(|e| Unread {
        body: json!({ "error": {
            "code": "invalid_argument",
            "message": format!("{shown} is not UTF-8 text (invalid at byte {})", e.utf8_error().valid_up_to()),
            "hint": "pass the answer exactly as Tally printed it (one JSON object with data and provenance)",
        }}),
        exit: EXIT_BAD_INPUT,
    })
}

/// `tally verify ENVELOPE.json`: the answer's call run again on the data of now and compared
/// (docs/verify.md). A short summary goes to stderr and the whole check, as JSON, to stdout.
/// The exit code is the outcome: 0 identical, 1 data changed or the answer altered, 2 not
/// reproducible (3, 4, 5 as for every command).
pub fn verify(file: &std::path::Path, common: &Common) -> ExitCode {
    let cap = common.limits().max_envelope_bytes;
    let text = match read_envelope_text(file, cap) {
        Ok(text) => text,
        Err(refusal) => {
            print_error(&refusal.body);
            return ExitCode::from(refusal.exit);
        }
    };
    // Size and nesting checked before the text is parsed, as the verify_answer tool does.
    let envelope = match tally_engine::verify::read_envelope(&text, cap) {
        Ok(v) => v,
        Err(e) => {
            print_error(&e.to_json());
            return ExitCode::from(match e {
                EngineError::Request(_) => EXIT_BAD_INPUT,
                _ => EXIT_FAILED,
            });
        }
    };
    drop(text);
    let checked = match call(Tool::VerifyAnswer, json!({ "envelope": envelope }), common) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let data = &checked["data"];
    let status = data["status"].as_str().unwrap_or("");
    let mut summary = format!("{}\n", data["summary"].as_str().unwrap_or(status));
    for s in data["sources"].as_array().into_iter().flatten() {
        if s["changed"].as_bool() == Some(true) {
            summary.push_str(&format!(
                "  source {}: {}\n",
                s["id"].as_str().unwrap_or("?"),
                s["note"].as_str().unwrap_or("changed")
            ));
        }
    }
    let changes = data["changes"].as_array().cloned().unwrap_or_default();
    for c in changes.iter().take(20) {
        summary.push_str(&format!(
            "  {}: {} → {}\n",
            c["at"].as_str().unwrap_or("?"),
            c["old"],
            c["new"]
        ));
    }
    let total = data["changes_total"].as_u64().unwrap_or(0) as usize;
    if total > 20 {
        summary.push_str(&format!(
            "  … and {} more ({} of them in the JSON)\n",
            total - 20,
            changes.len().saturating_sub(20)
        ));
    }
    for r in data["reasons"].as_array().into_iter().flatten() {
        summary.push_str(&format!("  {}\n", r.as_str().unwrap_or("")));
    }
    eprint!("{summary}");
    let printed = print_envelope(&checked, common);
    if printed != ExitCode::SUCCESS {
        return printed;
    }
    ExitCode::from(match status {
        "identical" => 0,
        "data_changed" | "altered" => 1,
        _ => 2,
    })
}
