//! A Parquet file read through a [`Blob`]: its footer checked before anything trusts it, its
//! stamp, and its data read and decoded within caps.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchReader};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use datafusion::parquet::errors::ParquetError;

use crate::pages::{self, MAX_EXPANSION};

/// Rows per batch when reading.
/// The largest footer read: a footer describes columns and row groups; tens of megabytes
/// would be a file of millions of row groups, or a hostile one.
pub const MAX_FOOTER_BYTES: u64 = 64 * 1024 * 1024;
pub(crate) const BATCH_ROWS: usize = 16 * 1024;

/// Why a Parquet file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    // Only the file name is shown: messages reach callers, who must never see machine paths.
    #[error("cannot read `{}`: {source}", file_name(path))]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The bytes are not a (complete) Parquet file.
    #[error(
        "`{}` is not a readable Parquet file ({message}); a file still being written is retried once complete",
        file_name(path)
    )]
    Format { path: PathBuf, message: String },
    /// The footer is complete but its numbers cannot be true (row counts that disagree,
    /// sizes past the end of the file, an implausible compression ratio).
    #[error("`{}` has a footer that cannot be trusted: {message}", file_name(path))]
    Implausible { path: PathBuf, message: String },
    /// Data pages that do not decode (corrupt, truncated in the middle, or lying about
    /// their contents).
    #[error("`{}` has data that does not decode: {message}", file_name(path))]
    Corrupt { path: PathBuf, message: String },
    /// The file is not the size it had when its footer was read (replaced or growing).
    #[error("`{}` changed since it was registered", file_name(path))]
    Changed { path: PathBuf },
    /// The caller's meter refused to account for more (memory budget, cancellation).
    #[error("{0}")]
    Stopped(String),
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub(crate) fn format_error(path: &Path, e: ParquetError) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// What the footer says about a file.
#[derive(Debug, Clone)]
pub struct Footer {
    pub path: PathBuf,
    pub schema: SchemaRef,
    pub num_rows: u64,
    pub size: u64,
    pub modified: Option<SystemTime>,
    /// The raw footer (Thrift metadata and its length), which changes whenever the data does:
    /// enough to tell versions apart without reading the data pages. Shared by the footer's
    /// clones (it is megabytes for a file of hundreds of row groups).
    pub footer_bytes: std::sync::Arc<[u8]>,
    /// A digest of `footer_bytes`, made once by whoever needs one and shared by the footer's
    /// clones: a footer [`Footers`] gives back is such a clone, its bytes compared equal.
    pub digest: std::sync::Arc<std::sync::OnceLock<String>>,
    /// The footer, parsed and checked.
    pub metadata: std::sync::Arc<datafusion::parquet::file::metadata::ParquetMetaData>,
    /// Its column chunks by where they lie ([`Footer::chunks`]), made once by whoever needs
    /// them and shared by the footer's clones.
    chunks: std::sync::Arc<std::sync::OnceLock<std::sync::Arc<[ChunkAt]>>>,
    /// The file this footer was last read from and found equal to, as its metadata said then,
    /// shared by the footer's clones ([`Footer::known_in`]).
    seen: std::sync::Arc<std::sync::Mutex<Option<Stamp>>>,
}

/// A local file as its metadata says it is: which file (device and inode), its size, and when
/// its contents (`modified`) and its inode (`changed`: any write, rename or change of times
/// sets it to the clock's time, and no call sets it otherwise) last changed, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    device: u64,
    inode: u64,
    size: u64,
    modified: i128,
    changed: i128,
}

/// How long after a file's last change the read of its footer must have begun for its stamp to
/// vouch for its bytes: a change within the same tick of the file system's clock as a read
/// could leave the stamp as it was (git's "racy" index entries), one after a read begun this
/// long after the last change cannot (its tick is a later one, even at one second a tick).
pub const SETTLED: std::time::Duration = std::time::Duration::from_secs(1);

/// File systems (Linux's magic numbers) whose change times come from this machine's clock:
/// ext2–4, XFS, Btrfs, tmpfs, overlayfs, ZFS, F2FS. On a network file system they come from
/// the server's, which may lag this one's past [`SETTLED`]; there a footer is always read.
#[cfg(target_os = "linux")]
const LOCAL_FILE_SYSTEMS: [u64; 7] = [
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0x0102_1994,
    0x794C_7630,
    0x2FC1_2FC1,
    0xF2F5_2010,
];

impl Stamp {
    /// The stamp of an open file with metadata `meta`, both taken before it is read (with
    /// [`clock_ns`] before them). `None` unless the file lies on a local file system of Linux
    /// ([`LOCAL_FILE_SYSTEMS`]): elsewhere a footer is always read again.
    #[cfg(target_os = "linux")]
    pub fn of(file: &File, meta: &std::fs::Metadata) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let kind = rustix::fs::fstatfs(file).ok()?.f_type as u64 & 0xFFFF_FFFF;
        if !LOCAL_FILE_SYSTEMS.contains(&kind) {
            return None;
        }
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Some(Stamp {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.size(),
            modified: ns(meta.mtime(), meta.mtime_nsec()),
            changed: ns(meta.ctime(), meta.ctime_nsec()),
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn of(_file: &File, _meta: &std::fs::Metadata) -> Option<Stamp> {
        None
    }

    /// Whether a read begun `at` (nanoseconds since the epoch) began [`SETTLED`] after this
    /// stamp's last change.
    fn settled_at(&self, at: i128) -> bool {
        at.saturating_sub(self.changed) >= SETTLED.as_nanos() as i128
    }
}

/// The clock now, in nanoseconds since the epoch: taken before a file's stamp and the read of
/// its footer, and given to [`Footer::seen_in`] once the read found the footer's bytes.
pub fn clock_ns() -> i128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// Where a column chunk lies in its file: its first byte, the byte after its last, its row
/// group and its column (the index of its leaf).
pub type ChunkAt = (u64, u64, usize, usize);

impl Footer {
    /// The file's column chunks sorted by where they lie ([`ChunkAt`]); a chunk whose offset
    /// or size is negative is left out. Made once per footer parsed: a file of thousands of
    /// row groups has hundreds of thousands of chunks, and every scan of it needs them.
    pub fn chunks(&self) -> std::sync::Arc<[ChunkAt]> {
        std::sync::Arc::clone(self.chunks.get_or_init(|| {
            let mut chunks = Vec::new();
            for (g, group) in self.metadata.row_groups().iter().enumerate() {
                for (c, column) in group.columns().iter().enumerate() {
                    if let Ok((start, len)) = pages::chunk_range(column, g) {
                        chunks.push((start as u64, (start + len) as u64, g, c));
                    }
                }
            }
            chunks.sort_unstable();
            chunks.into()
        }))
    }

    /// Whether the file stamped `stamp` is known to end in this footer without reading it:
    /// it is the same file, of the same size, unchanged since a read that found it ending in
    /// this footer, a read begun [`SETTLED`] after the file's last change (so no later change
    /// can have left its stamp as it was).
    pub fn known_in(&self, stamp: Option<Stamp>) -> bool {
        let Some(stamp) = stamp else {
            return false;
        };
        stamp.size == self.size && self.seen.lock().is_ok_and(|seen| *seen == Some(stamp))
    }

    /// A read begun `at` ([`clock_ns`], taken before the file's stamp `stamp`) found the file
    /// ending in this footer: remembered only when the read began [`SETTLED`] after the
    /// file's last change.
    pub fn seen_in(&self, stamp: Option<Stamp>, at: i128) {
        let stamp = stamp.filter(|s| s.settled_at(at) && s.size == self.size);
        if let Ok(mut seen) = self.seen.lock() {
            *seen = stamp;
        }
    }
}

/// Bytes read by position: a local file, or an object in object storage (whose reads are
/// ranged requests). Every reader of this crate reads through it, so both are checked alike.
pub trait Blob: Send + Sync {
    /// Its size in bytes, as it is now.
    fn size(&self) -> std::io::Result<u64>;
    /// Fills `buf` with the bytes from `offset`; fewer bytes than asked is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// The bytes of several ranges (an object store reads them with few requests, at once).
    fn read_ranges(&self, ranges: &[std::ops::Range<u64>]) -> std::io::Result<Vec<Bytes>> {
        ranges
            .iter()
            .map(|r| {
                let mut buf = vec![0u8; r.end.saturating_sub(r.start) as usize];
                self.read_exact_at(&mut buf, r.start)
                    .map(|()| Bytes::from(buf))
            })
            .collect()
    }
}

impl Blob for File {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        read_at(self, buf, offset)
    }
}

/// Fills `buf` from `offset` of `file` without moving a shared cursor (positional reads, so
/// several readers may share one open file).
#[cfg(unix)]
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file.try_clone()?;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

/// Reads the footer of `path`: schema, row count, size. No data pages are read. The footer's
/// numbers are checked against each other and against the file before anything trusts them.
pub fn read_footer(path: &Path) -> Result<Footer, Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let modified = file.metadata().map_err(io)?.modified().ok();
    read_footer_of(path, &file, modified)
}

/// Reads the footer of the bytes `blob` holds, named `path` in messages (an object's key):
/// what [`read_footer`] does for a local file.
pub fn read_footer_of(
    path: &Path,
    blob: &dyn Blob,
    modified: Option<SystemTime>,
) -> Result<Footer, Error> {
    let (size, footer_bytes) = footer_bytes(path, blob)?;
    parse_footer(path, footer_bytes, size, modified)
}

/// The size of the bytes `blob` holds and its raw footer (Thrift metadata and its length).
fn footer_bytes(path: &Path, blob: &dyn Blob) -> Result<(u64, Vec<u8>), Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = blob.size().map_err(io)?;
    match raw_footer(blob, size).map_err(io)? {
        Tail::Footer(bytes) => Ok((size, bytes)),
        // No magic number at the end: not Parquet, or a file still being written (its footer
        // comes last), which the caller retries.
        Tail::NoMagic => Err(Error::Format {
            path: path.to_path_buf(),
            message: "the file does not end with the Parquet magic number".into(),
        }),
        Tail::TooLong => Err(Error::Implausible {
            path: path.to_path_buf(),
            message: format!("its footer says it is longer than {MAX_FOOTER_BYTES} bytes"),
        }),
    }
}

/// The footer `footer_bytes` of a file of `size` bytes, parsed and checked.
fn parse_footer(
    path: &Path,
    footer_bytes: Vec<u8>,
    size: u64,
    modified: Option<SystemTime>,
) -> Result<Footer, Error> {
    let reader_meta = guarded(path, || {
        let thrift = &footer_bytes[..footer_bytes.len().saturating_sub(8)];
        let metadata =
            datafusion::parquet::file::metadata::ParquetMetaDataReader::decode_metadata(thrift)
                .map_err(|e| format_error(path, e))?;
        ArrowReaderMetadata::try_new(std::sync::Arc::new(metadata), ArrowReaderOptions::new())
            .map_err(|e| format_error(path, e))
    })?;
    check_footer(path, reader_meta.metadata(), size)?;
    let num_rows = reader_meta.metadata().file_metadata().num_rows();
    Ok(Footer {
        path: path.to_path_buf(),
        schema: reader_meta.schema().clone(),
        num_rows: u64::try_from(num_rows).unwrap_or(0),
        size,
        modified,
        footer_bytes: footer_bytes.into(),
        digest: std::sync::Arc::default(),
        metadata: std::sync::Arc::clone(reader_meta.metadata()),
        chunks: std::sync::Arc::default(),
        seen: std::sync::Arc::default(),
    })
}

/// Footers parsed before, by the path (or object key) they were read from, within a bound on
/// the memory they hold: a footer read again whose bytes are those parsed before, in a file
/// of the same size, is given back without being parsed again. Parsing the footer of a file
/// of hundreds of row groups takes tens of milliseconds (megabytes of Thrift); reading its
/// bytes again and comparing them takes one.
#[derive(Debug)]
pub struct Footers {
    held: std::sync::Mutex<FootersHeld>,
    /// The memory the footers held may take, in bytes.
    bound: usize,
}

#[derive(Debug, Default)]
struct FootersHeld {
    /// The footers, oldest first.
    footers: std::collections::VecDeque<(Footer, usize)>,
    bytes: usize,
}

impl Footers {
    pub fn new(bound: usize) -> Footers {
        Footers {
            held: std::sync::Mutex::new(FootersHeld::default()),
            bound,
        }
    }

    /// A footer held for `path` that the file stamped `stamp` is known to end in
    /// ([`Footer::known_in`]), so that its bytes need not be read again; `modified` is the
    /// file's, as its metadata says now.
    pub fn known(
        &self,
        path: &Path,
        stamp: Option<Stamp>,
        modified: Option<SystemTime>,
    ) -> Option<Footer> {
        let held = self.held.lock().ok()?;
        held.footers
            .iter()
            .find(|(f, _)| f.path == path && f.known_in(stamp))
            .map(|(f, _)| Footer {
                modified,
                ..f.clone()
            })
    }

    /// [`read_footer_of`], parsed only when its bytes are not those of a footer held.
    pub fn read_of(
        &self,
        path: &Path,
        blob: &dyn Blob,
        modified: Option<SystemTime>,
    ) -> Result<Footer, Error> {
        let (size, bytes) = footer_bytes(path, blob)?;
        if let Ok(held) = self.held.lock()
            && let Some((footer, _)) = held
                .footers
                .iter()
                .find(|(f, _)| f.path == path && f.size == size && *f.footer_bytes == *bytes)
        {
            return Ok(Footer {
                modified,
                ..footer.clone()
            });
        }
        let footer = parse_footer(path, bytes, size, modified)?;
        let weight = footer.footer_bytes.len() + footer.metadata.memory_size();
        if weight <= self.bound
            && let Ok(mut held) = self.held.lock()
        {
            if let Some(at) = held.footers.iter().position(|(f, _)| f.path == path)
                && let Some((_, w)) = held.footers.remove(at)
            {
                held.bytes -= w;
            }
            while held.bytes + weight > self.bound {
                match held.footers.pop_front() {
                    Some((_, w)) => held.bytes -= w,
                    None => break,
                }
            }
            held.bytes += weight;
            held.footers.push_back((footer.clone(), weight));
        }
        Ok(footer)
    }

    /// How many footers are held.
    pub fn len(&self) -> usize {
        self.held.lock().map_or(0, |h| h.footers.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The checks a footer must pass: row counts that add up, column chunks inside the file, and
/// no chunk claiming to decompress to more than [`MAX_EXPANSION`] times its size.
fn check_footer(
    path: &Path,
    metadata: &datafusion::parquet::file::metadata::ParquetMetaData,
    file_size: u64,
) -> Result<(), Error> {
    let implausible = |message: String| Error::Implausible {
        path: path.to_path_buf(),
        message,
    };
    let declared = metadata.file_metadata().num_rows();
    if declared < 0 {
        return Err(implausible(format!("it declares {declared} rows")));
    }
    let mut in_groups: i64 = 0;
    for (g, group) in metadata.row_groups().iter().enumerate() {
        let rows = group.num_rows();
        if rows < 0 {
            return Err(implausible(format!("row group {g} declares {rows} rows")));
        }
        in_groups = in_groups.saturating_add(rows);
        for column in group.columns() {
            let name = column.column_path().string();
            let compressed = column.compressed_size();
            let uncompressed = column.uncompressed_size();
            if compressed < 0 || uncompressed < 0 {
                return Err(implausible(format!(
                    "column `{name}` of row group {g} declares a negative size"
                )));
            }
            let start = column
                .dictionary_page_offset()
                .unwrap_or(i64::MAX)
                .min(column.data_page_offset());
            if start < 0 || (start as u64).saturating_add(compressed as u64) > file_size {
                return Err(implausible(format!(
                    "column `{name}` of row group {g} lies past the end of the file ({file_size} bytes)"
                )));
            }
            // Small chunks may expand a lot in relative terms; what matters is the absolute
            // amount, so the ratio applies past a floor of 1 MiB.
            if uncompressed > (1 << 20) && uncompressed / compressed.max(1) > MAX_EXPANSION {
                return Err(implausible(format!(
                    "column `{name}` of row group {g} claims to expand from {compressed} to {uncompressed} bytes, more than {MAX_EXPANSION} times"
                )));
            }
            // A flat column has one value per row; fewer values than rows cannot decode.
            if column.column_descr().max_rep_level() == 0 && column.num_values() != rows {
                return Err(implausible(format!(
                    "column `{name}` of row group {g} holds {} values for {rows} rows",
                    column.num_values()
                )));
            }
        }
    }
    if in_groups != declared {
        return Err(implausible(format!(
            "it declares {declared} rows but its row groups hold {in_groups}"
        )));
    }
    Ok(())
}

/// Runs parquet decoding with panics turned into errors: a hostile file can make the parquet
/// crate panic, and that must fail this file, not the caller.
pub(crate) fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the reader stopped unexpectedly".to_string());
            Err(Error::Corrupt {
                path: path.to_path_buf(),
                message: format!("the Parquet reader failed ({message})"),
            })
        }
    }
}

/// What the end of a file holds.
pub(crate) enum Tail {
    /// The metadata, its length and the magic number.
    Footer(Vec<u8>),
    NoMagic,
    /// A footer that says it is longer than [`MAX_FOOTER_BYTES`] (not read).
    TooLong,
}

/// The tail read first: most footers fit, so an object's footer is one ranged request.
const TAIL_GUESS: u64 = 64 * 1024;

/// The last bytes of a Parquet file: metadata, its length and the magic number.
pub(crate) fn raw_footer(blob: &dyn Blob, size: u64) -> std::io::Result<Tail> {
    if size < 12 {
        return Ok(Tail::NoMagic);
    }
    let guess = size.min(TAIL_GUESS);
    let mut tail = vec![0u8; guess as usize];
    blob.read_exact_at(&mut tail, size - guess)?;
    let end = &tail[tail.len() - 8..];
    if &end[4..] != b"PAR1" {
        return Ok(Tail::NoMagic);
    }
    let len = u64::from(u32::from_le_bytes([end[0], end[1], end[2], end[3]]));
    if len > MAX_FOOTER_BYTES {
        return Ok(Tail::TooLong);
    }
    let wanted = (8 + len).min(size);
    if wanted <= guess {
        return Ok(Tail::Footer(tail.split_off((guess - wanted) as usize)));
    }
    let mut out = vec![0u8; wanted as usize];
    blob.read_exact_at(&mut out, size - wanted)?;
    Ok(Tail::Footer(out))
}

/// The whole file as bytes (hashed by the caller) and its data, limited to `columns` (indices
/// into the footer's schema).
#[derive(Debug)]
pub struct Data {
    pub bytes: Bytes,
    pub batches: Vec<RecordBatch>,
    pub schema: SchemaRef,
}

/// Accounts for what decoding holds: called after each batch with its size in bytes and its
/// rows; an error stops the decoding and is returned as [`Error::Stopped`].
pub type Meter<'a> = dyn FnMut(usize, usize) -> Result<(), String> + 'a;

/// Reads the file's bytes once and decodes the given top-level columns from them. Text
/// columns are decoded as string views, so a batch holds 16 bytes per value plus the
/// dictionary and page buffers it shares (a million rows of one long dictionary value cost
/// 16 MB, not a million copies); `meter` sees every batch before the next is decoded. The
/// rows decoded must be the rows the footer declared.
pub fn read_data(
    path: &Path,
    columns: &[usize],
    expected_size: u64,
    meter: &mut Meter<'_>,
) -> Result<Data, Error> {
    use std::io::Read;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    // Read no more than the size the caller accounted for: a file that grew since is not
    // this version (the caller sees the size differ and treats the version as stale).
    let file = File::open(path).map_err(io)?;
    let mut bytes = Vec::with_capacity(usize::try_from(expected_size).unwrap_or(0));
    file.take(expected_size.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 != expected_size {
        return Err(Error::Changed {
            path: path.to_path_buf(),
        });
    }
    let bytes = Bytes::from(bytes);
    let mut batches = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let schema = decode(path, bytes.clone(), columns, &mut |batch| {
        meter(new_bytes(&batch, &mut seen), batch.num_rows())?;
        batches.push(batch);
        Ok(())
    })?;
    Ok(Data {
        bytes,
        batches,
        schema,
    })
}

/// The memory a batch adds to the batches decoded before it: string views share their
/// dictionary and page buffers across batches, so each buffer is counted once (`seen` holds
/// the buffers already counted).
pub fn new_bytes(batch: &RecordBatch, seen: &mut std::collections::HashSet<usize>) -> usize {
    use datafusion::arrow::array::{Array, StringViewArray};
    batch
        .columns()
        .iter()
        .map(
            |column| match column.as_any().downcast_ref::<StringViewArray>() {
                Some(views) => {
                    let own = views.len() * 16 + views.len() / 8 + 64;
                    let shared: usize = views
                        .data_buffers()
                        .iter()
                        .filter(|b| seen.insert(b.as_ptr() as usize))
                        .map(|b| b.capacity())
                        .sum();
                    own + shared
                }
                None => column.get_array_memory_size(),
            },
        )
        .sum()
}

/// Decodes every page of the given columns (all of them when `columns` is empty) of the bytes
/// of a Parquet file, handing each batch to `each` before the next is decoded (an error from
/// it stops decoding as [`Error::Stopped`]), and checks the rows against the footer.
pub fn decode(
    path: &Path,
    bytes: Bytes,
    columns: &[usize],
    each: &mut dyn FnMut(RecordBatch) -> Result<(), String>,
) -> Result<SchemaRef, Error> {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    guarded(path, move || {
        // The file's own Arrow schema is not used: it may ask for dictionary arrays (one
        // copy of the values per batch); text is read as views of shared buffers instead.
        let plain = ArrowReaderMetadata::load(
            &bytes,
            ArrowReaderOptions::new().with_skip_arrow_metadata(true),
        )
        .map_err(|e| format_error(path, e))?;
        check_footer(path, plain.metadata(), bytes.len() as u64)?;
        pages::check(&bytes, plain.metadata(), columns).map_err(|message| Error::Implausible {
            path: path.to_path_buf(),
            message,
        })?;
        let declared = plain.metadata().file_metadata().num_rows();
        let viewed: Vec<Field> = plain
            .schema()
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 => {
                    Field::new(f.name(), DataType::Utf8View, f.is_nullable())
                        .with_metadata(f.metadata().clone())
                }
                _ => f.as_ref().clone(),
            })
            .collect();
        let options = ArrowReaderOptions::new()
            .with_skip_arrow_metadata(true)
            .with_schema(std::sync::Arc::new(Schema::new_with_metadata(
                viewed,
                plain.schema().metadata().clone(),
            )));
        let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(bytes, options)
            .map_err(|e| format_error(path, e))?;
        let mask = if columns.is_empty() {
            ProjectionMask::all()
        } else {
            ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied())
        };
        let reader = builder
            .with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(|e| format_error(path, e))?;
        let schema = reader.schema();
        let mut rows: i64 = 0;
        for batch in reader {
            let batch = batch.map_err(|e| Error::Corrupt {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
            rows += batch.num_rows() as i64;
            each(batch).map_err(Error::Stopped)?;
        }
        if rows != declared {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                message: format!("its footer declares {declared} rows but {rows} decode"),
            });
        }
        Ok(schema)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn write(path: &Path, rows: i64) {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .expect("batch");
        let file = File::create(path).expect("create");
        let mut writer =
            datafusion::parquet::arrow::ArrowWriter::try_new(file, schema, None).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
    }

    #[test]
    fn a_footer_read_again_unchanged_is_not_parsed_again() {
        let dir = std::env::temp_dir().join(format!("tally-footers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("data.parquet");
        write(&path, 10);
        let footers = Footers::new(64 * 1024 * 1024);
        let read = |footers: &Footers| {
            let file = File::open(&path).expect("open");
            footers.read_of(&path, &file, None).expect("footer")
        };
        let first = read(&footers);
        let again = read(&footers);
        assert_eq!(footers.len(), 1);
        assert!(Arc::ptr_eq(&first.metadata, &again.metadata));
        assert_eq!(again.num_rows, 10);
        // A digest made of the first is the second's: their bytes are the same.
        first.digest.get_or_init(|| "made once".into());
        assert_eq!(again.digest.get().map(String::as_str), Some("made once"));
        // Replaced: parsed again, and held instead of the old one, with no digest yet.
        write(&path, 12);
        let replaced = read(&footers);
        assert!(!Arc::ptr_eq(&first.metadata, &replaced.metadata));
        assert_eq!((replaced.num_rows, footers.len()), (12, 1));
        assert!(replaced.digest.get().is_none());
        // A bound below one footer holds none.
        let none = Footers::new(16);
        read(&none);
        assert!(none.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_footer_is_known_in_its_file_only_while_the_file_is_unchanged_and_was_read_settled() {
        // The test's temporary directory is on a local file system (as on the machines the
        // tests run on); a stamp there is taken.
        let dir = std::env::temp_dir().join(format!("tally-parquet-stamp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("a.parquet");
        write(&path, 10);
        let footers = Footers::new(64 * 1024 * 1024);
        let stamp = || {
            let file = File::open(&path).expect("open");
            let meta = file.metadata().expect("metadata");
            Stamp::of(&file, &meta).expect("a stamp on a local file system")
        };
        let footer = footers
            .read_of(&path, &File::open(&path).expect("open"), None)
            .expect("footer");
        let settled = |s: Stamp| s.changed + SETTLED.as_nanos() as i128;
        // Never read: not known.
        assert!(!footer.known_in(Some(stamp())));
        assert!(footers.known(&path, Some(stamp()), None).is_none());
        // A read begun within SETTLED of the file's last change: a change in the same tick of
        // the file system's clock could leave the stamp as it is, so it vouches for nothing.
        footer.seen_in(Some(stamp()), settled(stamp()) - 1);
        assert!(!footer.known_in(Some(stamp())));
        // Begun after it: known, by the footer and its clones, and by the footers held.
        footer.seen_in(Some(stamp()), settled(stamp()));
        assert!(footer.known_in(Some(stamp())));
        let held = footers
            .known(&path, Some(stamp()), None)
            .expect("known through the footers held");
        assert!(Arc::ptr_eq(&held.metadata, &footer.metadata));
        assert!(held.clone().known_in(Some(stamp())));
        // No stamp (a file system whose clock is not this machine's): never known.
        assert!(!footer.known_in(None));
        // Rewritten in place with the same size and its modification time moved: the same
        // file, another stamp.
        let before = std::fs::metadata(&path)
            .expect("metadata")
            .modified()
            .expect("mtime");
        let bytes = std::fs::read(&path).expect("read");
        let rewrite = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        std::os::unix::fs::FileExt::write_all_at(&rewrite, &bytes, 0).expect("write");
        rewrite
            .set_modified(before + std::time::Duration::from_secs(5))
            .expect("set mtime");
        assert_eq!(stamp().size, bytes.len() as u64);
        assert!(!footer.known_in(Some(stamp())));
        // Another file at the same path (written aside and renamed over it): another inode.
        footer.seen_in(Some(stamp()), settled(stamp()));
        assert!(footer.known_in(Some(stamp())));
        let aside = dir.join("b.parquet");
        write(&aside, 10);
        std::fs::rename(&aside, &path).expect("rename");
        assert!(!footer.known_in(Some(stamp())));
        assert!(footers.known(&path, Some(stamp()), None).is_none());
        // Rewritten with more rows: another size.
        footer.seen_in(Some(stamp()), settled(stamp()));
        write(&path, 11);
        assert!(!footer.known_in(Some(stamp())));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
