//! The plugin API crate this `tally` was built with, embedded: `tally plugin new` unpacks it
//! into a new project (`vendor/tally-plugin-api/`), so the project builds wherever it is
//! copied, offline, without a Tally checkout, against exactly the API this server speaks.
//!
//! What is embedded is what the crate's package holds (its `include` list: the sources, the
//! WIT of every API version, the readme and the manifest), about 70 KB. The manifest inherits
//! keys from Tally's workspace; [`standalone_manifest`] writes them out literally, as
//! `cargo package` would, from the workspace manifest embedded beside it.

/// The files of the plugin API crate, by path inside it. A file added to the crate is added
/// here too (a test compares this list with the crate's folder).
pub const FILES: &[(&str, &str)] = &[
    ("README.md", include_str!("../../../plugin-api/README.md")),
    ("src/lib.rs", include_str!("../../../plugin-api/src/lib.rs")),
    (
        "src/guest.rs",
        include_str!("../../../plugin-api/src/guest.rs"),
    ),
    (
        "src/locator.rs",
        include_str!("../../../plugin-api/src/locator.rs"),
    ),
    (
        "src/native.rs",
        include_str!("../../../plugin-api/src/native.rs"),
    ),
    (
        "src/provenance.rs",
        include_str!("../../../plugin-api/src/provenance.rs"),
    ),
    (
        "wit/since_v0.1.0/source.wit",
        include_str!("../../../plugin-api/wit/since_v0.1.0/source.wit"),
    ),
];

/// The crate's manifest, as written in the workspace (keys inherited from it).
const MANIFEST: &str = include_str!("../../../plugin-api/Cargo.toml");
/// The workspace manifest the inherited keys come from.
const WORKSPACE: &str = include_str!("../../../Cargo.toml");

/// Every file of the crate, the manifest standalone, by path inside it.
pub fn files() -> Result<Vec<(&'static str, String)>, String> {
    let manifest = format!(
        "# The plugin API crate tally {} was built with, unpacked by `tally plugin new`; the keys\n# it inherits in Tally's workspace are written out.\n{}",
        env!("CARGO_PKG_VERSION"),
        standalone_manifest(MANIFEST, WORKSPACE)?
    );
    let mut out = vec![("Cargo.toml", manifest)];
    out.extend(
        FILES
            .iter()
            .map(|(path, text)| (*path, (*text).to_string())),
    );
    Ok(out)
}

/// `member` (a workspace member's manifest) with every key it inherits from `workspace`
/// written out: `key.workspace = true` under `[package]`, a dependency's `workspace = true`
/// (its other keys, such as `optional`, kept), and the `[lints]` table dropped (the
/// workspace's lints are this repository's policy, not the crate's). `Err` names what it
/// could not write out.
pub fn standalone_manifest(member: &str, workspace: &str) -> Result<String, String> {
    let package = table(workspace, "workspace.package");
    let dependencies = table(workspace, "workspace.dependencies");
    let mut out = String::new();
    let mut section = String::new();
    for line in member.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            section = name.trim().to_string();
            if section == "lints" {
                continue;
            }
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if section == "lints" {
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let written = if let Some(name) = key.strip_suffix(".workspace") {
            if value != "true" {
                return Err(format!("`{key} = {value}` in [{section}]"));
            }
            let from = if section == "package" {
                &package
            } else {
                &dependencies
            };
            let inherited = lookup(from, name)
                .ok_or_else(|| format!("`{name}` is not in the workspace's keys"))?;
            format!("{name} = {inherited}")
        } else if value.starts_with('{') && value.contains("workspace = true") {
            let inherited = lookup(&dependencies, key)
                .ok_or_else(|| format!("`{key}` is not a workspace dependency"))?;
            let inner = value.trim_start_matches('{').trim_end_matches('}');
            let own: Vec<&str> = split_top(inner)
                .into_iter()
                .filter(|k| !k.is_empty() && *k != "workspace = true")
                .collect();
            format!("{key} = {}", merged(&inherited, &own)?)
        } else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        out.push_str(&written);
        out.push('\n');
    }
    if out.contains("workspace") {
        return Err("a key still refers to the workspace".into());
    }
    Ok(out)
}

/// The `key = value` entries of a table of a TOML document, each value on one line (a value
/// that spans lines, such as an array of features, joined).
fn table(document: &str, name: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut inside = false;
    let mut open: Option<(String, String)> = None;
    for line in document.lines() {
        let line = line.split(" #").next().unwrap_or_default().trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some((key, value)) = &mut open {
            value.push(' ');
            value.push_str(line);
            if balanced(value) {
                out.push((key.clone(), value.clone()));
                open = None;
            }
            continue;
        }
        if line.starts_with('[') && !line.contains('=') {
            inside = line == format!("[{name}]");
            continue;
        }
        if !inside {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let (key, value) = (key.trim().to_string(), value.trim().to_string());
            if balanced(&value) {
                out.push((key, value));
            } else {
                open = Some((key, value));
            }
        }
    }
    out
}

/// The comma-separated parts of an inline table's inside, commas inside arrays and strings
/// left alone.
fn split_top(inner: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '[' | '{' if !quoted => depth += 1,
            ']' | '}' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                parts.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(inner[start..].trim());
    parts
}

fn balanced(value: &str) -> bool {
    let count = |c: char| value.chars().filter(|x| *x == c).count();
    count('[') == count(']') && count('{') == count('}')
}

fn lookup(entries: &[(String, String)], key: &str) -> Option<String> {
    entries
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.replace("[ ", "[").replace(", ]", "]"))
}

/// A workspace dependency's spec (`"1"` or `{ … }`) with the member's own keys added.
fn merged(inherited: &str, own: &[&str]) -> Result<String, String> {
    let mut keys: Vec<String> = if inherited.starts_with('"') {
        vec![format!("version = {inherited}")]
    } else {
        vec![
            inherited
                .trim()
                .trim_start_matches('{')
                .trim_end_matches('}')
                .trim()
                .to_string(),
        ]
    };
    for k in own {
        let name = k.split('=').next().unwrap_or_default().trim();
        if keys
            .iter()
            .any(|existing| existing.contains(&format!("{name} =")))
        {
            return Err(format!(
                "`{name}` is set both by the workspace and the crate"
            ));
        }
        keys.push((*k).to_string());
    }
    Ok(format!("{{ {} }}", keys.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded files are every file of the crate's package.
    #[test]
    fn every_file_of_the_crate_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin-api");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("plugin-api") {
                let path = entry.expect("entry").path();
                // `python/` holds the Python guest helper, which `tally plugin new --lang
                // python` embeds on its own: it is not part of the Rust crate's package.
                if path.is_dir() && path != root.join("python") {
                    stack.push(path);
                } else if path.is_file() {
                    let relative = path.strip_prefix(&root).expect("inside");
                    let relative = relative.to_string_lossy().replace('\\', "/");
                    if relative != "Cargo.toml" {
                        on_disk.push(relative);
                    }
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
    }

    #[test]
    fn the_manifest_is_written_out_without_the_workspace() {
        let manifest = standalone_manifest(MANIFEST, WORKSPACE).expect("standalone");
        assert!(!manifest.contains("workspace"), "{manifest}");
        assert!(manifest.contains("version = \"0.1.0\"\n"), "{manifest}");
        assert!(manifest.contains("edition = \"2024\"\n"), "{manifest}");
        assert!(
            manifest.contains("wit-bindgen = { version = \"0.63\", optional = true }\n"),
            "{manifest}"
        );
        assert!(
            manifest.contains(
                "arrow-ipc = { version = \"59.3\", default-features = false, optional = true }\n"
            ),
            "{manifest}"
        );
        assert!(
            manifest.contains("datafusion = { version = \"55.2\""),
            "{manifest}"
        );
        assert!(!manifest.contains("[lints]"), "{manifest}");
    }

    #[test]
    fn a_key_set_twice_is_refused() {
        let workspace = "[workspace.dependencies]\nx = { version = \"1\", features = [\"a\"] }\n";
        let member = "[dependencies]\nx = { workspace = true, features = [\"b\", \"c\"] }\n";
        assert!(standalone_manifest(member, workspace).is_err());
        let member = "[dependencies]\nx = { workspace = true, optional = true }\n";
        assert_eq!(
            standalone_manifest(member, workspace).as_deref(),
            Ok("[dependencies]\nx = { version = \"1\", features = [\"a\"], optional = true }\n")
        );
    }
}
