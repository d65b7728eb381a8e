//! Files a person can read, held on the workspace's sources: no Rust file is over 1,000 lines
//! (a file that grows past it is split along its phases, as `resolve/` and `provisions/` are),
//! and an error is a bare `String` only at an edge where the message is the product.

use std::path::{Path, PathBuf};

use crate::modules::{collect_rs, crates, workspace};

/// The most lines a Rust file of the workspace may have, its unit tests included.
const MOST_LINES: usize = 1_000;

/// Every `.rs` file of the workspace's crates (sources, tests, benches and build scripts).
fn rust_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for krate in crates(root) {
        for dir in ["src", "tests", "benches"] {
            collect_rs(&krate.join(dir), &mut files);
        }
        let build = krate.join("build.rs");
        if build.is_file() {
            files.push(build);
        }
    }
    files.sort();
    files.dedup();
    files
}

#[test]
fn no_rust_file_is_over_a_thousand_lines() {
    let root = workspace();
    let files = rust_files(&root);
    assert!(
        files.len() > 200,
        "the workspace's files were found: {}",
        files.len()
    );
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file)
                .expect("a source file")
                .lines()
                .count();
            (lines > MOST_LINES).then(|| {
                format!(
                    "{} ({lines} lines)",
                    file.strip_prefix(&root).unwrap_or(file).display()
                )
            })
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MOST_LINES} lines: split each along its phases (named phases with typed \
         intermediates, as `host/semantic/src/resolve/`), its unit tests in a `tests.rs` of its \
         own if they are what makes it long: {long:#?}"
    );
}

/// The files whose functions may fail with a bare `String`, and why the message is the
/// product there. Anywhere else a failure is a typed error a caller can match on and wrap.
const STRING_ERRORS_AT_EDGES: &[(&str, &str)] = &[
    // The plugin ABI: a plugin's error crosses the wasm or C boundary as text.
    (
        "plugin-api/src/",
        "a plugin's error crosses the ABI as text",
    ),
    (
        "plugins/",
        "a plugin answers its host with text through the ABI",
    ),
    ("examples/", "an example plugin answers through the ABI"),
    ("tests/plugins/", "a test plugin answers through the ABI"),
    (
        "host/plugin-host/src/wasm/",
        "the plugin's own WIT `result<_, string>`, and the runtime's start-up failure kept for every \
         later call in a OnceLock (wasmtime's error is not Clone)",
    ),
    (
        "host/plugin-host/src/wasm_backend.rs",
        "what a plugin answered that cannot be used, said with the plugin's name in its error",
    ),
    // Programs run by a person, who reads the message.
    (
        "host/server/src/",
        "the binary: the message is printed to the person who ran it",
    ),
    ("tools/", "a generator run by hand: its errors are printed"),
    (
        "host/cluster/src/bin/",
        "the scheduler's binary: printed to its operator",
    ),
    // Start-up and configuration: refused with a message to the operator, never matched on.
    (
        "host/cluster/src/address.rs",
        "an address flag refused with what was wrong",
    ),
    (
        "host/cluster/src/client.rs",
        "a scheduler that cannot be reached: said to the operator",
    ),
    (
        "host/cluster/src/exec.rs",
        "an executor that cannot be reached or run: said to the operator",
    ),
    (
        "host/mcp/src/serve.rs",
        "token, policy and settings files refused at start or reload",
    ),
    (
        "host/mcp/src/guard/",
        "tokens refused at start; a request past a bound answered 429 with the message",
    ),
    (
        "host/mcp/src/oauth/",
        "an issuer that cannot be read: the reason logged and given with the 503",
    ),
    (
        "host/mcp/src/policies.rs",
        "a policy file refused at start, saying where and what",
    ),
    (
        "host/mcp/src/audit.rs",
        "an audit log that cannot be opened: refused at start",
    ),
    ("host/mcp/src/otlp.rs", "an OTLP endpoint refused at start"),
    (
        "host/plugin-host/src/native_stderr.rs",
        "the plugins' output cannot be redirected: at start",
    ),
    (
        "host/engine/src/storage.rs",
        "a cache folder others may write, a page that cannot be read: the reasons `serve` and `check` print",
    ),
    (
        "host/engine/src/twin.rs",
        "a policy that cannot be applied to a dataset: refused at start or logged",
    ),
    (
        "host/storage/src/cache/directory.rs",
        "a cache folder others may write: refused at start",
    ),
    (
        "host/storage/src/catalog/register.rs",
        "a page that cannot be read: the reason `tally check` prints",
    ),
    // Answers to the client whose text is the whole of the error.
    (
        "host/mcp/src/prompts.rs",
        "a prompt's arguments refused: the invalid-params message the client shows",
    ),
    (
        "host/mcp/src/choose.rs",
        "a question not asked: the bound it met, said in the refusal",
    ),
    (
        "host/engine/src/schema.rs",
        "a tool schema that does not compile: one of the problems `validate` lists",
    ),
    (
        "host/storage/src/cluster/call.rs",
        "why a plan ran on this server: said in the envelope (where_plans_ran)",
    ),
    (
        "host/semantic/src/definition/url.rs",
        "an object URL refused: the definition's diagnostic",
    ),
    (
        "host/storage/src/store/layout.rs",
        "a column type refused: the text of the dataset's problem",
    ),
    // Callbacks whose signature is another crate's.
    (
        "host/storage/src/backend.rs",
        "the page callback of the Parquet reader (tally-plugin-parquet)",
    ),
    (
        "host/storage/src/parquet.rs",
        "the page callback of the Parquet reader (tally-plugin-parquet)",
    ),
    (
        "host/storage/src/parquet/load.rs",
        "the batch callback of the Parquet reader (tally-plugin-parquet)",
    ),
    // Messages for the log: nothing acts on them but a person reading it.
    (
        "host/plugin-host/src/code_cache.rs",
        "a compiled-plugin cache entry dropped: logged",
    ),
];
/// The error type of each `Result<T, E>` written on `line`: the text after the top-level
/// comma of its generic arguments.
fn error_types(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (start, _) in line.match_indices("Result<") {
        let (mut depth, mut comma) = (0usize, None);
        for (i, c) in line[start + "Result<".len()..].char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                ',' if depth == 0 => comma = Some(i),
                '>' | ')' | ']' if depth == 0 => {
                    if let Some(at) = comma {
                        let args = &line[start + "Result<".len()..];
                        out.push(args[at + 1..i].trim().to_string());
                    }
                    break;
                }
                '>' | ')' | ']' => depth -= 1,
                _ => {}
            }
        }
    }
    out
}

/// `Result<…, String>` in a production line (comments and `#[cfg(test)]` modules aside).
fn string_errors(text: &str) -> Vec<(usize, String)> {
    let production = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    production
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let code = line.split("//").next().unwrap_or_default();
            error_types(code)
                .iter()
                .any(|e| e == "String")
                .then(|| (i + 1, line.trim().to_string()))
        })
        .collect()
}

#[test]
fn an_error_is_a_bare_string_only_where_the_message_is_the_product() {
    let root = workspace();
    let mut found = Vec::new();
    let mut used = vec![false; STRING_ERRORS_AT_EDGES.len()];
    for file in rust_files(&root) {
        let relative = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace('\\', "/");
        if relative.contains("/tests/") || relative.ends_with("/tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        let hits = string_errors(&text);
        if hits.is_empty() {
            continue;
        }
        match STRING_ERRORS_AT_EDGES
            .iter()
            .position(|(edge, _)| relative.starts_with(edge))
        {
            Some(at) => used[at] = true,
            None => found.extend(
                hits.into_iter()
                    .map(|(line, code)| format!("{relative}:{line}: {code}")),
            ),
        }
    }
    assert!(
        found.is_empty(),
        "a failure the caller may act on is a typed error (a `thiserror` enum wrapping its \
         source with `#[from]`), not a `String`; if the message really is the product here, add \
         the file to STRING_ERRORS_AT_EDGES with the reason: {found:#?}"
    );
    let stale: Vec<&str> = STRING_ERRORS_AT_EDGES
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|((edge, _), _)| *edge)
        .collect();
    assert!(
        stale.is_empty(),
        "edges that no longer return a bare String: remove them from the list: {stale:?}"
    );
}

#[test]
fn the_reader_of_string_errors_sees_signatures_and_not_comments() {
    let text = "fn a() -> Result<(), String> {}\n// fn b() -> Result<u8, String>\nfn c() -> Result<Vec<String>, Error> {}\n#[cfg(test)]\nmod tests {\n    fn d() -> Result<(), String> { Ok(()) }\n}\n";
    let hits = string_errors(text);
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].0, 1);
    // A map of strings is no error type; a closure's and a nested result's are.
    assert!(string_errors("fn a() -> Result<BTreeMap<String, String>, ObjectError> {}").is_empty());
    assert_eq!(
        string_errors("let f = |x| -> Result<Option<u8>, String> { x };").len(),
        1
    );
    assert_eq!(
        string_errors("f: impl FnOnce() -> wasmtime::Result<Result<R, String>>,").len(),
        1
    );
}

/// `llms.txt` at the root (the ecosystem's convention for what a model reads first): it
/// names every tool, and each of its links leads to a file of the repository.
#[test]
fn llms_txt_names_every_tool_and_links_to_files_that_exist() {
    let root = workspace();
    let text = std::fs::read_to_string(root.join("llms.txt")).expect("llms.txt at the root");
    assert!(
        text.starts_with("# Tally\n"),
        "an H1 with the project's name first"
    );
    assert!(
        text.contains("\n> "),
        "a one-paragraph summary as a blockquote"
    );
    for tool in tally_semantic::request::TOOLS {
        assert!(
            text.contains(&format!("- `{}`: ", tool.name)),
            "llms.txt says what `{}` does",
            tool.name
        );
    }
    let mut links = 0;
    for rest in text.split("](").skip(1) {
        let target = rest.split(')').next().unwrap_or_default();
        assert!(
            !target.contains("://") && root.join(target).is_file(),
            "llms.txt links to {target}, which is not a file of the repository"
        );
        links += 1;
    }
    assert!(links >= 10, "the docs are linked: {links}");
}
