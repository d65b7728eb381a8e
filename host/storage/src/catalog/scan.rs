//! Scanning a datasets directory: what each folder needs (kept, waited for while it is being
//! written, or read again), the folders read several at once, and the catalog assembled in
//! folder order.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use super::register::{DEFINITION_FILE, Options, read_definition, register};
use super::snapshot::{Broken, Catalog, Changes, FolderState};
use crate::problem::{Problem, outside};
use crate::text::{Lines, escape_controls};

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

#[cfg(test)]
mod tests {
    use std::sync::{Condvar, Mutex};

    use tally_semantic::definition::{BackendKind, DatasetDef};

    use super::*;
    use crate::backend::{Backend, BackendFactory, Backends};
    use crate::problem::Refusal;

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
