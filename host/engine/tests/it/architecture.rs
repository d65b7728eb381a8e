//! The engine's architecture invariant, checked on its dependency graph: it owns the
//! `Backend` trait and the registry of backend kinds, and never links a plugin runtime.
//! Wasm components and native libraries are `tally-plugin-host`'s, which the binary wires in;
//! so building or testing the engine compiles no Cranelift and builds no wasm.

use std::process::Command;

#[test]
fn the_engine_links_no_plugin_runtime() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "tally-engine",
            "-e",
            "normal,build,dev",
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
    assert!(
        tree.contains("datafusion"),
        "the tree was read: {tree:.400}"
    );
    let forbidden = [
        "wasmtime",
        "cranelift",
        "libloading",
        "datafusion-ffi",
        "tally-wasm-plugins",
        "tally-plugin-host",
    ];
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
        "tally-engine must not depend on a plugin runtime, but links: {found:?}"
    );
}
