//! Prepared tables on disk. The first preparation of a dataset version writes its prepared
//! table (every declared field in its canonical type, text as codes into one dictionary per
//! field) into the cache directory as it is built, one chunk at a time; later starts map that
//! file instead of preparing again, so the first answer after a restart costs a check of the
//! file's frame and of the columns the first call reads, not a pass over the data.
//!
//! An entry is one file, named by the dataset id and version, written under a temporary name
//! and renamed into place (two servers sharing a directory never see half a file), and never
//! changed after:
//!
//! ```text
//! "TALLYPR2" · padding to 64 · chunks: an Arrow IPC file (the stored columns, one record
//! batch per chunk) · padding · values: an Arrow IPC file (one batch per text field: its
//! dictionary, and each value's folded form where folding changes it, which text search reads)
//! · the header as JSON · its length (u64 LE) · "TALLYPR2"
//! ```
//!
//! A mapped entry is checked before it is served: the frame (magic at both ends, the header,
//! the sections inside the file), the header (format, Tally version, dataset, version, rows),
//! the stored schema the definition asks for, every chunk's row count, and every data file's
//! size, time and (when the time moved) hash. Each column is then checked when first read
//! (Arrow's validation, every code inside its dictionary). Anything that does not check out is
//! a miss or marks the entry damaged: it is removed and the data prepared anew.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::convert::fb_to_schema;
use datafusion::arrow::ipc::reader::{FileDecoder, read_footer_length};
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::arrow::ipc::{Block, MetadataVersion, root_as_footer};
use serde::{Deserialize, Serialize};

use crate::backend::{ServedFile, sha256_file, sha256_hex};
use crate::error::StorageError;

/// What a cache file holds and how; a file of another format is not read.
const FORMAT: &str = "tally-prepared/3";
/// The first and last bytes of an entry.
const MAGIC: &[u8; 8] = b"TALLYPR2";
/// Sections start at multiples of this (Arrow buffers are aligned to it within a section).
const ALIGN: u64 = 64;
/// The largest header read.
const MAX_HEADER: u64 = 64 << 20;
/// Temporary files older than this are left-overs of a writer that stopped.
const ABANDONED: Duration = Duration::from_secs(3600);

/// The cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

/// A data file as the entry was built from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedFile {
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// Nanoseconds since the Unix epoch.
    pub modified: Option<u128>,
}

/// Where a section lies in the entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Section {
    pub offset: u64,
    pub len: u64,
}

/// What an entry says of itself, beside its table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    /// The Tally that wrote it: another release may prepare differently (folding, layout).
    pub tally: String,
    pub dataset: String,
    pub version: String,
    pub rows: usize,
    pub files: Vec<CachedFile>,
    pub extract: Option<String>,
    pub notes: Vec<String>,
    /// The fields (by index) whose dictionaries the values section holds, in its order.
    pub text_fields: Vec<usize>,
    pub chunks: Section,
    pub values: Section,
    /// Per chunk, the checksum of each stored column ([`digest`]).
    pub digests: Vec<Vec<u32>>,
    /// Per text field (in `text_fields` order), the checksum of its dictionary.
    pub value_digests: Vec<u32>,
    /// Per text field (in `text_fields` order), the checksum of its folded values.
    pub folded_digests: Vec<u32>,
    /// Per declared field, what preparing found of its values (`inspect_dataset` reads them
    /// instead of the records). Absent in entries written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Vec<crate::store::FieldStats>>,
}

impl Header {
    /// The header of a dataset version's table, written by this Tally (the rest filled by
    /// the writer).
    pub fn new(dataset: &str, version: &str) -> Header {
        Header {
            format: FORMAT.to_string(),
            tally: env!("CARGO_PKG_VERSION").to_string(),
            dataset: dataset.to_string(),
            version: version.to_string(),
            rows: 0,
            files: Vec::new(),
            extract: None,
            notes: Vec::new(),
            text_fields: Vec::new(),
            chunks: Section::default(),
            values: Section::default(),
            digests: Vec::new(),
            value_digests: Vec::new(),
            folded_digests: Vec::new(),
            stats: None,
        }
    }
}

/// A checksum of an array's contents (its values, offsets and null bits from its offset on,
/// never bytes past its end): what was written is what is read.
///
/// Null bits count only when some value is null. An array may carry a validity bitmap with
/// every bit set (a numeric cast such as `UInt32` → `Int64` or `Float32` → `Float64` always
/// makes one), but the Arrow IPC writer writes no bitmap when the null count is zero and the
/// reader gives such a column none: hashing those bits would make every such chunk fail its
/// check when read back. Without nulls the bits say nothing the values do not.
pub fn digest(array: &dyn Array) -> u32 {
    use datafusion::arrow::datatypes::ArrowNativeType;
    let mut h = crc32fast::Hasher::new();
    let data = array.to_data();
    let (offset, len) = (data.offset(), data.len());
    h.update(&(len as u64).to_le_bytes());
    match array.data_type() {
        DataType::Utf8 => {
            let s = array.as_string::<i32>();
            let offsets = s.value_offsets();
            let first = offsets.first().copied().unwrap_or(0);
            for o in offsets {
                h.update(&(*o - first).to_le_bytes());
            }
            let (start, end) = (
                first.as_usize(),
                offsets.last().copied().unwrap_or(0).as_usize(),
            );
            h.update(s.value_data().get(start..end).unwrap_or(&[]));
        }
        other => {
            if let (Some(width), Some(values)) = (other.primitive_width(), data.buffers().first()) {
                h.update(
                    values
                        .as_slice()
                        .get(offset * width..(offset + len) * width)
                        .unwrap_or(&[]),
                );
            }
        }
    }
    if let Some(nulls) = array.nulls().filter(|n| n.null_count() > 0) {
        for bits in nulls.inner().bit_chunks().iter_padded() {
            h.update(&bits.to_le_bytes());
        }
    }
    h.finalize()
}

fn nanos(t: SystemTime) -> Option<u128> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_nanos())
}

/// Why an entry was not used (logged, then the entry is removed).
#[derive(Debug)]
pub struct Miss(String);

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn miss(why: impl Into<String>) -> Miss {
    Miss(why.into())
}

/// Entries found and used by [`Cache::load`], in this process (for `/metrics`).
pub static HITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Entries looked for by [`Cache::load`] and not there, or not usable, in this process.
pub static MISSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
    fn create(&self) -> std::io::Result<()> {
        create_private(&self.dir)
    }

    /// Whether only its owner may put files in the directory: an entry is served as the
    /// data itself, so a directory others can write is not used (they could plant one).
    fn private(&self) -> Result<(), String> {
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

    fn path(&self, dataset: &str, version: &str) -> PathBuf {
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

    /// The entry of a dataset version, checked against what the definition asks for
    /// (`stored`: the stored schema, `text_fields`: the fields with dictionaries) and the data
    /// files as they are now (`files`, relative to `folder`). A miss removes the entry.
    pub fn load(
        &self,
        dataset: &str,
        version: &str,
        stored: &Schema,
        folder: &Path,
        files: &[ServedFile],
    ) -> Result<Option<Mapped>, Miss> {
        if let Err(why) = self.private() {
            return Err(miss(why));
        }
        let path = self.path(dataset, version);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                MISSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(miss(format!("cannot open it: {e}"))),
        };
        let checked = map(&file).and_then(|buffer| {
            let header = frame(&buffer)?;
            check(&header, dataset, version)?;
            let files = check_files(&header, folder, files)?;
            let entry = Entry::open(buffer, &header, stored, path.clone())?;
            let chunks = entry.chunk_rows()?;
            let rows: usize = chunks.iter().sum();
            if rows != header.rows {
                return Err(miss(format!(
                    "{rows} rows where its header says {}",
                    header.rows
                )));
            }
            Ok(Mapped {
                header,
                files,
                chunks,
                entry: Arc::new(entry),
            })
        });
        let counter = if checked.is_ok() { &HITS } else { &MISSES };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match checked {
            Ok(mapped) => Ok(Some(mapped)),
            Err(why) => {
                let _ = std::fs::remove_file(&path);
                Err(why)
            }
        }
    }

    /// Starts writing the entry of a dataset version with the stored columns `stored`: under
    /// a temporary name, chunk by chunk ([`Writer`]), renamed into place by
    /// [`Writer::finish`].
    pub fn writer(&self, header: Header, stored: &SchemaRef) -> std::io::Result<Writer> {
        self.create()?;
        self.private().map_err(std::io::Error::other)?;
        let path = self.path(&header.dataset, &header.version);
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(std::io::Error::other)?;
        let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let temporary = path.with_extension(format!("arrow.{suffix}.tmp"));
        let file = File::create_new(&temporary)?;
        let mut out = Counting {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            at: 0,
        };
        let started = (|| {
            out.write_all(MAGIC)?;
            pad(&mut out)?;
            let offset = out.at;
            let ipc = FileWriter::try_new(out, stored).map_err(std::io::Error::other)?;
            Ok::<_, std::io::Error>((ipc, offset))
        })();
        match started {
            Ok((ipc, offset)) => Ok(Writer {
                cache: self.clone(),
                header,
                path,
                temporary,
                ipc: Some(ipc),
                chunks_at: offset,
                rows: 0,
                digests: Vec::new(),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&temporary);
                Err(e)
            }
        }
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
    fn remove_stale(&self, dataset: &str, keep: &Path) {
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

/// Bytes written so far, for section offsets.
struct Counting {
    inner: std::io::BufWriter<File>,
    at: u64,
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Zeros up to the next multiple of [`ALIGN`].
fn pad(out: &mut Counting) -> std::io::Result<()> {
    let rest = (ALIGN - out.at % ALIGN) % ALIGN;
    out.write_all(&vec![0u8; rest as usize])
}

/// An entry being written: chunks as they are built, then the dictionaries and the header.
/// Dropped unfinished, its temporary file is removed.
pub struct Writer {
    cache: Cache,
    header: Header,
    path: PathBuf,
    temporary: PathBuf,
    ipc: Option<FileWriter<Counting>>,
    chunks_at: u64,
    rows: usize,
    digests: Vec<Vec<u32>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.ipc.is_some() {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

impl crate::store::ChunkSink for Writer {
    fn chunk(&mut self, batch: RecordBatch) -> Result<(), StorageError> {
        let ipc = self
            .ipc
            .as_mut()
            .ok_or_else(|| StorageError::internal("a cache entry written after its end"))?;
        self.digests
            .push(batch.columns().iter().map(|c| digest(c.as_ref())).collect());
        ipc.write(&batch).map_err(|e| {
            StorageError::internal(format!(
                "the prepared data could not be kept in the cache: {e}"
            ))
        })?;
        self.rows += batch.num_rows();
        Ok(())
    }
}

impl Writer {
    /// Ends the entry: the dictionaries of the text fields (`values`, by field index), the
    /// header (with `files`, `extract` and `notes` of the data read), synced, renamed into
    /// place; the dataset's other entries and abandoned temporary files are removed.
    pub fn finish(
        mut self,
        values: &[Option<crate::store::Dictionary>],
        stats: &[crate::store::FieldStats],
        files: &[ServedFile],
        extract: Option<String>,
        notes: Vec<String>,
    ) -> std::io::Result<PathBuf> {
        let ipc = self
            .ipc
            .take()
            .ok_or_else(|| std::io::Error::other("the entry was finished already"))?;
        let written = (|| {
            let mut ipc = ipc;
            ipc.finish().map_err(std::io::Error::other)?;
            let mut out = ipc.into_inner().map_err(std::io::Error::other)?;
            let chunks = Section {
                offset: self.chunks_at,
                len: out.at - self.chunks_at,
            };
            pad(&mut out)?;
            let values_at = out.at;
            let schema = values_schema();
            let mut text_fields = Vec::new();
            let mut value_digests = Vec::new();
            let mut folded_digests = Vec::new();
            let mut ipc = FileWriter::try_new(out, &schema).map_err(std::io::Error::other)?;
            for (f, v) in values.iter().enumerate() {
                if let Some(v) = v {
                    text_fields.push(f);
                    value_digests.push(digest(&v.values));
                    folded_digests.push(digest(&v.folded));
                    let batch = RecordBatch::try_new(
                        Arc::clone(&schema),
                        vec![
                            Arc::new(v.values.clone()) as ArrayRef,
                            Arc::new(v.folded.clone()) as ArrayRef,
                        ],
                    )
                    .map_err(std::io::Error::other)?;
                    ipc.write(&batch).map_err(std::io::Error::other)?;
                }
            }
            ipc.finish().map_err(std::io::Error::other)?;
            let mut out = ipc.into_inner().map_err(std::io::Error::other)?;
            let header = Header {
                rows: self.rows,
                files: cached_files(files),
                extract,
                notes,
                text_fields,
                chunks,
                values: Section {
                    offset: values_at,
                    len: out.at - values_at,
                },
                digests: std::mem::take(&mut self.digests),
                value_digests,
                folded_digests,
                stats: Some(stats.to_vec()),
                ..self.header.clone()
            };
            let json = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
            out.write_all(&json)?;
            out.write_all(&(json.len() as u64).to_le_bytes())?;
            out.write_all(MAGIC)?;
            out.flush()?;
            let file = out
                .inner
                .into_inner()
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            file.sync_all()?;
            std::fs::rename(&self.temporary, &self.path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&self.temporary);
            return Err(e);
        }
        self.cache.remove_stale(&self.header.dataset, &self.path);
        Ok(self.path.clone())
    }
}

/// The schema of the values section: per text field, its dictionary and the folded forms.
fn values_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("value", DataType::Utf8, false),
        Field::new("folded", DataType::Utf8, true),
    ]))
}

/// A mapped entry, its frame checked: what it says, the data files as they are now, the rows
/// of each chunk, and the columns, read when first asked for.
#[derive(Debug)]
pub struct Mapped {
    pub header: Header,
    /// The data files as they are now (their hashes those of the bytes the entry was built
    /// from, checked).
    pub files: Vec<ServedFile>,
    pub chunks: Vec<usize>,
    pub entry: Arc<Entry>,
}

/// The sections of a mapped entry.
pub struct Entry {
    buffer: Buffer,
    path: PathBuf,
    stored: SchemaRef,
    version: MetadataVersion,
    blocks: Vec<Block>,
    chunks_at: usize,
    values_schema: SchemaRef,
    values_version: MetadataVersion,
    values_blocks: Vec<Block>,
    values_at: usize,
    /// Per field, its block in the values section.
    text: std::collections::HashMap<usize, usize>,
    digests: Vec<Vec<u32>>,
    value_digests: Vec<u32>,
    folded_digests: Vec<u32>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("bytes", &self.buffer.len())
            .field("chunks", &self.blocks.len())
            .finish_non_exhaustive()
    }
}

/// An Arrow IPC file inside the entry: its schema, version and blocks, all inside it.
fn ipc_section(
    buffer: &Buffer,
    section: Section,
    what: &str,
) -> Result<(usize, SchemaRef, MetadataVersion, Vec<Block>), Miss> {
    let bad =
        |e: &dyn std::fmt::Display| miss(format!("its {what} are not a readable Arrow file: {e}"));
    let start = usize::try_from(section.offset).map_err(|_| miss("a section past the end"))?;
    let len = usize::try_from(section.len).map_err(|_| miss("a section past the end"))?;
    if start % ALIGN as usize != 0
        || start.checked_add(len).is_none_or(|e| e > buffer.len())
        || len < 16
    {
        return Err(miss(format!("its {what} lie outside the file")));
    }
    let bytes = &buffer[start..start + len];
    if &bytes[..6] != b"ARROW1" {
        return Err(miss(format!("its {what} are not an Arrow file")));
    }
    let trailer = len - 10;
    let tail: [u8; 10] = bytes[trailer..].try_into().map_err(|_| miss("too short"))?;
    let footer_len = read_footer_length(tail).map_err(|e| bad(&e))?;
    if footer_len > trailer {
        return Err(miss(format!(
            "the footer of its {what} is longer than they are"
        )));
    }
    let footer = root_as_footer(&bytes[trailer - footer_len..trailer]).map_err(|e| bad(&e))?;
    let fb_schema = footer
        .schema()
        .ok_or_else(|| miss(format!("its {what} have no schema")))?;
    let schema = Arc::new(fb_to_schema(fb_schema));
    let mut blocks = Vec::new();
    for block in footer.recordBatches().into_iter().flatten() {
        let at = usize::try_from(block.offset()).map_err(|_| miss("a negative offset"))?;
        let n = usize::try_from(block.bodyLength())
            .ok()
            .and_then(|b| b.checked_add(usize::try_from(block.metaDataLength()).ok()?))
            .ok_or_else(|| miss("a block of impossible length"))?;
        if at.checked_add(n).is_none_or(|end| end > len) {
            return Err(miss(format!("a block past the end of its {what}")));
        }
        blocks.push(*block);
    }
    Ok((start, schema, footer.version(), blocks))
}

impl Entry {
    fn open(
        buffer: Buffer,
        header: &Header,
        stored: &Schema,
        path: PathBuf,
    ) -> Result<Entry, Miss> {
        let (chunks_at, schema, version, blocks) = ipc_section(&buffer, header.chunks, "chunks")?;
        let same_fields = schema.fields().len() == stored.fields().len()
            && schema
                .fields()
                .iter()
                .zip(stored.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !same_fields {
            return Err(miss("its columns are not the ones the definition asks for"));
        }
        let (values_at, values_schema, values_version, values_blocks) =
            ipc_section(&buffer, header.values, "dictionaries")?;
        if values_schema.fields() != self::values_schema().fields()
            || values_blocks.len() != header.text_fields.len()
        {
            return Err(miss("its dictionaries are not the ones its header lists"));
        }
        let expected_text: Vec<usize> = stored
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| f.data_type() == &DataType::UInt32)
            .map(|(i, _)| i)
            .collect();
        if header.text_fields != expected_text {
            return Err(miss("its text fields are not the definition's"));
        }
        if header.digests.len() != blocks.len()
            || header
                .digests
                .iter()
                .any(|d| d.len() != stored.fields().len())
            || header.value_digests.len() != header.text_fields.len()
            || header.folded_digests.len() != header.text_fields.len()
        {
            return Err(miss("its checksums do not cover its columns"));
        }
        Ok(Entry {
            digests: header.digests.clone(),
            value_digests: header.value_digests.clone(),
            folded_digests: header.folded_digests.clone(),
            text: header
                .text_fields
                .iter()
                .enumerate()
                .map(|(b, f)| (*f, b))
                .collect(),
            buffer,
            path,
            stored: Arc::new(stored.clone()),
            version,
            blocks,
            chunks_at,
            values_schema,
            values_version,
            values_blocks,
            values_at,
        })
    }

    /// Decodes one block of a section with a projection; a panic in the decoder (a hostile
    /// file) is an error like any other.
    fn decode(
        &self,
        at: usize,
        schema: &SchemaRef,
        version: MetadataVersion,
        block: &Block,
        projection: Vec<usize>,
    ) -> Result<RecordBatch, String> {
        let start = at + block.offset() as usize;
        let len = block.bodyLength() as usize + block.metaDataLength() as usize;
        let data = self.buffer.slice_with_length(start, len);
        let decoder = FileDecoder::new(Arc::clone(schema), version).with_projection(projection);
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decoder.read_record_batch(block, &data)
        }));
        match decoded {
            Ok(Ok(Some(batch))) => Ok(batch),
            Ok(Ok(None)) => Err("an empty block".into()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("a block the decoder cannot read".into()),
        }
    }

    /// The rows of each chunk (no column is decoded).
    fn chunk_rows(&self) -> Result<Vec<usize>, Miss> {
        self.blocks
            .iter()
            .map(|b| {
                self.decode(self.chunks_at, &self.stored, self.version, b, Vec::new())
                    .map(|batch| batch.num_rows())
                    .map_err(|e| miss(format!("a chunk does not decode: {e}")))
            })
            .collect()
    }
}

impl crate::store::Columns for Entry {
    fn column(&self, field: usize) -> Result<Vec<ArrayRef>, String> {
        self.blocks
            .iter()
            .enumerate()
            .map(|(c, b)| {
                let batch =
                    self.decode(self.chunks_at, &self.stored, self.version, b, vec![field])?;
                let array = Arc::clone(batch.column(0));
                if self.digests.get(c).and_then(|d| d.get(field)) != Some(&digest(array.as_ref())) {
                    return Err(format!("chunk {c} does not match its checksum"));
                }
                Ok(array)
            })
            .collect()
    }

    fn values(&self, field: usize) -> Result<StringArray, String> {
        let (at, values) = self.values_column(field, 0)?;
        if self.value_digests.get(at) != Some(&digest(&values)) {
            return Err("the dictionary does not match its checksum".into());
        }
        if values.is_empty() || !values.value(0).is_empty() || values.null_count() > 0 {
            return Err("a dictionary that does not start with the empty value".into());
        }
        Ok(values)
    }

    fn folded(&self, field: usize) -> Result<StringArray, String> {
        let (at, folded) = self.values_column(field, 1)?;
        if self.folded_digests.get(at) != Some(&digest(&folded)) {
            return Err("the folded values do not match their checksum".into());
        }
        Ok(folded)
    }

    fn damaged(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Entry {
    /// Column `column` of text field `field`'s block in the values section, with the block's
    /// place (its checksums' index).
    fn values_column(&self, field: usize, column: usize) -> Result<(usize, StringArray), String> {
        let at = *self
            .text
            .get(&field)
            .ok_or_else(|| format!("no dictionary for field {field}"))?;
        let block = self
            .values_blocks
            .get(at)
            .ok_or_else(|| format!("no dictionary for field {field}"))?;
        let batch = self.decode(
            self.values_at,
            &self.values_schema,
            self.values_version,
            block,
            vec![column],
        )?;
        let values = batch
            .column(0)
            .as_string_opt::<i32>()
            .ok_or("a dictionary that is not text")?
            .clone();
        Ok((at, values))
    }
}

/// The header of a mapped entry, its frame checked: magic at both ends, a header that fits.
fn frame(buffer: &Buffer) -> Result<Header, Miss> {
    let len = buffer.len();
    if len < 32 || &buffer[..8] != MAGIC {
        return Err(miss("not a Tally cache entry (no leading magic)"));
    }
    if &buffer[len - 8..] != MAGIC {
        return Err(miss("cut short (no trailing magic)"));
    }
    let header_len = u64::from_le_bytes(
        buffer[len - 16..len - 8]
            .try_into()
            .map_err(|_| miss("too short"))?,
    );
    if header_len > MAX_HEADER || header_len as usize > len - 24 {
        return Err(miss("a header longer than the file"));
    }
    let start = len - 16 - header_len as usize;
    serde_json::from_slice(&buffer[start..len - 16])
        .map_err(|e| miss(format!("a broken header: {e}")))
}

/// The header is this Tally's, for this dataset version.
fn check(header: &Header, dataset: &str, version: &str) -> Result<(), Miss> {
    if header.format != FORMAT {
        return Err(miss(format!(
            "format {} (this Tally reads {FORMAT})",
            header.format
        )));
    }
    if header.tally != env!("CARGO_PKG_VERSION") {
        return Err(miss(format!("written by Tally {}", header.tally)));
    }
    if header.dataset != dataset || header.version != version {
        return Err(miss(format!(
            "it holds {} version {}",
            header.dataset, header.version
        )));
    }
    Ok(())
}

/// The file, mapped read-only. Entries are written once under another name and renamed
/// into place, never changed after, and removed only by unlinking, so a mapped entry's
/// bytes do not change under the map.
#[allow(unsafe_code)]
fn map(file: &File) -> Result<Buffer, Miss> {
    // SAFETY: the bytes of a cache entry never change after it is renamed into place (see
    // above); the map is read-only, and what is read is checked before it is trusted.
    let mapped =
        unsafe { memmap2::Mmap::map(file) }.map_err(|e| miss(format!("cannot map it: {e}")))?;
    Ok(Buffer::from(bytes::Bytes::from_owner(mapped)))
}

/// The data files are the ones the entry was built from: the same paths and sizes, and the
/// same time or, when the time moved, the same bytes (hashed again).
fn check_files(
    header: &Header,
    folder: &Path,
    now: &[ServedFile],
) -> Result<Vec<ServedFile>, Miss> {
    if header.files.len() != now.len() {
        return Err(miss("it was built from other files"));
    }
    let mut files = Vec::with_capacity(now.len());
    for (cached, current) in header.files.iter().zip(now) {
        if cached.path != current.path || cached.size != current.size {
            return Err(miss(format!("`{}` changed", current.path)));
        }
        let same_time =
            cached.modified.is_some() && cached.modified == current.modified.and_then(nanos);
        if !same_time {
            let hash = sha256_file(&folder.join(&current.path))
                .map_err(|e| miss(format!("cannot read `{}`: {e}", current.path)))?;
            if hash != cached.sha256 {
                return Err(miss(format!("the bytes of `{}` changed", current.path)));
            }
        }
        files.push(ServedFile {
            path: current.path.clone(),
            size: current.size,
            sha256: cached.sha256.clone(),
            modified: current.modified,
            object: current.object.clone(),
        });
    }
    Ok(files)
}

/// The files a prepared table was built from, as an entry records them.
pub fn cached_files(files: &[ServedFile]) -> Vec<CachedFile> {
    files
        .iter()
        .map(|f| CachedFile {
            path: f.path.clone(),
            size: f.size,
            sha256: f.sha256.clone(),
            modified: f.modified.and_then(nanos),
        })
        .collect()
}
