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
    match block_on(engine().call(tool, arguments)) {
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

#[test]
fn golden_cases() {
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
        let out = run_case(tool, &case["arguments"]);
        let mut text = serde_json::to_string_pretty(&out).expect("json");
        text.push('\n');
        let stem = path
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        check(
            &path.with_file_name(format!("{stem}.expected.json")),
            &text,
            &mut failures,
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn content_hash_is_the_sha256_of_the_served_file() {
    let out = run_case(
        Tool::QueryRecords,
        &json!({ "dataset_id": "fixture", "limit": 1 }),
    );
    let hash = out["provenance"]["sources"][0]["contentHash"]
        .as_str()
        .expect("hash")
        .to_string();
    let bytes =
        std::fs::read(crate::fixture::datasets_dir().join("fixture/data.parquet")).expect("file");
    assert_eq!(hash, tally_engine::backend::sha256_hex(&bytes));
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
