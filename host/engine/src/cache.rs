//! Prepared tables on disk. The first preparation of a dataset version writes its prepared
//! table (canonical types, row numbers, folded search text, code and share columns) as one
//! Arrow IPC file in the cache directory; later starts map that file instead of preparing
//! again, so the first answer after a restart costs a file check, not a pass over the data.
//!
//! An entry is named by the dataset id and version, written under a temporary name and
//! renamed into place (two servers sharing a directory never see half a file), and never
//! changed after. A mapped entry is checked before it is served: the Arrow file's framing,
//! the header in its schema metadata (format, Tally version, dataset, version, rows), the
//! schema the definition asks for, and every data file's size, time and (when the time
//! moved) hash. Anything else is a miss: the entry is removed and the data prepared anew.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::convert::fb_to_schema;
use datafusion::arrow::ipc::reader::{FileDecoder, read_footer_length};
use datafusion::arrow::ipc::root_as_footer;
use datafusion::arrow::ipc::writer::FileWriter;
use serde::{Deserialize, Serialize};

use crate::backend::{ServedFile, sha256_file, sha256_hex};

/// What a cache file holds and how; a file of another format is not read.
const FORMAT: &str = "tally-prepared/1";
/// The schema metadata key of an entry's header.
const HEADER_KEY: &str = "tally.cache";
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
    /// Per coded field (by index), its values (code 0 first).
    pub codes: Vec<(usize, Vec<String>)>,
    /// The computed measures (by index) with a share column.
    pub shares: Vec<usize>,
}

impl Header {
    /// The header of a dataset version's table of `rows` rows, written by this Tally (the
    /// rest filled by the writer).
    pub fn new(dataset: &str, version: &str, rows: usize) -> Header {
        Header {
            format: FORMAT.to_string(),
            tally: env!("CARGO_PKG_VERSION").to_string(),
            dataset: dataset.to_string(),
            version: version.to_string(),
            rows,
            files: Vec::new(),
            extract: None,
            notes: Vec::new(),
            codes: Vec::new(),
            shares: Vec::new(),
        }
    }
}

/// A mapped entry: its header and its table (arrays over the mapped file).
#[derive(Debug)]
pub struct Entry {
    pub header: Header,
    pub batches: Vec<RecordBatch>,
    pub schema: SchemaRef,
    /// The data files as they are now (their hashes those of the bytes the entry was built
    /// from, checked).
    pub files: Vec<ServedFile>,
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

impl Cache {
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
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&self.dir)
    }

    /// Whether only its owner may put files in the directory: an entry is served as the
    /// data itself, so a directory others can write is not used (they could plant one).
    fn private(&self) -> Result<(), String> {
        let meta = match std::fs::metadata(&self.dir) {
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
    /// (`expected` schema) and the data files as they are now (`files`, relative to
    /// `folder`). A miss removes the entry.
    pub fn load(
        &self,
        dataset: &str,
        version: &str,
        expected: &Schema,
        folder: &Path,
        files: &[ServedFile],
    ) -> Result<Option<Entry>, Miss> {
        if let Err(why) = self.private() {
            return Err(miss(why));
        }
        let path = self.path(dataset, version);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(miss(format!("cannot open it: {e}"))),
        };
        let checked = map(&file).and_then(|buffer| {
            let (header, schema, batches) = decode(&buffer)?;
            check(&header, dataset, version, &schema, expected, &batches)?;
            let files = check_files(&header, folder, files)?;
            Ok(Entry {
                header,
                batches,
                schema,
                files,
            })
        });
        match checked {
            Ok(entry) => Ok(Some(entry)),
            Err(why) => {
                let _ = std::fs::remove_file(&path);
                Err(why)
            }
        }
    }

    /// Writes the entry of a dataset version: under a temporary name, synced, then renamed
    /// into place; the entries of the dataset's other versions and abandoned temporary files
    /// are removed.
    pub fn store(
        &self,
        header: &Header,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> std::io::Result<PathBuf> {
        self.create()?;
        self.private().map_err(std::io::Error::other)?;
        let path = self.path(&header.dataset, &header.version);
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(std::io::Error::other)?;
        let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let temporary = path.with_extension(format!("arrow.{suffix}.tmp"));
        let written = (|| {
            let file = File::create_new(&temporary)?;
            let json = serde_json::to_string(header).map_err(std::io::Error::other)?;
            let mut metadata = schema.metadata().clone();
            metadata.insert(HEADER_KEY.to_string(), json);
            let schema = Schema::new_with_metadata(schema.fields().clone(), metadata);
            let mut writer = FileWriter::try_new(std::io::BufWriter::new(file), &schema)
                .map_err(std::io::Error::other)?;
            for batch in batches {
                writer.write(batch).map_err(std::io::Error::other)?;
            }
            writer.finish().map_err(std::io::Error::other)?;
            let mut inner = writer.into_inner().map_err(std::io::Error::other)?;
            inner.flush()?;
            inner
                .into_inner()
                .map_err(|e| std::io::Error::other(e.to_string()))?
                .sync_all()?;
            std::fs::rename(&temporary, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(e);
        }
        self.remove_stale(&header.dataset, &path);
        Ok(path)
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

/// The header, schema and batches of an Arrow IPC file, arrays over its bytes.
fn decode(buffer: &Buffer) -> Result<(Header, SchemaRef, Vec<RecordBatch>), Miss> {
    let bad = |e: &dyn std::fmt::Display| miss(format!("not a readable Arrow file: {e}"));
    if buffer.len() < 16 || &buffer[..6] != b"ARROW1" {
        return Err(miss("not an Arrow file (no leading magic)"));
    }
    let trailer = buffer.len() - 10;
    let tail: [u8; 10] = buffer[trailer..]
        .try_into()
        .map_err(|_| miss("too short"))?;
    let footer_len = read_footer_length(tail).map_err(|e| bad(&e))?;
    if footer_len > trailer {
        return Err(miss("its footer is longer than the file"));
    }
    let footer = root_as_footer(&buffer[trailer - footer_len..trailer]).map_err(|e| bad(&e))?;
    let fb_schema = footer.schema().ok_or_else(|| miss("no schema"))?;
    let schema = Arc::new(fb_to_schema(fb_schema));
    let header: Header = schema
        .metadata()
        .get(HEADER_KEY)
        .ok_or_else(|| miss("no Tally header"))
        .and_then(|json| {
            serde_json::from_str(json).map_err(|e| miss(format!("a broken header: {e}")))
        })?;
    let decoder = FileDecoder::new(Arc::clone(&schema), footer.version());
    let mut batches = Vec::new();
    for block in footer.recordBatches().into_iter().flatten() {
        let start = usize::try_from(block.offset()).map_err(|_| miss("a negative offset"))?;
        let len = usize::try_from(block.bodyLength())
            .ok()
            .and_then(|b| b.checked_add(usize::try_from(block.metaDataLength()).ok()?))
            .ok_or_else(|| miss("a block of impossible length"))?;
        if start.checked_add(len).is_none_or(|end| end > buffer.len()) {
            return Err(miss("a block past the end of the file"));
        }
        let data = buffer.slice_with_length(start, len);
        let batch = decoder
            .read_record_batch(block, &data)
            .map_err(|e| bad(&e))?
            .ok_or_else(|| miss("an empty block"))?;
        batches.push(batch);
    }
    Ok((header, schema, batches))
}

/// The header is this Tally's, for this dataset version, and the table has the schema the
/// definition asks for and the rows the header says.
fn check(
    header: &Header,
    dataset: &str,
    version: &str,
    schema: &Schema,
    expected: &Schema,
    batches: &[RecordBatch],
) -> Result<(), Miss> {
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
    let same_fields = schema.fields().len() == expected.fields().len()
        && schema
            .fields()
            .iter()
            .zip(expected.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    if !same_fields {
        return Err(miss("its columns are not the ones the definition asks for"));
    }
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows != header.rows {
        return Err(miss(format!(
            "{rows} rows where its header says {}",
            header.rows
        )));
    }
    Ok(())
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
