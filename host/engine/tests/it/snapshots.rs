//! insta snapshots of one envelope per tool: every change to the wire shape is a reviewed diff
//! (`cargo insta review`, or INSTA_UPDATE=always then `git diff`).

use serde_json::json;
use tally_semantic::Tool;

use crate::cases::run_case;

fn snapshot(name: &str, tool: Tool, arguments: serde_json::Value) {
    let envelope = run_case(tool, &arguments);
    insta::assert_json_snapshot!(name, envelope, { ".provenance.generatedAt" => "[generatedAt]" });
}

#[test]
fn envelope_of_each_tool() {
    snapshot("list_datasets", Tool::ListDatasets, json!({}));
    snapshot(
        "inspect_dataset",
        Tool::InspectDataset,
        json!({ "dataset_id": "fixture" }),
    );
    snapshot(
        "query_records",
        Tool::QueryRecords,
        json!({ "dataset_id": "fixture", "where": { "手続類型": ["申請等"] }, "order_by": ["-総手続件数"], "limit": 3 }),
    );
    snapshot(
        "summarize_records",
        Tool::SummarizeRecords,
        json!({ "dataset_id": "fixture", "group_by": ["所管府省庁"], "metrics": ["count", "sum:総手続件数", "avg:オンライン率"], "having": { "count": { "$gte": 2 } } }),
    );
}
