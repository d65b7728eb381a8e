//! `tally plugin`: tooling for people who write wasm source plugins.
//!
//! - `new NAME`: a project from the template (literal package keys, a component and a host
//!   library, a size-tuned release profile, the plugin API crate this tally was built with
//!   unpacked into `vendor/`) with an example dataset;
//! - `build [DIR]`: the component in release for wasm32-wasip2, checked (a component, the
//!   API version this server speaks) and measured;
//! - `test DIR|FILE.wasm --dataset FOLDER`: the plugin on a dataset folder through the real
//!   sandbox, as the server would call it, every answer checked (see
//!   `tally_plugin_host::probe`) and the folder's dataset.yaml checked against it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::{Args, Subcommand};

use crate::exit;

const TARGET: &str = "wasm32-wasip2";
const TEMPLATE_LIB: &str = include_str!("../../../examples/plugin-template/src/lib.rs");
/// Where `new` unpacks the plugin API crate, inside the project.
const VENDORED_API: &str = "vendor/tally-plugin-api";

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Write a new plugin project NAME/ from the template: a component that reads the
    /// `.txt` files of its dataset folder, one row per line, citing file and line; with an
    /// example dataset folder (example/).
    New {
        /// The plugin's (and its crate's or module's) name: lowercase letters, digits, `-`
        /// and `_`.
        name: String,
        /// The language of the project: `rust` (a crate over tally-plugin-api's guest helper)
        /// or `python` (app.py over the Python guest helper, compiled by componentize-py).
        #[arg(long, value_enum, default_value_t = Lang::Rust)]
        lang: Lang,
        /// Where to write the project (default: ./NAME). It must not exist or be empty.
        #[arg(long, value_name = "DIR")]
        path: Option<PathBuf>,
        /// Depend on the `plugin-api` folder of a Tally checkout by path instead (default:
        /// the plugin API crate this tally was built with, unpacked into the project's
        /// vendor/tally-plugin-api, so the project builds anywhere).
        #[arg(long, value_name = "DIR")]
        api: Option<PathBuf>,
    },
    /// Build a plugin project's component (Rust: in release for wasm32-wasip2; Python: with
    /// componentize-py), check that it is a component of a plugin API version this server
    /// speaks, and print its file, size and SHA-256.
    Build {
        /// The project folder (with its Cargo.toml, or its app.py).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Run a plugin on a dataset folder through the real sandbox: `describe` with the
    /// folder's backend.config, a full `scan`, one scan per filterable column; check the
    /// answers and the folder's dataset.yaml against them; print rows with their sources,
    /// the time and the memory used. Exit 0 when all is well, 1 when the plugin (or the
    /// definition) is at fault, 5 when the folder cannot be used.
    Test(TestFlags),
}

/// The language of a new plugin project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
}

#[derive(Debug, Args)]
pub struct TestFlags {
    /// A plugin project folder (built first) or a `.wasm` component.
    plugin: PathBuf,
    /// The dataset folder: its dataset.yaml (backend.config, fields) and the files the
    /// plugin reads.
    #[arg(long, value_name = "FOLDER")]
    dataset: PathBuf,
    /// How many rows to print.
    #[arg(long, default_value_t = 5)]
    rows: usize,
    /// Wall-clock time one plugin call may run, in milliseconds (as `serve`).
    #[arg(long, default_value_t = 5_000)]
    plugin_deadline_ms: u64,
    /// Memory one plugin instance may grow to, in MiB (as `serve`).
    #[arg(long, default_value_t = 256)]
    plugin_memory_mb: usize,
    /// Size of what one scan may return, in MiB (as `serve`).
    #[arg(long, default_value_t = 64)]
    plugin_output_mb: usize,
}

/// A failure of a `tally plugin` command: what, what would work, and the exit code.
struct Failure {
    code: u8,
    message: String,
    fix: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>, fix: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            fix: fix.into(),
        }
    }

    fn report(self, command: &str) -> ExitCode {
        eprintln!("tally plugin {command}: {}", self.message);
        if !self.fix.is_empty() {
            eprintln!("  fix: {}", self.fix);
        }
        ExitCode::from(self.code)
    }
}

pub fn run(command: PluginCommand) -> ExitCode {
    match command {
        PluginCommand::New {
            name,
            lang,
            path,
            api,
        } => match new(&name, lang, path, api) {
            Ok(dir) => {
                println!("wrote the plugin project {}", dir.display());
                println!("next:");
                if lang == Lang::Python {
                    println!(
                        "  python3 -m pip install componentize-py=={}   # once",
                        crate::plugin_python::COMPONENTIZE_PY
                    );
                }
                println!("  tally plugin build {}", dir.display());
                println!(
                    "  tally plugin test {} --dataset {}",
                    dir.display(),
                    dir.join("example").display()
                );
                ExitCode::SUCCESS
            }
            Err(f) => f.report("new"),
        },
        PluginCommand::Build { dir } => match build(&dir) {
            Ok(built) => {
                print_built(&built);
                ExitCode::SUCCESS
            }
            Err(f) => f.report("build"),
        },
        PluginCommand::Test(flags) => test(flags),
    }
}

// ---- new ------------------------------------------------------------------------------------

impl From<crate::plugin_python::Problem> for Failure {
    fn from(p: crate::plugin_python::Problem) -> Failure {
        Failure::new(p.code, p.message, p.fix)
    }
}

fn new(
    name: &str,
    lang: Lang,
    path: Option<PathBuf>,
    api: Option<PathBuf>,
) -> Result<PathBuf, Failure> {
    if !crate::plugin_python::valid_name(name) {
        return Err(Failure::new(
            exit::BAD_INPUT,
            format!("`{name}` cannot name a plugin crate"),
            "use lowercase letters, digits, `-` and `_`, starting with a letter (e.g. `my-source`)",
        ));
    }
    let dir = path.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(Failure::new(
            exit::CONFIG,
            format!("{} already exists and is not empty", dir.display()),
            "name a new folder with --path, or remove this one",
        ));
    }
    let api = match api {
        None => None,
        Some(api) => Some(api.canonicalize().ok().filter(|a| a.join("Cargo.toml").is_file() && a.join("wit").is_dir()).ok_or_else(|| {
            Failure::new(
                exit::CONFIG,
                format!(
                    "{} is not the plugin-api folder of a Tally checkout (with Cargo.toml and wit/)",
                    api.display()
                ),
                "pass --api PATH to the plugin-api folder of a Tally checkout, or leave --api out to unpack the plugin API crate this tally was built with into the project",
            )
        })?),
    };
    if lang == Lang::Python {
        if api.is_some() {
            return Err(Failure::new(
                exit::BAD_INPUT,
                "--api names the Rust plugin API crate; a Python project carries its own helper",
                "leave --api out with --lang python",
            ));
        }
        let module = name.replace('-', "_");
        let yaml = example_yaml(name, &module, &format!("build/{module}.wasm"));
        write_files(&dir, crate::plugin_python::files(name, yaml))?;
        return Ok(dir);
    }
    let crate_name = name.replace('-', "_");
    let mut files: Vec<(PathBuf, String)> = vec![
        (PathBuf::from("Cargo.toml"), cargo_toml(name, api.as_deref())),
        (PathBuf::from("src/lib.rs"), lib_rs(name)),
        (PathBuf::from(".gitignore"), "/target\n*.wasm\n".to_string()),
        (
            PathBuf::from("README.md"),
            readme(name, &crate_name, api.is_none()),
        ),
        (
            PathBuf::from("example/dataset.yaml"),
            example_yaml(name, &crate_name, &format!("{crate_name}.wasm")),
        ),
        (
            PathBuf::from("example/hello.txt"),
            "Hello from the example dataset.\nEvery non-empty line is a row.\n\nThis one cites line 4.\n".to_string(),
        ),
    ];
    if api.is_none() {
        let vendored = crate::plugin_api::files().map_err(|e| {
            Failure::new(
                exit::FAILED,
                format!("the plugin API crate built into this tally cannot be written out: {e}"),
                "this is a fault of this tally build; pass --api PATH to a Tally checkout's plugin-api folder meanwhile",
            )
        })?;
        files.extend(
            vendored
                .into_iter()
                .map(|(path, text)| (Path::new(VENDORED_API).join(path), text)),
        );
    }
    write_files(&dir, files)?;
    Ok(dir)
}

/// Writes a new project's files under `dir`.
fn write_files(dir: &Path, files: Vec<(PathBuf, String)>) -> Result<(), Failure> {
    for (relative, text) in files {
        let path = dir.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                Failure::new(
                    exit::CONFIG,
                    format!("cannot create {}: {e}", parent.display()),
                    "choose a folder you can write to (--path)",
                )
            })?;
        }
        std::fs::write(&path, text).map_err(|e| {
            Failure::new(
                exit::CONFIG,
                format!("cannot write {}: {e}", path.display()),
                "choose a folder you can write to (--path)",
            )
        })?;
    }
    Ok(())
}

fn cargo_toml(name: &str, api: Option<&Path>) -> String {
    let (workspace, dependency) = match api {
        None => (
            r#"# The plugin API in vendor/ is a dependency, not a member: a member's optional features (the
# API's `native`) would all be resolved into Cargo.lock.
[workspace]
exclude = ["vendor"]"#,
            format!(
                r#"# Tally's plugin API with its guest helper: the crate tally {tally} was built with, unpacked
# into vendor/ so this project builds anywhere, offline. To take a published version instead:
# tally-plugin-api = {{ version = "{api_version}", features = ["guest"] }} (or a git dependency on
# Tally's repository), then delete vendor/.
tally-plugin-api = {{ path = "{VENDORED_API}", features = ["guest"] }}"#,
                tally = env!("CARGO_PKG_VERSION"),
                api_version = env!("CARGO_PKG_VERSION"),
            ),
        ),
        Some(api) => (
            "[workspace]",
            format!(
                r#"# Tally's plugin API with its guest helper, from a Tally checkout. From Tally's repository
# instead: tally-plugin-api = {{ git = "<Tally's repository URL>", features = ["guest"] }}
tally-plugin-api = {{ path = {api:?}, features = ["guest"] }}"#,
                api = api.display().to_string(),
            ),
        ),
    };
    format!(
        r#"# A workspace of its own: the project builds wherever it is put, inside another one too.
{workspace}

[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
rust-version = "{rust}"
publish = false

[lib]
# cdylib: the wasm component (`tally plugin build`); rlib: the same code as a library on
# this machine, for `cargo test`.
crate-type = ["cdylib", "rlib"]

[dependencies]
{dependency}

# A plugin is built once and runs sandboxed: small code, and a panic aborts (the server shows
# its message). A release build is under a megabyte; a debug build tens of megabytes.
[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
strip = true
panic = "abort"
"#,
        rust = env!("CARGO_PKG_RUST_VERSION"),
    )
}

/// The template's code, named for this plugin.
fn lib_rs(name: &str) -> String {
    TEMPLATE_LIB.replacen("\"template\"", &format!("{name:?}"), 1)
}

/// The example dataset of a new project: `module.wasm` served, `built` the file
/// `tally plugin build` makes.
fn example_yaml(name: &str, crate_name: &str, built: &str) -> String {
    let schema = tally_semantic::definition::schema_url();
    format!(
        r#"# yaml-language-server: $schema={schema}
# An example dataset served by the plugin `{name}`: `tally plugin build` makes
# {built}; copy it here (or let `tally plugin test` use the build).
title: Example lines
description: The lines of the .txt files of this folder.
source: {{url: "https://example.org/"}}
backend:
  kind: wasm
  component: {crate_name}.wasm
  config: {{publisher: "Example Org"}}
fields:
- {{name: path, role: dim, desc: The file}}
- {{name: line, role: attr, data_type: integer, desc: "The line number, from 1"}}
- {{name: text, role: attr, desc: The line}}
"#
    )
}

fn readme(name: &str, crate_name: &str, vendored: bool) -> String {
    let api = if vendored {
        "The plugin API crate is in `vendor/tally-plugin-api` (the version of the `tally` that\nwrote this project), so the project builds anywhere, offline; to depend on a published\nversion instead, see the comment above the dependency in `Cargo.toml`."
    } else {
        "The plugin API crate is taken from a Tally checkout (the path in `Cargo.toml`)."
    };
    include_str!("plugin_rust_readme.md")
        .replace("{name}", name)
        .replace("{crate_name}", crate_name)
        .replace("{api_note}", api)
}

// ---- build ----------------------------------------------------------------------------------

struct Built {
    /// How it was built: `release, wasm32-wasip2`, `componentize-py`.
    how: &'static str,
    wasm: PathBuf,
    size: u64,
    sha256: String,
    api_version: &'static str,
}

fn print_built(b: &Built) {
    println!("built {}", b.wasm.display());
    println!("  {} KiB, {}; {}", b.size.div_ceil(1024), b.how, b.sha256);
    println!(
        "  plugin API {} (this tally speaks {})",
        b.api_version,
        tally_plugin_api::PLUGIN_API_VERSION
    );
}

/// Whether the Rust of `dir` has the standard library of the wasm target.
fn target_installed(dir: &Path) -> Option<bool> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .current_dir(dir)
        .output()
        .ok()?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || sysroot.as_os_str().is_empty() {
        return None;
    }
    let lib = sysroot.join("lib").join("rustlib").join(TARGET).join("lib");
    Some(std::fs::read_dir(lib).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("libcore-"))
    }))
}

fn build(dir: &Path) -> Result<Built, Failure> {
    if crate::plugin_python::is_project(dir) {
        let wasm = crate::plugin_python::build(dir)?;
        return check_component(&wasm, "componentize-py");
    }
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(Failure::new(
            exit::CONFIG,
            format!("{} has no Cargo.toml", dir.display()),
            "name the folder of a plugin project: a Rust crate, or a Python project with its app.py (`tally plugin new [--lang python] NAME` makes one)",
        ));
    }
    if target_installed(dir) == Some(false) {
        return Err(Failure::new(
            exit::CONFIG,
            format!("the Rust target {TARGET} is not installed"),
            format!("rustup target add {TARGET}"),
        ));
    }
    eprintln!("building {} for {TARGET} (release)…", dir.display());
    let mut child = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .arg("build")
        .arg("--release")
        .arg("--lib")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--message-format=json-render-diagnostics")
        // A tally run by cargo (tests) must not hand its own build settings on.
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_PRIMARY_PACKAGE")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            Failure::new(
                exit::CONFIG,
                format!("cargo could not be run: {e}"),
                "install Rust with rustup (cargo on PATH)",
            )
        })?;
    let mut wasm = None;
    if let Some(out) = child.stdout.take() {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if message["reason"] != "compiler-artifact" {
                continue;
            }
            if let Some(file) = message["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"))
            {
                wasm = Some(PathBuf::from(file));
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| Failure::new(exit::FAILED, format!("cargo failed: {e}"), ""))?;
    if !status.success() {
        return Err(Failure::new(
            exit::BAD_INPUT,
            "the plugin did not build (cargo's messages are above)",
            "fix what the compiler says",
        ));
    }
    let wasm = wasm.ok_or_else(|| {
        Failure::new(
            exit::BAD_INPUT,
            "the build made no .wasm component",
            "the [lib] section of Cargo.toml needs crate-type = [\"cdylib\", \"rlib\"]",
        )
    })?;
    check_component(&wasm, "release, wasm32-wasip2")
}

fn check_component(wasm: &Path, how: &'static str) -> Result<Built, Failure> {
    let bytes = std::fs::read(wasm).map_err(|e| {
        Failure::new(
            exit::CONFIG,
            format!("cannot read {}: {e}", wasm.display()),
            "name a .wasm component",
        )
    })?;
    let runtime = tally_plugin_host::wasm::runtime()
        .map_err(|e| Failure::new(exit::FAILED, e.message(), e.fix()))?;
    let label = format!("`{}`", wasm.display());
    let compiled = runtime
        .compile(&label, &bytes, None)
        .map_err(|e| Failure::new(exit::BAD_INPUT, e.message(), e.fix()))?;
    Ok(Built {
        how,
        wasm: wasm.to_path_buf(),
        size: compiled.size,
        sha256: compiled.sha256.clone(),
        api_version: compiled.api_version,
    })
}

// ---- test -----------------------------------------------------------------------------------

/// A line of `tally plugin test`'s report. What the plugin said (its names, rows, messages and
/// the column names of its Arrow stream) may hold control characters: they are written
/// visibly, as the server escapes a plugin's text (`tally_engine::storage::escape_controls`).
fn say(line: &str) {
    println!(
        "{}",
        tally_engine::storage::escape_controls(line, tally_engine::storage::Lines::Kept)
    );
}

fn test(flags: TestFlags) -> ExitCode {
    match run_test(&flags) {
        Ok(code) => code,
        Err(f) => f.report("test"),
    }
}

fn run_test(flags: &TestFlags) -> Result<ExitCode, Failure> {
    let folder = &flags.dataset;
    let Subject {
        wasm,
        bytes,
        def,
        warnings,
    } = read_subject(flags)?;
    // The plugin under test stands in for the component the definition names (a file, or a
    // built-in plugin when testing one of those).
    let component = match &def.backend.plugin {
        Some(tally_semantic::definition::PluginRef::File(f)) => Some(f.clone()),
        Some(tally_semantic::definition::PluginRef::Builtin(_)) => None,
        None => {
            return Err(Failure::new(
                exit::CONFIG,
                "the dataset.yaml names no wasm component",
                "write backend: {kind: wasm, component: NAME.wasm} (the plugin under test stands in for that file)",
            ));
        }
    };
    let limits = tally_plugin_host::PluginLimits {
        deadline: std::time::Duration::from_millis(flags.plugin_deadline_ms.max(10)),
        memory_bytes: flags.plugin_memory_mb.max(1) * 1024 * 1024,
        output_bytes: flags.plugin_output_mb.max(1) * 1024 * 1024,
        ..Default::default()
    };

    // The plugin on its own, every answer checked.
    let label = format!(
        "the component `{}`",
        wasm.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let probe = match tally_plugin_host::probe::probe(
        &label,
        &bytes,
        folder,
        &def.backend.config,
        &limits,
        &def.id,
        flags.rows,
    ) {
        Ok(p) => p,
        Err(e) => {
            say(&format!("FAIL {}", e.message()));
            say(&format!("  fix: {}", e.fix()));
            return Ok(ExitCode::from(exit::BAD_INPUT));
        }
    };
    let mut problems = probe.problems.clone();
    print_probe(&probe);

    let Some(component) = component else {
        // A built-in plugin's definition: its fields against what the plugin describes.
        builtin_fields(&def, &probe, &mut problems);
        return Ok(verdict(&probe, &problems, warnings));
    };
    // The definition against the plugin, as the server loads it: a copy of the folder with
    // the plugin under test as its component.
    let scratch = scratch_copy(folder, &def.id, &component, &bytes)?;
    let scanned = problems.is_empty();
    as_served(&scratch, &def.id, limits, &mut problems);
    if !scanned {
        // The server's probe scan fails as the scans above did: said once is enough.
        problems.retain(|p| !p.contains(tally_plugin_host::wasm_backend::PROBE_FAILED));
    }
    drop(scratch);

    Ok(verdict(&probe, &problems, warnings))
}

/// What `tally plugin test` runs: the component (built first from a project) and the
/// dataset definition it is tested against.
struct Subject {
    wasm: PathBuf,
    bytes: Vec<u8>,
    def: tally_semantic::DatasetDef,
    /// How many warnings the definition has (printed as `tally check` prints them).
    warnings: usize,
}

/// Reads the dataset folder's definition and the component under test, building it first
/// when a project folder is named.
fn read_subject(flags: &TestFlags) -> Result<Subject, Failure> {
    let folder = &flags.dataset;
    let yaml = folder.join("dataset.yaml");
    if !yaml.is_file() {
        return Err(Failure::new(
            exit::CONFIG,
            format!("{} has no dataset.yaml", folder.display()),
            "name a dataset folder whose dataset.yaml names the plugin (backend: {kind: wasm, component: NAME.wasm})",
        ));
    }
    let wasm = if flags.plugin.is_dir() {
        let built = build(&flags.plugin)?;
        print_built(&built);
        built.wasm
    } else {
        flags.plugin.clone()
    };
    let bytes = std::fs::read(&wasm).map_err(|e| {
        Failure::new(
            exit::CONFIG,
            format!("cannot read {}: {e}", wasm.display()),
            "name a plugin project folder or a .wasm component",
        )
    })?;
    let text = std::fs::read_to_string(&yaml).map_err(|e| {
        Failure::new(
            exit::CONFIG,
            format!("cannot read {}: {e}", yaml.display()),
            "",
        )
    })?;
    let id = folder
        .canonicalize()
        .ok()
        .and_then(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "dataset".into());
    // The definition checks of `tally check`, with the same words.
    let label = yaml.display().to_string();
    let (def, diagnostics) = crate::check::read_definition(&label, &id, &text);
    let Some(def) = def else {
        return Err(Failure::new(
            exit::CONFIG,
            format!(
                "{}'s dataset.yaml cannot be read: {}",
                folder.display(),
                diagnostics
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            "fix the definition as each error says (`tally check` on the folder's parent says the same)",
        ));
    };
    for d in &diagnostics {
        say(&format!("{d}"));
    }
    Ok(Subject {
        wasm,
        bytes,
        def,
        warnings: diagnostics.len(),
    })
}

/// Checks a built-in plugin's definition: each field one of the columns the plugin
/// describes, a numeric field a numeric column.
fn builtin_fields(
    def: &tally_semantic::DatasetDef,
    probe: &tally_plugin_host::probe::Probe,
    problems: &mut Vec<String>,
) {
    for f in &def.fields {
        match probe.columns.iter().find(|(n, _)| n == &f.name) {
            None => problems.push(format!(
                "dataset.yaml: field `{}` is not one of the columns plugin `{}` {} describes",
                f.name, probe.name, probe.version
            )),
            Some((_, t))
                if f.data_type.is_numeric()
                    && !matches!(
                        t,
                        tally_plugin_host::wasm::ColumnType::Integer
                            | tally_plugin_host::wasm::ColumnType::Number
                    ) =>
            {
                problems.push(format!(
                    "dataset.yaml: field `{}` is declared {} but plugin `{}` {} describes it as {}",
                    f.name,
                    f.data_type.as_str(),
                    probe.name,
                    probe.version,
                    tally_plugin_host::probe::column_type_name(*t)
                ))
            }
            Some(_) => {}
        }
    }
}

/// A scratch copy of the dataset folder (as `<scratch>/<id>`) with the component under test
/// written where the definition names its component.
fn scratch_copy(
    folder: &Path,
    id: &str,
    component: &str,
    bytes: &[u8],
) -> Result<tempfile::TempDir, Failure> {
    // A fresh private directory (random name, removed when dropped, even on an error).
    let scratch = tempfile::Builder::new()
        .prefix("tally-plugin-test-")
        .tempdir()
        .map_err(|e| {
            Failure::new(
                exit::FAILED,
                format!("cannot make a scratch directory: {e}"),
                "",
            )
        })?;
    let served = scratch.path().join(id);
    let copied = copy_folder(folder, &served).and_then(|()| {
        let target = served.join(component);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
        }
        // A hard link to the folder's own component must not be written through.
        let _ = std::fs::remove_file(&target);
        std::fs::write(&target, bytes)
            .map_err(|e| format!("cannot write the component into the copy: {e}"))
    });
    if let Err(e) = copied {
        return Err(Failure::new(exit::FAILED, e, ""));
    }
    Ok(scratch)
}

/// Serves the scratch copy as the server would and adds what fails there to `problems`:
/// the definition's problems, then one query.
fn as_served(
    scratch: &tempfile::TempDir,
    id: &str,
    limits: tally_plugin_host::PluginLimits,
    problems: &mut Vec<String>,
) {
    let engine = std::sync::Arc::new(tally_engine::Engine::open_with_backends(
        scratch.path(),
        tally_engine::Limits::default(),
        tally_plugin_host::backends(tally_plugin_host::PluginOptions {
            limits,
            ..Default::default()
        }),
    ));
    let view = tally_mcp::view::View::of(&engine, tally_mcp::view::Caller::operator());
    for broken in view.broken().filter(|b| b.folder == id) {
        for p in &broken.problems {
            let at = if p.key.is_empty() {
                String::new()
            } else {
                format!(" at `{}`", p.key)
            };
            problems.push(format!(
                "dataset.yaml{}{at}: {} (fix: {})",
                p.line.map(|l| format!(":{l}")).unwrap_or_default(),
                p.reason,
                p.fix
            ));
        }
    }
    if let Some(ds) = view.dataset(id) {
        for column in &ds.def.undeclared {
            say(&format!(
                "note: the plugin produces `{column}`, which dataset.yaml does not declare: it is not served (declare it as a field to serve it)"
            ));
        }
        // One query as a client would send it: what the server checks of the rows and their
        // sources (source types, dates, files inside the folder) fails here if it fails there.
        if let Some(runtime) = crate::runtime::runtime() {
            let asked = serde_json::json!({ "dataset_id": id, "limit": 1 });
            if let Err(e) = runtime.block_on(view.call(
                &engine,
                tally_semantic::request::Tool::QueryRecords,
                asked,
            )) {
                let error = e.to_json();
                problems.push(format!(
                    "served, a query fails: {}",
                    error["error"]["message"].as_str().unwrap_or("(no message)")
                ));
            }
        }
    }
    drop(view);
    drop(engine);
}

/// Exit 0 when every check passed; warnings about the definition (as `tally check` has them:
/// the dataset is served) are counted, not failed.
fn verdict(
    probe: &tally_plugin_host::probe::Probe,
    problems: &[String],
    warnings: usize,
) -> ExitCode {
    if problems.is_empty() {
        say(&format!(
            "ok: plugin `{}` {} passed every check{}",
            probe.name,
            probe.version,
            match warnings {
                0 => String::new(),
                1 => ", with 1 warning about dataset.yaml (above)".to_string(),
                n => format!(", with {n} warnings about dataset.yaml (above)"),
            }
        ));
        ExitCode::SUCCESS
    } else {
        say(&format!("{} problem(s):", problems.len()));
        for p in problems {
            say(&format!("FAIL {p}"));
        }
        ExitCode::from(exit::BAD_INPUT)
    }
}

fn print_probe(p: &tally_plugin_host::probe::Probe) {
    use tally_plugin_host::probe::{column_type_name, millis};
    say(&format!(
        "plugin `{}` {} (API {}): {}",
        p.name, p.version, p.api_version, p.summary
    ));
    say(&format!(
        "  columns: {}",
        p.columns
            .iter()
            .map(|(n, t)| format!("{n} ({})", column_type_name(*t)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !p.filterable.is_empty() {
        say(&format!(
            "  filters it applies itself: {}",
            p.filterable.join(", ")
        ));
    }
    say(&format!(
        "  describe: {}, {} MiB of memory",
        millis(p.describe.elapsed),
        p.describe.peak_memory.div_ceil(1 << 20)
    ));
    if p.scanned {
        say(&format!(
            "  scan: {} rows, {} sources, {} KiB of output in {}, {} MiB of memory",
            p.rows,
            p.sources,
            p.output_bytes.div_ceil(1024),
            millis(p.scan.elapsed),
            p.scan.peak_memory.div_ceil(1 << 20)
        ));
    } else {
        say(&format!(
            "  scan: failed after {}, {} MiB of memory (why: the problem below)",
            millis(p.scan.elapsed),
            p.scan.peak_memory.div_ceil(1 << 20)
        ));
    }
    if !p.files.is_empty() {
        say(&format!("  files read: {}", p.files.join(", ")));
    }
    for note in &p.notes {
        say(&format!("  note: {note}"));
    }
    for (i, row) in p.sample.iter().enumerate() {
        let source = p
            .sample_sources
            .get(i)
            .map(|s| format!("  ← {s}"))
            .unwrap_or_default();
        let cells: Vec<String> = row.iter().map(|c| short(c, 60)).collect();
        say(&format!("  row {}: {}{source}", i + 1, cells.join(" | ")));
    }
    for f in &p.filters {
        say(&format!(
            "  filter {} = `{}`: {} of {} rows returned have it (a scan without the filter has {})",
            f.column, f.value, f.got, f.returned, f.expected
        ));
    }
}

/// A cell on one line, cut to `n` characters.
fn short(text: &str, n: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > n {
        one_line.chars().take(n).collect::<String>() + "…"
    } else {
        one_line
    }
}

/// Copies a dataset folder (hard links where the file system allows).
fn copy_folder(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let entries =
        std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        if kind.is_dir() {
            copy_folder(&path, &target)?;
        } else if kind.is_file() && std::fs::hard_link(&path, &target).is_err() {
            // Never through an existing file: a new one or nothing.
            let copied = std::fs::File::open(&path).and_then(|mut from| {
                let mut to = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&target)?;
                std::io::copy(&mut from, &mut to)
            });
            if let Err(e) = copied {
                return Err(format!("cannot copy {}: {e}", path.display()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The example a new project gets names the schema on its first line (editors check the
    /// file against it) and is a definition the reader serves without a word.
    #[test]
    fn the_example_definition_names_the_schema_and_reads_cleanly() {
        let yaml = super::example_yaml("my-lines", "my_lines", "my_lines.wasm");
        assert_eq!(
            yaml.lines().next(),
            Some(
                format!(
                    "# yaml-language-server: $schema={}",
                    tally_semantic::definition::schema_url()
                )
                .as_str()
            )
        );
        let loaded =
            tally_semantic::definition::load_definition("example/dataset.yaml", "example", &yaml)
                .unwrap_or_else(|e| panic!("the example is refused: {e:?}"));
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    }
}
