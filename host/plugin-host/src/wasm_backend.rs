//! The backend of `kind: wasm` datasets: a sandboxed component that scans the dataset folder.
//!
//! Registration compiles the component (cached) and asks it to describe itself, which gives
//! the columns; a query's first use scans once and keeps the rows in memory for this
//! version, like Parquet. The rows' own sources (a document section, a law article) travel
//! with them as [`RowSources`], and the Arrow bytes the plugin returned are hashed as the
//! dataset's content hash.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use tally_plugin_api::provenance::SourceType;
use tally_semantic::definition::{BackendKind, DateValue, PluginRef};

use crate::wasm::{
    self, ColumnType, Compiled, Description, FilterOp, PluginError, PluginLimits, Runtime,
    ScanRequest,
};
use tally_storage::StorageError;
use tally_storage::backend::{
    Backend, LoadedData, Pushed, RowSource, RowSources, ServedFile, Test, sha256_hex,
};
use tally_storage::backend::{BackendDescription, Sandbox};
use tally_storage::text::{Lines, escape_controls};

/// How the refusal of a dataset whose probe scan failed begins (what follows is the scan's
/// error).
pub const PROBE_FAILED: &str = "the probe read of its data at registration failed";

/// A dataset served by a wasm component.
#[derive(Debug)]
pub struct WasmBackend {
    dataset: String,
    folder: PathBuf,
    /// How the component is named in messages: ``component `x.wasm` `` or
    /// ``built-in plugin `documents` ``.
    label: String,
    /// `builtin:<name>` or the component file.
    origin: String,
    runtime: Arc<Runtime>,
    compiled: Arc<Compiled>,
    description: Description,
    config: String,
    limits: PluginLimits,
    schema: SchemaRef,
    /// The component file (when it is one) and every other file of the folder, as stamped
    /// at registration: any change makes a new version.
    files: Vec<ServedFile>,
    /// Why the last scan of the whole data failed, until one succeeds.
    failure: std::sync::Mutex<Option<String>>,
    /// The failed scans, said in the log once per interval.
    failures: crate::failures::FailureLog,
    /// What the probe read at registration returned, with the columns it asked for: the first
    /// whole read asking the same columns is answered from it (checked again, under its own
    /// meter) instead of scanning again. At most the output cap; taken by that read.
    primed: std::sync::Mutex<Option<(Option<Vec<String>>, wasm::ScanResult)>>,
    /// The scans this version asked of its plugin (the probe's included).
    scans: Arc<std::sync::atomic::AtomicU64>,
}

impl WasmBackend {
    /// The scan a load asks of the plugin (the declared columns asked for, the conditions
    /// the plugin says it applies), and those conditions in words.
    fn scan_request(&self, columns: &[String], pushed: &[Pushed]) -> (ScanRequest, Vec<String>) {
        let projection: Vec<String> = columns
            .iter()
            .filter(|c| self.schema.index_of(c).is_ok())
            .cloned()
            .collect();
        let filters: Vec<wasm::Filter> = pushed
            .iter()
            .filter_map(|p| {
                // Equality only: this backend pushes no ranges (`prunes_ranges` is false).
                let Test::Equals(wanted) = &p.test else {
                    return None;
                };
                let ops = &self
                    .description
                    .filters
                    .iter()
                    .find(|f| f.column == p.column)?
                    .ops;
                let op = if wanted.as_slice().len() == 1 && ops.contains(&FilterOp::Eq) {
                    FilterOp::Eq
                } else if ops.contains(&FilterOp::InList) {
                    FilterOp::InList
                } else {
                    return None;
                };
                let column_type = self
                    .description
                    .columns
                    .iter()
                    .find(|c| c.name == p.column)?
                    .data_type;
                // Values go as the column's own type; one that does not read as it (an
                // integer column asked for `abc`) is not pushed: the host's own filter
                // answers it (no row).
                let values = wanted
                    .iter()
                    .map(|v| typed_value(column_type, v))
                    .collect::<Option<Vec<_>>>()?;
                Some(wasm::Filter {
                    column: p.column.clone(),
                    op,
                    values,
                })
            })
            .collect();
        let applied: Vec<String> = pushed
            .iter()
            .filter(|p| filters.iter().any(|f| f.column == p.column))
            .map(Pushed::describe)
            .collect();
        let request = ScanRequest {
            dataset: self.dataset.clone(),
            config: self.config.clone(),
            projection: Some(projection),
            filters,
            limit: None,
        };
        (request, applied)
    }

    /// Compiles the component and asks it to describe itself for this config.
    pub fn register(
        dataset: &str,
        folder: &Path,
        plugin: &PluginRef,
        config: &serde_json::Value,
        limits: PluginLimits,
        code: Option<&crate::code_cache::CodeCache>,
    ) -> Result<WasmBackend, PluginError> {
        let runtime = wasm::runtime()?;
        let (label, bytes, component_file): (String, std::borrow::Cow<'static, [u8]>, _) =
            match plugin {
                PluginRef::Builtin(name) => {
                    let bytes = tally_wasm_plugins::builtin(name).ok_or_else(|| {
                        PluginError::new(
                            format!("there is no built-in wasm plugin `{name}`"),
                            format!(
                                "use one of: {}",
                                tally_wasm_plugins::builtin_names()
                                    .iter()
                                    .map(|n| format!("builtin:{n}"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?;
                    (
                        format!("built-in plugin `{name}`"),
                        std::borrow::Cow::Borrowed(bytes),
                        None,
                    )
                }
                PluginRef::File(relative) => {
                    let path = folder.join(relative);
                    let bytes = std::fs::read(&path).map_err(|e| {
                        PluginError::new(
                            format!("the component `{relative}` cannot be read: {e}"),
                            "put the .wasm component in the dataset folder under that name",
                        )
                    })?;
                    let meta = std::fs::metadata(&path).ok();
                    let file = ServedFile {
                        path: relative.clone(),
                        size: bytes.len() as u64,
                        sha256: String::new(),
                        modified: meta.and_then(|m| m.modified().ok()),
                        object: None,
                    };
                    (
                        format!("component `{relative}`"),
                        std::borrow::Cow::Owned(bytes),
                        Some(file),
                    )
                }
            };
        let compiled = runtime.compile(&label, &bytes, code)?;
        let config_text = config.to_string();
        let description = runtime.describe(&label, &compiled, folder, &limits, &config_text)?;
        let schema = schema_of(&label, &description)?;
        let origin = match plugin {
            PluginRef::Builtin(_) => "built in".to_string(),
            PluginRef::File(f) => format!("from `{f}`"),
        };
        let label = format!(
            "plugin `{}` {} ({origin})",
            description.name, description.version
        );
        let mut files: Vec<ServedFile> = component_file.into_iter().collect();
        let component = files.first().map(|f| f.path.clone());
        for f in folder_files(folder) {
            if Some(&f.path) != component.as_ref() {
                files.push(f);
            }
        }
        let backend = WasmBackend {
            dataset: dataset.to_string(),
            folder: folder.to_path_buf(),
            label,
            origin: match plugin {
                PluginRef::Builtin(name) => format!("builtin:{name}"),
                PluginRef::File(f) => f.clone(),
            },
            runtime,
            compiled,
            description,
            config: config_text,
            limits,
            schema,
            files,
            failure: std::sync::Mutex::default(),
            failures: crate::failures::FailureLog::default(),
            primed: std::sync::Mutex::default(),
            scans: Arc::default(),
        };
        backend.probe()?;
        Ok(backend)
    }

    /// A read of the whole data, checked as a load checks every scan (the Arrow types, the
    /// sources, the files reported): a plugin that describes itself but cannot read its
    /// folder (a wrong path in its config, a bad file, a build that fails past its first
    /// rows) is refused when it registers, so it never enters service: the operator sees it
    /// among the broken datasets with what it wrote to stderr, and a reload to such a build
    /// keeps the last good version serving. It is the read a first query makes; a plugin
    /// whose data fits its output cap reads it well within its deadline.
    fn probe(&self) -> Result<(), PluginError> {
        let columns = column_names(&self.schema);
        let (request, _) = self.scan_request(&columns, &[]);
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let meter = probe_meter(&self.label, self.limits.output_bytes.saturating_mul(4));
        let result = self
            .runtime
            .scan(
                &self.label,
                &self.compiled,
                &self.folder,
                &self.limits,
                &request,
            )
            .map_err(|e| probe_refused(e.message(), e.fix().to_string()))?;
        probe_outcome(
            self.reader()
                .check(&result, &request, &[], &meter)
                .map(drop),
            "this is a fault in the plugin: its author can reproduce it on this dataset folder with `tally plugin test`",
        )?;
        if let Ok(mut primed) = self.primed.lock() {
            *primed = Some((request.projection, result));
        }
        Ok(())
    }

    /// How many scans this version asked of its plugin, its probe read included.
    pub fn scans(&self) -> u64 {
        self.scans.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What reads this dataset's data through the plugin, on any thread.
    fn reader(&self) -> Reader {
        Reader {
            scans: Arc::clone(&self.scans),
            runtime: Arc::clone(&self.runtime),
            compiled: Arc::clone(&self.compiled),
            folder: self.folder.clone(),
            limits: self.limits,
            label: self.label.clone(),
            dataset: self.dataset.clone(),
            schema: self.schema.clone(),
        }
    }

    /// What the plugin says it is and does.
    pub fn description(&self) -> &Description {
        &self.description
    }
}

/// Every column of `schema`, by name, in order: what a probe read asks for.
pub(crate) fn column_names(schema: &SchemaRef) -> Vec<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
}

/// The meter a probe read of `label`'s data reads under: at most `bytes` held.
pub(crate) fn probe_meter(label: &str, bytes: usize) -> tally_storage::memory::Meter {
    let budget = tally_storage::memory::Budget::new(bytes);
    tally_storage::memory::Meter::new(
        budget.reservation(format!("the probe read of {label}")),
        Arc::default(),
        Arc::default(),
    )
}

/// The refusal of a dataset whose probe read failed with `message`. The files it read may
/// still be being written: it is retried when they settle.
pub(crate) fn probe_refused(
    message: impl std::fmt::Display,
    fix: impl Into<String>,
) -> PluginError {
    PluginError::incomplete(format!("{PROBE_FAILED}: {message}"), fix)
}

/// What a probe read that ended with `read` says of the dataset: a read stopped by the probe's
/// memory bound says nothing against the data (it is read whole when prepared, under the
/// server's budget); any other failure refuses it, with `fix`.
pub(crate) fn probe_outcome(read: Result<(), StorageError>, fix: &str) -> Result<(), PluginError> {
    match read {
        Ok(()) | Err(StorageError::Limit { .. }) => Ok(()),
        Err(StorageError::Backend { message, .. }) => Err(probe_refused(message, fix)),
        Err(other) => Err(probe_refused(other, fix)),
    }
}

fn schema_of(label: &str, d: &Description) -> Result<SchemaRef, PluginError> {
    let mut seen = std::collections::HashSet::new();
    let mut fields = Vec::with_capacity(d.columns.len());
    for c in &d.columns {
        if c.name.trim().is_empty() || c.name.starts_with(tally_storage::dataset::RESERVED_PREFIX) {
            return Err(PluginError::new(
                format!("{label} describes a column named `{}`", c.name),
                "column names must be non-empty and not start with `__tally_`",
            ));
        }
        if !seen.insert(c.name.as_str()) {
            return Err(PluginError::new(
                format!("{label} describes the column `{}` twice", c.name),
                "column names must be unique",
            ));
        }
        fields.push(Field::new(&c.name, arrow_type(c.data_type), true));
    }
    for f in &d.filters {
        if !seen.contains(f.column.as_str()) {
            return Err(PluginError::new(
                format!(
                    "{label} declares a filter on `{}`, which is not one of its columns",
                    f.column
                ),
                "declare filters only on described columns",
            ));
        }
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// A pushed-down value as the plugin's column type has it.
pub fn typed_value(column: ColumnType, text: &str) -> Option<wasm::Value> {
    Some(match column {
        ColumnType::Text => wasm::Value::Text(text.to_string()),
        ColumnType::Integer => wasm::Value::Integer(text.trim().parse().ok()?),
        ColumnType::Number => wasm::Value::Number(text.trim().parse().ok()?),
        ColumnType::Boolean => match text.trim().to_ascii_lowercase().as_str() {
            "true" => wasm::Value::Boolean(true),
            "false" => wasm::Value::Boolean(false),
            _ => return None,
        },
    })
}

fn arrow_type(t: ColumnType) -> DataType {
    match t {
        ColumnType::Text => DataType::Utf8,
        ColumnType::Integer => DataType::Int64,
        ColumnType::Number => DataType::Float64,
        ColumnType::Boolean => DataType::Boolean,
    }
}

/// Every file under the folder (hidden ones and `dataset.yaml` included: the definition is a
/// file the plugin may read too), sorted, with size and time.
pub fn folder_files(folder: &Path) -> Vec<ServedFile> {
    let mut out = Vec::new();
    let mut stack = vec![(folder.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, prefix, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() && depth < 8 {
                stack.push((e.path(), path, depth + 1));
            } else if meta.is_file() {
                out.push(ServedFile {
                    path,
                    size: meta.len(),
                    sha256: String::new(),
                    modified: meta.modified().ok(),
                    object: None,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A path a plugin reported, made relative to the dataset folder; `None` if it leaves it.
fn inside(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => return None,
            other => parts.push(other),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Percent-encodes what a URI may not hold literally (non-ASCII, spaces, quotes), keeping
/// everything else as the plugin wrote it.
pub fn encode_uri(uri: &str) -> String {
    let mut out = String::with_capacity(uri.len());
    for c in uri.chars() {
        if c.is_ascii_alphanumeric() || "-._~:/?#[]@!$&'()*+,;=%".contains(c) {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

fn has_scheme(uri: &str) -> bool {
    uri.split_once(':').is_some_and(|(scheme, rest)| {
        !rest.is_empty()
            && scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

#[async_trait]
impl Backend for WasmBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Wasm
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn row_count(&self) -> Option<u64> {
        None
    }

    fn files(&self) -> Vec<ServedFile> {
        self.files.clone()
    }

    fn describe(&self) -> BackendDescription {
        let d = &self.description;
        BackendDescription {
            plugin: Some(d.name.clone()),
            plugin_version: Some(d.version.clone()),
            summary: Some(d.summary.clone()),
            component: Some(self.origin.clone()),
            component_sha256: Some(self.compiled.sha256.clone()),
            filters_applied_by_plugin: Some(d.filters.iter().map(|f| f.column.clone()).collect()),
            sandbox: Some(Sandbox {
                files: "the dataset folder, read-only",
                network: false,
                deadline_ms: self.limits.deadline.as_millis() as u64,
                memory_bytes: self.limits.memory_bytes as u64,
                output_bytes: self.limits.output_bytes as u64,
            }),
            ..BackendDescription::of(BackendKind::Wasm)
        }
    }

    fn read_failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    fn fingerprint(&self) -> Vec<u8> {
        let mut f = self.compiled.sha256.clone().into_bytes();
        f.extend_from_slice(self.config.as_bytes());
        tally_storage::backend::stamp_files(&mut f, &self.files);
        f
    }

    fn pushdown_columns(&self) -> Vec<String> {
        self.description
            .filters
            .iter()
            .filter(|f| f.ops.contains(&FilterOp::Eq) || f.ops.contains(&FilterOp::InList))
            .map(|f| f.column.clone())
            .collect()
    }

    async fn load(
        &self,
        columns: &[String],
        pushed: &[Pushed],
        meter: &tally_storage::memory::Meter,
    ) -> Result<LoadedData, StorageError> {
        let (request, applied) = self.scan_request(columns, pushed);
        let reader = self.reader();
        let meter = meter.clone();
        // The plugin runs on a blocking thread: a scan is CPU work bounded by its deadline.
        let whole = pushed.is_empty();
        // The first whole read asking what the probe asked is answered by the probe's rows.
        let primed = whole
            .then(|| {
                self.primed
                    .lock()
                    .ok()?
                    .take_if(|(asked, _)| *asked == request.projection)
                    .map(|(_, result)| result)
            })
            .flatten();
        let loaded = tokio::task::spawn_blocking(move || match primed {
            Some(result) => reader.check(&result, &request, &applied, &meter),
            None => reader.read(&request, &applied, &meter),
        })
        .await
        .map_err(StorageError::internal)?;
        // The operator's account of a failed scan, on one line (what the plugin wrote to
        // stderr has lines of its own, which would read as log lines): the caller sees the
        // same message.
        // Once per interval with a count: a client retrying a failing dataset must not fill
        // the log.
        if let Err(e) = &loaded
            && let Some(unsaid) = self.failures.admit()
        {
            let one_line = escape_controls(&e.to_string(), Lines::Escaped).into_owned();
            tracing::warn!(
                dataset = %self.dataset,
                "{}: the scan failed: {one_line}{}",
                self.label,
                crate::failures::unsaid(unsaid)
            );
        }
        // A read of the whole data says whether the data can be read (`/health`).
        // A read stopped for the memory budget says nothing of the data.
        if whole
            && !matches!(loaded, Err(StorageError::Limit { .. }))
            && let Ok(mut failure) = self.failure.lock()
        {
            *failure = loaded.as_ref().err().map(ToString::to_string);
        }
        loaded.map(|mut loaded| {
            loaded.notes.dedup();
            loaded
        })
    }
}

/// What reads a dataset's data through its plugin: the scan, then the checks of every load.
struct Reader {
    scans: Arc<std::sync::atomic::AtomicU64>,
    runtime: Arc<Runtime>,
    compiled: Arc<Compiled>,
    folder: PathBuf,
    limits: PluginLimits,
    label: String,
    dataset: String,
    schema: SchemaRef,
}

impl Reader {
    /// Scans with `request` (the conditions `applied` in words, for the extract step) and
    /// checks what came back: the Arrow stream against the description, the files reported
    /// (hashed), the row sources.
    fn read(
        &self,
        request: &ScanRequest,
        applied: &[String],
        meter: &tally_storage::memory::Meter,
    ) -> Result<LoadedData, StorageError> {
        let Reader {
            runtime,
            compiled,
            folder,
            limits,
            label,
            dataset,
            ..
        } = self;
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let result = runtime
            .scan(label, compiled, folder, limits, request)
            .map_err(|e| StorageError::Backend {
                dataset: dataset.clone(),
                message: e.to_string(),
            })?;
        self.check(&result, request, applied, meter)
    }

    /// Checks what a scan with `request` returned and makes it the data of a load.
    fn check(
        &self,
        result: &wasm::ScanResult,
        request: &ScanRequest,
        applied: &[String],
        meter: &tally_storage::memory::Meter,
    ) -> Result<LoadedData, StorageError> {
        let Reader {
            compiled,
            folder,
            label,
            dataset,
            schema,
            ..
        } = self;
        // What the checks say may quote the Arrow stream's own names (escaped like the rest
        // of what the plugin returned, see `wasm::Runtime`).
        let fail = |message: String| StorageError::Backend {
            dataset: dataset.clone(),
            message: escape_controls(&message, Lines::Kept).into_owned(),
        };
        meter.account(result.ipc.len(), 0)?;
        let projection = request.projection.as_deref().unwrap_or_default();
        let (got, batches) = decode(label, &result.ipc, schema, projection, meter, &fail)?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let read = hash_reported_files(label, folder, &result.files).map_err(fail)?;
        let row_sources = row_sources_of(label, result, rows, &read.hashes).map_err(fail)?;
        let mut files = vec![ServedFile {
            path: format!("the output of {label}"),
            size: result.ipc.len() as u64,
            sha256: sha256_hex(&result.ipc),
            modified: None,
            object: None,
        }];
        let files_read = read.files.len();
        files.extend(read.files);
        let mut notes = result.notes.clone();
        notes.extend(read.notes);
        let table = MemTable::try_new(got, vec![batches]).map_err(|e| fail(e.to_string()))?;
        Ok(LoadedData {
            provider: Arc::new(table),
            files,
            extract: Some(format!(
                "{label}, component {}, which read {}{}",
                compiled.sha256,
                match files_read {
                    0 => "no file it reported".to_string(),
                    1 => "1 file of the dataset folder".to_string(),
                    n => format!("{n} files of the dataset folder"),
                },
                if applied.is_empty() {
                    String::new()
                } else {
                    format!(
                        " and applied {} itself, returning {rows} rows",
                        applied.join(" and ")
                    )
                }
            )),
            notes,
            row_sources,
        })
    }
}

fn row_source(
    label: &str,
    i: usize,
    s: &wasm::Source,
    hashes: &HashMap<String, String>,
) -> Result<RowSource, String> {
    let uri = encode_uri(s.uri.trim());
    if !has_scheme(&uri) {
        return Err(format!(
            "{label} gave source {i} the uri `{}`, which is not a URI (it needs a scheme, e.g. https: or urn:)",
            s.uri
        ));
    }
    let source_type = SourceType::parse(&s.source_type).ok_or_else(|| {
        format!(
            "{label} gave source {i} the sourceType `{}`; expected one of {}",
            s.source_type,
            SourceType::ALL
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let date = |what: &str, v: &Option<String>| -> Result<Option<String>, String> {
        match v {
            None => Ok(None),
            Some(d) => DateValue::parse(d)
                .map(|d| Some(d.as_str().to_string()))
                .ok_or_else(|| {
                    format!(
                        "{label} gave source {i} the {what} `{d}`, which is not a date (YYYY-MM-DD) or an RFC 3339 date-time"
                    )
                }),
        }
    };
    let file = s.file.as_deref().and_then(inside);
    Ok(RowSource {
        uri,
        title: s.title.clone(),
        publisher: s.publisher.clone(),
        source_type: source_type.as_str().to_string(),
        locator: s.locator.clone(),
        published_at: date("publishedAt", &s.published_at)?,
        effective_at: date("effectiveAt", &s.effective_at)?,
        content_hash: file.and_then(|f| hashes.get(&f).cloned()),
    })
}

/// The rows a plugin returned, decoded batch by batch, each accounted before the next (a
/// compressed stream may expand far beyond the output cap), after checking that every
/// column asked for came back with the type the plugin described.
fn decode(
    label: &str,
    ipc: &[u8],
    schema: &SchemaRef,
    projection: &[String],
    meter: &tally_storage::memory::Meter,
    fail: &dyn Fn(String) -> StorageError,
) -> Result<(SchemaRef, Vec<RecordBatch>), StorageError> {
    let reader = StreamReader::try_new(std::io::Cursor::new(ipc), None).map_err(|e| {
        fail(format!(
            "{label} returned rows that are not an Arrow IPC stream: {e}"
        ))
    })?;
    let got = reader.schema();
    for name in projection {
        let want = schema
            .field_with_name(name)
            .ok()
            .map(|f| f.data_type().clone());
        match got.field_with_name(name) {
            Ok(f) if Some(f.data_type()) == want.as_ref() => {}
            Ok(f) => {
                return Err(fail(format!(
                    "{label} returned column `{name}` as {}, but described it as {}",
                    f.data_type(),
                    want.map(|t| t.to_string()).unwrap_or_default()
                )));
            }
            Err(_) => {
                return Err(fail(format!(
                    "{label} did not return the column `{name}` it describes"
                )));
            }
        }
    }
    let mut batches = Vec::new();
    for batch in reader {
        let batch =
            batch.map_err(|e| fail(format!("{label} returned a broken Arrow stream: {e}")))?;
        meter.account(batch.get_array_memory_size(), batch.num_rows())?;
        batches.push(batch);
    }
    Ok((got, batches))
}

/// The files a plugin reported reading, hashed as they are now.
struct FilesRead {
    files: Vec<ServedFile>,
    /// Hash by path relative to the dataset folder.
    hashes: HashMap<String, String>,
    /// Reported files the host could not read.
    notes: Vec<String>,
}

/// Hashes the files a plugin reported reading; one outside its dataset folder is refused.
fn hash_reported_files(
    label: &str,
    folder: &Path,
    reported: &[String],
) -> Result<FilesRead, String> {
    let mut read = FilesRead {
        files: Vec::new(),
        hashes: HashMap::new(),
        notes: Vec::new(),
    };
    let mut outside = Vec::new();
    for reported in reported {
        let Some(rel) = inside(reported) else {
            outside.push(reported.clone());
            continue;
        };
        if read.hashes.contains_key(&rel) {
            continue;
        }
        let path = folder.join(&rel);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let sha = sha256_hex(&bytes);
                read.hashes.insert(rel.clone(), sha.clone());
                read.files.push(ServedFile {
                    path: rel,
                    size: bytes.len() as u64,
                    sha256: sha,
                    modified: std::fs::metadata(&path).and_then(|m| m.modified()).ok(),
                    object: None,
                });
            }
            Err(e) => read.notes.push(format!(
                "{label} reported reading `{rel}`, which the host could not read to hash it ({e})"
            )),
        }
    }
    if !outside.is_empty() {
        return Err(format!(
            "{label} reported reading files outside its dataset folder: {}",
            outside.join(", ")
        ));
    }
    Ok(read)
}

/// The per-row sources a plugin returned, checked: one per row, each a source it returned.
fn row_sources_of(
    label: &str,
    result: &wasm::ScanResult,
    rows: usize,
    hashes: &HashMap<String, String>,
) -> Result<Option<Arc<RowSources>>, String> {
    if result.row_sources.is_empty() {
        return Ok(None);
    }
    if result.row_sources.len() != rows {
        return Err(format!(
            "{label} returned {rows} rows but {} row sources",
            result.row_sources.len()
        ));
    }
    let mut sources = Vec::with_capacity(result.sources.len());
    for (i, s) in result.sources.iter().enumerate() {
        sources.push(row_source(label, i, s, hashes)?);
    }
    if let Some(bad) = result
        .row_sources
        .iter()
        .find(|&&i| i as usize >= sources.len())
    {
        return Err(format!(
            "{label} referenced source {bad}, but returned {} sources",
            sources.len()
        ));
    }
    Ok(Some(Arc::new(RowSources {
        sources,
        index: result.row_sources.clone(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_encoded_and_checked() {
        assert_eq!(
            encode_uri("urn:tally:document:d/日本.md"),
            "urn:tally:document:d/%E6%97%A5%E6%9C%AC.md"
        );
        assert_eq!(encode_uri("https://a.b/c d"), "https://a.b/c%20d");
        assert!(has_scheme("urn:x"));
        assert!(has_scheme("https://x"));
        assert!(!has_scheme("docs/a.md"));
        assert!(!has_scheme("1http:x"));
    }

    /// The probe read at registration answers the first whole read that asks the same columns
    /// (the plugin is not asked twice), with the same rows; a later read scans again.
    #[test]
    fn the_probe_read_answers_the_first_read() {
        // Registration blocks (as the catalog's threads do); reads run on a runtime.
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let folder = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(folder.path().join("docs")).unwrap();
        std::fs::write(
            folder.path().join("docs/a.md"),
            "# A\n\nOne.\n\n## B\n\nTwo.\n",
        )
        .unwrap();
        let backend = WasmBackend::register(
            "d",
            folder.path(),
            &PluginRef::Builtin("documents".into()),
            &serde_json::json!({"folder": "docs"}),
            PluginLimits::default(),
            None,
        )
        .expect("registers");
        assert_eq!(backend.scans(), 1, "the probe read");
        let columns = column_names(&backend.schema());
        let meter = probe_meter("the test", 1 << 30);
        let count = |loaded: &LoadedData| {
            loaded
                .row_sources
                .as_ref()
                .map(|r| r.index.len())
                .unwrap_or_default()
        };
        let first = runtime
            .block_on(backend.load(&columns, &[], &meter))
            .expect("reads");
        assert_eq!(backend.scans(), 1, "answered by the probe's rows");
        let again = runtime
            .block_on(backend.load(&columns, &[], &meter))
            .expect("reads");
        assert_eq!(backend.scans(), 2, "a later read scans");
        assert!(count(&first) > 0);
        assert_eq!(count(&first), count(&again));
        assert_eq!(
            first.files[0].sha256, again.files[0].sha256,
            "the same rows"
        );
        // A read of other columns is not answered by it.
        let fresh = WasmBackend::register(
            "d",
            folder.path(),
            &PluginRef::Builtin("documents".into()),
            &serde_json::json!({"folder": "docs"}),
            PluginLimits::default(),
            None,
        )
        .expect("registers");
        runtime
            .block_on(fresh.load(&columns[..1], &[], &meter))
            .expect("reads");
        assert_eq!(fresh.scans(), 2);
    }

    #[test]
    fn reported_paths_stay_inside() {
        assert_eq!(inside("/docs/a.md").as_deref(), Some("docs/a.md"));
        assert_eq!(inside("./a.md").as_deref(), Some("a.md"));
        assert_eq!(inside("../x"), None);
        assert_eq!(inside("/"), None);
    }
}
