//! Registering one dataset folder: its definition read, checked against the data's metadata
//! (names, columns and types, the memory budget), its version and retrieval date; and every
//! page of its data read, for `tally check`.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tally_semantic::definition::{BackendKind, DatasetDef, DateValue, Diagnostic, load_definition};
use tally_semantic::names;

use crate::backend::{Backend, Backends};
use crate::dataset::{Dataset, RESERVED_PREFIX, Retrieved, canonical_type};
use crate::problem::{Problem, ReadError, Refusal, outside, read_small};

/// The definition file of a dataset folder.
pub const DEFINITION_FILE: &str = "dataset.yaml";
/// Sidecar written by fetchers: `{"fetched_at": …, "fetched_from": …}`.
pub const FETCH_RECORD: &str = ".fetch.json";

/// How datasets are registered: which backends there are, and the memory they must fit.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The backends this server can build, by kind (the binary adds wasm and native
    /// plugins to the built-in Parquet one).
    pub backends: Backends,
    /// The server's memory budget in bytes (0: not checked): a dataset whose data cannot fit
    /// it, by what its metadata declares, is refused at registration, unless its files can
    /// be read at every call instead (`serving` not `Prepared`).
    pub memory_budget: usize,
    pub serving: crate::dataset::Serving,
    /// List the objects of object-store datasets again (a folder's files say nothing of
    /// them), and retry those that could not be registered.
    pub check_objects: bool,
}

/// Registers one folder: `Ok(None)` when it is disabled.
pub fn register(
    folder: &Path,
    folder_name: &str,
    label: &str,
    options: &Options,
) -> Result<Option<Dataset>, Refusal> {
    let (text, loaded) = read_definition(folder, folder_name, label)?;
    let mut def = loaded.dataset;
    if !def.enabled {
        return Ok(None);
    }
    check_names(folder, &def)?;
    let backend: Arc<dyn Backend> = options.backends.create(&def, folder)?;
    let schema = backend.schema();
    check_columns(&def, &schema, &columns_source(&def, backend.as_ref()))?;
    if !backend.streams() || options.serving == crate::dataset::Serving::Prepared {
        check_budget(&def, backend.as_ref(), options.memory_budget)?;
    }
    let undeclared: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| f.name())
        .filter(|c| def.field(c).is_none())
        .cloned()
        .collect();
    def.undeclared = undeclared.clone();
    let (retrieved, fetched_from) = retrieval(folder, &def.retrieved_at, &backend);
    let version = version_of(&text, backend.as_ref());
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
        Arc::from(text.as_str()),
    )))
}

/// The definition file's text and what it defines; a file that may still be being written
/// says so.
pub(super) fn read_definition(
    folder: &Path,
    folder_name: &str,
    label: &str,
) -> Result<(String, tally_semantic::definition::Loaded), Refusal> {
    let text = read_small(
        &folder.join(DEFINITION_FILE),
        tally_semantic::yaml::MAX_DOCUMENT_BYTES,
    )
    .map_err(|e| Refusal {
        maybe_incomplete: matches!(e, ReadError::Unreadable(_)),
        data_gone: false,
        problems: vec![Problem::plain(
            e.to_string(),
            "make it a readable UTF-8 file of at most a few hundred kilobytes",
        )],
    })?;
    let loaded = load_definition(label, folder_name, &text).map_err(|e| {
        // A file cut off mid-write does not parse (or is empty); anything else is a mistake.
        let maybe_incomplete = e.unparsed;
        let errors: Vec<&Diagnostic> = e.errors().collect();
        Refusal {
            problems: errors.into_iter().map(Problem::from_diagnostic).collect(),
            maybe_incomplete,
            data_gone: false,
        }
    })?;
    Ok((text, loaded))
}

/// No field name Tally reserves, and the files the definition names lie inside the folder
/// (links included).
fn check_names(folder: &Path, def: &DatasetDef) -> Result<(), Refusal> {
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
    let named = match (&def.backend.kind, &def.backend.plugin) {
        (BackendKind::Parquet, _) => Some(def.data_file.as_str()),
        (_, Some(tally_semantic::definition::PluginRef::File(f))) => Some(f.as_str()),
        _ => None,
    };
    if let Some(file) = named
        && let Some(problem) = outside(folder, &folder.join(file))
    {
        return Err(vec![problem].into());
    }
    Ok(())
}

/// Where a dataset's columns come from, in words: its data file, or the plugin that
/// describes them (so that a field missing from a plugin's output names the plugin).
fn columns_source(def: &DatasetDef, backend: &dyn Backend) -> String {
    let described = backend.describe();
    match described.plugin {
        Some(name) => format!(
            "the columns plugin `{name}` {} describes",
            described.plugin_version.unwrap_or_default()
        ),
        None => def.data_file.clone(),
    }
}

/// An Arrow type as a plugin describes it.
fn type_words(t: &datafusion::arrow::datatypes::DataType) -> String {
    use datafusion::arrow::datatypes::DataType;
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Int64 => "an integer".into(),
        DataType::Float64 => "a number".into(),
        DataType::Boolean => "a boolean".into(),
        other => format!("Arrow {other}"),
    }
}

/// The definition fits the data: every field is a column of a type it can be read as.
fn check_columns(def: &DatasetDef, schema: &Schema, source: &str) -> Result<(), Refusal> {
    let plugin = def.backend.kind != tally_semantic::definition::BackendKind::Parquet;
    let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut problems = Vec::new();
    for (i, f) in def.column_fields().iter().enumerate() {
        match schema.field_with_name(&f.name) {
            Ok(col) => {
                if let Err(m) = canonical_type(f.data_type, col.data_type()) {
                    problems.push(Problem {
                        line: Some(f.pos.line),
                        key: format!("fields[{i}].data_type"),
                        reason: if plugin {
                            format!(
                                "field `{}` is declared {} but {source} has it as {}",
                                f.name,
                                f.data_type.as_str(),
                                type_words(col.data_type())
                            )
                        } else {
                            format!("field `{}` {m}", f.name)
                        },
                        fix: if plugin {
                            "declare the type the plugin describes (data_type: string, integer or number), or change the plugin's description".into()
                        } else {
                            "declare the type the column has (data_type: string, integer or number), or fix the data".into()
                        },
                    });
                }
            }
            Err(_) => {
                let ranked = names::rank(&f.name, columns.iter().copied());
                let near: Vec<&str> = ranked.into_iter().take(3).collect();
                problems.push(Problem {
                    line: Some(f.pos.line),
                    key: format!("fields[{i}].name"),
                    reason: if plugin {
                        format!("field `{}` is not one of {source}", f.name)
                    } else {
                        format!("field `{}` is not a column of {source}", f.name)
                    },
                    fix: if plugin {
                        format!(
                            "use the name of a column the plugin produces ({}), or make the plugin describe and produce `{}`",
                            columns.join(", "),
                            f.name
                        )
                    } else {
                        format!(
                            "use the column's exact name; closest columns: {}",
                            near.join(", ")
                        )
                    },
                });
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.into())
    }
}

/// What the metadata declares must fit the budget before anything is read. Reading and
/// preparing a row holds at least: its number and a search-text offset (12 bytes), and per
/// field 16 bytes (a text value's view as read, then its offset once prepared; a number
/// read, then cast).
fn check_budget(def: &DatasetDef, backend: &dyn Backend, budget: usize) -> Result<(), Refusal> {
    let Some(rows) = backend.row_count().filter(|_| budget > 0) else {
        return Ok(());
    };
    let per_row = 12u64
        + def
            .fields
            .iter()
            .map(|f| if f.data_type.is_numeric() { 16 } else { 20 })
            .sum::<u64>();
    let least = rows.saturating_mul(per_row);
    if least <= budget as u64 {
        return Ok(());
    }
    Err(vec![Problem {
        line: None,
        key: "data_file".into(),
        reason: format!(
            "the data declares {rows} rows; reading and preparing them needs at least {} MiB of memory ({per_row} bytes a row for {} fields), more than the server's memory budget of {} MiB",
            least / (1 << 20),
            def.fields.len(),
            budget / (1 << 20)
        ),
        fix: "serve a smaller extract of the data, or start the server with a larger --memory-budget".into(),
    }]
    .into())
}

/// The version of a dataset: a hash of its definition's text, its files (names and sizes)
/// and the backend's fingerprint.
fn version_of(text: &str, backend: &dyn Backend) -> String {
    let mut hasher = Sha256::new();
    hasher.update(text.as_bytes());
    for file in backend.files() {
        hasher.update(file.path.as_bytes());
        hasher.update(file.size.to_le_bytes());
    }
    hasher.update(backend.fingerprint());
    hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Decodes every page of every column (undeclared ones too) of a dataset's data, local files
/// and objects alike, within `budget`: what `tally check` does before it passes a dataset, so
/// a file every query would fail on is not passed. Backends without pages have none to read.
pub fn read_every_page(ds: &Dataset, budget: &Arc<crate::memory::Budget>) -> Result<(), String> {
    let mut reservation = budget.reservation(format!("reading every page of `{}`", ds.def.id));
    let result = ds
        .backend
        .read_every_page(&mut |bytes| reservation.resize(bytes).map_err(|e| e.to_string()));
    let _ = reservation.resize(0);
    result
}

/// The retrieval date: `.fetch.json`, else the definition's `retrieved_at`, else the data
/// file's modification time.
fn retrieval(
    folder: &Path,
    retrieved_at: &Option<DateValue>,
    backend: &Arc<dyn Backend>,
) -> (Retrieved, Option<String>) {
    if let Ok(text) = read_small(&folder.join(FETCH_RECORD), 64 * 1024) {
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
