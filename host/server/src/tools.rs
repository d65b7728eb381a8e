//! The four tools as MCP clients see them: names, descriptions that teach the flow, input
//! schemas, and the output schemas the engine validates every result against.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool as McpTool, ToolAnnotations};
use serde_json::{Value, json};
use tally_engine::schema::output_schema;
use tally_semantic::Tool;

/// What the server tells a model before it calls anything.
pub const INSTRUCTIONS: &str = "Tally answers questions over datasets by computing every number itself. \
Do not count, sum or average rows yourself and do not guess what codes mean: pick conditions and let Tally compute. \
Flow: list_datasets → inspect_dataset (exact field names, roles, codes and notes; names are in the dataset's language) → \
summarize_records for counts, sums, averages and ratios, or query_records for individual records. \
Every result carries its provenance (source, retrieval date, content hash, what was done) and caveats in provenance.warnings: \
pass those caveats on when you answer.";

fn names_or_string(description: &str) -> Value {
    json!({
        "description": description,
        "anyOf": [
            { "type": "array", "items": { "type": "string" } },
            { "type": "string", "description": "one name, or a JSON array as a string" }
        ]
    })
}

fn conditions(description: &str) -> Value {
    json!({
        "description": description,
        "anyOf": [
            { "type": "object", "additionalProperties": true },
            { "type": "string", "description": "the same object as a JSON string" }
        ]
    })
}

fn limit(min: usize, max: usize, default: usize) -> Value {
    json!({
        "description": format!("Rows to return, {min}–{max} (default {default}); out-of-range values are clamped and the clamp is reported."),
        "anyOf": [
            { "type": "integer" },
            { "type": "string", "description": "a number as text" }
        ]
    })
}

const WHERE: &str = "Conditions, ANDed. {\"field\": [\"a\", \"b\"]} = exact match of any listed value (on multi-value fields: any part); \
{\"field\": \"text\"} = case-insensitive substring; {\"field\": 10} = equality; operators: $eq $in $ne $contains $not_contains \
$gt $gte $lt $lte $not_empty, e.g. {\"総手続件数\": {\"$gte\": 100}}. Codes of static codelists are checked (\"実施済\" is read as \"1 実施済\"). \
On a law locator field (inspect_dataset shows `locator: law`), a value names a provision in any common form \
(\"第5条第1項\", \"第５条の２\", \"第5の2条\", \"附則第3条\", lists such as \"第20条第1項及び第3項\") and matches it and everything inside it.";

fn input_schema(tool: Tool) -> Value {
    let dataset_id = json!({ "type": "string", "description": "A dataset_id from list_datasets." });
    match tool {
        Tool::ListDatasets => json!({
            "type": "object",
            "properties": {
                "q": { "type": "string", "description": "Case-insensitive substring of the dataset id or title." },
                "publisher": { "type": "string", "description": "Case-insensitive substring of the publisher." }
            }
        }),
        Tool::InspectDataset => json!({
            "type": "object",
            "properties": { "dataset_id": dataset_id },
            "required": ["dataset_id"]
        }),
        Tool::QueryRecords => json!({
            "type": "object",
            "properties": {
                "dataset_id": dataset_id,
                "q": { "type": "string", "description": "Case-insensitive substring searched in every text field (or in search_fields)." },
                "search_fields": names_or_string("Fields q searches (default: all text fields)."),
                "select": names_or_string("Fields to return, in order (default: all; then columns empty on the whole page are left out and listed)."),
                "where": conditions(WHERE),
                "order_by": names_or_string("\"F\" ascending or \"-F\" descending; nulls last; ties in file order."),
                "limit": limit(1, 5000, 50),
                "cursor": { "type": "string", "description": "next_cursor from the previous page, with the same other arguments." }
            },
            "required": ["dataset_id"]
        }),
        Tool::SummarizeRecords => json!({
            "type": "object",
            "properties": {
                "dataset_id": dataset_id,
                "metrics": names_or_string("\"count\", \"sum:F\", \"avg:F\", \"min:F\", \"max:F\" (F a measure) or \"avg:<computed measure>\"; default [\"count\"]."),
                "group_by": names_or_string("Groupable fields; default: one row for all matching records. Multi-value fields are split into their parts."),
                "where": conditions(WHERE),
                "having": conditions("Conditions on result columns, e.g. {\"count\": {\"$gte\": 10}}; a bare number means equality."),
                "explode": names_or_string("Multi-value fields to split into one group per part (implied when grouping by one)."),
                "limit": limit(1, 10_000, 200)
            },
            "required": ["dataset_id"]
        }),
    }
}

fn description(tool: Tool) -> &'static str {
    match tool {
        Tool::ListDatasets => {
            "Step 1: list the datasets this server computes over (id, title, publisher, record count, dates), \
and any dataset folders that cannot be served with the reason. Then call inspect_dataset on the one you need. \
Example: {\"q\": \"手続\"}"
        }
        Tool::InspectDataset => {
            "Step 2: describe one dataset before querying it: every field's exact name (in the dataset's language), \
role (id, dim, measure, attr), meaning, codes with descriptions, fill rate, numeric statistics, caveats (what null means), \
and computed measures with their formulas. Use these exact names in the other tools. \
Example: {\"dataset_id\": \"procedures\"}"
        }
        Tool::QueryRecords => {
            "Step 3a: fetch individual records matching conditions, a page at a time, in a stable order \
(file order unless order_by); total counts all matches and next_cursor fetches the next page. Use summarize_records instead \
for any count, sum, average or share. \
Rows read by a plugin (law articles, document sections) cite their own source in rowSourceRefs, with a locator. \
From a number to the law behind it: a procedure's 法令名 and 根拠条項号 (e.g. \"第5条第1項\", however written) look up \
its legal text in a law dataset: {\"dataset_id\": \"<law dataset>\", \"where\": {\"law_title\": [\"行政手続法\"], \"locator\": \"第5条第1項\"}}. \
Example: {\"dataset_id\": \"procedures\", \"where\": {\"所管府省庁\": [\"デジタル庁\"]}, \"select\": [\"手続名\", \"オンライン化の実施状況\"], \"limit\": 10}"
        }
        Tool::SummarizeRecords => {
            "Step 3b: compute counts, sums, averages, extremes and computed measures (ratios) per group, on the server. \
Sums skip nulls and report how many were skipped (F:null_excluded); averages are rounded to 2 decimals, ratios to 4. \
Rows come ordered by the first metric, descending. \
Example: {\"dataset_id\": \"procedures\", \"group_by\": [\"所管府省庁\"], \"metrics\": [\"count\", \"avg:オンライン率\"], \"limit\": 10}"
        }
    }
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// The MCP description of a tool.
pub fn mcp_tool(tool: Tool) -> McpTool {
    McpTool::new(
        tool.name(),
        description(tool),
        Arc::new(object(input_schema(tool))),
    )
    .with_raw_output_schema(Arc::new(object(output_schema(tool).clone())))
    .with_annotations(
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

pub fn all() -> Vec<McpTool> {
    Tool::ALL.into_iter().map(mcp_tool).collect()
}

pub fn by_name(name: &str) -> Option<Tool> {
    Tool::ALL.into_iter().find(|t| t.name() == name)
}

pub fn all_names() -> Vec<&'static str> {
    Tool::ALL.iter().map(|t| t.name()).collect()
}
