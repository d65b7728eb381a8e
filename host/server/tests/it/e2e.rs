//! Runs the Python end-to-end suite (`tests/e2e`, the official MCP Python SDK as the client)
//! against the `tally` binary cargo just built.
//!
//! The interpreter is `TALLY_PYTHON`, else `.venv/bin/python` at the workspace root (made by
//! `.ci/run`). Without one the test says so and passes, except under `CI=true`, where a
//! missing client must fail the run rather than hide behind a skip.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate sits two levels below the workspace root")
        .to_path_buf()
}

fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TALLY_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = workspace_root().join(".venv/bin/python");
    venv.is_file().then_some(venv)
}

/// Small Parquet files `v{k}.parquet` of k rows (columns id, grp, k = k): each a dataset
/// version whose row count and contents say which version it is (hot-reload tests).
fn write_variants(dir: &Path) {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::parquet::arrow::ArrowWriter;

    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("grp", DataType::Utf8, true),
        Field::new("k", DataType::Int64, false),
    ]));
    for k in 1..=80i64 {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(
                (0..k).map(|i| format!("r{i}")).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                (0..k).map(|i| format!("g{}", i % 3)).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(vec![k; k as usize])),
        ];
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch");
        let file = std::fs::File::create(dir.join(format!("v{k}.parquet"))).expect("variant file");
        let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), None).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
    }
}

/// The same 300 rows as `compare.parquet` and as table `t` of `compare.sqlite` (native plugin
/// tests compare the two).
fn write_comparison(dir: &Path) {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::parquet::arrow::ArrowWriter;

    let n = 300i64;
    let ids: Vec<String> = (0..n).map(|i| format!("r{i:03}")).collect();
    let groups: Vec<String> = (0..n).map(|i| format!("g{}", i % 4)).collect();
    let amounts: Vec<Option<i64>> = (0..n).map(|i| (i % 7 != 0).then_some(i * 3)).collect();
    let ratios: Vec<Option<f64>> = (0..n)
        .map(|i| (i % 5 != 0).then_some(i as f64 / 11.0))
        .collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("grp", DataType::Utf8, true),
        Field::new("amount", DataType::Int64, true),
        Field::new("ratio", DataType::Float64, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(ids.clone())),
        Arc::new(StringArray::from(groups.clone())),
        Arc::new(Int64Array::from(amounts.clone())),
        Arc::new(Float64Array::from(ratios.clone())),
    ];
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch");
    let file = std::fs::File::create(dir.join("compare.parquet")).expect("parquet file");
    let mut writer = ArrowWriter::try_new(file, schema, None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");

    let mut db = rusqlite::Connection::open(dir.join("compare.sqlite")).expect("sqlite file");
    db.execute_batch("CREATE TABLE t (id TEXT NOT NULL, grp TEXT, amount INTEGER, ratio REAL);")
        .expect("table");
    let tx = db.transaction().expect("transaction");
    for i in 0..n as usize {
        tx.execute(
            "INSERT INTO t VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![ids[i], groups[i], amounts[i], ratios[i]],
        )
        .expect("row");
    }
    tx.commit().expect("commit");
}

/// Hostile Parquet files for the resource tests (`tests/e2e/test_hostile.py`), each small on
/// disk:
/// - `bomb-rows.parquet`: 10M rows of one short string (column `s`), which declares more rows
///   than a 256 MiB budget can hold;
/// - `bomb-text.parquet`: 1.5M rows of one 2 KiB string (column `s`), 3 GB once decoded;
/// - `overflow.parquet`: columns `id`, `grp`, `n`, where group `big` sums four values of
///   2^62 (past the 64-bit range) and group `small` sums 1 + 2.
fn write_hostile(dir: &Path) {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        ArrayRef, DictionaryArray, Int32Array, Int64Array, StringArray,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::basic::{Compression, ZstdLevel};
    use datafusion::parquet::file::properties::WriterProperties;

    let props = || {
        WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(4 * 1024 * 1024))
            .build()
    };
    for (name, rows, text) in [
        ("bomb-rows.parquet", 10_000_000usize, "x".repeat(16)),
        ("bomb-text.parquet", 1_500_000usize, "y".repeat(2048)),
    ] {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            false,
        )]));
        let file = std::fs::File::create(dir.join(name)).expect("bomb file");
        let mut writer =
            ArrowWriter::try_new(file, Arc::clone(&schema), Some(props())).expect("writer");
        let chunk = 1_000_000usize;
        let mut written = 0;
        while written < rows {
            let n = chunk.min(rows - written);
            let keys = Int32Array::from(vec![0i32; n]);
            let values = Arc::new(StringArray::from(vec![text.as_str()]));
            let dict: DictionaryArray<Int32Type> =
                DictionaryArray::try_new(keys, values).expect("dictionary");
            let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(dict) as ArrayRef])
                .expect("batch");
            writer.write(&batch).expect("write");
            written += n;
        }
        writer.close().expect("close");
    }

    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("grp", DataType::Utf8, false),
        Field::new("n", DataType::Int64, true),
    ]));
    let big = 1i64 << 62;
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e", "f"])) as ArrayRef,
            Arc::new(StringArray::from(vec![
                "big", "big", "big", "big", "small", "small",
            ])),
            Arc::new(Int64Array::from(vec![big, big, big, big, 1, 2])),
        ],
    )
    .expect("batch");
    let file = std::fs::File::create(dir.join("overflow.parquet")).expect("overflow file");
    let mut writer = ArrowWriter::try_new(file, schema, None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");

    // `large.parquet`: 1M ordinary rows (id, a, b, c: text; n: integer), slow enough to
    // prepare that a call with a short deadline answers before the preparation is done.
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("a", DataType::Utf8, false),
        Field::new("b", DataType::Utf8, true),
        Field::new("c", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
    ]));
    let file = std::fs::File::create(dir.join("large.parquet")).expect("large file");
    let mut writer =
        ArrowWriter::try_new(file, Arc::clone(&schema), Some(props())).expect("writer");
    let chunk = 100_000i64;
    for start in (0..1_000_000i64).step_by(chunk as usize) {
        let range = start..start + chunk;
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from_iter_values(
                    range.clone().map(|i| format!("row-{i:07}")),
                )) as ArrayRef,
                Arc::new(StringArray::from_iter_values(
                    range.clone().map(|i| format!("group {}", i % 97)),
                )),
                Arc::new(StringArray::from_iter_values(range.clone().map(|i| {
                    format!("申請の種類 {} / Application kind {}", i % 1009, i % 13)
                }))),
                Arc::new(StringArray::from_iter_values(range.clone().map(|i| {
                    format!("備考: 第{}条に基づく手続 (procedure {i})", i % 211)
                }))),
                Arc::new(Int64Array::from_iter_values(
                    range.clone().map(|i| i % 1000),
                )),
            ],
        )
        .expect("batch");
        writer.write(&batch).expect("write");
    }
    writer.close().expect("close");
}

#[test]
fn python_mcp_client_end_to_end() {
    let root = workspace_root();
    let Some(python) = python() else {
        let message = "no Python environment with the MCP SDK: create it with \
                       `python3 -m venv .venv && .venv/bin/pip install -r tests/e2e/requirements.txt` \
                       (or set TALLY_PYTHON)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
        eprintln!("skipped: {message}");
        return;
    };
    // The suite drives every part of the server; a plain build would fail it test by test.
    let left_out: Vec<&str> = [
        ("s3", cfg!(feature = "s3")),
        ("native-plugins", cfg!(feature = "native-plugins")),
        ("png-charts", cfg!(feature = "png-charts")),
    ]
    .into_iter()
    .filter(|(_, built)| !built)
    .map(|(name, _)| name)
    .collect();
    assert!(
        left_out.is_empty(),
        "the end-to-end tests need the full server, and this build leaves out {}: run \
         `cargo test --workspace --features tally/cluster,tally/full` (README.md)",
        left_out.join(", ")
    );
    let variants = tempfile::tempdir().expect("temp dir");
    write_variants(variants.path());
    write_comparison(variants.path());
    write_hostile(variants.path());
    std::fs::write(
        variants.path().join("methods.json"),
        tally_mcp::methods::to_json(),
    )
    .expect("the method table");
    // Native plugin libraries cargo built for this test run sit beside this test binary.
    let native_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    // The cache of prepared data is on by default: the servers of this run share one of their
    // own, never the user's.
    let cache_home = tempfile::tempdir().expect("temp dir");
    // `TALLY_PYTEST_K=expr` runs only the tests pytest's `-k` selects (while working on one).
    let only: Vec<String> = std::env::var("TALLY_PYTEST_K")
        .map(|k| vec!["-k".to_string(), k])
        .unwrap_or_default();
    let output = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "tests/e2e",
            "-q",
            // Show what the tests print (reload times, churn figures) for passing tests too.
            "-rP",
            "-p",
            "no:cacheprovider",
            "--timeout=300",
            // Where the suite's time goes, in every log: the slowest tests and fixtures.
            "--durations=40",
            "--durations-min=3",
            // A passing test's temporary folder is removed as it ends (native plugin libraries
            // and generated tables are hundreds of megabytes; CI's disk is not large).
            "-o",
            "tmp_path_retention_policy=failed",
            "-o",
            "tmp_path_retention_count=1",
        ])
        .args(only)
        .current_dir(&root)
        .env("TALLY_BIN", env!("CARGO_BIN_EXE_tally"))
        .env("TALLY_DATASETS", root.join("datasets"))
        .env("TALLY_VARIANTS", variants.path())
        // The wasm components this workspace built (the plugin template, the hostile test
        // plugins) and the reference material beside the repository (tests skip without it).
        .env("TALLY_WASM_DIR", tally_wasm_plugins::BUILT_DIR)
        .env("TALLY_NATIVE_DIR", &native_dir)
        .env("TALLY_REFERENCE", root.join("../shared/reference"))
        .env("XDG_CACHE_HOME", cache_home.path())
        // The counts of this suite, for the closing line of `.ci/run` (it counts every test).
        .env(
            "TALLY_PYTEST_REPORT",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("pytest-report.json"),
        )
        .env_remove("TALLY_CACHE_DIR")
        .env_remove("TALLY_NO_CACHE")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    // cargo test shows a passing test's output to no one: the suite's output is kept for
    // `.ci/run`, which prints where its time went (pytest's slowest tests).
    let _ = std::fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("pytest-output.txt"),
        stdout.as_bytes(),
    );
    eprintln!("{stderr}");
    // pytest exits 5 when it collected nothing: that is a failure here too.
    assert!(
        output.status.success(),
        "the Python MCP end-to-end suite failed ({})",
        output.status
    );
    assert!(stdout.contains(" passed"), "pytest ran no test");
}
