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
        other @ Request::ListDatasets(_) => Ok(serde_json::to_value(other).expect("serializable")),
    };
    match resolved {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "error": e }),
    }
}

#[test]
fn request_cases() {
    let def = fixture();
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
        let out = outcome(&def, tool, &case["arguments"]);

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
