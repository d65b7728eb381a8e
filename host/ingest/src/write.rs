//! Writing the converted rows as the dataset's Parquet file, a batch at a time.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::error::IngestError;
use crate::values::{Kind, Value};

/// Rows per row group: small enough that min/max statistics leave row groups of a large
/// file unread, large enough to compress well.
pub const ROW_GROUP_ROWS: usize = 65_536;
/// Rows per data page: the page index prunes within a row group.
const PAGE_ROWS: usize = 8_192;
/// Rows converted before they are handed to the writer.
const BATCH_ROWS: usize = 8_192;
/// Bytes of values converted before they are handed to the writer, whatever the rows: a
/// batch of 8,192 rows of 10,000 columns would be most of a GiB.
pub const BATCH_BYTES: usize = 32 << 20;
/// What the Parquet writer may hold of the row group it is writing (pages, dictionaries and
/// statistics of every column) before the row group is closed early: a row group of 65,536
/// wide rows would otherwise be held whole until written.
pub const ROW_GROUP_MEMORY: usize = 128 << 20;
/// What the footer of the file may hold: the metadata of every column chunk (statistics,
/// page index) stays in memory until the file is finished, about [`CHUNK_METADATA`] for each
/// column of each row group. A wide file closes its row groups early (at
/// [`ROW_GROUP_MEMORY`]), so without this its footer would grow with its rows.
pub const FOOTER_BUDGET: usize = 256 << 20;
/// Metadata held for one column of one row group, about (measured: 1–2.5 KiB).
const CHUNK_METADATA: usize = 3 << 10;

/// One column of the written file.
#[derive(Debug, Clone)]
pub struct OutColumn {
    pub name: String,
    pub kind: Kind,
    /// Index of the input column it comes from (none: a declared column the file lacks,
    /// written empty when drift is accepted).
    pub source: Option<usize>,
    /// Dictionary-encode the column's pages (text with repeated values; a unique column
    /// gains nothing from a dictionary).
    pub dictionary: bool,
    /// A bloom filter for equality lookups (the record id).
    pub bloom: bool,
}

enum Builder {
    Text(StringBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
}

impl Builder {
    /// A builder with room for `rows` values (`rows * 16` bytes of text): the batch's share
    /// of [`BATCH_BYTES`] for this column, so that thousands of columns do not each reserve
    /// a full batch up front.
    fn new(kind: Kind, rows: usize) -> Builder {
        match kind {
            Kind::Text | Kind::Date => Builder::Text(StringBuilder::with_capacity(rows, rows * 16)),
            Kind::Int => Builder::Int(Int64Builder::with_capacity(rows)),
            Kind::Float => Builder::Float(Float64Builder::with_capacity(rows)),
            Kind::Bool => Builder::Bool(BooleanBuilder::with_capacity(rows)),
        }
    }

    fn push(&mut self, v: Value) {
        match (self, v) {
            (Builder::Text(b), Value::Text(s)) => b.append_value(s),
            (Builder::Int(b), Value::Int(i)) => b.append_value(i),
            (Builder::Float(b), Value::Float(f)) => b.append_value(f),
            (Builder::Bool(b), Value::Bool(x)) => b.append_value(x),
            (Builder::Text(b), _) => b.append_null(),
            (Builder::Int(b), _) => b.append_null(),
            (Builder::Float(b), _) => b.append_null(),
            (Builder::Bool(b), _) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Text(b) => Arc::new(b.finish()),
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
        }
    }
}

fn arrow_type(kind: Kind) -> DataType {
    match kind {
        Kind::Text | Kind::Date => DataType::Utf8,
        Kind::Int => DataType::Int64,
        Kind::Float => DataType::Float64,
        Kind::Bool => DataType::Boolean,
    }
}

/// The Parquet file being written.
pub struct Sink {
    writer: ArrowWriter<File>,
    schema: Arc<Schema>,
    builders: Vec<Builder>,
    columns: usize,
    pending: usize,
    /// Bytes of values in the builders, about.
    pending_bytes: usize,
    pub rows: u64,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink").field("rows", &self.rows).finish()
    }
}

impl Sink {
    pub fn create(
        path: &Path,
        columns: &[OutColumn],
        metadata: Vec<(String, String)>,
    ) -> Result<Sink, IngestError> {
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(&c.name, arrow_type(c.kind), true))
                .collect::<Vec<_>>(),
        ));
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(internal)?))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_data_page_row_count_limit(PAGE_ROWS)
            .set_statistics_enabled(EnabledStatistics::Page)
            .set_created_by(format!("tally {} (tally add)", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(
                metadata
                    .into_iter()
                    .map(|(k, v)| KeyValue::new(k, v))
                    .collect(),
            ));
        for c in columns {
            let path = ColumnPath::from(c.name.as_str());
            props = props.set_column_dictionary_enabled(
                path.clone(),
                c.dictionary && matches!(c.kind, Kind::Text | Kind::Date),
            );
            if c.bloom {
                props = props.set_column_bloom_filter_enabled(path, true);
            }
        }
        let file = File::create(path)
            .map_err(|e| IngestError::io(format!("cannot write {}", path.display()), e))?;
        let writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props.build()))
            .map_err(internal)?;
        let rows = (BATCH_BYTES / 16 / columns.len().max(1)).clamp(16, BATCH_ROWS);
        Ok(Sink {
            writer,
            schema,
            builders: columns.iter().map(|c| Builder::new(c.kind, rows)).collect(),
            columns: columns.len(),
            pending: 0,
            pending_bytes: 0,
            rows: 0,
        })
    }

    /// Appends one row (one value per column, in order).
    pub fn push(&mut self, values: impl Iterator<Item = Value>) -> Result<(), IngestError> {
        for (b, v) in self.builders.iter_mut().zip(values) {
            self.pending_bytes += match &v {
                Value::Text(s) => s.len() + 4,
                _ => 8,
            };
            b.push(v);
        }
        self.pending += 1;
        self.rows += 1;
        if self.pending >= BATCH_ROWS || self.pending_bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), IngestError> {
        if self.pending == 0 {
            return Ok(());
        }
        let arrays: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), arrays).map_err(internal)?;
        self.writer.write(&batch).map_err(written)?;
        self.pending = 0;
        self.pending_bytes = 0;
        if self.writer.memory_size() > ROW_GROUP_MEMORY {
            self.writer.flush().map_err(written)?;
        }
        let row_groups = self.writer.flushed_row_groups().len() + 1;
        if row_groups
            .saturating_mul(self.columns)
            .saturating_mul(CHUNK_METADATA)
            > FOOTER_BUDGET
        {
            return Err(IngestError::limit(
                format!(
                    "the data is too wide and long for one Parquet file: after {} rows it needs {row_groups} row groups of {} columns, whose metadata (held until the file is finished) would pass {} MiB",
                    self.rows,
                    self.columns,
                    FOOTER_BUDGET >> 20
                ),
                "split the file into several by rows (a dataset each, or parts converted one by one), or keep only the columns needed",
            ));
        }
        Ok(())
    }

    /// Writes the footer and syncs the file to disk.
    pub fn finish(mut self) -> Result<u64, IngestError> {
        self.flush()?;
        let file = self.writer.into_inner().map_err(written)?;
        file.sync_all()
            .map_err(|e| IngestError::io("cannot sync the written Parquet file", e))?;
        Ok(self.rows)
    }
}

fn internal(e: impl std::fmt::Display) -> IngestError {
    IngestError::Internal(format!("writing Parquet: {e}"))
}

/// A failure of the Parquet writer: the disk (full, gone) is said as such; anything else is
/// a bug of ours.
fn written(e: parquet::errors::ParquetError) -> IngestError {
    if let parquet::errors::ParquetError::External(inner) = &e
        && let Some(io) = inner.downcast_ref::<std::io::Error>()
    {
        return IngestError::io(
            "cannot write the Parquet file",
            std::io::Error::new(io.kind(), io.to_string()),
        );
    }
    internal(e)
}
