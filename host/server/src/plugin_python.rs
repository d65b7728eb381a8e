//! Python plugins: `tally plugin new --lang python` and the build of such a project.
//!
//! A Python plugin is the same WebAssembly component as a Rust one: componentize-py compiles
//! the project's `app.py`, the guest helper `tally_plugin.py` (the Python twin of the Rust
//! guest helper, pure Python) and CPython into one component exporting
//! `tally:plugin/source@<version>`. The host runs it in the same sandbox, unchanged.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::exit;

/// The componentize-py version projects are built with (pinned: its output is the component
/// the sandbox runs, and its CPython is the one the plugin's code meets).
pub const COMPONENTIZE_PY: &str = "0.25.1";

/// The world a source plugin exports, in the WIT the project carries.
const WORLD: &str = "source-plugin";

const HELPER: &str = include_str!("../../../plugin-api/python/tally_plugin.py");
const TEMPLATE_APP: &str = include_str!("../../../examples/plugin-template-python/app.py");
const TEMPLATE_TEST: &str = include_str!("../../../examples/plugin-template-python/test_app.py");
const EXAMPLE_TEXT: &str =
    include_str!("../../../examples/plugin-template-python/example/hello.txt");
const WIT: &str = include_str!("../../../plugin-api/wit/since_v0.1.0/source.wit");

/// What went wrong, what would work, and the exit code.
#[derive(Debug)]
pub struct Problem {
    pub code: u8,
    pub message: String,
    pub fix: String,
}

impl Problem {
    fn new(code: u8, message: impl Into<String>, fix: impl Into<String>) -> Problem {
        Problem {
            code,
            message: message.into(),
            fix: fix.into(),
        }
    }
}

/// Whether `dir` is a Python plugin project (an `app.py`, no `Cargo.toml`).
pub fn is_project(dir: &Path) -> bool {
    dir.join("app.py").is_file() && !dir.join("Cargo.toml").is_file()
}

/// The files of a new Python plugin project named `name`, by path inside it, with the
/// example dataset's definition `example_yaml` (the one a Rust project gets, naming
/// `build/<module>.wasm`).
pub fn files(name: &str, example_yaml: String) -> Vec<(PathBuf, String)> {
    let module = name.replace('-', "_");
    vec![
        (
            PathBuf::from("app.py"),
            TEMPLATE_APP.replacen("NAME = \"template\"", &format!("NAME = {name:?}"), 1),
        ),
        (PathBuf::from("tally_plugin.py"), HELPER.to_string()),
        (PathBuf::from("wit/source.wit"), WIT.to_string()),
        (PathBuf::from("test_app.py"), TEMPLATE_TEST.to_string()),
        (PathBuf::from("pyproject.toml"), pyproject(name)),
        (
            PathBuf::from(".gitignore"),
            "/build/\n*.wasm\n__pycache__/\n/wit_world/\n/componentize_py_*\n/poll_loop.py\n/.venv/\n"
                .to_string(),
        ),
        (PathBuf::from("README.md"), readme(name, &module)),
        (PathBuf::from("example/dataset.yaml"), example_yaml),
        (PathBuf::from("example/hello.txt"), EXAMPLE_TEXT.to_string()),
    ]
}

fn pyproject(name: &str) -> String {
    format!(
        r#"# A Tally source plugin in Python: `tally plugin build` compiles app.py with componentize-py
# into the WebAssembly component build/{module}.wasm.
[project]
name = "{name}"
version = "0.1.0"
description = "A Tally source plugin"
requires-python = ">=3.11"
dependencies = []

[project.optional-dependencies]
# What `tally plugin build` runs (pinned: the component it makes is what the sandbox runs).
build = ["componentize-py=={COMPONENTIZE_PY}"]

[tool.tally-plugin]
# The plugin API this project's wit/ holds, and the module componentize-py compiles.
api = "{api}"
app = "app"
"#,
        module = name.replace('-', "_"),
        api = tally_plugin_api::PLUGIN_API_VERSION,
    )
}

fn readme(name: &str, module: &str) -> String {
    include_str!("plugin_python_readme.md")
        .replace("{name}", name)
        .replace("{module}", module)
        .replace("{componentize_py}", COMPONENTIZE_PY)
        .replace("{api}", tally_plugin_api::PLUGIN_API_VERSION)
}

/// Whether `name` can name a plugin (a crate, a module, a component file): lowercase letters,
/// digits, `-` and `_`, starting with a letter, at most 64 characters.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= 64
}

/// The module name of the project in `dir` (`-` as `_`), which names its component: `[project]
/// name` of its pyproject.toml, else the folder's name. A name that could not name a file in
/// `build/` (a path, spaces, capitals) is refused, as `tally plugin new` refuses it.
fn project_name(dir: &Path) -> Result<String, Problem> {
    let manifest = dir.join("pyproject.toml");
    let declared = match std::fs::read_to_string(&manifest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(Problem::new(
                exit::CONFIG,
                format!("cannot read {}: {e}", manifest.display()),
                "make pyproject.toml readable, or remove it to name the component after the folder",
            ));
        }
        Ok(text) => {
            let doc = text.parse::<toml_edit::DocumentMut>().map_err(|e| {
                Problem::new(
                    exit::CONFIG,
                    format!("{} is not valid TOML: {e}", manifest.display()),
                    "fix the file as the message says (`tally plugin new --lang python` writes one)",
                )
            })?;
            doc.get("project")
                .and_then(|p| p.get("name"))
                .and_then(|n| n.as_str())
                .map(str::to_string)
        }
    };
    let from_folder = declared.is_none();
    let name = declared
        .or_else(|| {
            dir.canonicalize()
                .ok()?
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    if !valid_name(&name) {
        return Err(Problem::new(
            exit::CONFIG,
            format!(
                "{} `{name}` cannot name the plugin's component",
                if from_folder {
                    "the project has no [project] name in pyproject.toml, and its folder's name"
                } else {
                    "pyproject.toml's [project] name"
                }
            ),
            "write `name = \"my-source\"` under [project] in pyproject.toml: lowercase letters, digits, `-` and `_`, starting with a letter",
        ));
    }
    Ok(name.replace('-', "_"))
}

/// The componentize-py to run: `$TALLY_COMPONENTIZE_PY`, the project's own `.venv`, else the
/// one on PATH.
fn componentize_py(dir: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("TALLY_COMPONENTIZE_PY") {
        return PathBuf::from(p);
    }
    let local = dir.join(".venv").join("bin").join("componentize-py");
    if local.is_file() {
        return local;
    }
    PathBuf::from("componentize-py")
}

fn install_hint() -> String {
    format!(
        "install it: `python3 -m pip install componentize-py=={COMPONENTIZE_PY}` (into the project's .venv, or any environment on PATH; `pip install -e '.[build]'` in the project does the same)"
    )
}

/// Compiles the project in `dir` into `build/<name>.wasm` with componentize-py, saying what
/// it runs. The component is checked by the caller, as a Rust build's is.
pub fn build(dir: &Path) -> Result<PathBuf, Problem> {
    for needed in ["app.py", "tally_plugin.py"] {
        if !dir.join(needed).is_file() {
            return Err(Problem::new(
                exit::CONFIG,
                format!("{} has no {needed}", dir.display()),
                "name the folder of a Python plugin project (`tally plugin new --lang python NAME` makes one)",
            ));
        }
    }
    let wit = dir.join("wit");
    if !wit.is_dir() {
        return Err(Problem::new(
            exit::CONFIG,
            format!("{} has no wit/ folder", dir.display()),
            format!(
                "the project needs the WIT of the plugin API (`tally plugin new --lang python` writes wit/source.wit, API {})",
                tally_plugin_api::PLUGIN_API_VERSION
            ),
        ));
    }
    let tool = componentize_py(dir);
    let version = Command::new(&tool).arg("--version").output().map_err(|e| {
        Problem::new(
            exit::CONFIG,
            format!("componentize-py could not be run ({}): {e}", tool.display()),
            install_hint(),
        )
    })?;
    let said = String::from_utf8_lossy(&version.stdout);
    let found = said.split_whitespace().last().unwrap_or("").to_string();
    if found != COMPONENTIZE_PY {
        eprintln!(
            "warning: componentize-py {found} is not the version this tally pins ({COMPONENTIZE_PY}); the component may differ from what `tally plugin test` was checked with ({})",
            install_hint()
        );
    }
    let name = project_name(dir)?;
    let out_dir = dir.join("build");
    std::fs::create_dir_all(&out_dir).map_err(|e| {
        Problem::new(
            exit::CONFIG,
            format!("cannot create {}: {e}", out_dir.display()),
            "build in a folder you can write to",
        )
    })?;
    let wasm = out_dir.join(format!("{name}.wasm"));
    eprintln!("building {} with componentize-py {found}…", dir.display());
    let status = Command::new(&tool)
        .arg("-d")
        .arg("wit")
        .arg("-w")
        .arg(WORLD)
        .arg("componentize")
        .arg("app")
        .arg("-p")
        .arg(".")
        .arg("-o")
        .arg(Path::new("build").join(format!("{name}.wasm")))
        .current_dir(dir)
        .status()
        .map_err(|e| {
            Problem::new(
                exit::CONFIG,
                format!("componentize-py could not be run: {e}"),
                install_hint(),
            )
        })?;
    if !status.success() || !wasm.is_file() {
        return Err(Problem::new(
            exit::BAD_INPUT,
            "the plugin did not build (componentize-py's messages are above)",
            "fix what componentize-py says (an import error names the module; `python -m unittest` runs the plugin's code on this machine first)",
        ));
    }
    Ok(wasm)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version the tests install (tests/e2e/requirements.txt) is the version projects pin.
    #[test]
    fn the_pinned_componentize_py_is_the_one_tests_install() {
        let requirements = include_str!("../../../tests/e2e/requirements.txt");
        assert!(
            requirements.contains(&format!("componentize-py=={COMPONENTIZE_PY}")),
            "tests/e2e/requirements.txt must pin componentize-py=={COMPONENTIZE_PY}"
        );
    }

    /// The component is named from pyproject.toml, never with a path or a name `new` refuses,
    /// and a pyproject.toml that does not read is said, not passed over.
    #[test]
    fn the_project_name_names_a_file_in_build_or_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |text: &str| std::fs::write(dir.path().join("pyproject.toml"), text).unwrap();
        write("[project]\nname = \"my-source\"\n");
        assert_eq!(project_name(dir.path()).unwrap(), "my_source");
        for hostile in ["../../escape", "My Source", "/abs", ""] {
            write(&format!("[project]\nname = {hostile:?}\n"));
            let refused = project_name(dir.path()).expect_err(hostile);
            assert!(
                refused
                    .message
                    .contains("cannot name the plugin's component"),
                "{}",
                refused.message
            );
        }
        write("[project\nname = ");
        let refused = project_name(dir.path()).expect_err("bad TOML");
        assert!(
            refused.message.contains("is not valid TOML"),
            "{}",
            refused.message
        );
    }

    /// A new project's helper and WIT are this tally's, and its app is named for it.
    #[test]
    fn a_new_project_carries_the_helper_and_the_current_wit() {
        let files = files("my-source", "the example".to_string());
        let get = |p: &str| {
            files
                .iter()
                .find(|(path, _)| path == Path::new(p))
                .map(|(_, text)| text.as_str())
                .unwrap_or_else(|| panic!("no {p}"))
        };
        assert!(get("app.py").contains("NAME = \"my-source\""));
        assert!(get("tally_plugin.py").contains(&format!(
            "API_VERSION = \"{}\"",
            tally_plugin_api::PLUGIN_API_VERSION
        )));
        assert!(get("wit/source.wit").contains(&format!(
            "package tally:plugin@{};",
            tally_plugin_api::PLUGIN_API_VERSION
        )));
        assert_eq!(get("example/dataset.yaml"), "the example");
        assert!(get("README.md").contains("componentize-py==0.25.1"));
        assert!(!get("README.md").contains("{name}"));
        assert!(get("tally_plugin.py").contains(&format!(
            "PLUGIN_FAULT = \"{}\"",
            tally_plugin_api::PLUGIN_FAULT
        )));
    }
}
