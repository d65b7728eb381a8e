//! Tool arguments → resolved plans (or refusals), against the fixture dataset. Each
//! `NAME.json` under `tests/data/requests` (`{"tool", "arguments"}`) has its expected outcome
//! in `NAME.expected.json`.

use serde_json::{Value, json};
use tally_semantic::definition::{DatasetDef, load_definition};
use tally_semantic::request::{Request, Tool, parse};
use tally_semantic::resolve::{resolve_dataset, resolve_query, resolve_summarize};

use crate::harness::{cases, check, data_dir, finish};

fn fixture() -> DatasetDef {
    let text = std::fs::read_to_string(data_dir("").join("fixture.dataset.yaml")).expect("fixture");
    load_definition("fixture/dataset.yaml", "fixture", &text)
        .expect("fixture definition is valid")
        .dataset
}

fn outcome(def: &DatasetDef, tool: Tool, arguments: &Value) -> Value {
    let titles = |id: &str| (id == "fixture").then(|| def.title.clone());
    let request = match parse(tool, arguments) {
        Ok(r) => r,
        Err(e) => return json!({ "error": e }),
    };
    let resolved = match request {
        Request::QueryRecords(args) => resolve_query(def, args).map(|p| p.to_json(def)),
        Request::SummarizeRecords(args) => resolve_summarize(def, args).map(|p| p.to_json(def)),
        Request::InspectDataset(args) => {
            resolve_dataset(&args.dataset_id, &["fixture", "procedures"], &titles)
                .map(|(id, res)| json!({ "dataset_id": id, "resolved_fields": res.into_iter().collect::<Vec<_>>() }))
        }
        other @ (Request::ListDatasets(_) | Request::VerifyAnswer(_) | Request::CiteProvisions(_)) => {
            Ok(serde_json::to_value(other).expect("serializable"))
        }
    };
    match resolved {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "error": e }),
    }
}

/// The dataset of periods, stocks, flows and rates (`definitions/statistics.yaml`).
fn statistics() -> DatasetDef {
    let text = std::fs::read_to_string(data_dir("definitions").join("statistics.yaml"))
        .expect("statistics definition");
    load_definition("statistics/dataset.yaml", "statistics", &text)
        .expect("statistics definition is valid")
        .dataset
}

#[test]
fn request_cases() {
    let fixture = fixture();
    let statistics = statistics();
    let mut failures = Vec::new();
    for path in cases(&data_dir("requests"), "json") {
        if path.to_string_lossy().ends_with(".expected.json") {
            continue;
        }
        let case: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("readable"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let tool = Tool::ALL
            .into_iter()
            .find(|t| Some(t.name()) == case["tool"].as_str())
            .unwrap_or_else(|| panic!("{}: unknown tool", path.display()));
        let def = if case["arguments"]["dataset_id"] == "statistics" {
            &statistics
        } else {
            &fixture
        };
        let out = outcome(def, tool, &case["arguments"]);

        // Every refusal says what was wrong; those about names list candidates.
        if let Some(err) = out.get("error") {
            assert!(
                err["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{}",
                path.display()
            );
            let code = err["code"].as_str().unwrap_or_default();
            if code.starts_with("unknown_") || code == "invalid_code" {
                assert!(
                    err["candidates"].as_array().is_some_and(|c| !c.is_empty()),
                    "{}: candidates",
                    path.display()
                );
            }
        }
        let mut text = serde_json::to_string_pretty(&out).expect("serializable");
        text.push('\n');
        let expected = path.with_file_name(format!(
            "{}.expected.json",
            path.file_stem().expect("stem").to_string_lossy()
        ));
        check(&expected, &text, &mut failures);
    }
    finish(failures);
}

/// A `locator: law` field: values are read as law references in any common form (a bare
/// string too: a provision is looked up, not searched), each rewrite is disclosed, and a
/// reference without an article is refused with an example.
#[test]
fn law_locator_values_are_normalised() {
    let text = "title: laws\nbackend: {kind: wasm, component: builtin:law}\nfields:\n- {name: law_title, role: dim}\n- {name: locator, role: attr, locator: law}\n";
    let def = load_definition("laws/dataset.yaml", "laws", text)
        .expect("valid")
        .dataset;
    let plan = |where_: Value| {
        outcome(
            &def,
            Tool::QueryRecords,
            &json!({ "dataset_id": "laws", "where": where_ }),
        )
    };
    let out = plan(json!({ "locator": "第５条の２第３項" }));
    assert_eq!(
        out["ok"]["where"],
        json!(["locator is 第五条の二第三項 or inside it"]),
        "{out:#}"
    );
    assert_eq!(
        out["ok"]["resolved_fields"],
        json!([{ "parameter": "where.locator value", "input": "第５条の２第３項", "canonical": "第五条の二第三項" }])
    );
    let out = plan(json!({ "locator": ["第20条第1項及び第3項", "第5の2条"] }));
    let described = out["ok"]["where"][0]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for provision in ["第二十条第一項", "第二十条第三項", "第五条の二"] {
        assert!(described.contains(provision), "{out:#}");
    }
    let out = plan(json!({ "locator": "第五条" }));
    assert_eq!(out["ok"]["resolved_fields"], json!([]), "already canonical");
    let out = plan(json!({ "locator": "第2項" }));
    assert!(
        out["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("names no article")),
        "{out:#}"
    );
    assert!(out["error"]["example"].is_object());

    let bad =
        "title: laws\nfields:\n- {name: n, role: measure, data_type: integer, locator: law}\n";
    let err = load_definition("laws/dataset.yaml", "laws", bad).expect_err("refused");
    assert!(
        err.errors().any(|d| d
            .message
            .contains("`locator` must be `law` on a single-valued text field")),
        "{err:?}"
    );
}

/// The tool table lists every tool once, in the order of `Tool::ALL`, with each part a tool
/// needs said; and each tool's example is a call its own parser and the fixture accept.
#[test]
fn the_tool_table_lists_every_tool_with_an_example_that_resolves() {
    use tally_semantic::request::{ExampleNames, TOOLS};
    let def = fixture();
    assert_eq!(TOOLS.len(), Tool::ALL.len());
    let mut names = std::collections::HashSet::new();
    let mut commands = std::collections::HashSet::new();
    for (info, tool) in TOOLS.iter().zip(Tool::ALL) {
        assert_eq!(info.tool, tool, "TOOLS is in the order of Tool::ALL");
        assert_eq!(tool.info(), info);
        assert!(
            names.insert(info.name) && commands.insert(info.command),
            "{info:?}"
        );
        assert!(!info.title.is_empty() && info.view.is_none_or(|v| !v.is_empty()));
        assert_eq!(info.verifiable, tool != Tool::VerifyAnswer, "{info:?}");
        let names = ExampleNames {
            dataset: "fixture",
            field: "所管府省庁",
            metric: "avg:オンライン率",
            linked: None,
        };
        let Some(example) = tool.example(&names) else {
            assert_eq!(
                tool,
                Tool::VerifyAnswer,
                "only verify_answer has no example"
            );
            continue;
        };
        let request = parse(tool, &example).unwrap_or_else(|e| panic!("{}: {e:?}", info.name));
        let resolved = match request {
            Request::QueryRecords(args) => resolve_query(&def, args).map(|_| ()),
            Request::SummarizeRecords(args) => resolve_summarize(&def, args).map(|_| ()),
            _ => Ok(()),
        };
        assert!(resolved.is_ok(), "{}: {example} → {resolved:?}", info.name);
    }
}
