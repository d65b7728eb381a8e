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
    let variants = tempfile::tempdir().expect("temp dir");
    write_variants(variants.path());
    write_comparison(variants.path());
    // Native plugin libraries cargo built for this test run sit beside this test binary.
    let native_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
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
        ])
        .current_dir(&root)
        .env("TALLY_BIN", env!("CARGO_BIN_EXE_tally"))
        .env("TALLY_DATASETS", root.join("datasets"))
        .env("TALLY_VARIANTS", variants.path())
        // The wasm components this workspace built (the plugin template, the hostile test
        // plugins) and the reference material beside the repository (tests skip without it).
        .env("TALLY_WASM_DIR", tally_wasm_plugins::BUILT_DIR)
        .env("TALLY_NATIVE_DIR", &native_dir)
        .env("TALLY_REFERENCE", root.join("../shared/reference"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    // pytest exits 5 when it collected nothing: that is a failure here too.
    assert!(
        output.status.success(),
        "the Python MCP end-to-end suite failed ({})",
        output.status
    );
    assert!(stdout.contains(" passed"), "pytest ran no test");
}
