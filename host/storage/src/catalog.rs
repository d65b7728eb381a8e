//! The catalog: every dataset folder of a datasets directory, registered or reported broken.
//!
//! Registration reads the definition and the data's metadata (for Parquet, the footer), and
//! checks that they fit: every declared field is a column of the data with a usable type.
//! A dataset that does not fit is listed as broken with its reasons; it never stops the
//! others from being served.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use datafusion::arrow::datatypes::Schema;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tally_semantic::definition::{BackendKind, DatasetDef, DateValue, Diagnostic, load_definition};
use tally_semantic::names;

use crate::backend::{Backend, Backends};
use crate::dataset::{Dataset, RESERVED_PREFIX, Retrieved, canonical_type};
use crate::problem::{Problem, ReadError, Refusal, outside, read_small};
use crate::text::{Lines, escape_controls};

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

/// What became of one folder at the last scan.
#[derive(Debug, Clone, Default)]
struct FolderState {
    /// The folder's files (names, sizes, times) when last read; `None` reads it again.
    stamp: Option<String>,
    /// A change not read yet: the folder's files as they were first seen so, and when. It is
    /// read once they have stayed so for [`QUIET`].
    waiting: Option<(String, SystemTime)>,
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
    /// Folders no longer reported broken (fixed, or removed).
    pub cleared: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.updated.is_empty()
            && self.removed.is_empty()
            && self.broken.is_empty()
            && self.cleared.is_empty()
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

/// How long a changed folder's files must stay as they are before the change is read: a
/// writer that renames the data and then the definition into place is never served the one
/// with the other's previous version (when the scan waits at all: never at start).
pub const QUIET: Duration = Duration::from_millis(500);

/// A file a writer puts in a dataset folder while it changes several files: the folder is
/// not read again until the file is gone.
pub const WRITING_MARKER: &str = ".tally-writing";

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
        let mut folders = dataset_folders(dir);
        folders.sort();
        let now = SystemTime::now();
        // What each folder needs, in folder order: cheap (its files' names, sizes and times).
        let mut steps = Vec::with_capacity(folders.len());
        for folder in folders {
            steps.extend(step_of(dir, folder, previous, settle, now, options));
        }
        // The new and changed folders registered, several at once.
        read_changed(&mut steps, options);
        // The catalog, in folder order, as if they had been read one after another.
        for step in steps {
            let (name, state) = match step {
                Step::Outside(name, problem) => {
                    let broken = Broken {
                        folder: name.clone(),
                        file: format!("{name}/"),
                        problems: vec![problem],
                        serving_version: None,
                    };
                    next.broken.push(broken.clone());
                    next.folders.insert(
                        name,
                        FolderState {
                            broken: Some(broken),
                            ..FolderState::default()
                        },
                    );
                    continue;
                }
                Step::Done(name, state) => (name, state),
                Step::Wait(name, state) => {
                    next.pending.push(name.clone());
                    (name, state)
                }
                Step::Read(read) => {
                    // Never left unread (see `read_changed`); were it, it is read again at
                    // the next scan.
                    next.pending.push(read.name.clone());
                    (
                        read.name,
                        FolderState {
                            stamp: None,
                            ..read.before
                        },
                    )
                }
                Step::Registered(name, state) => {
                    log_read(&name, &state);
                    if state.stamp.is_none() {
                        next.pending.push(name.clone());
                    }
                    (name, state)
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
                    // Read again at the next scan: when the other folder goes, this one must
                    // not stay unlisted.
                    next.folders.insert(name, FolderState::default());
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

        let changes = Changes::between(previous, &next);
        (next, changes)
    }

    pub fn ids(&self) -> Vec<&str> {
        self.datasets.keys().map(String::as_str).collect()
    }
}

/// Whether an object-store dataset's objects are no longer those registered (listed again),
/// or it could not be registered and is worth trying again. A store that does not answer is
/// no change: the version registered keeps serving.
fn objects_changed(folder: &Path, name: &str, before: &FolderState) -> bool {
    if let Some(ds) = &before.served {
        let Some(url) = &ds.def.data_url else {
            return false;
        };
        let changed = match crate::object::stamp(url) {
            Ok(now) => ds.backend.remote_listing().as_deref() != Some(now.as_str()),
            Err(e) if e.is_transient() => {
                tracing::warn!(dataset = %ds.def.id, "{e}; the version registered keeps serving");
                false
            }
            // Gone, denied, or no longer Parquet: read again, so it is reported (the version
            // registered keeps serving until a valid one replaces it).
            Err(_) => true,
        };
        // Already reported broken for this same reason: nothing new to read.
        return changed;
    }
    if before.broken.is_some() {
        let label = format!("{name}/{DEFINITION_FILE}");
        return read_definition(folder, name, &label)
            .is_ok_and(|(_, loaded)| loaded.dataset.data_url.is_some());
    }
    false
}

/// How many folders are registered at once. Registering is mostly waiting: on files, on an
/// object store, or on a plugin's probe scan, which its deadline ends by the wall clock (the
/// epoch ticks however busy the cores are). So the bound is not the number of cores: on two
/// cores, four plugins that loop cost one deadline at start-up, not two (or four, one after
/// another, before). What it bounds is what registrations hold at once: four plugin instances
/// of at most `--plugin-memory-mb` each (1 GiB at the defaults), four Parquet footers, four
/// object-store listings.
pub const REGISTRATIONS_AT_ONCE: usize = 4;

/// What a scan does with one folder.
enum Step {
    /// Linked in from outside the datasets directory: reported, never read.
    Outside(String, Problem),
    /// Unchanged since the last scan: its state kept.
    Done(String, FolderState),
    /// Changed, but still changing (or marked as being written): its served version kept,
    /// read at a later scan.
    Wait(String, FolderState),
    /// New or changed: to be read again.
    Read(Read),
    /// Read again: its new state (logged when the catalog is assembled, in folder order).
    Registered(String, FolderState),
}

/// What a scan does with one folder: cheap (its files' names, sizes and times).
fn step_of(
    dir: &Path,
    folder: PathBuf,
    previous: &Catalog,
    settle: Duration,
    now: SystemTime,
    options: &Options,
) -> Option<Step> {
    let name = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !folder.join(DEFINITION_FILE).is_file() {
        return None;
    }
    if let Some(problem) = outside(dir, &folder) {
        // A folder linked in from elsewhere would serve files nobody put here.
        return Some(Step::Outside(name, problem));
    }
    let (current, newest) = stamp(&folder);
    let before = previous.folders.get(&name).cloned().unwrap_or_default();
    let unchanged = before.stamp.as_deref() == Some(current.as_str())
        && !(options.check_objects && objects_changed(&folder, &name, &before));
    if unchanged {
        Some(Step::Done(name, before))
    } else if let Some(waiting) = still_changing(&folder, &current, &before, settle, now) {
        // Read when its files have stopped changing (or its writer's marker is gone).
        Some(Step::Wait(name, FolderState { waiting, ..before }))
    } else {
        let fresh = newest
            .and_then(|t| now.duration_since(t).ok())
            .is_none_or(|age| age < settle);
        Some(Step::Read(Read {
            folder,
            name,
            current,
            before,
            fresh,
        }))
    }
}

/// Whether a changed folder is to wait before it is read: `Some(what to remember)` while its
/// files changed less than [`QUIET`] ago (as this scan and the earlier ones saw them) or its
/// writer's [`WRITING_MARKER`] is there; `None` to read it now. A scan that does not wait
/// (`settle` zero: the first one) reads it at once.
fn still_changing(
    folder: &Path,
    current: &str,
    before: &FolderState,
    settle: Duration,
    now: SystemTime,
) -> Option<Option<(String, SystemTime)>> {
    if settle.is_zero() {
        return None;
    }
    if folder.join(WRITING_MARKER).exists() {
        return Some(None);
    }
    match &before.waiting {
        Some((seen, since)) if seen == current => {
            let quiet = now.duration_since(*since).unwrap_or_default() >= QUIET.min(settle);
            if quiet {
                None
            } else {
                Some(before.waiting.clone())
            }
        }
        _ => Some(Some((current.to_string(), now))),
    }
}

/// A folder to read again, with what the last scan knew of it.
struct Read {
    folder: PathBuf,
    name: String,
    /// Its files now (see [`stamp`]).
    current: String,
    before: FolderState,
    /// Its files changed less than `settle` ago.
    fresh: bool,
}

/// Reads every [`Step::Read`] folder, [`REGISTRATIONS_AT_ONCE`] at a time (this thread one of
/// them), and makes it [`Step::Registered`] in place: the order of `steps` is kept, so the
/// catalog is the one reading them one after another would give.
fn read_changed(steps: &mut [Step], options: &Options) {
    let reads: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Step::Read(_)))
        .map(|(i, _)| i)
        .collect();
    let done: Vec<(usize, FolderState)> = {
        let steps: &[Step] = steps;
        let next = AtomicUsize::new(0);
        // Each worker takes the next folder not yet taken until none is left.
        let work = || {
            let mut done = Vec::new();
            while let Some(&i) = reads.get(next.fetch_add(1, Ordering::Relaxed)) {
                if let Step::Read(r) = &steps[i] {
                    let state = read_folder(
                        &r.folder,
                        &r.name,
                        r.current.clone(),
                        &r.before,
                        r.fresh,
                        options,
                    );
                    done.push((i, state));
                }
            }
            done
        };
        let helpers = REGISTRATIONS_AT_ONCE.min(reads.len()).saturating_sub(1);
        std::thread::scope(|scope| {
            // A thread that cannot be started leaves its share to the others.
            let started: Vec<_> = (0..helpers)
                .filter_map(|_| {
                    std::thread::Builder::new()
                        .name("tally-register".into())
                        .spawn_scoped(scope, work)
                        .ok()
                })
                .collect();
            let mut done = work();
            for helper in started {
                match helper.join() {
                    Ok(theirs) => done.extend(theirs),
                    // A registration that panics panics the scan, as it did when this thread
                    // read every folder itself.
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            done
        })
    };
    for (i, state) in done {
        if let Step::Read(r) = &mut steps[i] {
            let name = std::mem::take(&mut r.name);
            steps[i] = Step::Registered(name, state);
        }
    }
}

/// A folder's state after reading it anew: served, disabled, or broken (an earlier valid
/// version keeps serving). Files that may still be being written (`fresh`) and do not read
/// yet leave the state as it was, unstamped, to be read again when they settle.
fn read_folder(
    folder: &Path,
    name: &str,
    current: String,
    before: &FolderState,
    fresh: bool,
    options: &Options,
) -> FolderState {
    // Named relative to the datasets directory: messages never show a machine path.
    let label = format!("{name}/{DEFINITION_FILE}");
    match register(folder, name, &label, options) {
        Ok(Some(dataset)) => FolderState {
            stamp: Some(current),
            served: Some(Arc::new(dataset)),
            ..FolderState::default()
        },
        Ok(None) => FolderState {
            stamp: Some(current),
            disabled: true,
            ..FolderState::default()
        },
        Err(refusal) if refusal.maybe_incomplete && fresh => FolderState {
            stamp: None,
            ..before.clone()
        },
        Err(refusal) => {
            let serving = before.served.clone();
            if let Some(ds) = &serving {
                ds.note_refused(&refusal.problems, refusal.data_gone);
            }
            FolderState {
                stamp: Some(current),
                broken: Some(Broken {
                    folder: name.to_string(),
                    file: label,
                    problems: refusal.problems,
                    serving_version: serving.as_ref().map(|d| d.version.clone()),
                }),
                served: serving,
                disabled: false,
                waiting: None,
            }
        }
    }
}

/// What reading a folder again came to, in the log: still being written, refused (each
/// problem), or registered (its definition's warnings).
fn log_read(name: &str, state: &FolderState) {
    if state.stamp.is_none() {
        tracing::info!(folder = %name, "files are still being written; retrying when they settle");
    } else if let Some(broken) = &state.broken {
        // One log line a problem: a plugin's reason may hold what it wrote to stderr, whose
        // lines would read as log lines of their own.
        for p in &broken.problems {
            let line = format!("{}: {} {}", broken.file, p.key, p.reason);
            tracing::warn!("{}", escape_controls(&line, Lines::Escaped));
        }
    } else if let Some(ds) = &state.served {
        for w in &ds.warnings {
            tracing::warn!("{}", escape_controls(&w.to_string(), Lines::Escaped));
        }
    }
}

impl Changes {
    /// What changed from one catalog to the next: datasets added, updated (a new version)
    /// and removed; folders newly broken (or broken differently) and cleared.
    fn between(previous: &Catalog, next: &Catalog) -> Changes {
        let mut changes = Changes::default();
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
        for p in &previous.broken {
            if !next.broken.iter().any(|b| b.folder == p.folder) {
                changes.cleared.push(p.folder.clone());
            }
        }
        changes
    }
}

/// The dataset folders of a datasets directory: its subfolders, and symbolic links to folders
/// (checked by [`outside`]), except hidden ones.
pub fn dataset_folders(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_type().is_ok_and(|t| {
                    t.is_dir() || (t.is_symlink() && e.path().metadata().is_ok_and(|m| m.is_dir()))
                })
            })
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect(),
        Err(e) => {
            tracing::error!("cannot read the datasets directory {}: {e}", dir.display());
            Vec::new()
        }
    }
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
fn read_definition(
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

#[cfg(test)]
mod tests {
    use std::sync::{Condvar, Mutex};

    use tally_semantic::definition::BackendKind;

    use super::*;
    use crate::backend::BackendFactory;

    /// Registrations under way now, and the most seen at once.
    #[derive(Debug, Default)]
    struct AtOnce {
        counts: Mutex<(usize, usize)>,
        changed: Condvar,
    }

    /// Refuses every dataset, as a plugin whose probe scan fails does, after waiting (at most
    /// 10 s) until [`REGISTRATIONS_AT_ONCE`] registrations have been under way at once.
    #[derive(Debug, Clone)]
    struct Waiting(Arc<AtOnce>);

    impl BackendFactory for Waiting {
        fn kind(&self) -> BackendKind {
            BackendKind::Wasm
        }

        fn create(&self, def: &DatasetDef, _folder: &Path) -> Result<Arc<dyn Backend>, Refusal> {
            let at_once = &self.0;
            let mut counts = at_once.counts.lock().unwrap_or_else(|p| p.into_inner());
            counts.0 += 1;
            counts.1 = counts.1.max(counts.0);
            at_once.changed.notify_all();
            let (mut counts, _) = at_once
                .changed
                .wait_timeout_while(counts, Duration::from_secs(10), |c| {
                    c.1 < REGISTRATIONS_AT_ONCE
                })
                .unwrap_or_else(|p| p.into_inner());
            counts.0 -= 1;
            Err(vec![Problem::plain(
                format!("the probe scan of `{}` ran past its deadline", def.id),
                "make the plugin faster",
            )]
            .into())
        }
    }

    fn plugin_folder(dir: &Path, name: &str) {
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("plugin.wasm"), b"\0asm").unwrap();
        std::fs::write(
            folder.join(DEFINITION_FILE),
            "title: t\nbackend: {kind: wasm, component: plugin.wasm}\nfields:\n- {name: a, role: dim}\n",
        )
        .unwrap();
    }

    /// Every plugin folder's probe scan ran after the one before: each plugin that looped
    /// added its whole deadline (5 s) to start-up. Folders are now registered
    /// `REGISTRATIONS_AT_ONCE` at a time, and the catalog is the one reading them in folder
    /// order gives.
    #[test]
    fn plugin_folders_register_several_at_once_in_folder_order() {
        let dir = tempfile::tempdir().unwrap();
        let names = ["p0", "p1", "p2", "p3", "p4", "p5", "p6"];
        for name in names.iter().rev() {
            plugin_folder(dir.path(), name);
        }
        // Refused before any backend is made, between the others.
        std::fs::create_dir_all(dir.path().join("p3a")).unwrap();
        std::fs::write(dir.path().join("p3a").join(DEFINITION_FILE), "title: [").unwrap();
        let at_once = Arc::new(AtOnce::default());
        let options = Options {
            backends: Backends::builtin().with(Waiting(Arc::clone(&at_once))),
            ..Options::default()
        };
        let (catalog, changes) =
            Catalog::scan(dir.path(), &Catalog::default(), Duration::ZERO, &options);
        let most = at_once.counts.lock().unwrap().1;
        assert_eq!(
            most, REGISTRATIONS_AT_ONCE,
            "registrations under way at once"
        );
        let broken: Vec<&str> = catalog.broken.iter().map(|b| b.folder.as_str()).collect();
        assert_eq!(broken, ["p0", "p1", "p2", "p3", "p3a", "p4", "p5", "p6"]);
        assert_eq!(changes.broken, broken);
        for b in catalog.broken.iter().filter(|b| b.folder != "p3a") {
            assert_eq!(
                b.problems[0].reason,
                format!("the probe scan of `{}` ran past its deadline", b.folder)
            );
            assert_eq!(b.file, format!("{}/{DEFINITION_FILE}", b.folder));
        }
        assert!(catalog.datasets.is_empty() && catalog.pending.is_empty());
        // Scanned again with nothing changed: nothing is read, nothing changes.
        let (again, changes) = Catalog::scan(dir.path(), &catalog, Duration::ZERO, &options);
        assert!(changes.is_empty(), "{changes:?}");
        let listed: Vec<&str> = again.broken.iter().map(|b| b.folder.as_str()).collect();
        assert_eq!(listed, broken);
    }
}
