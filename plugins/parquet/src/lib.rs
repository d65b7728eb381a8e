//! The built-in Parquet backend's file access.
//!
//! Registration reads the footer only (schema and row count), so a datasets directory with
//! many large files is listed at once; the data is read when a dataset is first queried. The
//! bytes are read once into memory and parsed from there, so the hash the envelope reports
//! (`contentHash`) is of exactly the bytes that were served.
//!
//! Architecture invariant: knows nothing of the host beyond file access; the engine adapts it
//! to its backend trait.

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

/// Rows per batch when reading.
const BATCH_ROWS: usize = 16 * 1024;

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
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn format_error(path: &Path, e: ParquetError) -> Error {
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
    /// enough to tell versions apart without reading the data pages.
    pub footer_bytes: Vec<u8>,
}

/// Reads the footer of `path`: schema, row count, size. No data pages are read.
pub fn read_footer(path: &Path) -> Result<Footer, Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let reader_meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
        .map_err(|e| format_error(path, e))?;
    let num_rows = reader_meta.metadata().file_metadata().num_rows();
    let footer_bytes = raw_footer(&file, meta.len()).map_err(io)?;
    Ok(Footer {
        path: path.to_path_buf(),
        schema: reader_meta.schema().clone(),
        num_rows: u64::try_from(num_rows).unwrap_or(0),
        size: meta.len(),
        modified: meta.modified().ok(),
        footer_bytes,
    })
}

/// The last bytes of a Parquet file: metadata, its length and the magic number.
fn raw_footer(file: &File, size: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file.try_clone()?;
    if size < 8 {
        return Ok(Vec::new());
    }
    let mut tail = [0u8; 8];
    f.seek(SeekFrom::Start(size - 8))?;
    f.read_exact(&mut tail)?;
    let len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    let start = size.saturating_sub(8 + len);
    let mut out = Vec::with_capacity((size - start) as usize);
    f.seek(SeekFrom::Start(start))?;
    f.take(size - start).read_to_end(&mut out)?;
    Ok(out)
}

/// The whole file as bytes (hashed by the caller) and its data, limited to `columns` (indices
/// into the footer's schema).
#[derive(Debug)]
pub struct Data {
    pub bytes: Bytes,
    pub batches: Vec<RecordBatch>,
    pub schema: SchemaRef,
}

/// Reads the file's bytes once and decodes the given top-level columns from them.
pub fn read_data(path: &Path, columns: &[usize]) -> Result<Data, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bytes = Bytes::from(bytes);
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
        .map_err(|e| format_error(path, e))?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
    let reader = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| format_error(path, e))?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Format {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    Ok(Data {
        bytes,
        batches,
        schema,
    })
}
