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
