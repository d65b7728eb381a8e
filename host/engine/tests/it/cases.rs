//! Golden cases: each `tests/data/cases/NAME.json` (`{"tool", "arguments"}`) is run against
//! the fixture and its envelope (or error) compared with `NAME.expected.json`. Volatile
//! values (generation time) are replaced; `UPDATE_EXPECT=1` rewrites the expectations.

use std::path::Path;

use serde_json::{Value, json};
use tally_semantic::Tool;

use crate::fixture::{block_on, data_dir, engine};

fn redact(mut v: Value) -> Value {
    if let Some(p) = v.get_mut("provenance") {
        p["generatedAt"] = json!("<generatedAt>");
    }
    v
}

pub fn run_case(tool: Tool, arguments: &Value) -> Value {
    run_case_on(engine(), tool, arguments)
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
fn run_golden(engine: &tally_engine::Engine, seen: &dyn Fn(String) -> String, update: bool) {
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

#[test]
fn golden_cases() {
    run_golden(engine(), &|t| t, true);
}

/// The same cases answered from the files at every call (the path that serves data over the
/// memory budget) give the same envelopes; only the extract step says which path answered.
#[test]
fn golden_cases_read_from_the_files_at_every_call() {
    let streaming = tally_engine::Engine::open_with(
        crate::fixture::datasets_dir(),
        tally_engine::Limits {
            serving: tally_engine::dataset::Serving::Streaming,
            ..Default::default()
        },
    );
    let streamed = std::sync::atomic::AtomicUsize::new(0);
    let said = |text: String| -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        let phrase = "(read from the files at this call";
        while let Some(at) = rest.find(phrase) {
            out.push_str(&rest[..at]);
            let after = &rest[at..];
            let end = after.find(')').map_or(after.len(), |e| e + 1);
            assert!(
                after[..end].contains("row group"),
                "the extract step says what was read: {}",
                &after[..end]
            );
            out.push_str("(prepared in memory)");
            streamed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            rest = &after[end..];
        }
        out.push_str(rest);
        out
    };
    run_golden(&streaming, &said, false);
    // Every answer on the fixture read it from its file.
    assert!(streamed.load(std::sync::atomic::Ordering::Relaxed) >= 30);
}

/// docs/semantics.md names, per section, the golden cases that pin its rules: every case it
/// names exists, and every case is named under some section.
#[test]
fn every_golden_case_is_filed_under_a_section_of_the_semantics() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/semantics.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/semantics.md");
    let dir = data_dir().join("cases");
    let cases: Vec<String> = std::fs::read_dir(&dir)
        .expect("cases dir")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".json") && !n.ends_with(".expected.json"))
        .map(|n| n.trim_end_matches(".json").to_string())
        .collect();
    // The names in "Golden cases:" paragraphs, with the section they are under.
    let mut named: Vec<(String, String)> = Vec::new();
    let mut section = String::new();
    let mut in_list = false;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            section = h.to_string();
            in_list = false;
            continue;
        }
        if line.starts_with("Golden cases:") {
            in_list = true;
        } else if line.trim().is_empty() {
            in_list = false;
        }
        if in_list {
            for name in line.split('`').skip(1).step_by(2) {
                named.push((section.clone(), name.to_string()));
            }
        }
    }
    let missing: Vec<String> = named
        .iter()
        .filter(|(_, n)| !cases.contains(n))
        .map(|(s, n)| format!("{n} (under \"{s}\")"))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/semantics.md names cases that do not exist: {missing:?}"
    );
    let unfiled: Vec<&String> = cases
        .iter()
        .filter(|c| !named.iter().any(|(_, n)| n == *c))
        .collect();
    assert!(
        unfiled.is_empty(),
        "golden cases not named under any section of docs/semantics.md: {unfiled:?}"
    );
}
