//! A wasm plugin tried on a dataset folder the way the server would call it, with every
//! answer checked and measured: for `tally plugin test` (and the people who write plugins).
//!
//! It compiles the component (its API version checked), calls `describe` with the dataset's
//! config, `scan`s everything, and then scans once per column the plugin says it filters,
//! with a value the full scan holds. Every problem names the plugin, its version and the
//! function, and says what was expected and what came back, in the data's terms.

use std::path::Path;
use std::time::Duration;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;

use crate::PluginError;
use crate::wasm::{
    self, CallStats, ColumnType, Compiled, Description, FilterOp, PluginLimits, Runtime,
    ScanRequest, ScanResult,
};

/// A filterable column tried with one value.
#[derive(Debug, Clone)]
pub struct FilterCheck {
    pub column: String,
    pub value: String,
    /// Rows with the value in the full scan.
    pub expected: usize,
    /// Rows with the value in the filtered scan.
    pub got: usize,
    /// Rows of the filtered scan in all (those without the value are filtered again by the
    /// host: slower, never wrong).
    pub returned: usize,
}

/// What the plugin did.
#[derive(Debug, Clone)]
pub struct Probe {
    pub name: String,
    pub version: String,
    pub summary: String,
    pub api_version: &'static str,
    pub sha256: String,
    pub size: u64,
    pub columns: Vec<(String, ColumnType)>,
    pub filterable: Vec<String>,
    pub describe: CallStats,
    pub scan: CallStats,
    /// Whether the full scan answered (`rows` and what follows say nothing when not).
    pub scanned: bool,
    pub rows: usize,
    pub output_bytes: usize,
    /// The first rows, as text, in the described column order.
    pub sample: Vec<Vec<String>>,
    /// The source (title and locator) of each sampled row, when rows have sources.
    pub sample_sources: Vec<String>,
    pub sources: usize,
    pub files: Vec<String>,
    pub notes: Vec<String>,
    pub filters: Vec<FilterCheck>,
    /// Everything found wrong; empty when the plugin did all it should.
    pub problems: Vec<String>,
}

pub fn column_type_name(t: ColumnType) -> &'static str {
    match t {
        ColumnType::Text => "text",
        ColumnType::Integer => "integer",
        ColumnType::Number => "number",
        ColumnType::Boolean => "boolean",
    }
}

fn arrow_type(t: ColumnType) -> DataType {
    match t {
        ColumnType::Text => DataType::Utf8,
        ColumnType::Integer => DataType::Int64,
        ColumnType::Number => DataType::Float64,
        ColumnType::Boolean => DataType::Boolean,
    }
}

/// Runs the plugin `bytes` on `folder` with `config` (the dataset's `backend.config`).
/// `Err` when it cannot even describe itself (not a component, another API version, a trap
/// in `describe`); otherwise the probe, with its problems.
pub fn probe(
    label: &str,
    bytes: &[u8],
    folder: &Path,
    config: &serde_json::Value,
    limits: &PluginLimits,
    dataset: &str,
    sample_rows: usize,
) -> Result<Probe, PluginError> {
    let runtime = wasm::runtime()?;
    let compiled = runtime.compile(label, bytes, None)?;
    let config_text = config.to_string();
    let described = runtime.describe(label, &compiled, folder, limits, &config_text)?;
    let describe_stats = wasm::last_call_stats().unwrap_or_default();
    let plugin = Plugin {
        runtime: &runtime,
        compiled: &compiled,
        label: format!("plugin `{}` {}", described.name, described.version),
        folder,
        limits,
        dataset,
        config_text,
    };
    let label = &plugin.label;
    let (columns, filterable, mut problems) = declared(label, &described);
    let scanned = plugin.scan(&plugin.request(Vec::new()));
    // What is known so far; the scans below fill in the rest.
    let mut probe = Probe {
        name: described.name,
        version: described.version,
        summary: described.summary,
        api_version: compiled.api_version,
        sha256: compiled.sha256.clone(),
        size: compiled.size,
        columns,
        filterable,
        describe: describe_stats,
        scan: wasm::last_call_stats().unwrap_or_default(),
        scanned: scanned.is_ok(),
        rows: 0,
        output_bytes: 0,
        sample: Vec::new(),
        sample_sources: Vec::new(),
        sources: 0,
        files: Vec::new(),
        notes: Vec::new(),
        filters: Vec::new(),
        problems: Vec::new(),
    };
    let full = match scanned {
        Ok(r) => r,
        Err(e) => {
            problems.push(e.message().to_string());
            probe.problems = problems;
            return Ok(probe);
        }
    };
    let (columns, filterable) = (probe.columns.clone(), probe.filterable.clone());
    let batches = check_output(label, &full, &columns, &mut problems);
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    check_sources(label, &full, rows, folder, &mut problems);
    let (sample, sample_sources) = sample_of(&batches, &full, &columns, sample_rows);

    let mut notes = full.notes.clone();
    if rows > 1 {
        plugin.scan_limited(&columns, &mut problems, &mut notes);
    }
    let filters = plugin.scan_filtered(&filterable, &columns, &batches, &mut problems);
    probe.rows = rows;
    probe.output_bytes = full.ipc.len();
    probe.sample = sample;
    probe.sample_sources = sample_sources;
    probe.sources = full.sources.len();
    probe.files = full.files;
    probe.notes = notes;
    probe.filters = filters;
    probe.problems = problems;
    Ok(probe)
}

/// What `describe` declares: the columns, those that can be filtered on, and the filters
/// declared on columns it does not have, as problems.
fn declared(
    label: &str,
    described: &Description,
) -> (Vec<(String, ColumnType)>, Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let columns: Vec<(String, ColumnType)> = described
        .columns
        .iter()
        .map(|c| (c.name.clone(), c.data_type))
        .collect();
    let filterable: Vec<String> = described
        .filters
        .iter()
        .filter(|f| f.ops.contains(&FilterOp::Eq) || f.ops.contains(&FilterOp::InList))
        .map(|f| f.column.clone())
        .collect();
    for f in &described.filters {
        if !columns.iter().any(|(n, _)| n == &f.column) {
            problems.push(format!(
                "{label}, describe: it declares a filter on `{}`, which is not one of its columns",
                f.column
            ));
        }
    }
    (columns, filterable, problems)
}

/// A described plugin, scanned on its dataset folder as the server would.
struct Plugin<'a> {
    runtime: &'a Runtime,
    compiled: &'a Compiled,
    /// The plugin's name and version, as problems name it.
    label: String,
    folder: &'a Path,
    limits: &'a PluginLimits,
    dataset: &'a str,
    /// The dataset's config, as JSON text.
    config_text: String,
}

impl Plugin<'_> {
    /// A scan of the dataset with `filters`.
    fn request(&self, filters: Vec<wasm::Filter>) -> ScanRequest {
        ScanRequest {
            dataset: self.dataset.to_string(),
            config: self.config_text.clone(),
            projection: None,
            filters,
            limit: None,
        }
    }

    /// Runs one scan in the plugin's sandbox.
    fn scan(&self, request: &ScanRequest) -> Result<ScanResult, PluginError> {
        self.runtime.scan(
            &self.label,
            self.compiled,
            self.folder,
            self.limits,
            request,
        )
    }

    /// Scans with a limit of 1 row, adding what is wrong to `problems` and a note when it
    /// returns more rows.
    fn scan_limited(
        &self,
        columns: &[(String, ColumnType)],
        problems: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) {
        let label = &self.label;
        // A scan with a limit: the server does not send one (every answer says how many
        // records matched in all, and a scan is kept for the dataset version), but the
        // contract has it.
        let limited = ScanRequest {
            limit: Some(1),
            ..self.request(Vec::new())
        };
        match self.scan(&limited) {
            Ok(result) => {
                let mut found = Vec::new();
                let got: usize = check_output(label, &result, columns, &mut found)
                    .iter()
                    .map(RecordBatch::num_rows)
                    .sum();
                problems.extend(found);
                if got > 1 {
                    notes.push(format!(
                        "with a limit of 1 row it returned {got} rows (allowed, but `Rows::is_full` lets it stop early)"
                    ));
                }
            }
            Err(e) => problems.push(format!("{} (with a limit of 1 row)", e.message())),
        }
    }

    /// Scans once per filterable column, with the first value the full scan (`batches`)
    /// holds, adding what is wrong to `problems`: each column tried.
    fn scan_filtered(
        &self,
        filterable: &[String],
        columns: &[(String, ColumnType)],
        batches: &[RecordBatch],
        problems: &mut Vec<String>,
    ) -> Vec<FilterCheck> {
        let label = &self.label;
        let mut filters = Vec::new();
        for column in filterable {
            let Some(column_type) = columns.iter().find(|(n, _)| n == column).map(|(_, t)| *t)
            else {
                continue;
            };
            let Some(value) = first_value(batches, column) else {
                continue;
            };
            let expected = count_value(batches, column, &value);
            let Some(typed) = crate::wasm_backend::typed_value(column_type, &value) else {
                continue;
            };
            let filter = wasm::Filter {
                column: column.clone(),
                op: FilterOp::Eq,
                values: vec![typed],
            };
            match self.scan(&self.request(vec![filter])) {
                Ok(result) => {
                    let mut found = Vec::new();
                    let batches = check_output(label, &result, columns, &mut found);
                    problems.extend(found);
                    let got = count_value(&batches, column, &value);
                    let returned = batches.iter().map(RecordBatch::num_rows).sum();
                    if got < expected {
                        problems.push(format!(
                            "{label}, scan with the filter {column} = `{value}`: it returned {got} rows with that value, but a scan without the filter has {expected}; a plugin may return more rows than asked, never fewer"
                        ));
                    }
                    filters.push(FilterCheck {
                        column: column.clone(),
                        value,
                        expected,
                        got,
                        returned,
                    });
                }
                Err(e) => problems.push(format!(
                    "{} (with the filter {column} = `{value}`)",
                    e.message()
                )),
            }
        }
        filters
    }
}

/// The rows of a scan, checked against what the plugin described: an Arrow IPC stream with
/// every described column, of its type.
fn check_output(
    label: &str,
    result: &ScanResult,
    columns: &[(String, ColumnType)],
    problems: &mut Vec<String>,
) -> Vec<RecordBatch> {
    let reader = match StreamReader::try_new(std::io::Cursor::new(&result.ipc), None) {
        Ok(r) => r,
        Err(e) => {
            problems.push(format!(
                "{label}, scan: its rows are not an Arrow IPC stream ({e})"
            ));
            return Vec::new();
        }
    };
    let schema = reader.schema();
    for (name, t) in columns {
        match schema.field_with_name(name) {
            Ok(f) if f.data_type() == &arrow_type(*t) => {}
            Ok(f) => problems.push(format!(
                "{label}, scan: column `{name}` comes back as Arrow {}, but describe says {} (Arrow {})",
                f.data_type(),
                column_type_name(*t),
                arrow_type(*t)
            )),
            Err(_) => problems.push(format!(
                "{label}, scan: column `{name}`, which describe lists, is missing from the rows"
            )),
        }
    }
    for f in schema.fields() {
        if !columns.iter().any(|(n, _)| n == f.name()) {
            problems.push(format!(
                "{label}, scan: it returns a column `{}` that describe does not list (the host ignores it)",
                f.name()
            ));
        }
    }
    let mut batches = Vec::new();
    for batch in reader {
        match batch {
            Ok(b) => batches.push(b),
            Err(e) => {
                problems.push(format!(
                    "{label}, scan: the Arrow stream breaks after {} rows ({e})",
                    batches.iter().map(RecordBatch::num_rows).sum::<usize>()
                ));
                break;
            }
        }
    }
    batches
}

/// Row sources: one index per row into the sources, or none at all; files inside the
/// folder.
fn check_sources(
    label: &str,
    result: &ScanResult,
    rows: usize,
    folder: &Path,
    problems: &mut Vec<String>,
) {
    if !result.row_sources.is_empty() && result.row_sources.len() != rows {
        problems.push(format!(
            "{label}, scan: it gives {} row sources for {rows} rows (one per row, or none)",
            result.row_sources.len()
        ));
    }
    if let Some((row, index)) = result
        .row_sources
        .iter()
        .enumerate()
        .find(|(_, i)| **i as usize >= result.sources.len())
    {
        problems.push(format!(
            "{label}, scan: row {} names source {index}, but there are {} sources (indexes 0 to {})",
            row + 1,
            result.sources.len(),
            result.sources.len().saturating_sub(1)
        ));
    }
    for (i, s) in result.sources.iter().enumerate() {
        if !s.uri.contains(':') {
            problems.push(format!(
                "{label}, scan: source {i} has the uri `{}`, which is not a URI (it needs a scheme, e.g. https: or urn:)",
                s.uri
            ));
        }
        if let Some(file) = &s.file
            && !in_folder(folder, file)
        {
            problems.push(format!(
                "{label}, scan: source {i} names the file `{file}`, which is not in the dataset folder"
            ));
        }
    }
    for file in &result.files {
        if !in_folder(folder, file) {
            problems.push(format!(
                "{label}, scan: it reports reading `{file}`, which is not in the dataset folder"
            ));
        }
    }
}

/// A path as the plugin sees it (relative, or from the folder's root `/`) names a file
/// inside the dataset folder.
fn in_folder(folder: &Path, file: &str) -> bool {
    let relative = Path::new(file.trim_start_matches('/'));
    relative.components().all(|c| {
        matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    }) && folder.join(relative).is_file()
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a ArrayRef> {
    batch.schema().index_of(name).ok().map(|i| batch.column(i))
}

fn first_value(batches: &[RecordBatch], name: &str) -> Option<String> {
    for b in batches {
        let a = column(b, name)?;
        for r in 0..a.len() {
            if a.is_valid(r) {
                return array_value_to_string(a, r).ok();
            }
        }
    }
    None
}

fn count_value(batches: &[RecordBatch], name: &str, value: &str) -> usize {
    let mut n = 0;
    for b in batches {
        let Some(a) = column(b, name) else { continue };
        for r in 0..a.len() {
            if a.is_valid(r) && array_value_to_string(a, r).is_ok_and(|v| v == value) {
                n += 1;
            }
        }
    }
    n
}

fn sample_of(
    batches: &[RecordBatch],
    result: &ScanResult,
    columns: &[(String, ColumnType)],
    n: usize,
) -> (Vec<Vec<String>>, Vec<String>) {
    let mut rows = Vec::new();
    let mut sources = Vec::new();
    let mut index = 0usize;
    'outer: for b in batches {
        for r in 0..b.num_rows() {
            if rows.len() >= n {
                break 'outer;
            }
            rows.push(
                columns
                    .iter()
                    .map(|(name, _)| match column(b, name) {
                        Some(a) if a.is_valid(r) => array_value_to_string(a, r).unwrap_or_default(),
                        _ => "null".to_string(),
                    })
                    .collect(),
            );
            if let Some(s) = result
                .row_sources
                .get(index)
                .and_then(|i| result.sources.get(*i as usize))
            {
                sources.push(match &s.locator {
                    Some(l) => format!("{} — {l} ({})", s.title, s.uri),
                    None => format!("{} ({})", s.title, s.uri),
                });
            }
            index += 1;
        }
    }
    (rows, sources)
}

/// A duration in words for the report.
pub fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
