//! Golden cases: each `tests/data/cases/NAME.json` (`{"tool", "arguments"}`) is run against
//! the fixture and its envelope (or error) compared with `NAME.expected.json` (the runner is
//! `golden.rs`); `UPDATE_EXPECT=1` rewrites the expectations.

use std::path::Path;

use serde_json::Value;
use tally_semantic::Tool;

use crate::fixture::{data_dir, engine};
use crate::golden::{as_if_prepared, run_case_on, run_golden};

pub fn run_case(tool: Tool, arguments: &Value) -> Value {
    run_case_on(engine(), tool, arguments)
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
            serving: tally_storage::dataset::Serving::Streaming,
            ..Default::default()
        },
    );
    let streamed = std::sync::atomic::AtomicUsize::new(0);
    let said = |text: String| -> String {
        as_if_prepared(&text, &|how| {
            assert!(
                how.contains("row group"),
                "the extract step says what was read: {how}"
            );
            streamed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
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

/// The output schema a client is shown is far smaller than the full one every envelope is
/// checked against (issue 37), and admits every golden envelope: it only leaves constraints
/// out.
#[test]
fn every_golden_envelope_fits_the_published_output_schema() {
    let dir = data_dir().join("cases");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("cases") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(case) = name.strip_suffix(".expected.json") else {
            continue;
        };
        let asked: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{case}.json"))).expect("case"),
        )
        .expect("case json");
        let answer: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("expected"))
                .expect("expected json");
        if answer.get("provenance").is_none() {
            continue; // a refusal
        }
        let tool = Tool::ALL
            .into_iter()
            .find(|t| Some(t.name()) == asked["tool"].as_str())
            .expect("tool");
        let schema = tally_engine::schema::published_output_schema(tool);
        let validator = jsonschema::validator_for(schema).expect("the published schema compiles");
        let problems: Vec<String> = validator
            .iter_errors(&answer)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(problems.is_empty(), "{case}: {problems:?}");
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} envelopes checked");
}

/// The examples of docs/semantics.md run: each JSON call marked `<!-- example: runs on panel -->`
/// is answered by the engine over the fixture datasets, each marked `refused on panel` is
/// refused, each YAML block marked `a definition` is read and each marked `a refused
/// definition` is refused.
#[test]
fn the_examples_of_the_semantics_run() {
    let doc = std::fs::read_to_string(data_dir().join("../../../../docs/semantics.md"))
        .expect("docs/semantics.md");
    let mut checked = 0;
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(kind) = line
            .trim()
            .strip_prefix("<!-- example: ")
            .and_then(|l| l.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let body = body.join("\n");
        match kind {
            "a definition" | "a refused definition" => {
                assert_eq!(fence, "```yaml", "{kind}: a YAML block");
                let read = tally_semantic::load_definition("dataset.yaml", "example", &body);
                assert_eq!(read.is_err(), kind.contains("refused"), "{kind}:\n{body}");
            }
            "runs on panel" | "refused on panel" => {
                assert_eq!(fence, "```json", "{kind}: a JSON block");
                let case: Value = serde_json::from_str(&body).expect("example JSON");
                let tool = Tool::ALL
                    .into_iter()
                    .find(|t| Some(t.name()) == case["tool"].as_str())
                    .expect("a tool");
                let out = run_case(tool, &case["arguments"]);
                let refused = out.get("error").is_some();
                assert_eq!(refused, kind.starts_with("refused"), "{body}\n{out:#}");
            }
            other => panic!("unknown example kind `{other}`"),
        }
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} examples found");
}
