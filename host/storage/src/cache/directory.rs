//! The cache directory: where each dataset version's entry is, entries no longer served
//! swept, a directory others could write refused, and the key cursors are signed with.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backend::sha256_hex;

/// Temporary files older than this are left-overs of a writer that stopped.
const ABANDONED: Duration = Duration::from_secs(3600);

/// The cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// The bytes of the entries in the cache now (its top level; compiled plugin code and the
    /// cursor key aside).
    pub fn bytes(&self) -> u64 {
        std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .filter(std::fs::Metadata::is_file)
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    /// The cache in `dir` (created when first written).
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The default place: `$XDG_CACHE_HOME/tally`, else `~/.cache/tally`; `None` when the
    /// environment names neither.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("tally"))
    }

    /// The name of the folder of [`Cache::default_dir`] kept for one datasets directory: the
    /// directory's last name (for people looking in) and a hash of its full path.
    pub fn folder_for(datasets: &Path) -> String {
        let full = datasets
            .canonicalize()
            .unwrap_or_else(|_| datasets.to_path_buf());
        let name: String = full
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(40)
            .collect();
        let hash = sha256_hex(full.to_string_lossy().as_bytes());
        format!("{name}-{}", &hash.trim_start_matches("sha256:")[..12])
    }

    /// Creates the directory, readable and writable by this user only.
    pub(super) fn create(&self) -> std::io::Result<()> {
        create_private(&self.dir)
    }

    /// Whether only its owner may put files in the directory: an entry is served as the
    /// data itself, so a directory others can write is not used (they could plant one).
    pub(super) fn private(&self) -> Result<(), String> {
        check_private(&self.dir)
    }

    /// The file name prefix of a dataset's entries: its id where it is plain, with a hash of
    /// the id so that different ids never share a prefix.
    fn prefix(dataset: &str) -> String {
        let plain: String = dataset
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(40)
            .collect();
        let hash = sha256_hex(dataset.as_bytes());
        let hash = hash.trim_start_matches("sha256:");
        format!("{plain}.{}", &hash[..12])
    }

    pub(super) fn path(&self, dataset: &str, version: &str) -> PathBuf {
        let version: String = version
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        self.dir
            .join(format!("{}.{version}.arrow", Cache::prefix(dataset)))
    }

    /// Whether an entry of a dataset version is on disk (not yet checked: [`Cache::load`]
    /// checks it).
    pub fn holds(&self, dataset: &str, version: &str) -> bool {
        self.path(dataset, version).is_file()
    }

    /// Removes the entries of dataset versions no longer served: `served` lists every
    /// (dataset, version) the catalog serves now. A cache directory belongs to one datasets
    /// directory (the default gives each its own folder).
    pub fn sweep<'a>(&self, served: impl IntoIterator<Item = (&'a str, &'a str)>) -> usize {
        let keep: std::collections::HashSet<PathBuf> = served
            .into_iter()
            .map(|(dataset, version)| self.path(dataset, version))
            .collect();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".arrow")
                && !keep.contains(&path)
                && std::fs::remove_file(&path).is_ok()
            {
                removed += 1;
            }
        }
        removed
    }

    /// Removes the dataset's entries other than `keep`, and temporary files nobody has
    /// written for an hour. A mapped file removed stays readable to whoever maps it.
    pub(super) fn remove_stale(&self, dataset: &str, keep: &Path) {
        let prefix = format!("{}.", Cache::prefix(dataset));
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path == keep {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let abandoned = name.ends_with(".tmp")
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > ABANDONED);
            let other_version = name.starts_with(&prefix) && name.ends_with(".arrow");
            if abandoned || other_version {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

impl Cache {
    /// The key cursors are signed with, kept in the cache directory (`cursor.key`, 32
    /// random bytes, readable by this user only) so that every server process and command of
    /// one datasets directory signs and checks cursors alike: a page from a server is asked
    /// for again after a restart, and checked by `tally verify` or `verify_answer` in another
    /// process, while an edited cursor is refused by all of them. `None` when the directory
    /// is not private or the key cannot be read or made (each process then signs with a key
    /// of its own).
    pub fn cursor_key(&self) -> Option<[u8; 32]> {
        check_private(&self.dir).ok()?;
        create_private(&self.dir).ok()?;
        let path = self.dir.join("cursor.key");
        let read = |path: &Path| -> Option<[u8; 32]> {
            let bytes = std::fs::read(path).ok()?;
            <[u8; 32]>::try_from(bytes.as_slice()).ok()
        };
        for _ in 0..20 {
            if let Some(key) = read(&path) {
                return Some(key);
            }
            let mut key = [0u8; 32];
            getrandom::fill(&mut key).ok()?;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            match options.open(&path) {
                Ok(mut file) => {
                    use std::io::Write;
                    if file.write_all(&key).and_then(|()| file.sync_all()).is_ok() {
                        return Some(key);
                    }
                    let _ = std::fs::remove_file(&path);
                    return None;
                }
                // Another process is writing it: read it once it is whole.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(_) => return None,
            }
        }
        None
    }
}

/// Creates `dir` (and its parents), readable and writable by this user only.
pub fn create_private(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Whether only its owner may put files in `dir` (a missing one passes: it is created
/// private when first written). What a cache holds is trusted as what it stands for, so a
/// directory others could write (and plant files in) is not used.
pub fn check_private(dir: &Path) -> Result<(), String> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        // Nothing there yet: nothing to read; `store` creates it private.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("the cache directory cannot be read: {e}")),
    };
    if !meta.is_dir() {
        return Err("the cache directory is not a directory".into());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o022 != 0 {
            return Err(format!(
                "the cache directory may be written by other users (mode {:o}); make it private (chmod 700) or name another",
                mode & 0o777
            ));
        }
    }
    Ok(())
}
