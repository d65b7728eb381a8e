//! Builds the workspace's wasm plugins with a nested `cargo build --target wasm32-wasip2`.
//!
//! The nested cargo uses a target directory of its own (`<target>/wasm-plugins`): sharing the
//! outer one would deadlock on cargo's build-directory lock, which the outer cargo holds
//! while this script runs. One nested build compiles every plugin, so their shared
//! dependencies (arrow-ipc, wit-bindgen) are compiled once; later builds are incremental.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, folder, output file stem, embedded as `builtin:<name>`)
const PLUGINS: &[(&str, &str, &str, Option<&str>)] = &[
    (
        "tally-plugin-documents",
        "plugins/documents",
        "tally_plugin_documents",
        Some("documents"),
    ),
    (
        "tally-plugin-law",
        "plugins/law",
        "tally_plugin_law",
        Some("law"),
    ),
    (
        "tally-plugin-template",
        "examples/plugin-template",
        "tally_plugin_template",
        None,
    ),
    (
        "tally-test-plugin-hostile",
        "tests/plugins/hostile",
        "tally_test_plugin_hostile",
        None,
    ),
    (
        "tally-test-plugin-wrong-version",
        "tests/plugins/wrong-version",
        "tally_test_plugin_wrong_version",
        None,
    ),
];

const TARGET: &str = "wasm32-wasip2";
const PROFILE: &str = "wasm-guest";

/// Stops the build with one line saying what to do when the compiler has no standard library
/// for the wasm target: otherwise the nested build fails deep inside a dependency with
/// "can't find crate for `core`".
fn check_target_installed() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let Ok(out) = Command::new(&rustc).args(["--print", "sysroot"]).output() else {
        return; // the nested build will say what is wrong
    };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || sysroot.as_os_str().is_empty() {
        return;
    }
    let std_dir = sysroot.join("lib").join("rustlib").join(TARGET).join("lib");
    let has_std = std::fs::read_dir(&std_dir)
        .map(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("libcore-"))
        })
        .unwrap_or(false);
    if !has_std {
        eprintln!(
            "error: the Rust target {TARGET} is not installed, and Tally's built-in wasm plugins need it. \
             Install it with `rustup target add {TARGET}` and build again."
        );
        std::process::exit(1);
    }
}

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .and_then(Path::parent)
        .expect("plugins/wasm sits two levels below the workspace root")
        .to_path_buf();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out; the nested build lives beside the
    // profile folders so every outer profile (dev, test, clippy, release) shares it.
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .map(|t| t.join("wasm-plugins"))
        .unwrap_or_else(|| out_dir.join("wasm-plugins"));

    // Rebuild when a plugin, the guest helper, the WIT or the lock file changes.
    let dirs = PLUGINS
        .iter()
        .map(|(_, dir, _, _)| *dir)
        .chain(["plugin-api", "Cargo.lock"]);
    for dir in dirs {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }

    check_target_installed();

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    // One `cargo rustc` per plugin: the crates are plain libraries on the host (no linking)
    // and components only here. They share the target directory, so common dependencies
    // compile once.
    for (package, _, _, _) in PLUGINS {
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&workspace)
            .arg("rustc")
            .arg("--lib")
            .arg("--crate-type")
            .arg("cdylib")
            .arg("-p")
            .arg(package)
            .arg("--target")
            .arg(TARGET)
            .arg("--profile")
            .arg(PROFILE)
            .arg("--target-dir")
            .arg(&target_dir)
            .arg("--locked");
        // The outer build's settings are for the host: none of them may leak into the guest
        // build (a wrapper such as clippy-driver, host rustflags, a target dir).
        for var in [
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_BUILD_TARGET_DIR",
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_BUILD_RUSTC_WRAPPER",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_MAKEFLAGS",
            "MAKEFLAGS",
            "MFLAGS",
        ] {
            cmd.env_remove(var);
        }
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("could not run cargo for the wasm plugin {package}: {e}"));
        if !status.success() {
            panic!(
                "building the wasm plugin {package} for {TARGET} failed (see the output above).\n\
                 If the target is missing, install it with `rustup target add {TARGET}`."
            );
        }
    }

    let built = target_dir.join(TARGET).join(PROFILE);
    let mut embedded = String::from(
        "/// The built-in plugins: (name, component bytes).\npub static BUILTIN: &[(&str, &[u8])] = &[\n",
    );
    for (_, _, stem, builtin) in PLUGINS {
        let file = built.join(format!("{stem}.wasm"));
        if !file.is_file() {
            panic!("the wasm plugin build did not produce {}", file.display());
        }
        if let Some(name) = builtin {
            embedded.push_str(&format!(
                "    ({name:?}, include_bytes!({:?})),\n",
                file.display().to_string()
            ));
        }
    }
    embedded.push_str("];\n");
    std::fs::write(out_dir.join("builtin.rs"), embedded).expect("OUT_DIR is writable");
    println!("cargo:rustc-env=TALLY_WASM_PLUGIN_DIR={}", built.display());
}
