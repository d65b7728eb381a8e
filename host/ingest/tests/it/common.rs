//! Helpers: the reference data beside the repository, reading back what was written.

use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tally_ingest::{AddOptions, ReadOptions};

/// `../shared/reference/<rel>`, or `None` (the test says it skipped) when absent; under
/// `CI=true` a missing reference fails the test.
pub fn reference(rel: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference");
    let path = root.join(rel);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "CI=true but the reference file {} is missing",
            path.display()
        );
    }
    eprintln!("skipped: the reference file {} is absent", path.display());
    None
}

pub fn options(datasets: &Path, id: &str, file: &Path) -> AddOptions {
    AddOptions {
        dataset_id: id.to_string(),
        file: file.to_path_buf(),
        datasets: datasets.to_path_buf(),
        read: ReadOptions::default(),
        header_rows: None,
        accept_drift: false,
        null_markers: Vec::new(),
        keep_fetch_record: false,
    }
}

/// Runs `work` in a process of its own — this test binary again, running only the test
/// `name` (its path, such as `limits::a_test`) — so that its peak resident memory is its
/// own and not that of the tests running beside it. Returns that peak in KiB to the test
/// that asked; in the process that does the work it runs `work` and returns `None`. Where
/// the peak cannot be read (no `/proc`), `work` runs here and `None` is returned.
pub fn peak_rss_kib_alone(name: &str, work: impl FnOnce()) -> Option<u64> {
    const ALONE: &str = "TALLY_INGEST_IT_ALONE";
    if std::env::var(ALONE).as_deref() == Ok(name) {
        work();
        if let Some(kib) = peak_rss_kib() {
            println!("peak_rss_kib={kib}");
        }
        return None;
    }
    if peak_rss_kib().is_none() {
        work();
        return None;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, name)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} failed in a process of its own:\n{stdout}\n{stderr}"
    );
    // The harness writes the test's name on the same line as what it prints.
    let kib = stdout.split("peak_rss_kib=").nth(1).and_then(|v| {
        v.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    });
    assert!(
        kib.is_some(),
        "{name} did not run in its own process (is the name its full path?):\n{stdout}"
    );
    kib
}

/// This process's peak resident memory in KiB (`VmHWM`), where the system says it.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A column of a Parquet file: text as text, numbers as i64 where they are integers.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
}

/// The named columns of a Parquet file.
pub fn read_columns(path: &Path, names: &[&str]) -> Vec<Column> {
    let file = std::fs::File::open(path).expect("parquet file");
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let mut out: Vec<Option<Column>> = vec![None; names.len()];
    for batch in reader {
        let batch = batch.expect("batch");
        for (k, name) in names.iter().enumerate() {
            let col = batch
                .column_by_name(name)
                .unwrap_or_else(|| panic!("{} has no column {name}", path.display()));
            let integer = matches!(
                col.data_type(),
                DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::UInt8
                    | DataType::UInt16
                    | DataType::UInt32
                    | DataType::UInt64
            );
            if integer {
                let c = arrow::compute::cast(col, &DataType::Int64).expect("cast");
                let c = c.as_primitive::<Int64Type>();
                let values = (0..c.len()).map(|i| (!c.is_null(i)).then(|| c.value(i)));
                match out[k].get_or_insert_with(|| Column::Int(Vec::new())) {
                    Column::Int(v) => v.extend(values),
                    Column::Text(_) => panic!("mixed"),
                }
            } else {
                let c = arrow::compute::cast(col, &DataType::Utf8).expect("cast");
                let c = c.as_string::<i32>();
                let values = (0..c.len()).map(|i| (!c.is_null(i)).then(|| c.value(i).to_string()));
                match out[k].get_or_insert_with(|| Column::Text(Vec::new())) {
                    Column::Text(v) => v.extend(values),
                    Column::Int(_) => panic!("mixed"),
                }
            }
        }
    }
    out.into_iter().map(|c| c.expect("a batch")).collect()
}

/// The Arrow type of each column of a Parquet file.
pub fn types(path: &Path) -> Vec<(String, DataType)> {
    let file = std::fs::File::open(path).expect("parquet file");
    let b = ParquetRecordBatchReaderBuilder::try_new(file).expect("parquet");
    b.schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect()
}
