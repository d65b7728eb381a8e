//! The catalog: every dataset folder of a datasets directory, registered or reported broken.
//!
//! Registration reads the definition and the data's metadata (for Parquet, the footer), and
//! checks that they fit: every declared field is a column of the data with a usable type.
//! A dataset that does not fit is listed as broken with its reasons; it never stops the
//! others from being served.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tally_semantic::definition::{BackendKind, DateValue, Diagnostic, Severity, load_definition};
use tally_semantic::names;

use crate::backend::{Backend, ParquetBackend};
use crate::dataset::{Dataset, RESERVED_PREFIX, Retrieved, canonical_type};

/// The definition file of a dataset folder.
pub const DEFINITION_FILE: &str = "dataset.yaml";
/// Sidecar written by fetchers: `{"fetched_at": …, "fetched_from": …}`.
pub const FETCH_RECORD: &str = ".fetch.json";

/// A dataset folder that cannot be served, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Broken {
    /// The folder name.
    pub folder: String,
    /// The file at fault, relative to the datasets directory.
    pub file: String,
    /// Each problem: line, key path, message and fix.
    pub problems: Vec<Problem>,
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

/// Every dataset of a directory, at one moment.
#[derive(Debug, Default)]
pub struct Catalog {
    pub datasets: BTreeMap<String, Arc<Dataset>>,
    pub broken: Vec<Broken>,
    /// Datasets switched off with `enabled: false`.
    pub disabled: Vec<String>,
}

impl Catalog {
    /// Scans `dir`: one dataset per sub-folder holding a `dataset.yaml`.
    pub fn load(dir: &Path) -> Catalog {
        let mut catalog = Catalog::default();
        let mut folders: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .collect(),
            Err(e) => {
                tracing::error!("cannot read the datasets directory {}: {e}", dir.display());
                return catalog;
            }
        };
        folders.sort();
        for folder in folders {
            let folder_name = folder
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !folder.join(DEFINITION_FILE).is_file() {
                continue;
            }
            // Named relative to the datasets directory: messages never show a machine path.
            let label = format!("{folder_name}/{DEFINITION_FILE}");
            match register(&folder, &folder_name, &label) {
                Ok(Some(dataset)) => {
                    let id = dataset.def.id.clone();
                    if let Some(existing) = catalog.datasets.get(&id) {
                        catalog.broken.push(Broken {
                            folder: folder_name,
                            file: label,
                            problems: vec![Problem::plain(
                                format!(
                                    "dataset id `{id}` is already served from folder {}",
                                    existing.folder.display()
                                ),
                                "give one of them another `id:` (or rename the folder)",
                            )],
                        });
                        continue;
                    }
                    for w in &dataset.warnings {
                        tracing::warn!("{w}");
                    }
                    catalog.datasets.insert(id, Arc::new(dataset));
                }
                Ok(None) => catalog.disabled.push(folder_name),
                Err(problems) => {
                    for p in &problems {
                        tracing::warn!("{label}: {} {}", p.key, p.reason);
                    }
                    catalog.broken.push(Broken {
                        folder: folder_name,
                        file: label,
                        problems,
                    });
                }
            }
        }
        catalog
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
) -> Result<Option<Dataset>, Vec<Problem>> {
    let text = std::fs::read_to_string(folder.join(DEFINITION_FILE)).map_err(|e| {
        vec![Problem::plain(
            format!("cannot read the file: {e}"),
            "make it a readable UTF-8 file",
        )]
    })?;
    let loaded = load_definition(label, folder_name, &text).map_err(|e| {
        e.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(Problem::from_diagnostic)
            .collect::<Vec<_>>()
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
        return Err(reserved);
    }

    let backend: Arc<dyn Backend> = match def.backend.kind {
        BackendKind::Parquet => {
            let path = folder.join(&def.data_file);
            if !path.is_file() {
                return Err(vec![Problem {
                    line: None,
                    key: "data_file".into(),
                    reason: format!(
                        "the data file `{}` is not in the dataset folder",
                        def.data_file
                    ),
                    fix: "put the Parquet file there, or name it with `data_file:`".into(),
                }]);
            }
            let backend =
                ParquetBackend::register(&def.id, folder, &def.data_file).map_err(|e| {
                    vec![Problem {
                        line: None,
                        key: "data_file".into(),
                        reason: e.to_string(),
                        fix: "write a complete Parquet file".into(),
                    }]
                })?;
            Arc::new(backend)
        }
        other => {
            return Err(vec![Problem {
                line: None,
                key: "backend.kind".into(),
                reason: format!("backend kind `{}` is not available in this build yet", other.as_str()),
                fix: "use the built-in Parquet backend (no `backend:` key) until plugin support lands".into(),
            }]);
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
        return Err(problems);
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
    let modified = backend.files().first().and_then(|f| f.modified);
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
