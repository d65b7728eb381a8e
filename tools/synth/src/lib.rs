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

/// Writes the batch as zstd-compressed Parquet with ~16k-row row groups and
/// page statistics.
pub fn write_parquet(batch: &RecordBatch, path: &Path) -> Result<(), Error> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_statistics_enabled(EnabledStatistics::Page)
        .build();
    let file = std::fs::File::create(path)?;
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(props))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct Output {
    pub rows: usize,
    pub data: PathBuf,
    pub definition: PathBuf,
}

/// Reads the statistics at `stats_path` and writes `data.parquet` and
/// `dataset.yaml` into `out_dir` (created if missing).
pub fn run(stats_path: &Path, out_dir: &Path, seed: u64) -> Result<Output, Error> {
    let stats = Stats::load(stats_path)?;
    std::fs::create_dir_all(out_dir)?;
    let batch = generate_batch(&stats, seed)?;
    let data = out_dir.join(DATA_FILE);
    write_parquet(&batch, &data)?;
    let definition = out_dir.join(DEFINITION_FILE);
    std::fs::write(&definition, schema::dataset_yaml())?;
    Ok(Output {
        rows: batch.num_rows(),
        data,
        definition,
    })
}
