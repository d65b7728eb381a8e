//! The golden runner: each `tests/data/cases/NAME.json` (`{"tool", "arguments"}`) run on an
//! engine and its envelope (or error) compared with `NAME.expected.json`. Volatile values
//! (generation time) are replaced. The engine's own tests run it on one process; the cluster
//! tests (`host/cluster`) include this file to run the same cases through a cluster.

use std::path::Path;

use serde_json::{Value, json};
use tally_semantic::Tool;

use crate::fixture::{block_on, data_dir};

fn redact(mut v: Value) -> Value {
    if let Some(p) = v.get_mut("provenance") {
        p["generatedAt"] = json!("<generatedAt>");
    }
    v
}

pub fn run_case_on(engine: &tally_engine::Engine, tool: Tool, arguments: &Value) -> Value {
    match block_on(engine.call(tool, arguments)) {
        Ok(envelope) => {
            // Engine::call validates already; checking again here keeps this suite honest
            // if that ever changes.
            if let Err(problems) = tally_engine::schema::validate(tool, &envelope) {
                panic!("{} envelope fails its schema: {problems:?}", tool.name());
            }
            redact(envelope)
        }
        Err(e) => e.to_json(),
    }
}

fn check(expected_file: &Path, actual: &str, failures: &mut Vec<String>) {
    let expected = std::fs::read_to_string(expected_file).unwrap_or_default();
    if expected == actual {
        return;
    }
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(expected_file, actual).expect("expectation written");
        return;
    }
    failures.push(format!(
        "{} differs (run with UPDATE_EXPECT=1 to accept, then review the diff):\n--- expected\n{expected}\n--- actual\n{actual}",
        expected_file.display()
    ));
}

/// Runs every golden case on `engine`, the answer's text passed through `seen` before it is
/// compared with its expectation.
pub fn run_golden(engine: &tally_engine::Engine, seen: &dyn Fn(String) -> String, update: bool) {
    let dir = data_dir().join("cases");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("cases dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p.to_string_lossy().ends_with(".expected.json")
        })
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no cases in {}", dir.display());
    let mut failures = Vec::new();
    for path in paths {
        let case: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("readable"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let tool = Tool::ALL
            .into_iter()
            .find(|t| Some(t.name()) == case["tool"].as_str())
            .unwrap_or_else(|| panic!("{}: unknown tool", path.display()));
        let out = run_case_on(engine, tool, &case["arguments"]);
        let mut text = serde_json::to_string_pretty(&out).expect("json");
        text.push('\n');
        let text = seen(text);
        let stem = path
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        let expected = path.with_file_name(format!("{stem}.expected.json"));
        if update {
            check(&expected, &text, &mut failures);
        } else {
            let want = std::fs::read_to_string(&expected).unwrap_or_default();
            if want != text {
                failures.push(format!(
                    "{} differs:\n--- expected\n{want}\n--- actual\n{text}",
                    expected.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `text` with every "(read from the files at this call…)" of an extract step replaced by
/// "(prepared in memory)", what the golden files say, each replaced part shown to `seen`
/// first: answers read from the files (on this server or a cluster) compare with the same
/// expectations, and the caller checks what the extract step said instead.
pub fn as_if_prepared(text: &str, seen: &dyn Fn(&str)) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let phrase = "(read from the files at this call";
    while let Some(at) = rest.find(phrase) {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let end = after.find(')').map_or(after.len(), |e| e + 1);
        seen(&after[..end]);
        out.push_str("(prepared in memory)");
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}
