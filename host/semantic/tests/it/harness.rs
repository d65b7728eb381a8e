//! `check(input, expected)`: golden files beside the inputs. Run with `UPDATE_EXPECT=1` to
//! rewrite the expectations, then review the diff.

use std::path::{Path, PathBuf};

/// The files in `dir` with extension `ext`, sorted.
pub fn cases(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no .{ext} cases in {}", dir.display());
    out
}

pub fn data_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(sub)
}

/// Compares `actual` with the golden file; collects mismatches instead of stopping at the
/// first, so one run shows every case that changed.
pub fn check(expected_file: &Path, actual: &str, failures: &mut Vec<String>) {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let expected = std::fs::read_to_string(expected_file).unwrap_or_default();
    if expected == actual {
        return;
    }
    if update {
        std::fs::write(expected_file, actual)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", expected_file.display()));
        return;
    }
    failures.push(format!(
        "{} differs (run with UPDATE_EXPECT=1 to accept):\n--- expected\n{expected}\n--- actual\n{actual}",
        expected_file.display()
    ));
}

pub fn finish(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crate sits two levels below the workspace root")
        .to_path_buf()
}

/// `../shared/reference` beside the workspace, if present. Absent: the caller skips with a
/// message, except under CI, where a missing reference folder must fail the run instead of
/// hiding a broken setup behind a skip.
pub fn reference_dir() -> Option<PathBuf> {
    let dir = workspace_root().join("../shared/reference");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "CI=true but the reference folder {} is missing; CI must provide ../shared/reference",
            dir.display()
        );
    }
    eprintln!(
        "skipped: {} is absent (reference tests run where ../shared/reference exists)",
        dir.display()
    );
    None
}
