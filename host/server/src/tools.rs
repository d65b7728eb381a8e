//! The tools as MCP clients see them: names, descriptions that teach the flow (with
//! examples taken from the datasets served), input schemas, and the output schemas the
//! engine validates every result against.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool as McpTool, ToolAnnotations};
use serde_json::{Value, json};
use tally_engine::schema::output_schema;
use tally_semantic::Tool;
use tally_semantic::request::Shape;

/// What the server tells a model before it calls anything.
pub const INSTRUCTIONS: &str = "Tally answers questions over datasets by computing every number itself. \
Do not count, sum or average rows yourself and do not guess what codes mean: pick conditions and let Tally compute. \
Flow: list_datasets → inspect_dataset (exact field names, roles, codes and notes; names are in the dataset's language) → \
summarize_records for counts, sums, averages and ratios, or query_records for individual records. \
Every result carries its provenance (source, retrieval date, content hash, what was done), the caveats of the fields it used \
in data.notes (what null means, approximations) and what was read or cut in provenance.warnings: pass those on when you answer.";

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

fn count(description: &str) -> Value {
    json!({
        "description": description,
        "anyOf": [
            { "type": "integer" },
            { "type": "string", "description": "a number as text" }
        ]
    })
}

/// Names taken from the datasets actually served, for the examples in the tools'
/// descriptions: a model learns the flow from names it can use, and is never shown a demo
/// dataset this server does not have.
#[derive(Debug, Clone)]
pub struct Examples {
    dataset: String,
    group: String,
    metric: String,
    measure: Option<String>,
    /// A dataset with a law-provision field, and that field.
    law: Option<(String, String)>,
}

impl Examples {
    /// Placeholders only (`<dataset_id>`, `<field>`): for what no caller reads, such as the
    /// input schema the HTTP transport checks headers against.
    pub fn placeholders() -> Examples {
        Examples {
            dataset: "<dataset_id>".into(),
            group: "<field>".into(),
            metric: "count".into(),
            measure: None,
            law: None,
        }
    }

    /// Examples from what the caller may see (placeholders when it sees nothing): a tool
    /// description never names a dataset or field outside the caller's scope.
    pub fn from_view(view: &crate::view::View) -> Examples {
        use tally_semantic::definition::{LocatorKind, Role};
        let pick = view
            .datasets()
            .find(|d| {
                d.def
                    .fields
                    .iter()
                    .any(|f| f.groupable && f.role == Role::Dim)
            })
            .or_else(|| view.datasets().next());
        let mut ex = Examples::placeholders();
        if let Some(ds) = pick {
            let def = &ds.def;
            ex.dataset = def.id.clone();
            if let Some(f) = def
                .fields
                .iter()
                .find(|f| f.groupable && f.role == Role::Dim)
                .or_else(|| def.fields.iter().find(|f| f.groupable))
            {
                ex.group = f.name.clone();
            }
            ex.measure = def
                .fields
                .iter()
                .find(|f| f.role == Role::Measure)
                .map(|f| f.name.clone());
            ex.metric = match (def.computed_measures.first(), &ex.measure) {
                (Some(m), _) => format!("avg:{}", m.name),
                (None, Some(f)) => format!("sum:{f}"),
                (None, None) => "count".into(),
            };
        }
        ex.law = view.datasets().find_map(|d| {
            d.def
                .fields
                .iter()
                .find(|f| f.locator == Some(LocatorKind::Law))
                .map(|f| (d.def.id.clone(), f.name.clone()))
        });
        ex
    }

    fn measure(&self) -> &str {
        self.measure.as_deref().unwrap_or("<measure>")
    }
}

fn where_text(ex: &Examples) -> String {
    let mut text = format!(
        "Conditions, ANDed. {{\"field\": [\"a\", \"b\"]}} = exact match of any listed value (on multi-value fields: any part); \
{{\"field\": \"text\"}} = substring, ignoring case and full/half width (on a field with declared codes, a code's label means that code); \
{{\"field\": 10}} = equality; operators: $eq $in $ne $contains $not_contains $gt $gte $lt $lte $not_empty, e.g. {{\"{}\": {{\"$gte\": 100}}}}. \
Codes are checked against the field's codelist (a label without its number is read as the code); numbers may be sent as text.",
        ex.measure()
    );
    if ex.law.is_some() {
        text.push_str(
            " On a law locator field (inspect_dataset shows `locator: law`), a value names a provision in any common form \
(\"第5条第1項\", \"第５条の２\", \"第5の2条\", \"附則第3条\") and matches it and everything inside it.",
        );
    }
    text
}

/// What a parameter means, for the input schema ("" when the table has a parameter this
/// has no words for: a test refuses that).
fn parameter_description(tool: Tool, name: &str, ex: &Examples) -> String {
    match (tool, name) {
        (_, "dataset_id") => "A dataset_id from list_datasets.".into(),
        (Tool::CiteProvisions, "group_by") => "Fields of the dataset to count the records per provision by (e.g. the ministry); default: all records together.".into(),
        (Tool::CiteProvisions, "link") => "The linked dataset to cite from (a `to` of the dataset's links); default: its only link.".into(),
        (Tool::CiteProvisions, "as_of") => "Cite the provisions as they stood on this date (YYYY-MM-DD): each law in the revision in force then. Default: the latest revision.".into(),
        (Tool::QueryRecords | Tool::SummarizeRecords, "as_of") => "Only for datasets with revisions (law texts; inspect_dataset shows `revisions`): read each in the revision in force on this date (YYYY-MM-DD). Default: the latest revision.".into(),
        (_, "provenance_format") => "\"json\" (default): provenance as Tally's JSON; \"prov\": also as W3C PROV-O in JSON-LD, in `prov` beside `provenance` (for tools that read PROV).".into(),
        (Tool::VerifyAnswer, "envelope") => "The whole answer to check: an object with data and provenance, exactly as a tool returned it (or its JSON text).".into(),
        (Tool::ListDatasets, "q") => "Case-insensitive substring of the dataset id or title.".into(),
        (Tool::ListDatasets, "publisher") => "Case-insensitive substring of the publisher.".into(),
        (Tool::InspectDataset, "detail") => "\"compact\" (default): what writing a call needs; \"full\": every code's description, more top values, quality words.".into(),
        (Tool::QueryRecords, "q") => "Substring searched in every text field (or in search_fields), ignoring case and full/half width.".into(),
        (Tool::QueryRecords, "search_fields") => "Fields q searches (default: all text fields).".into(),
        (Tool::QueryRecords, "select") => "Fields to return, in order (default: the id, names, dimensions and the fields the call uses; the others are listed in omitted_columns).".into(),
        (_, "where") => where_text(ex),
        (Tool::QueryRecords, "order_by") => "\"F\" ascending or \"-F\" descending; nulls last; ties in file order.".into(),
        (_, "limit") => match tool.parameter("limit").map(|p| p.shape) {
            Some(Shape::Count { min, max, default }) => format!(
                "Rows to return, {min}–{max} (default {default}); out-of-range values are clamped and the clamp is reported."
            ),
            _ => String::new(),
        },
        (Tool::QueryRecords, "cursor") => "next_cursor from the previous page, with the same other arguments.".into(),
        (Tool::SummarizeRecords, "metrics") => "\"count\", \"sum:F\", \"avg:F\", \"min:F\", \"max:F\" (F a measure) or \"avg:<computed measure>\"; default [\"count\"].".into(),
        (Tool::SummarizeRecords, "group_by") => "Groupable fields; default: one row for all matching records. Multi-value fields are split into their parts. A missing value is the key null.".into(),
        (Tool::SummarizeRecords, "having") => "Conditions on result columns, e.g. {\"count\": {\"$gte\": 10}}; a bare number means equality; a metric's field alone names it when only one metric has it.".into(),
        (Tool::SummarizeRecords, "explode") => "Multi-value fields to split into one group per part (implied when grouping by one); records without a part are counted in records_without_value.".into(),
        (Tool::SummarizeRecords, "order_by") => "Result columns to order by, \"-\" first for descending: a metric (\"count\", \"avg:F\", or F alone when one metric has it) or a group key. Default: the first metric descending; ties by group key.".into(),
        _ => String::new(),
    }
}

/// A tool's input schema, generated from the parameter table the parser reads
/// ([`Tool::spec`]): names, shapes, bounds, choices and what is required cannot drift from
/// what the parser accepts.
fn input_schema(tool: Tool, ex: &Examples) -> Value {
    let mut properties = serde_json::Map::new();
    for p in tool.spec() {
        let description = parameter_description(tool, p.name, ex);
        let schema = match p.shape {
            Shape::Text => json!({ "type": "string", "description": description }),
            Shape::Choice(words) => {
                json!({ "type": "string", "enum": words, "description": description })
            }
            Shape::Names => names_or_string(&description),
            Shape::Conditions => conditions(&description),
            Shape::Count { .. } => count(&description),
            Shape::Answer => json!({
                "description": description,
                "anyOf": [
                    { "type": "object", "required": ["data", "provenance"], "additionalProperties": true },
                    { "type": "string", "description": "the same answer as JSON text" }
                ]
            }),
        };
        properties.insert(p.name.to_string(), schema);
    }
    if tool == Tool::SummarizeRecords {
        properties.insert(
            CHART.to_string(),
            json!({
                "type": "string",
                "enum": CHART_FORMATS,
                "description": "Only for clients that show images but no MCP Apps view: adds the chart of the result \
(the one the view would draw) as an image block after the JSON. Omit it otherwise; the result is the same either way.",
            }),
        );
    }
    let mut schema = json!({ "type": "object", "properties": properties });
    let required: Vec<&str> = tool
        .spec()
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name)
        .collect();
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

fn description(tool: Tool, ex: &Examples) -> String {
    match tool {
        Tool::ListDatasets => "Step 1: list the datasets this server computes over (id, title, publisher, record count, dates), \
and any dataset folders that cannot be served with the reason. Then call inspect_dataset on the one you need. \
Example: {}"
            .to_string(),
        Tool::InspectDataset => format!(
            "Step 2: describe one dataset before querying it: every field's exact name (in the dataset's language), \
role (id, dim, measure, attr), meaning, codes or most frequent values, fill rate, numeric statistics, caveats (what null means), \
and computed measures with their formulas. Use these exact names in the other tools. Compact by default; \"detail\": \"full\" for everything. \
Example: {{\"dataset_id\": \"{}\"}}",
            ex.dataset
        ),
        Tool::QueryRecords => {
            let mut d = format!(
                "Step 3a: fetch individual records matching conditions, a page at a time, in a stable order \
(file order unless order_by); total counts all matches and next_cursor fetches the next page. A page is sized to fit a model's \
context (rows past it continue with next_cursor); without select, the id, names, dimensions and the fields used are returned. \
Use summarize_records instead for any count, sum, average or share. \
Example: {{\"dataset_id\": \"{}\", \"where\": {{\"{}\": {{\"$not_empty\": true}}}}, \"limit\": 10}}",
                ex.dataset, ex.group
            );
            if let Some((law, field)) = &ex.law {
                d.push_str(&format!(
                    " Rows read by a plugin (law articles, document sections) cite their own source in rowSourceRefs, with a locator. \
A provision however written looks up its text: {{\"dataset_id\": \"{law}\", \"where\": {{\"{field}\": \"第5条第1項\"}}}}."
                ));
            }
            d
        }
        Tool::SummarizeRecords => format!(
            "Step 3b: compute counts, sums, averages, extremes and computed measures (ratios) per group, on the server. \
Sums skip nulls and report how many were skipped (F:null_excluded); averages are rounded to 2 decimals, ratios to 4. \
Rows come ordered by the first metric, descending, unless order_by says otherwise (e.g. [\"-{metric}\"] for a top list). \
Example: {{\"dataset_id\": \"{}\", \"group_by\": [\"{}\"], \"metrics\": [\"count\", \"{metric}\"], \"limit\": 10}}",
            ex.dataset,
            ex.group,
            metric = ex.metric
        ),
        Tool::CiteProvisions => format!(
            "Step 4 (legal basis): the provisions the matching records rest on, for a dataset whose definition links it to a law dataset \
(inspect_dataset shows `links`). Tally reads each record's law and article reference in any common form, finds the provision in the law \
(the revision in force on as_of, or the latest) and returns one row per provision: law, provision (locator), its text (trimmed), revision, \
e-Gov URI and the number of records resting on it, each provision cited in provenance. References that find nothing are counted in \
`unmatched` by reason (law not served, provision not found, unparsable reference). Example: {{\"dataset_id\": \"{}\", \"where\": {{\"{}\": {{\"$not_empty\": true}}}}, \"limit\": 20}}",
            ex.dataset, ex.group
        ),
        Tool::VerifyAnswer => "Check an answer of the other tools again, months later or after it passed through other hands: give it the whole answer (data and provenance, as the tool returned it). Tally runs its recorded call (provenance.query) on the data served now and compares number by number, exactly. status: identical (same data, same numbers), data_changed (which source changed, and every value that changed, old and new), altered (the answer's data does not match its resultHash: it was edited), or not_reproducible (its dataset, a field or a code is gone, or the semantics changed between Tally versions). Read-only. \
Example: {\"envelope\": <a whole answer of summarize_records, as it was returned>}"
            .to_string(),
    }
}

/// The one argument the server reads itself rather than the engine: how to draw a summary
/// for clients without views. It changes no number in the result.
pub const CHART: &str = "chart";
pub const CHART_FORMATS: [&str; 2] = ["png", "svg"];

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// What a client shows a person for a tool.
pub fn title(tool: Tool) -> &'static str {
    match tool {
        Tool::ListDatasets => "List datasets",
        Tool::InspectDataset => "Inspect a dataset",
        Tool::QueryRecords => "Query records",
        Tool::SummarizeRecords => "Summarize records",
        Tool::CiteProvisions => "Cite the provisions records rest on",
        Tool::VerifyAnswer => "Verify an answer",
    }
}

/// A small SVG icon as a `data:` URI (MCP icons, 2025-11-25): drawn in one mid-tone that
/// reads on light and dark backgrounds, no script, no external reference.
fn svg_icon(body: &str) -> rmcp::model::Icon {
    let svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='none' stroke='#64748b' stroke-width='2' stroke-linecap='round'>{body}</svg>"
    );
    let encoded: String =
        percent_encoding::utf8_percent_encode(&svg, percent_encoding::NON_ALPHANUMERIC).collect();
    let mut icon = rmcp::model::Icon::new(format!("data:image/svg+xml,{encoded}"));
    icon.mime_type = Some("image/svg+xml".into());
    icon.sizes = Some(vec!["any".into()]);
    icon
}

/// The server's icon: a tally mark (four strokes crossed by a fifth).
pub fn server_icon() -> rmcp::model::Icon {
    svg_icon("<path d='M5 4v16M10 4v16M15 4v16M20 4v16M2 17L23 7'/>")
}

/// A tool's icon: a stack of datasets, a magnifier, rows of records, bars, a page of
/// provisions, a shield with a check.
pub fn icon(tool: Tool) -> rmcp::model::Icon {
    svg_icon(match tool {
        Tool::ListDatasets => {
            "<ellipse cx='12' cy='5' rx='8' ry='3'/><path d='M4 5v14c0 1.7 3.6 3 8 3s8-1.3 8-3V5M4 12c0 1.7 3.6 3 8 3s8-1.3 8-3'/>"
        }
        Tool::InspectDataset => "<circle cx='10' cy='10' r='6'/><path d='M15 15l6 6'/>",
        Tool::QueryRecords => "<path d='M3 5h18M3 10h18M3 15h18M3 20h18'/>",
        Tool::SummarizeRecords => "<path d='M5 21V11M12 21V4M19 21v-7M2 21h20'/>",
        Tool::CiteProvisions => "<path d='M6 3h9l4 4v14H6z'/><path d='M9 10h7M9 14h7M9 18h4'/>",
        Tool::VerifyAnswer => {
            "<path d='M12 2l8 4v6c0 5-3.5 8.5-8 10-4.5-1.5-8-5-8-10V6z'/><path d='M8 12l3 3 5-6'/>"
        }
    })
}

/// The MCP description of a tool, with examples from what is served.
pub fn mcp_tool(tool: Tool, ex: &Examples) -> McpTool {
    McpTool::new(
        tool.name(),
        description(tool, ex),
        Arc::new(object(input_schema(tool, ex))),
    )
    .with_title(title(tool))
    .with_icons(vec![icon(tool)])
    .with_raw_output_schema(Arc::new(object(output_schema(tool).clone())))
    .with_annotations(
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

pub fn by_name(name: &str) -> Option<Tool> {
    Tool::ALL.into_iter().find(|t| t.name() == name)
}

pub fn all_names() -> Vec<&'static str> {
    Tool::ALL.iter().map(|t| t.name()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_semantic::request::{Request, parse};

    fn examples() -> Examples {
        Examples {
            dataset: "d".into(),
            group: "g".into(),
            metric: "count".into(),
            measure: Some("m".into()),
            law: Some(("l".into(), "f".into())),
        }
    }

    /// A value of the shape the schema gives, as a client would send it.
    fn sample(schema: &Value) -> Value {
        if let Some(words) = schema["enum"].as_array() {
            return words[words.len() - 1].clone();
        }
        match schema["type"].as_str() {
            Some("string") => json!("x"),
            _ => match schema["anyOf"][0]["type"].as_str() {
                Some("array") => json!(["x"]),
                Some("object") => json!({}),
                Some("integer") => json!(3),
                other => panic!("no sample for {other:?} in {schema}"),
            },
        }
    }

    #[test]
    fn every_tool_has_a_title_for_people() {
        let ex = examples();
        for tool in Tool::ALL {
            let t = mcp_tool(tool, &ex);
            assert_eq!(t.title.as_deref(), Some(title(tool)));
            assert!(
                !title(tool).contains('_'),
                "a title is words, not the tool's name"
            );
        }
    }

    /// The schema a client sees and the parser that reads its calls agree: every property
    /// is a parameter the parser accepts (with a value of the schema's shape), every
    /// parameter is a property, with words to explain it, and `limit`'s bounds are the
    /// parser's.
    #[test]
    fn input_schemas_and_the_parser_agree() {
        let ex = examples();
        for tool in Tool::ALL {
            let schema = input_schema(tool, &ex);
            let properties = schema["properties"].as_object().expect("properties");
            let names: Vec<&str> = properties
                .keys()
                .map(String::as_str)
                .filter(|n| !(tool == Tool::SummarizeRecords && *n == CHART))
                .collect();
            assert_eq!(
                names,
                tool.parameters().collect::<Vec<_>>(),
                "{}",
                tool.name()
            );
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for p in tool.spec() {
                assert_eq!(
                    required.contains(&p.name),
                    p.required,
                    "{}.{}",
                    tool.name(),
                    p.name
                );
                assert!(
                    !parameter_description(tool, p.name, &ex).is_empty(),
                    "{}.{} has no description",
                    tool.name(),
                    p.name
                );
            }
            // Every property, sent alone (with the required ones), parses.
            for (name, property) in properties {
                let mut arguments = serde_json::Map::new();
                for r in &required {
                    arguments.insert((*r).to_string(), json!("d"));
                }
                if name == "cursor" {
                    continue; // a cursor must be one the server issued; its shape is a string
                }
                if tool == Tool::SummarizeRecords && name == CHART {
                    continue; // the server takes it out before the parser sees the call
                }
                arguments.insert(name.clone(), sample(property));
                if let Err(e) = parse(tool, &Value::Object(arguments.clone())) {
                    assert_ne!(
                        e.code,
                        tally_semantic::ErrorCode::UnknownParameter,
                        "{}: the schema offers `{name}` but the parser refuses it: {e:?}",
                        tool.name()
                    );
                }
            }
            // A parameter the schema does not offer is refused.
            let mut arguments = json!({ "not_a_parameter": 1 });
            for r in &required {
                arguments[*r] = json!("d");
            }
            let refused = parse(tool, &arguments).expect_err("unknown parameter");
            assert_eq!(refused.code, tally_semantic::ErrorCode::UnknownParameter);
            // limit: the bounds the schema states are the ones the parser clamps to.
            if let Some(p) = tool.parameter("limit") {
                let Shape::Count { max, default, .. } = p.shape else {
                    panic!("limit is a count");
                };
                let description = properties["limit"]["description"].as_str().unwrap();
                assert!(
                    description.contains(&format!("–{max} (default {default})")),
                    "{description}"
                );
                let over = json!({ "dataset_id": "d", "limit": max + 1 });
                let limit = match parse(tool, &over).expect("clamped, not refused") {
                    Request::QueryRecords(a) => a.limit,
                    Request::SummarizeRecords(a) => a.limit,
                    Request::CiteProvisions(a) => a.limit,
                    other => panic!("{other:?}"),
                };
                assert_eq!(limit, max);
            }
        }
    }
}
