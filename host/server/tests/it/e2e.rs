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
    let output = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "tests/e2e",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout=300",
        ])
        .current_dir(&root)
        .env("TALLY_BIN", env!("CARGO_BIN_EXE_tally"))
        .env("TALLY_DATASETS", root.join("datasets"))
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
