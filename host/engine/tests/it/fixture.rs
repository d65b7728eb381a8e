//! The fixture datasets directory: `tests/data/fixture` (definition + rows as JSON) written
//! to a real Parquet file in a temporary directory, once per test binary.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use serde_json::Value;
use tally_semantic::definition::{DataType as FieldType, load_definition};

pub fn data_dir() -> PathBuf {
    // Through `../engine` so that the cluster tests (`host/cluster`), which include this file,
    // find the same data.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/data")
}

/// The fixture's definition.
pub fn fixture_yaml() -> String {
    std::fs::read_to_string(data_dir().join("fixture/dataset.yaml")).expect("fixture yaml")
}

/// The fixture's rows, in field order.
pub fn fixture_rows() -> Vec<Vec<Value>> {
    serde_json::from_str(
        &std::fs::read_to_string(data_dir().join("fixture/rows.json")).expect("rows"),
    )
    .expect("rows json")
}

/// Writes `rows` (arrays of JSON values in field order) as Parquet typed after `yaml`.
pub fn write_dataset(dir: &Path, yaml: &str, rows: &[Vec<Value>]) {
    std::fs::create_dir_all(dir).expect("dataset folder");
    std::fs::write(dir.join("dataset.yaml"), yaml).expect("yaml written");
    write_parquet(&dir.join("data.parquet"), yaml, rows, &[]);
}

/// Writes `rows` to one Parquet file at `path`, typed after `yaml`'s fields, leaving out the
/// fields named in `without` (partition columns kept in folder names).
pub fn write_parquet(path: &Path, yaml: &str, rows: &[Vec<Value>], without: &[&str]) {
    write_parquet_with(path, yaml, rows, without, None);
}

/// [`write_parquet`] with writer properties of the caller's (row group and page sizes).
pub fn write_parquet_with(
    path: &Path,
    yaml: &str,
    rows: &[Vec<Value>],
    without: &[&str],
    properties: Option<datafusion::parquet::file::properties::WriterProperties>,
) {
    // Every test that writes data may make cursors: all of them with the key the golden
    // files were made with, whichever test runs first.
    tally_engine::cursor::derive_key(b"tally engine tests");
    let def = load_definition("dataset.yaml", "x", yaml)
        .expect("valid definition")
        .dataset;
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (i, f) in def.fields.iter().enumerate() {
        if without.contains(&f.name.as_str()) {
            continue;
        }
        let cell = |r: &Vec<Value>| r.get(i).cloned().unwrap_or(Value::Null);
        match f.data_type {
            FieldType::Integer => {
                fields.push(Field::new(&f.name, DataType::Int64, true));
                columns.push(Arc::new(Int64Array::from(
                    rows.iter().map(|r| cell(r).as_i64()).collect::<Vec<_>>(),
                )));
            }
            FieldType::Number => {
                fields.push(Field::new(&f.name, DataType::Float64, true));
                columns.push(Arc::new(Float64Array::from(
                    rows.iter().map(|r| cell(r).as_f64()).collect::<Vec<_>>(),
                )));
            }
            _ => {
                fields.push(Field::new(&f.name, DataType::Utf8, true));
                columns.push(Arc::new(StringArray::from(
                    rows.iter()
                        .map(|r| cell(r).as_str().map(str::to_string))
                        .collect::<Vec<_>>(),
                )));
            }
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("batch");
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("folder");
    let file = std::fs::File::create(path).expect("parquet file");
    let mut writer = ArrowWriter::try_new(file, schema, properties).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
}

/// The fixture datasets directory: `fixture` (valid), `panel` (areas × years, with gaps) and
/// `broken` (its data file is missing).
pub fn datasets_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        // Cursors in golden files must not depend on a random per-process key.
        tally_engine::cursor::derive_key(b"tally engine tests");
        let tmp = tempfile::tempdir().expect("temp dir");
        let src = data_dir().join("fixture");
        let yaml = std::fs::read_to_string(src.join("dataset.yaml")).expect("fixture yaml");
        let rows: Vec<Vec<Value>> =
            serde_json::from_str(&std::fs::read_to_string(src.join("rows.json")).expect("rows"))
                .expect("rows json");
        write_dataset(&tmp.path().join("fixture"), &yaml, &rows);
        // An area × year panel with gaps (the statistics cases).
        let panel = data_dir().join("panel");
        let yaml = std::fs::read_to_string(panel.join("dataset.yaml")).expect("panel yaml");
        let rows: Vec<Vec<Value>> =
            serde_json::from_str(&std::fs::read_to_string(panel.join("rows.json")).expect("rows"))
                .expect("rows json");
        write_dataset(&tmp.path().join("panel"), &yaml, &rows);
        let broken = tmp.path().join("broken");
        std::fs::create_dir_all(&broken).expect("broken folder");
        std::fs::copy(
            data_dir().join("broken/dataset.yaml"),
            broken.join("dataset.yaml"),
        )
        .expect("broken yaml");
        tmp
    })
    .path()
}

/// One engine over the fixture directory, shared by the tests of this binary.
pub fn engine() -> &'static tally_engine::Engine {
    static ENGINE: OnceLock<tally_engine::Engine> = OnceLock::new();
    ENGINE.get_or_init(|| tally_engine::Engine::open(datasets_dir()))
}

/// A runtime for calling the engine from plain tests.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A call through the engine's one door, as a server makes it: a caller who may see every
/// dataset, the call's default budget, on a task of its own (a heavy call on the heavy
/// runtime, after its slot).
pub async fn answer(
    engine: &std::sync::Arc<tally_engine::Engine>,
    tool: tally_semantic::request::Tool,
    arguments: Value,
) -> Result<Value, tally_engine::EngineError> {
    let ask = tally_engine::Ask::parse(tool, arguments)?;
    let budget = engine.limits().call_timeout;
    engine
        .answer(
            &tally_engine::Caller::everyone("tests"),
            ask,
            budget,
            Vec::new(),
        )
        .await
}
