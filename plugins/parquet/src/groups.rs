//! Reading a Parquet file one row group at a time, in bounded memory.
//!
//! Preparing a dataset reads every row of its files once. Instead of reading a whole file into
//! memory, the column chunks of one row group are read (positional reads, never a map of a
//! file someone else may rewrite), their page headers checked as [`crate::read_data`] checks a
//! whole file's, and decoded from those bytes; then the next row group. What is held at once is
//! one row group's chunks and the batch being handed on.
//!
//! Text can be decoded as dictionary arrays: a dictionary-encoded column chunk then arrives
//! with its page dictionary as the values, so a caller that interns values does it once per
//! distinct value of a chunk, not once per row.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::reader::{ChunkReader, Length};

use crate::file::{BATCH_ROWS, Blob, Error, Footer, Tail, format_error, guarded, raw_footer};
use crate::pages;

/// How text columns are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    /// `Dictionary(Int32, Utf8)`: a chunk's page dictionary kept as the values.
    Dictionary,
    /// String views over shared buffers.
    Views,
}

/// The bytes of some column chunks of a file, read ahead: what the Parquet reader asks for
/// must lie inside one of them.
struct Prefetched {
    len: u64,
    chunks: Vec<(u64, Bytes)>,
}

impl Prefetched {
    fn find(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        for (at, bytes) in &self.chunks {
            let end = *at + bytes.len() as u64;
            if start >= *at && start + length as u64 <= end {
                let from = (start - at) as usize;
                return Ok(bytes.slice(from..from + length));
            }
        }
        Err(ParquetError::General(format!(
            "the reader asked for {length} bytes at {start}, outside the column chunks read"
        )))
    }
}

impl Length for Prefetched {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Prefetched {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        use bytes::Buf;
        for (at, bytes) in &self.chunks {
            let end = *at + bytes.len() as u64;
            if start >= *at && start < end {
                return Ok(bytes.slice((start - at) as usize..).reader());
            }
        }
        Err(ParquetError::General(format!(
            "the reader asked for bytes at {start}, outside the column chunks read"
        )))
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<Bytes, ParquetError> {
        self.find(start, length)
    }
}

/// The Arrow schema the file is decoded with: its own, without the embedded Arrow schema
/// (which may ask for types the engine does not serve), text as `text` says.
pub fn decoded_schema(footer: &Footer, text: Text) -> Result<SchemaRef, Error> {
    let plain = ArrowReaderMetadata::try_new(
        Arc::clone(&footer.metadata),
        ArrowReaderOptions::new().with_skip_arrow_metadata(true),
    )
    .map_err(|e| format_error(&footer.path, e))?;
    let fields: Vec<Field> = plain
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let as_text = |t: DataType| {
                Field::new(f.name(), t, f.is_nullable()).with_metadata(f.metadata().clone())
            };
            match f.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => match text {
                    Text::Dictionary => as_text(DataType::Dictionary(
                        Box::new(DataType::Int32),
                        Box::new(DataType::Utf8),
                    )),
                    Text::Views => as_text(DataType::Utf8View),
                },
                _ => f.as_ref().clone(),
            }
        })
        .collect();
    Ok(Arc::new(Schema::new_with_metadata(
        fields,
        plain.schema().metadata().clone(),
    )))
}

/// Reads the given top-level columns (indices into the file's schema) of the file `footer`
/// describes, row group by row group. `held` is told the bytes of the chunks read before a
/// row group is decoded (its answer may refuse) and 0 once they are let go; `each` gets every
/// batch. The file must still be the one the footer was read from: the same size, and the
/// same footer at its end once every row group is read. Returns the decoded schema.
pub fn read_groups(
    footer: &Footer,
    columns: &[usize],
    text: Text,
    held: &mut dyn FnMut(usize) -> Result<(), String>,
    each: &mut dyn FnMut(RecordBatch) -> Result<(), String>,
) -> Result<SchemaRef, Error> {
    let file = File::open(&footer.path).map_err(|source| Error::Io {
        path: footer.path.clone(),
        source,
    })?;
    read_groups_of(footer, &file, columns, text, held, each)
}

/// [`read_groups`] over the bytes `blob` holds (an object in object storage).
pub fn read_groups_of(
    footer: &Footer,
    file: &dyn Blob,
    columns: &[usize],
    text: Text,
    held: &mut dyn FnMut(usize) -> Result<(), String>,
    each: &mut dyn FnMut(RecordBatch) -> Result<(), String>,
) -> Result<SchemaRef, Error> {
    let path = footer.path.as_path();
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = file.size().map_err(io)?;
    if size != footer.size {
        return Err(Error::Changed {
            path: path.to_path_buf(),
        });
    }
    let schema = decoded_schema(footer, text)?;
    let metadata = Arc::clone(&footer.metadata);
    let reader_meta = ArrowReaderMetadata::try_new(
        Arc::clone(&metadata),
        ArrowReaderOptions::new()
            .with_skip_arrow_metadata(true)
            .with_schema(Arc::clone(&schema)),
    )
    .map_err(|e| format_error(path, e))?;
    let descr = metadata.file_metadata().schema_descr();
    let mut decoded: i64 = 0;
    let mut projected: Option<SchemaRef> = None;
    for (g, group) in metadata.row_groups().iter().enumerate() {
        // The chunks of the row group's columns read: asked for together (an object store
        // reads adjacent chunks with one request), held before they are read.
        let mut ranges = Vec::new();
        let mut wanted = Vec::new();
        for (c, column) in group.columns().iter().enumerate() {
            let root = descr.get_column_root_idx(c);
            if !columns.contains(&root) {
                continue;
            }
            let (start, len) =
                pages::chunk_range(column, g).map_err(|message| Error::Implausible {
                    path: path.to_path_buf(),
                    message,
                })?;
            if (start as u64).saturating_add(len as u64) > size {
                return Err(Error::Implausible {
                    path: path.to_path_buf(),
                    message: format!(
                        "column `{}` of row group {g} lies past the end of the file",
                        column.column_path().string()
                    ),
                });
            }
            ranges.push(start as u64..(start + len) as u64);
            wanted.push(column);
        }
        let bytes_held: usize = ranges.iter().map(|r| (r.end - r.start) as usize).sum();
        held(bytes_held).map_err(Error::Stopped)?;
        let read = file.read_ranges(&ranges).map_err(io)?;
        let mut chunks = Vec::with_capacity(read.len());
        for ((range, column), buf) in ranges.iter().zip(&wanted).zip(read) {
            pages::check_pages(&buf, column, g).map_err(|message| Error::Implausible {
                path: path.to_path_buf(),
                message,
            })?;
            chunks.push((range.start, buf));
        }
        let prefetched = Prefetched { len: size, chunks };
        let reader_meta = reader_meta.clone();
        let schema_seen = guarded(path, || {
            let builder =
                ParquetRecordBatchReaderBuilder::new_with_metadata(prefetched, reader_meta);
            let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
            let reader = builder
                .with_row_groups(vec![g])
                .with_projection(mask)
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| format_error(path, e))?;
            let schema = datafusion::arrow::record_batch::RecordBatchReader::schema(&reader);
            for batch in reader {
                let batch = batch.map_err(|e| Error::Corrupt {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })?;
                decoded += batch.num_rows() as i64;
                each(batch).map_err(Error::Stopped)?;
            }
            Ok(schema)
        })?;
        projected.get_or_insert(schema_seen);
        held(0).map_err(Error::Stopped)?;
    }
    let declared = metadata.file_metadata().num_rows();
    if decoded != declared {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: format!("its footer declares {declared} rows but {decoded} decode"),
        });
    }
    // Rewritten while it was read: not the version registered.
    match raw_footer(file, size).map_err(io)? {
        Tail::Footer(bytes) if *bytes == *footer.footer_bytes => {}
        _ => {
            return Err(Error::Changed {
                path: path.to_path_buf(),
            });
        }
    }
    Ok(projected.unwrap_or_else(|| {
        Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| schema.field(*c).clone())
                .collect::<Vec<_>>(),
        ))
    }))
}
