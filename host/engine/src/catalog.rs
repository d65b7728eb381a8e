//! The catalog: every dataset folder of a datasets directory, registered or reported broken.
//!
//! Registration reads the definition and the data's metadata (for Parquet, the footer), and
//! checks that they fit: every declared field is a column of the data with a usable type.
//! A dataset that does not fit is listed as broken with its reasons; it never stops the
//! others from being served.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tally_semantic::definition::{BackendKind, DateValue, Diagnostic, load_definition};
use tally_semantic::names;

use crate::backend::{Backend, ParquetBackend};
use crate::dataset::{Dataset, RESERVED_PREFIX, Retrieved, canonical_type};
use crate::wasm::PluginLimits;
use crate::wasm_backend::WasmBackend;

/// The definition file of a dataset folder.
pub const DEFINITION_FILE: &str = "dataset.yaml";
/// Sidecar written by fetchers: `{"fetched_at": …, "fetched_from": …}`.
pub const FETCH_RECORD: &str = ".fetch.json";

/// How datasets are registered: what their plugins may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// The sandbox limits of every wasm plugin call.
    pub plugins: PluginLimits,
    /// Whether native plugins may be loaded (they run with the server's full rights).
    pub allow_native: bool,
}

/// A dataset folder that cannot be served, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Broken {
    /// The folder name.
    pub folder: String,
    /// The file at fault, relative to the datasets directory.
    pub file: String,
    /// Each problem: line, key path, message and fix.
    pub problems: Vec<Problem>,
    /// When an earlier version of this folder was valid, it keeps serving: its version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_version: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key: String,
    pub reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

impl Problem {
    fn from_diagnostic(d: &Diagnostic) -> Problem {
        Problem {
            line: Some(d.line),
            key: d.path.clone(),
            reason: d.message.clone(),
            fix: d.fix.clone(),
        }
    }

    fn plain(reason: impl Into<String>, fix: impl Into<String>) -> Problem {
        Problem {
            line: None,
            key: String::new(),
            reason: reason.into(),
            fix: fix.into(),
        }
    }
}

/// Why a folder could not be registered.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub problems: Vec<Problem>,
    /// The file may still be being written (YAML that does not parse, a Parquet file without
    /// a complete footer): retried once writes settle, not reported before.
    pub maybe_incomplete: bool,
}

impl From<Vec<Problem>> for Refusal {
    fn from(problems: Vec<Problem>) -> Self {
        Refusal {
            problems,
            maybe_incomplete: false,
        }
    }
}

/// What became of one folder at the last scan.
#[derive(Debug, Clone, Default)]
struct FolderState {
    /// The folder's files (names, sizes, times) when last read; `None` reads it again.
    stamp: Option<String>,
    served: Option<Arc<Dataset>>,
    broken: Option<Broken>,
    disabled: bool,
}

/// Every dataset of a directory, at one moment. Immutable: a change builds a new catalog,
/// swapped in whole, so a call sees one consistent snapshot from start to end.
#[derive(Debug, Default)]
pub struct Catalog {
    pub datasets: BTreeMap<String, Arc<Dataset>>,
    pub broken: Vec<Broken>,
    /// Folders switched off with `enabled: false`.
    pub disabled: Vec<String>,
    /// Folders whose files are still being written; retried when writes settle.
    pub pending: Vec<String>,
    folders: BTreeMap<String, FolderState>,
}

/// How a scan changed the catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    /// Folders newly reported broken (or whose problems changed).
    pub broken: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.updated.is_empty()
            && self.removed.is_empty()
            && self.broken.is_empty()
    }
}

/// The files of a folder and its subfolders as (path, size, modified) — cheap to read, and
/// changed by any write — plus the newest modification time. Plugins may read subfolders
/// (a folder of documents), so a change there is a change of the dataset.
fn stamp(folder: &Path) -> (String, Option<SystemTime>) {
    let mut parts: Vec<String> = Vec::new();
    let mut newest: Option<SystemTime> = None;
    let mut stack = vec![(folder.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, prefix, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let Ok(meta) = e.metadata() else { continue };
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            if meta.is_dir() {
                if depth < 8 && parts.len() < 100_000 {
                    stack.push((e.path(), format!("{name}/"), depth + 1));
                }
                continue;
            }
            if !meta.is_file() {
                continue;
            }
            let modified = meta.modified().ok();
            newest = newest.max(modified);
            let nanos = modified
                .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            parts.push(format!("{name}:{}:{nanos}", meta.len()));
        }
    }
    parts.sort();
    (parts.join("|"), newest)
}

impl Catalog {
    /// Scans `dir` from scratch.
    pub fn load(dir: &Path, options: &Options) -> Catalog {
        Catalog::scan(dir, &Catalog::default(), Duration::ZERO, options).0
    }

    /// Scans `dir` again: unchanged folders keep their registered dataset (and its caches);
    /// changed ones are validated completely before they replace anything. A folder that
    /// stops being valid keeps its last good version serving and is listed as broken; one
    /// whose files changed less than `settle` ago and look half-written is retried later.
    pub fn scan(
        dir: &Path,
        previous: &Catalog,
        settle: Duration,
        options: &Options,
    ) -> (Catalog, Changes) {
        let mut next = Catalog::default();
        let mut changes = Changes::default();
        let mut folders: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .collect(),
            Err(e) => {
                tracing::error!("cannot read the datasets directory {}: {e}", dir.display());
                Vec::new()
            }
        };
        folders.sort();
        let now = SystemTime::now();
        for folder in folders {
            let name = folder
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !folder.join(DEFINITION_FILE).is_file() {
                continue;
            }
            let (current, newest) = stamp(&folder);
            let before = previous.folders.get(&name).cloned().unwrap_or_default();
            let state = if before.stamp.as_deref() == Some(current.as_str()) {
                before.clone()
            } else {
                // Named relative to the datasets directory: messages never show a machine path.
                let label = format!("{name}/{DEFINITION_FILE}");
                match register(&folder, &name, &label, options) {
                    Ok(Some(dataset)) => {
                        for w in &dataset.warnings {
                            tracing::warn!("{w}");
                        }
                        FolderState {
                            stamp: Some(current),
                            served: Some(Arc::new(dataset)),
                            ..FolderState::default()
                        }
                    }
                    Ok(None) => FolderState {
                        stamp: Some(current),
                        disabled: true,
                        ..FolderState::default()
                    },
                    Err(refusal) => {
                        let fresh = newest
                            .and_then(|t| now.duration_since(t).ok())
                            .is_none_or(|age| age < settle);
                        if refusal.maybe_incomplete && fresh {
                            tracing::info!(folder = %name, "files are still being written; retrying when they settle");
                            next.pending.push(name.clone());
                            FolderState {
                                stamp: None,
                                ..before.clone()
                            }
                        } else {
                            for p in &refusal.problems {
                                tracing::warn!("{label}: {} {}", p.key, p.reason);
                            }
                            let serving = before.served.clone();
                            FolderState {
                                stamp: Some(current),
                                broken: Some(Broken {
                                    folder: name.clone(),
                                    file: label,
                                    problems: refusal.problems,
                                    serving_version: serving.as_ref().map(|d| d.version.clone()),
                                }),
                                served: serving,
                                disabled: false,
                            }
                        }
                    }
                }
            };
            if let Some(ds) = &state.served {
                let id = ds.def.id.clone();
                if let Some(existing) = next.datasets.get(&id) {
                    next.broken.push(Broken {
                        folder: name.clone(),
                        file: format!("{name}/{DEFINITION_FILE}"),
                        problems: vec![Problem::plain(
                            format!(
                                "dataset id `{id}` is already served from folder `{}`",
                                existing
                                    .folder
                                    .file_name()
                                    .map(|n| n.to_string_lossy().into_owned())
                                    .unwrap_or_default()
                            ),
                            "give one of them another `id:` (or rename the folder)",
                        )],
                        serving_version: None,
                    });
                    next.folders.insert(
                        name,
                        FolderState {
                            stamp: state.stamp,
                            ..FolderState::default()
                        },
                    );
                    continue;
                }
                next.datasets.insert(id, Arc::clone(ds));
            }
            if let Some(b) = &state.broken {
                next.broken.push(b.clone());
            }
            if state.disabled {
                next.disabled.push(name.clone());
            }
            next.folders.insert(name, state);
        }

        for (id, ds) in &next.datasets {
            match previous.datasets.get(id) {
                None => changes.added.push(id.clone()),
                Some(old) if old.version != ds.version => changes.updated.push(id.clone()),
                Some(_) => {}
            }
        }
        for id in previous.datasets.keys() {
            if !next.datasets.contains_key(id) {
                changes.removed.push(id.clone());
            }
        }
        for b in &next.broken {
            let same = previous.broken.iter().any(|p| {
                p.folder == b.folder
                    && p.problems.len() == b.problems.len()
                    && p.problems
                        .iter()
                        .zip(&b.problems)
                        .all(|(x, y)| x.reason == y.reason)
            });
            if !same {
                changes.broken.push(b.folder.clone());
            }
        }
        (next, changes)
    }

    pub fn ids(&self) -> Vec<&str> {
        self.datasets.keys().map(String::as_str).collect()
    }
}

/// Registers one folder: `Ok(None)` when it is disabled.
pub fn register(
    folder: &Path,
    folder_name: &str,
    label: &str,
    options: &Options,
) -> Result<Option<Dataset>, Refusal> {
    let text = std::fs::read_to_string(folder.join(DEFINITION_FILE)).map_err(|e| Refusal {
        problems: vec![Problem::plain(
            format!("cannot read the file: {e}"),
            "make it a readable UTF-8 file",
        )],
        maybe_incomplete: true,
    })?;
    let loaded = load_definition(label, folder_name, &text).map_err(|e| {
        let errors: Vec<&Diagnostic> = e.errors().collect();
        // A file cut off mid-write does not parse (or is empty); anything else is a mistake.
        let maybe_incomplete = errors.iter().any(|d| {
            d.message.starts_with("the file is not valid YAML") || d.message == "the file is empty"
        });
        Refusal {
            problems: errors.into_iter().map(Problem::from_diagnostic).collect(),
            maybe_incomplete,
        }
    })?;
    let def = loaded.dataset;
    if !def.enabled {
        return Ok(None);
    }
    let reserved: Vec<Problem> = def
        .fields
        .iter()
        .filter(|f| f.name.starts_with(RESERVED_PREFIX))
        .map(|f| {
            Problem::plain(
                format!(
                    "field name `{}` starts with `{RESERVED_PREFIX}`, which Tally reserves",
                    f.name
                ),
                "rename the column",
            )
        })
        .collect();
    if !reserved.is_empty() {
        return Err(reserved.into());
    }

    let backend: Arc<dyn Backend> = match def.backend.kind {
        BackendKind::Parquet => {
            let path = folder.join(&def.data_file);
            if !path.is_file() {
                // The definition may have been copied before its data.
                return Err(Refusal {
                    problems: vec![Problem {
                        line: None,
                        key: "data_file".into(),
                        reason: format!(
                            "the data file `{}` is not in the dataset folder",
                            def.data_file
                        ),
                        fix: "put the Parquet file there, or name it with `data_file:`".into(),
                    }],
                    maybe_incomplete: true,
                });
            }
            let backend =
                ParquetBackend::register(&def.id, folder, &def.data_file).map_err(|e| Refusal {
                    maybe_incomplete: matches!(e, tally_plugin_parquet::Error::Format { .. }),
                    problems: vec![Problem {
                        line: None,
                        key: "data_file".into(),
                        reason: e.to_string(),
                        fix: "write a complete Parquet file".into(),
                    }],
                })?;
            Arc::new(backend)
        }
        BackendKind::Wasm => {
            let Some(plugin) = &def.backend.plugin else {
                return Err(Refusal::from(vec![Problem::plain(
                    "a wasm backend names no component",
                    "add `component: <file>.wasm` (a file in this folder) or `component: builtin:<name>` under `backend:`",
                )]));
            };
            if let tally_semantic::definition::PluginRef::File(f) = plugin
                && !folder.join(f).is_file()
            {
                // The definition may have been copied before its component.
                return Err(Refusal {
                    problems: vec![Problem {
                        line: None,
                        key: "backend.component".into(),
                        reason: format!("the component `{f}` is not in the dataset folder"),
                        fix: "put the .wasm component there, or name a built-in one with `builtin:<name>`".into(),
                    }],
                    maybe_incomplete: true,
                });
            }
            let backend = WasmBackend::register(
                &def.id,
                folder,
                plugin,
                &def.backend.config,
                options.plugins,
            )
            .map_err(|e| Refusal {
                maybe_incomplete: e.maybe_incomplete,
                problems: vec![Problem {
                    line: None,
                    key: "backend".into(),
                    reason: e.message,
                    fix: e.fix,
                }],
            })?;
            Arc::new(backend)
        }
        BackendKind::Native => {
            let Some(tally_semantic::definition::PluginRef::File(library)) = &def.backend.plugin
            else {
                return Err(Refusal::from(vec![Problem::plain(
                    "a native backend names no library file",
                    "add `library: <file>` (a shared library in this folder) under `backend:`",
                )]));
            };
            if !options.allow_native {
                return Err(Refusal::from(vec![Problem {
                    line: None,
                    key: "backend.kind".into(),
                    reason: format!(
                        "native plugins are not allowed on this server, so `{library}` was not loaded: a native plugin runs with the server's full rights"
                    ),
                    fix: "start tally with --allow-native (or TALLY_ALLOW_NATIVE=1) if you trust this library, or serve the data another way".into(),
                }]));
            }
            if !folder.join(library).is_file() {
                return Err(Refusal {
                    problems: vec![Problem {
                        line: None,
                        key: "backend.library".into(),
                        reason: format!("the library `{library}` is not in the dataset folder"),
                        fix: "put the shared library there under that name".into(),
                    }],
                    maybe_incomplete: true,
                });
            }
            let backend = crate::native::NativeBackend::register(
                &def.id,
                folder,
                library,
                &def.backend.config,
            )
            .map_err(|e| Refusal {
                maybe_incomplete: e.maybe_incomplete,
                problems: vec![Problem {
                    line: None,
                    key: "backend".into(),
                    reason: e.message,
                    fix: e.fix,
                }],
            })?;
            Arc::new(backend)
        }
    };

    // The definition must fit the data.
    let schema = backend.schema();
    let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut problems = Vec::new();
    for (i, f) in def.fields.iter().enumerate() {
        match schema.field_with_name(&f.name) {
            Ok(col) => {
                if let Err(m) = canonical_type(f.data_type, col.data_type()) {
                    problems.push(Problem {
                        line: Some(f.pos.line),
                        key: format!("fields[{i}].data_type"),
                        reason: format!("field `{}` {m}", f.name),
                        fix: "declare the type the column has (data_type: string, integer or number), or fix the data".into(),
                    });
                }
            }
            Err(_) => {
                let ranked = names::rank(&f.name, columns.iter().copied());
                let near: Vec<&str> = ranked.into_iter().take(3).collect();
                problems.push(Problem {
                    line: Some(f.pos.line),
                    key: format!("fields[{i}].name"),
                    reason: format!("field `{}` is not a column of {}", f.name, def.data_file),
                    fix: format!(
                        "use the column's exact name; closest columns: {}",
                        near.join(", ")
                    ),
                });
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems.into());
    }
    let undeclared: Vec<String> = columns
        .iter()
        .filter(|c| def.field(c).is_none())
        .map(|c| c.to_string())
        .collect();

    let (retrieved, fetched_from) = retrieval(folder, &def.retrieved_at, &backend);
    let mut hasher = Sha256::new();
    hasher.update(text.as_bytes());
    for file in backend.files() {
        hasher.update(file.path.as_bytes());
        hasher.update(file.size.to_le_bytes());
    }
    hasher.update(backend.fingerprint());
    let version: String = hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();

    Ok(Some(Dataset::new(
        def,
        folder.to_path_buf(),
        label.to_string(),
        loaded.warnings,
        backend,
        undeclared,
        retrieved,
        fetched_from,
        version,
    )))
}

/// The retrieval date: `.fetch.json`, else the definition's `retrieved_at`, else the data
/// file's modification time.
fn retrieval(
    folder: &Path,
    retrieved_at: &Option<DateValue>,
    backend: &Arc<dyn Backend>,
) -> (Retrieved, Option<String>) {
    if let Ok(text) = std::fs::read_to_string(folder.join(FETCH_RECORD)) {
        match serde_json::from_str::<Value>(&text) {
            Ok(v) => {
                let from = v
                    .get("fetched_from")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if let Some(date) = v
                    .get("fetched_at")
                    .and_then(Value::as_str)
                    .and_then(DateValue::parse)
                {
                    return (Retrieved::FetchRecord(date), from);
                }
                tracing::warn!(
                    "{}: `fetched_at` is missing or not a date; ignored",
                    folder.join(FETCH_RECORD).display()
                );
            }
            Err(e) => tracing::warn!(
                "{}: not JSON ({e}); ignored",
                folder.join(FETCH_RECORD).display()
            ),
        }
    }
    if let Some(d) = retrieved_at {
        return (Retrieved::Definition(d.clone()), None);
    }
    let modified = backend.files().iter().filter_map(|f| f.modified).max();
    match modified {
        Some(m) => {
            let t: chrono::DateTime<chrono::Utc> = m.into();
            (
                Retrieved::FileModified(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                None,
            )
        }
        None => (Retrieved::Unknown, None),
    }
}
