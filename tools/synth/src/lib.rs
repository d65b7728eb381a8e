//! Deterministic generator of a synthetic dataset shaped like デジタル庁's
//! administrative-procedures survey (行政手続等の棚卸調査結果).
//!
//! The generator reads the survey's published per-column statistics and
//! produces rows that reproduce them (null counts, top-value counts,
//! measure ranges) together with the dataset's semantic definition. The
//! rows themselves are invented.

mod generate;
mod laws;
pub mod rng;
pub mod sampling;
pub mod schema;
pub mod stats;
mod text;
mod vocab;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use stats::Stats;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Seed used when none is given, so that the default output is one fixed file.
pub const DEFAULT_SEED: u64 = 0x7A11_5EED_2024_0006;
pub const DATA_FILE: &str = "data.parquet";
pub const DEFINITION_FILE: &str = "dataset.yaml";
pub const ROW_GROUP_ROWS: usize = 16 * 1024;

/// Generates the synthetic table as one Arrow record batch, columns in the
/// order of the definition.
pub fn generate_batch(stats: &Stats, seed: u64) -> Result<RecordBatch, Error> {
    let columns = generate::generate(stats, seed)?;
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (name, column) in columns {
        match column {
            generate::Column::Text(values) => {
                fields.push(Field::new(name, DataType::Utf8, true));
                arrays.push(Arc::new(StringArray::from(values)));
            }
            generate::Column::Count(values) => {
                fields.push(Field::new(name, DataType::Int64, true));
                arrays.push(Arc::new(Int64Array::from(values)));
            }
        }
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

fn writer_properties() -> Result<WriterProperties, Error> {
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_statistics_enabled(EnabledStatistics::Page)
        .build())
}

/// Writes the batch as zstd-compressed Parquet with ~16k-row row groups and
/// page statistics.
pub fn write_parquet(batch: &RecordBatch, path: &Path) -> Result<(), Error> {
    let file = std::fs::File::create(path)?;
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(writer_properties()?))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(())
}

/// The name of the id column, numbered through when several chunks make one table.
const ID_FIELD: &str = "手続ID";

/// The seed of chunk `k` of a larger table: chunk 0 is the default table.
fn chunk_seed(seed: u64, k: u64) -> u64 {
    seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The batch with its ids numbered from `first + 1`, `width` digits wide.
fn renumber(batch: &RecordBatch, first: usize, width: usize) -> Result<RecordBatch, Error> {
    let schema = batch.schema();
    let index = schema.index_of(ID_FIELD)?;
    let ids: StringArray = (0..batch.num_rows())
        .map(|i| Some(format!("SYN-{:0width$}", first + i + 1)))
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[index] = Arc::new(ids);
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Writes a table of `rows` rows of the same shape: the table is generated again for each
/// chunk of the published size with a seed of its own (the first chunk is the default
/// table), ids numbered through, and streamed into one Parquet file, so memory holds one
/// chunk whatever `rows` is.
pub fn write_rows(stats: &Stats, seed: u64, rows: usize, path: &Path) -> Result<(), Error> {
    if rows == 0 {
        return Err("--rows must be at least 1".into());
    }
    let width = rows.to_string().len().max(6);
    let file = std::fs::File::create(path)?;
    let mut writer: Option<ArrowWriter<std::fs::File>> = None;
    let mut file = Some(file);
    let (mut written, mut k) = (0usize, 0u64);
    while written < rows {
        let batch = generate_batch(stats, chunk_seed(seed, k))?;
        let take = (rows - written).min(batch.num_rows());
        let batch = renumber(&batch.slice(0, take), written, width)?;
        if writer.is_none() {
            let f = file.take().ok_or("the output file is gone")?;
            writer = Some(ArrowWriter::try_new(
                f,
                batch.schema(),
                Some(writer_properties()?),
            )?);
        }
        if let Some(w) = writer.as_mut() {
            w.write(&batch)?;
        }
        written += take;
        k += 1;
    }
    if let Some(w) = writer {
        w.close()?;
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub struct Output {
    pub rows: usize,
    pub data: PathBuf,
    pub definition: PathBuf,
}

/// Reads the statistics at `stats_path` and writes `data.parquet` and
/// `dataset.yaml` into `out_dir` (created if missing): the published number of rows, or
/// `rows` of the same shape (see [`write_rows`]).
pub fn run(
    stats_path: &Path,
    out_dir: &Path,
    seed: u64,
    rows: Option<usize>,
) -> Result<Output, Error> {
    let stats = Stats::load(stats_path)?;
    std::fs::create_dir_all(out_dir)?;
    let data = out_dir.join(DATA_FILE);
    let rows = match rows {
        None => {
            let batch = generate_batch(&stats, seed)?;
            write_parquet(&batch, &data)?;
            batch.num_rows()
        }
        Some(rows) => {
            write_rows(&stats, seed, rows, &data)?;
            rows
        }
    };
    let definition = out_dir.join(DEFINITION_FILE);
    std::fs::write(&definition, schema::dataset_yaml())?;
    Ok(Output {
        rows,
        data,
        definition,
    })
}
