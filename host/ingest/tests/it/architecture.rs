//! The ingest crate's invariant, checked on its dependency graph: it knows files, encodings
//! and HTTP, never the query engine or MCP, so `tally add` can be built and tested without
//! DataFusion, wasmtime or rmcp.

use std::process::Command;

#[test]
fn ingest_links_no_query_engine_and_no_protocol() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "tally-ingest",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(tree.contains("calamine"), "the tree was read: {tree:.400}");
    let forbidden = ["datafusion", "tally-engine", "rmcp", "wasmtime", "tokio"];
    let found: Vec<&str> = tree
        .lines()
        .filter(|l| {
            let name = l.split_whitespace().next().unwrap_or_default();
            forbidden
                .iter()
                .any(|f| name == *f || name.starts_with(&format!("{f}-")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "tally-ingest must not depend on {found:?}"
    );
}
