//! Compiled wasm components kept on disk, so that a start after the first does not compile
//! them again (compiling the built-in `documents` plugin takes over a second on two cores;
//! loading its compiled code takes milliseconds).
//!
//! An entry is the machine code wasmtime compiled for one component on this host, named by
//! the SHA-256 of the component's bytes and a hash of the wasmtime build and settings that
//! compiled it. It is written once (to a temporary file, then renamed), and read back only
//! from a directory no other user may write (code read from it runs in this process). Its
//! header holds a CRC32 of the code, checked before wasmtime reads it: a truncated or
//! damaged entry is removed and the component compiled again. wasmtime checks on its own
//! that the code was compiled by the same version with the same settings.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

/// The first bytes of an entry.
const MAGIC: &[u8; 8] = b"TALLYCW1";
/// Magic, CRC32 of the code, length of the code.
const HEADER: usize = 8 + 4 + 8;
/// Entries kept: the most recently used ones (a plugin rebuilt many times while it is
/// written must not fill the disk).
const KEEP: usize = 16;

/// A directory of compiled components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeCache {
    dir: PathBuf,
}

impl CodeCache {
    pub fn new(dir: impl Into<PathBuf>) -> CodeCache {
        CodeCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry's file for a component (`sha256` of its bytes, as `sha256:<hex>`) compiled
    /// by `engine`.
    fn path(&self, engine: &Engine, sha256: &str) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let hex = sha256.trim_start_matches("sha256:");
        self.dir.join(format!(
            "{}-{:016x}.cwasm",
            &hex[..hex.len().min(40)],
            hasher.finish()
        ))
    }

    /// The component compiled earlier, if a sound entry is there; a damaged or incompatible
    /// one is removed (`Err` says why, for the log).
    pub fn load(&self, engine: &Engine, sha256: &str) -> Result<Option<Component>, String> {
        tally_storage::cache::check_private(&self.dir)?;
        let path = self.path(engine, sha256);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{} cannot be read: {e}", path.display())),
        };
        let checked = check(&bytes).and_then(|code| {
            // SAFETY: wasmtime runs deserialized code as it is, so it must be code wasmtime
            // itself compiled and nobody changed. The directory is checked to be writable by
            // this user only (no one else can plant or replace an entry), the entry is
            // written whole before it is renamed into place, and its CRC32 was checked just
            // now; wasmtime checks its own version and settings against the entry's.
            #[allow(unsafe_code)]
            unsafe { Component::deserialize(engine, code) }
                .map_err(|e| format!("wasmtime refused it: {e}"))
        });
        match checked {
            Ok(component) => {
                // Used now: the sweep keeps the most recently used entries.
                if let Ok(file) = std::fs::File::options().append(true).open(&path) {
                    let _ = file.set_modified(std::time::SystemTime::now());
                }
                Ok(Some(component))
            }
            Err(why) => {
                let _ = std::fs::remove_file(&path);
                Err(format!("{} was removed: {why}", path.display()))
            }
        }
    }

    /// Keeps the compiled `component` (whose bytes have `sha256`), then removes all but the
    /// [`KEEP`] most recently used entries.
    pub fn store(
        &self,
        engine: &Engine,
        sha256: &str,
        component: &Component,
    ) -> Result<(), String> {
        tally_storage::cache::create_private(&self.dir)
            .map_err(|e| format!("{} cannot be created: {e}", self.dir.display()))?;
        tally_storage::cache::check_private(&self.dir)?;
        let code = component.serialize().map_err(|e| e.to_string())?;
        let path = self.path(engine, sha256);
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| e.to_string())?;
        let tmp = self.dir.join(format!(
            ".{}.{:016x}.tmp",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            u64::from_le_bytes(nonce)
        ));
        let written = (|| -> std::io::Result<()> {
            let mut file = std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            file.write_all(MAGIC)?;
            file.write_all(&crc32fast::hash(&code).to_le_bytes())?;
            file.write_all(&(code.len() as u64).to_le_bytes())?;
            file.write_all(&code)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("{} cannot be written: {e}", path.display()));
        }
        self.sweep();
        Ok(())
    }

    /// Removes all but the [`KEEP`] most recently used entries, and temporary files of
    /// writers that died (older than an hour).
    fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut kept: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let modified = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            if name.ends_with(".cwasm") {
                kept.push((modified, entry.path()));
            } else if name.ends_with(".tmp")
                && modified
                    .elapsed()
                    .is_ok_and(|age| age > std::time::Duration::from_secs(3600))
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        kept.sort_by_key(|k| std::cmp::Reverse(k.0));
        for (_, path) in kept.into_iter().skip(KEEP) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The code of an entry whose header checks out.
fn check(bytes: &[u8]) -> Result<&[u8], String> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err("it is not a compiled component Tally wrote".into());
    }
    let crc = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
    let len = u64::from_le_bytes(bytes[12..20].try_into().unwrap_or_default());
    let code = &bytes[HEADER..];
    if code.len() as u64 != len {
        return Err(format!(
            "it holds {} bytes of code where its header says {len}",
            code.len()
        ));
    }
    if crc32fast::hash(code) != crc {
        return Err("its checksum does not match its code".into());
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest built-in component, compiled by a wasmtime engine of its own.
    fn compiled() -> (Engine, String, Component) {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config).expect("engine");
        let name = tally_wasm_plugins::builtin_names()[0];
        let bytes = tally_wasm_plugins::builtin(name).expect("built-in");
        let sha = tally_storage::backend::sha256_hex(bytes);
        let component = Component::new(&engine, bytes).expect("compiled");
        (engine, sha, component)
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        found.sort();
        found
    }

    #[test]
    fn kept_then_loaded_and_damage_is_caught() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = CodeCache::new(tmp.path().join("code"));
        let (engine, sha, component) = compiled();
        assert!(cache.load(&engine, &sha).expect("nothing yet").is_none());
        cache.store(&engine, &sha, &component).expect("kept");
        let kept = entries(cache.dir());
        assert_eq!(kept.len(), 1, "{kept:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(cache.dir())
                .expect("dir")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        let loaded = cache.load(&engine, &sha).expect("sound").expect("there");
        // The same component: its exports are the same.
        let names = |c: &Component| {
            c.component_type()
                .exports(&engine)
                .map(|(n, _)| n.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&loaded), names(&component));

        // Another component's code is not looked for under this one's name.
        let other = tally_storage::backend::sha256_hex(b"another component");
        assert!(cache.load(&engine, &other).expect("nothing").is_none());

        // One byte changed in the code: refused and removed, never run.
        let mut bytes = std::fs::read(&kept[0]).expect("read");
        let at = bytes.len() / 2;
        bytes[at] ^= 0x40;
        std::fs::write(&kept[0], &bytes).expect("damaged");
        let why = cache.load(&engine, &sha).expect_err("damaged");
        assert!(why.contains("checksum"), "{why}");
        assert!(entries(cache.dir()).is_empty());

        // Cut short: refused too.
        cache.store(&engine, &sha, &component).expect("kept again");
        let file = &entries(cache.dir())[0];
        let len = std::fs::metadata(file).expect("meta").len();
        std::fs::File::options()
            .write(true)
            .open(file)
            .and_then(|f| f.set_len(len / 3))
            .expect("truncated");
        let why = cache.load(&engine, &sha).expect_err("truncated");
        assert!(why.contains("header says"), "{why}");

        // Garbage with our name: refused.
        std::fs::write(file, b"not compiled code at all").expect("garbage");
        let why = cache.load(&engine, &sha).expect_err("garbage");
        assert!(why.contains("not a compiled component"), "{why}");
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_others_may_write_is_not_read() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = CodeCache::new(tmp.path().join("code"));
        let (engine, sha, component) = compiled();
        cache.store(&engine, &sha, &component).expect("kept");
        std::fs::set_permissions(cache.dir(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let why = cache.load(&engine, &sha).expect_err("not private");
        assert!(why.contains("other users"), "{why}");
        assert!(cache.store(&engine, &sha, &component).is_err());
    }

    #[test]
    fn only_the_most_recently_used_entries_are_kept() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = CodeCache::new(tmp.path().join("code"));
        let (engine, sha, component) = compiled();
        // Old entries of other components (as a plugin rebuilt many times leaves them).
        tally_storage::cache::create_private(cache.dir()).expect("dir");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
        for i in 0..(KEEP + 5) {
            let path = cache.dir().join(format!("{i:040}-0000000000000000.cwasm"));
            std::fs::write(&path, b"old").expect("old entry");
            std::fs::File::options()
                .append(true)
                .open(&path)
                .and_then(|f| f.set_modified(old))
                .expect("aged");
        }
        cache.store(&engine, &sha, &component).expect("kept");
        let left = entries(cache.dir());
        assert_eq!(left.len(), KEEP, "{left:?}");
        assert!(cache.load(&engine, &sha).expect("sound").is_some());
    }
}
