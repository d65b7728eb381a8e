//! The tools as MCP clients see them: names, descriptions that teach the flow (with
//! examples taken from the datasets served), input schemas, and the output schemas the
//! engine validates every result against.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool as McpTool, ToolAnnotations};
use serde_json::{Value, json};
use tally_engine::schema::published_output_schema;
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
        // One name, or a JSON array sent as a string: what models send.
        "anyOf": [
            { "type": "array", "items": { "type": "string" } },
            { "type": "string" }
        ]
    })
}

fn conditions(description: &str) -> Value {
    json!({
        "description": description,
        // The object, or the same object as a JSON string.
        "anyOf": [
            { "type": "object" },
            { "type": "string" }
        ]
    })
}

fn count(description: &str) -> Value {
    json!({
        "description": description,
        // A number, or a number as text.
        "anyOf": [
            { "type": "integer" },
            { "type": "string" }
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
    /// A dataset with `links`, and its first linking field.
    linked: Option<(String, String)>,
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
            linked: None,
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
        ex.linked = view.datasets().find_map(|d| {
            let (field, _) = d.def.links.first()?.on.first()?;
            Some((d.def.id.clone(), d.def.fields[*field].name.clone()))
        });
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

    /// The names the tools' example calls are written with.
    pub fn names(&self) -> tally_semantic::request::ExampleNames<'_> {
        tally_semantic::request::ExampleNames {
            dataset: &self.dataset,
            field: &self.group,
            metric: &self.metric,
            linked: self.linked.as_ref().map(|(d, f)| (d.as_str(), f.as_str())),
        }
    }
}

fn where_text(ex: &Examples) -> String {
    let mut text = format!(
        "ANDed: {{\"F\": [\"a\"]}} exact; {{\"F\": \"text\"}} substring (a code's label or number: that code); {{\"F\": 10}} equal; $eq $in $ne $nin $contains $not_contains $gt $gte $lt $lte $not_empty, e.g. {{\"{}\": {{\"$gte\": 100}}}}.",
        ex.measure()
    );
    if ex.law.is_some() {
        text.push_str(" A law locator takes a provision in any form (\"第5条第1項\").");
    }
    text
}

/// What a parameter means, for the input schema ("" when the table has a parameter this
/// has no words for: a test refuses that).
fn parameter_description(tool: Tool, name: &str, ex: &Examples) -> String {
    match (tool, name) {
        (_, "dataset_id") => "From list_datasets.".into(),
        (Tool::CiteProvisions, "group_by") => "Fields to count the records of each provision by; default: all together.".into(),
        (Tool::CiteProvisions, "link") => "The linked dataset to cite from (default: the only link).".into(),
        (Tool::CiteProvisions, "as_of") => "YYYY-MM-DD: each law as in force that day (default: latest).".into(),
        (Tool::QueryRecords | Tool::SummarizeRecords, "as_of") => "YYYY-MM-DD: datasets with revisions (laws) as in force that day (default: latest).".into(),
        (_, "provenance_format") => "\"prov\": adds W3C PROV-O.".into(),
        (Tool::VerifyAnswer, "envelope") => "The whole answer (data and provenance) as returned, or its JSON text.".into(),
        (Tool::ListDatasets, "q") => "Substring of the id or title.".into(),
        (Tool::ListDatasets, "publisher") => "Substring of the publisher.".into(),
        (Tool::InspectDataset, "detail") => "\"full\": every code's description and more values.".into(),
        (Tool::QueryRecords, "q") => "Substring of any text field (or of search_fields), ignoring case and width.".into(),
        (Tool::QueryRecords, "search_fields") => "Fields q searches (default: all text).".into(),
        (Tool::QueryRecords, "select") => "Fields to return (default: id, names, dimensions, fields used).".into(),
        (_, "where") => where_text(ex),
        (Tool::QueryRecords, "order_by") => "\"F\" or \"-F\" (descending); nulls last.".into(),
        (_, "limit") => match tool.parameter("limit").map(|p| p.shape) {
            Some(Shape::Count { min, max, default }) => {
                format!("Rows to return, {min}–{max} (default {default}).")
            }
            _ => String::new(),
        },
        (Tool::QueryRecords, "cursor") => "next_cursor of the previous page (same other arguments).".into(),
        (Tool::CiteProvisions, "cursor") => "next_cursor of the previous page (same other arguments).".into(),
        (Tool::SummarizeRecords, "metrics") => "count, sum:F, avg:F, min:F, max:F, last:F (at each group's latest period with a value of F) (F a measure), avg:<computed measure>; default [\"count\"].".into(),
        (Tool::SummarizeRecords, "group_by") => "Groupable fields (default: one row); a missing value is the key null.".into(),
        (Tool::SummarizeRecords, "having") => "Conditions on result columns, e.g. {\"count\": {\"$gte\": 10}}.".into(),
        (Tool::SummarizeRecords, "explode") => "Multi-value fields counted part by part (implied when grouped by).".into(),
        (Tool::SummarizeRecords, "compare") => "Periods of the time field side by side, {\"from\": 2010, \"to\": 2020} (each metric at both, change, % change; an end may be \"latest\"), or \"previous\".".into(),
        (Tool::SummarizeRecords, "rank") => "true: rank by the first metric (1 = largest) per period.".into(),
        (Tool::SummarizeRecords, "order_by") => "Result columns, \"-\" for descending (default: first metric descending).".into(),
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
            Shape::Compare => json!({
                "description": description,
                "anyOf": [
                    { "type": "object", "required": ["from", "to"] },
                    { "type": "string", "enum": ["previous"] }
                ]
            }),
            Shape::Flag => json!({ "type": "boolean", "description": description }),
            Shape::Answer => json!({
                "description": description,
                "anyOf": [
                    { "type": "object", "required": ["data", "provenance"] },
                    { "type": "string" }
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
                "description": "The chart as an image too (clients without views).",
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
    let example = match tool.example(&ex.names()) {
        Some(call) => call.to_string(),
        None => "{\"envelope\": <an answer>}".to_string(),
    };
    let what = match tool {
        Tool::ListDatasets => {
            "Step 1: the datasets served (id, title, publisher, records, dates) and folders that cannot be served, with why."
        }
        Tool::InspectDataset => {
            "Step 2: a dataset's fields (exact names, in its language), roles, meanings, codes or frequent values, fill rates, \
statistics, caveats (what null means) and computed measures. Use these names in the other tools."
        }
        Tool::QueryRecords => {
            "Step 3a: records matching conditions, a page at a time in a stable order; total counts all matches, next_cursor \
continues. For counts, sums or shares use summarize_records."
        }
        Tool::SummarizeRecords => {
            "Step 3b: counts, sums, averages, extremes and computed measures per group, computed on the server (sums skip nulls \
and say how many; averages to 2 decimals, ratios to 4); ordered by the first metric, descending, unless order_by."
        }
        Tool::CiteProvisions => {
            "Step 4: the provisions of law the matching records rest on (datasets with `links`): per provision its text, \
revision, e-Gov URI and records; references that find nothing counted in `unmatched`."
        }
        Tool::VerifyAnswer => {
            "Check a whole answer (data and provenance) again on the data served now: identical, \
data_changed (every changed value), altered (edited) or not_reproducible (why)."
        }
    };
    let mut d = format!("{what} Example: {example}");
    if let (Tool::QueryRecords, Some((law, field))) = (tool, &ex.law) {
        d.push_str(&format!(
            " Rows of a plugin cite their own source (rowSourceRefs). A provision looks up its text: \
{{\"dataset_id\": \"{law}\", \"where\": {{\"{field}\": \"第5条第1項\"}}}}."
        ));
    }
    d
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
    tool.info().title
}

/// A small SVG icon as a `data:` URI (MCP icons, 2025-11-25): drawn in one mid-tone that
/// reads on light and dark backgrounds, no script, no external reference.
fn svg_icon(body: &str) -> rmcp::model::Icon {
    let svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='none' stroke='gray'>{body}</svg>"
    );
    // Only what a URI may not hold is escaped (`<`, `>`, `#`, spaces…): an icon costs every
    // conversation its length in the tool list.
    const ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
        .add(b' ')
        .add(b'<')
        .add(b'>')
        .add(b'#')
        .add(b'%')
        .add(b'"')
        .add(b'{')
        .add(b'}')
        .add(b'|')
        .add(b'\\')
        .add(b'^')
        .add(b'`');
    let encoded: String = percent_encoding::utf8_percent_encode(&svg, ESCAPED).collect();
    // The data URI names its type; `mimeType` would say it twice.
    rmcp::model::Icon::new(format!("data:image/svg+xml,{encoded}"))
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
    .with_raw_output_schema(Arc::new(object(published_output_schema(tool).clone())))
    // Read-only: the destructive and idempotent hints mean nothing then (MCP), so they are
    // not spent on.
    .with_annotations(ToolAnnotations::new().read_only(true).open_world(false))
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
            linked: Some(("s".into(), "n".into())),
        }
    }

    /// Regression (issue 37, "the tool list costs 73,000 characters"): every conversation
    /// pays for `tools/list`, so all six tools, with examples of the real survey's length
    /// and a law dataset served, stay within 15,000 characters of JSON; the published output
    /// schemas are far smaller than the full ones the envelopes are checked against, and
    /// admit every envelope those admit (the engine's schema tests).
    #[test]
    fn the_tool_list_costs_at_most_15000_characters() {
        let ex = Examples {
            dataset: "procedures-survey-r6".into(),
            group: "所管府省庁".into(),
            metric: "avg:オンライン化率".into(),
            measure: Some("オンライン手続件数".into()),
            law: Some(("egov-laws".into(), "条項".into())),
            linked: Some(("procedures-survey-r6".into(), "法令番号".into())),
        };
        let tools: Vec<McpTool> = Tool::ALL.into_iter().map(|t| mcp_tool(t, &ex)).collect();
        let text = serde_json::to_string(&json!({ "tools": tools })).expect("json");
        let chars = text.chars().count();
        for t in &tools {
            println!(
                "{}: {} characters",
                t.name,
                serde_json::to_string(t).map_or(0, |s| s.chars().count())
            );
        }
        println!("tools/list: {chars} characters");
        assert!(chars <= 15_000, "tools/list is {chars} characters");
        for tool in Tool::ALL {
            let full = tally_engine::schema::output_schema(tool).to_string().len();
            let published = published_output_schema(tool).to_string().len();
            assert!(
                published * 4 < full,
                "{}: {published} of {full}",
                tool.name()
            );
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
                _ if schema["type"] == "boolean" => json!(true),
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
