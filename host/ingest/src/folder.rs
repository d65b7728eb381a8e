//! A dataset folder as `tally add` and `tally fetch` write it: the files it holds, its
//! definition, and the hidden staging folders files are written in before they are renamed
//! into place.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tally_semantic::DatasetDef;

use crate::error::IngestError;

/// The definition file of a dataset folder.
pub const DEFINITION_FILE: &str = "dataset.yaml";

/// The record of a download, beside the definition.
pub const FETCH_RECORD: &str = ".fetch.json";

/// A dataset id is the folder's name and appears in tool calls and URIs: the rule the
/// definition reader applies.
pub(crate) fn check_id(id: &str) -> Result<(), IngestError> {
    if !tally_semantic::definition::valid_id(id) {
        return Err(IngestError::dataset(
            format!(
                "{} cannot be a dataset id (it is the folder's name)",
                tally_semantic::definition::quote_name(id)
            ),
            "use 1 to 64 ASCII letters, digits, `-`, `_` and `.` (e.g. procedures-2025), not starting with `.`",
        ));
    }
    Ok(())
}

/// A definition's text as the server reads it: at most the size of a YAML document it
/// accepts, refused before reading when larger (`None`: there is no definition).
pub(crate) fn definition_text(path: &Path) -> Result<Option<String>, IngestError> {
    use tally_semantic::files::{ReadError, read_small};
    let context = || format!("cannot read {}", path.display());
    match read_small(path, tally_semantic::yaml::MAX_DOCUMENT_BYTES) {
        Ok(text) => Ok(Some(text)),
        Err(ReadError::Unreadable(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(ReadError::Unreadable(e) | ReadError::NotText(e)) => Err(IngestError::io(context(), e)),
        Err(e @ ReadError::TooLarge { .. }) => Err(IngestError::io(
            context(),
            std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
        )),
    }
}

/// The folder's definition, if it has one (an invalid one is an error: fix it first).
pub(crate) fn read_definition(folder: &Path, id: &str) -> Result<Option<DatasetDef>, IngestError> {
    let path = folder.join(DEFINITION_FILE);
    let Some(text) = definition_text(&path)? else {
        return Ok(None);
    };
    let label = format!("{id}/{DEFINITION_FILE}");
    match tally_semantic::load_definition(&label, id, &text) {
        Ok(loaded) => Ok(Some(loaded.dataset)),
        Err(e) => Err(IngestError::dataset(
            format!(
                "{} does not validate, so the file's columns cannot be read by it:\n{}",
                path.display(),
                e.diagnostics
                    .iter()
                    .filter(|d| d.severity == tally_semantic::definition::Severity::Error)
                    .map(|d| format!("  - line {}: {}: {} ({})", d.line, d.path, d.message, d.fix))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
            "fix dataset.yaml (`tally check` shows the same), or move it away to have a skeleton written",
        )),
    }
}

/// The names of staging folders: `.tally-add-<id>-<pid>` (`fetch-<id>` for a download).
const STAGING_PREFIX: &str = ".tally-add-";
/// The file a running add holds locked in its staging folder: a lock is released by the
/// system when its process ends, however it ends, so a folder whose lock can be taken is
/// abandoned (a process id alone can be reused).
const STAGING_LOCK: &str = ".lock";
/// Age past which a staging folder whose owner cannot be told is abandoned: no add takes a
/// day, and a folder left longer is debris.
const STAGING_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// A hidden folder in the datasets directory where files are written before they are
/// renamed into place; removed when dropped. It holds [`STAGING_LOCK`] locked while it lives.
pub(crate) struct Staging {
    pub(crate) dir: PathBuf,
    pub(crate) keep: bool,
    lock: Option<std::fs::File>,
}

impl Staging {
    pub(crate) fn new(datasets: &Path, id: &str) -> Result<Staging, IngestError> {
        remove_stale_staging(datasets);
        let pid = std::process::id();
        // A second add of the same id in this process (a server, tests) gets a folder of its
        // own; the pid stays last, where it is read back.
        let mut dir = datasets.join(format!("{STAGING_PREFIX}{id}-{pid}"));
        let mut n = 1;
        loop {
            match std::fs::create_dir(&dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => {
                    dir = datasets.join(format!("{STAGING_PREFIX}{id}-{n}-{pid}"));
                    n += 1;
                }
                Err(e) => {
                    return Err(IngestError::io(
                        format!("cannot create {}", dir.display()),
                        e,
                    ));
                }
            }
        }
        let mut staging = Staging {
            dir,
            keep: false,
            lock: None,
        };
        // Locked under another name and then renamed: a sweep never finds the lock file
        // before it is locked.
        let taking = staging.dir.join(".lock-taking");
        let file = std::fs::File::create(&taking)
            .map_err(|e| IngestError::io(format!("cannot create {}", taking.display()), e))?;
        if file.try_lock().is_ok() {
            rename(&taking, &staging.dir.join(STAGING_LOCK))?;
            staging.lock = Some(file);
        } else {
            // No locks here: sweeps tell by the process id.
            let _ = std::fs::remove_file(&taking);
        }
        Ok(staging)
    }

    /// Takes the lock file out before the folder itself becomes the dataset's. It is
    /// unlinked while still held, so no sweep can take it meanwhile (a folder without one is
    /// told by its live process id).
    pub(crate) fn release_lock(&mut self) {
        let path = self.dir.join(STAGING_LOCK);
        if std::fs::remove_file(&path).is_err() {
            // Where an open file cannot be removed (Windows), closing it first.
            self.lock = None;
            let _ = std::fs::remove_file(&path);
        }
        self.lock = None;
    }
}

/// Whether a staging folder belongs to a process that has ended (or, when that cannot be
/// told, whether it is older than a day).
fn is_stale(dir: &Path, name: &str) -> bool {
    if let Ok(lock) = std::fs::File::open(dir.join(STAGING_LOCK)) {
        match lock.try_lock() {
            Ok(()) => return true,
            Err(std::fs::TryLockError::WouldBlock) => return false,
            // Locks are not supported here: tell by the process id.
            Err(std::fs::TryLockError::Error(_)) => {}
        }
    }
    let pid = name.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
    if let Some(pid) = pid {
        if pid == std::process::id() {
            return false;
        }
        if Path::new("/proc/self").exists() {
            return !Path::new(&format!("/proc/{pid}")).exists();
        }
    }
    std::fs::symlink_metadata(dir)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age > STAGING_MAX_AGE)
}

/// Removes the staging folders (`.tally-add-*`) in `datasets` left by adds and fetches that
/// were killed before they could clean up, and returns those it removed. A folder is stale
/// when its process has ended: the lock it held in the folder can be taken, or (a folder
/// without one) its process id, the last part of its name, is not a live process; when that
/// cannot be told (no lock and no process table), when it is older than a day. The folder of
/// an add still running is never removed. `tally add` and `tally fetch` call it as they
/// start; `tally serve` as it starts.
pub fn remove_stale_staging(datasets: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(datasets) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(STAGING_PREFIX) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = e.path();
        if is_stale(&path, &name) && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub(crate) fn rename(from: &Path, to: &Path) -> Result<(), IngestError> {
    std::fs::rename(from, to).map_err(|e| {
        IngestError::io(
            format!(
                "cannot move {} into place at {}",
                from.display(),
                to.display()
            ),
            e,
        )
    })
}

pub(crate) fn write_synced(path: &Path, text: &str) -> Result<(), IngestError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)
        .map_err(|e| IngestError::io(format!("cannot write {}", path.display()), e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| IngestError::io(format!("cannot write {}", path.display()), e))
}
