//! The declared shape of every tool's result (JSON Schema 2020-12), and the check that each
//! envelope has it before it leaves the server.
//!
//! The MCP server publishes these as `outputSchema`; the engine validates every envelope
//! against its tool's schema with format checking on (date, date-time, uri), then checks in
//! code what a schema cannot say: every source reference resolves and source ids are unique.
//! An envelope that fails is a bug: it is logged and answered as an internal error.

use std::collections::HashSet;
use std::sync::OnceLock;

use serde_json::{Value, json};
use tally_plugin_api::provenance::SourceType;
use tally_semantic::Tool;

/// A date or a date-time, as sources give them (never padded to a made-up time).
fn date_or_time() -> Value {
    json!({ "anyOf": [ { "type": "string", "format": "date" }, { "type": "string", "format": "date-time" } ] })
}

fn provenance(sources_may_be_empty: bool) -> Value {
    let source_types: Vec<&str> = SourceType::ALL.iter().map(|t| t.as_str()).collect();
    let mut sources = json!({
        "type": "array",
        "description": "Every source the result was computed from; ids are unique and every reference in data resolves to one.",
        "items": {
            "type": "object",
            "additionalProperties": false,
            "required": ["id", "uri", "title", "publisher", "retrievedAt", "sourceType"],
            "properties": {
                "id": { "type": "string", "minLength": 1 },
                "uri": { "type": "string", "format": "uri", "description": "The publisher's URL, or urn:tally:dataset:<id>; never a local path." },
                "title": { "type": "string" },
                "publisher": { "type": "string" },
                "retrievedAt": date_or_time(),
                "sourceType": { "enum": source_types },
                "locator": { "type": "string", "description": "Where inside the source: an article, a page, a section." },
                "publishedAt": date_or_time(),
                "effectiveAt": date_or_time(),
                "license": { "type": "string" },
                "contentHash": { "type": "string", "pattern": "^sha256:[0-9a-f]{64}$", "description": "SHA-256 of the bytes served: proves they are unchanged, not who published them." }
            }
        }
    });
    if !sources_may_be_empty {
        sources["minItems"] = json!(1);
    }
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["generatedAt", "sources", "transformations", "warnings"],
        "properties": {
            "generatedAt": { "type": "string", "format": "date-time" },
            "sources": sources,
            "transformations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["type", "description", "toolVersion"],
                    "properties": {
                        "type": { "enum": ["extract", "filter", "normalize", "aggregate"] },
                        "description": { "type": "string" },
                        "toolVersion": { "type": "string" }
                    }
                }
            },
            "warnings": {
                "type": "array",
                "description": "Field notes that qualify the numbers, truncation, corrections of names.",
                "items": { "type": "string" }
            }
        }
    })
}

fn string_list() -> Value {
    json!({ "type": "array", "items": { "type": "string" } })
}

fn defs() -> Value {
    json!({
        "fieldMeta": {
            "type": "object",
            "additionalProperties": false,
            "required": ["name", "role", "data_type"],
            "properties": {
                "name": { "type": "string" },
                "role": { "enum": ["id", "dim", "measure", "attr"] },
                "data_type": { "enum": ["string", "integer", "number", "boolean", "date"] },
                "description": { "type": "string" },
                "multi_value_separator": { "type": "string" },
                "codelist": { "enum": ["static", "auto", "auto_split"] }
            }
        },
        "notes": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["field", "notes"],
                "properties": { "field": { "type": "string" }, "notes": string_list() }
            }
        },
        "resolved": {
            "type": "array",
            "description": "Names or codes read in another form than typed (input → canonical).",
            "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["parameter", "input", "canonical"],
                "properties": {
                    "parameter": { "type": "string" },
                    "input": { "type": "string" },
                    "canonical": { "type": "string" }
                }
            }
        },
        "cell": { "type": ["string", "number", "integer", "boolean", "null", "array"] },
        "rows": {
            "type": "array",
            "items": { "type": "array", "items": { "$ref": "#/$defs/cell" } }
        }
    })
}

fn envelope(data: Value, sources_may_be_empty: bool) -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["data", "provenance"],
        "properties": {
            "data": data,
            "provenance": provenance(sources_may_be_empty)
        },
        "$defs": defs()
    })
}

fn list_data() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["total", "datasets", "broken_datasets"],
        "properties": {
            "total": { "type": "integer", "minimum": 0 },
            "datasets": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["dataset_id", "title", "record_count", "sourceRef"],
                    "properties": {
                        "dataset_id": { "type": "string" },
                        "title": { "type": "string" },
                        "publisher": { "type": ["string", "null"] },
                        "description": { "type": "string" },
                        "record_count": { "type": ["integer", "null"] },
                        "field_count": { "type": "integer" },
                        "backend": { "enum": ["parquet", "wasm", "native"] },
                        "version": { "type": "string", "description": "Identifies the version of definition and data the dataset is served at." },
                        "as_of_date": date_or_time(),
                        "published_at": date_or_time(),
                        "license": { "type": "string" },
                        "tags": string_list(),
                        "sourceRef": { "type": "string" }
                    }
                }
            },
            "broken_datasets": {
                "type": "array",
                "description": "Dataset folders that cannot be served, with why.",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["folder", "file", "problems"],
                    "properties": {
                        "folder": { "type": "string" },
                        "file": { "type": "string" },
                        "serving_version": { "type": "string", "description": "An earlier valid version of this folder keeps serving." },
                        "problems": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": false,
                                "required": ["reason"],
                                "properties": {
                                    "line": { "type": "integer" },
                                    "key": { "type": "string" },
                                    "reason": { "type": "string" },
                                    "fix": { "type": "string" }
                                }
                            }
                        }
                    }
                }
            }
        }
    })
}

fn inspect_data() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["dataset_id", "title", "record_count", "fields", "quality_summary", "computed_measures", "undeclared_columns", "sourceRefs"],
        "properties": {
            "dataset_id": { "type": "string" },
            "title": { "type": "string" },
            "description": { "type": ["string", "null"] },
            "publisher": { "type": ["string", "null"] },
            "license": { "type": ["string", "null"] },
            "as_of_date": { "anyOf": [ date_or_time(), { "type": "null" } ] },
            "published_at": { "anyOf": [ date_or_time(), { "type": "null" } ] },
            "record_count": { "type": "integer" },
            "id_field": { "type": ["string", "null"] },
            "fields": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["name", "role", "data_type", "fill_rate"],
                    "properties": {
                        "name": { "type": "string" },
                        "role": { "enum": ["id", "dim", "measure", "attr"] },
                        "data_type": { "type": "string" },
                        "description": { "type": ["string", "null"] },
                        "groupable": { "type": "boolean" },
                        "fill_rate": { "type": "number", "minimum": 0, "maximum": 1 },
                        "quality": { "enum": ["fully", "mostly", "sparse"] },
                        "multi_value_separator": { "type": "string" },
                        "locator": { "type": "object", "description": "The field holds law provisions; how values are matched." },
                        "notes": string_list(),
                        "stats": {
                            "type": "object",
                            "additionalProperties": false,
                            "properties": {
                                "min": { "type": ["number", "null"] },
                                "max": { "type": ["number", "null"] },
                                "mean": { "type": ["number", "null"] },
                                "zero_count": { "type": ["integer", "null"] }
                            }
                        },
                        "codelist": { "type": "object" },
                        "values": { "type": "object", "description": "For fields without a codelist: the most frequent values with their counts (NFKC variants together)." }
                    }
                }
            },
            "quality_summary": { "type": "object" },
            "computed_measures": { "type": "array", "items": { "type": "object" } },
            "metrics": { "type": "object" },
            "generic_values": string_list(),
            "dataset_notes": string_list(),
            "undeclared_columns": string_list(),
            "undeclared_columns_note": { "type": "string" },
            "detail": { "type": "string", "description": "Present when the description is compact: what was shortened and how to get everything." },
            "definition_warnings": string_list(),
            "version": { "type": "string" },
            "backend": { "type": "object", "description": "Where the records come from: `kind` (parquet, wasm, native) and, for plugins, the plugin, its version, its component's hash and its sandbox limits." },
            "resolved_fields": { "$ref": "#/$defs/resolved" },
            "sourceRefs": { "type": "array", "items": { "type": "string" }, "minItems": 1 }
        }
    })
}

fn records_common() -> serde_json::Map<String, Value> {
    let v = json!({
        "dataset_id": { "type": "string" },
        "dataset_version": { "type": "string", "description": "The version of definition and data this result was computed on; a cursor from another version is refused." },
        "columns": string_list(),
        "rows": { "$ref": "#/$defs/rows" },
        "returned": { "type": "integer", "minimum": 0 },
        "field_metadata": { "type": "array", "items": { "$ref": "#/$defs/fieldMeta" } },
        "notes": { "$ref": "#/$defs/notes" },
        "dataset_notes": string_list(),
        "resolved_fields": { "$ref": "#/$defs/resolved" },
        "hints": string_list(),
        "parameters": { "type": "object", "description": "The call as resolved, with canonical names." },
        "sourceRefs": { "type": "array", "items": { "type": "string" }, "minItems": 1 },
        "rowSourceRefs": {
            "type": "array",
            "description": "Per row (parallel to rows): the sources that row comes from, when a backend reports them.",
            "items": string_list()
        },
        "truncated": { "type": "boolean" }
    });
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

fn query_data() -> Value {
    let mut props = records_common();
    props.insert("total".into(), json!({ "type": "integer", "minimum": 0 }));
    props.insert("offset".into(), json!({ "type": "integer", "minimum": 0 }));
    props.insert("next_cursor".into(), json!({ "type": ["string", "null"] }));
    props.insert(
        "omitted_columns".into(),
        json!({
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["field", "reason"],
                "properties": { "field": { "type": "string" }, "reason": { "type": "string" } }
            }
        }),
    );
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["dataset_id", "columns", "rows", "total", "next_cursor", "field_metadata", "notes", "resolved_fields", "sourceRefs"],
        "properties": props
    })
}

fn summarize_data() -> Value {
    let mut props = records_common();
    props.insert(
        "total_group_count".into(),
        json!({ "type": "integer", "minimum": 0 }),
    );
    props.insert(
        "total_records".into(),
        json!({ "type": "integer", "minimum": 0 }),
    );
    props.insert(
        "pre_explode_records".into(),
        json!({ "type": "integer", "minimum": 0 }),
    );
    props.insert(
        "records_without_value".into(),
        json!({
            "type": "object",
            "description": "Per exploded field, the matched records that have no value in it: they form no group.",
            "additionalProperties": { "type": "integer", "minimum": 0 }
        }),
    );
    props.insert(
        "metrics".into(),
        json!({
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["column", "description"],
                "properties": {
                    "column": { "type": "string" },
                    "description": { "type": "string" },
                    "rounded_to_decimals": { "type": "integer" },
                    "null_excluded_column": { "type": "string" }
                }
            }
        }),
    );
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["dataset_id", "columns", "rows", "total_group_count", "field_metadata", "metrics", "notes", "resolved_fields", "sourceRefs"],
        "properties": props
    })
}

/// The schema in the form portable clients accept: a `type` that lists several types (legal
/// JSON Schema, but rejected or flattened by clients that map schemas onto a single-`type`
/// dialect) becomes `anyOf` branches of one type each. The instances it admits are the same.
pub fn portable(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(types)) = map.get("type")
                && types.len() > 1
            {
                let branches: Vec<Value> = types.iter().map(|t| json!({ "type": t })).collect();
                map.remove("type");
                map.insert("anyOf".into(), Value::Array(branches));
            } else if let Some(Value::Array(types)) = map.get("type")
                && let [only] = types.as_slice()
            {
                let only = only.clone();
                map.insert("type".into(), only);
            }
            for value in map.values_mut() {
                portable(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(portable),
        _ => {}
    }
}

/// The output schema of a tool.
pub fn output_schema(tool: Tool) -> &'static Value {
    static SCHEMAS: OnceLock<[Value; 4]> = OnceLock::new();
    let all = SCHEMAS.get_or_init(|| {
        let mut all = [
            envelope(list_data(), true),
            envelope(inspect_data(), false),
            envelope(query_data(), false),
            envelope(summarize_data(), false),
        ];
        all.iter_mut().for_each(portable);
        all
    });
    match tool {
        Tool::ListDatasets => &all[0],
        Tool::InspectDataset => &all[1],
        Tool::QueryRecords => &all[2],
        Tool::SummarizeRecords => &all[3],
    }
}

fn validator(tool: Tool) -> Result<&'static jsonschema::Validator, String> {
    static VALIDATORS: OnceLock<Vec<Result<jsonschema::Validator, String>>> = OnceLock::new();
    let all = VALIDATORS.get_or_init(|| {
        Tool::ALL
            .iter()
            .map(|t| {
                jsonschema::options()
                    .should_validate_formats(true)
                    .build(output_schema(*t))
                    .map_err(|e| format!("the output schema of {} does not compile: {e}", t.name()))
            })
            .collect()
    });
    let i = Tool::ALL.iter().position(|t| *t == tool).unwrap_or(0);
    all[i].as_ref().map_err(Clone::clone)
}

/// Checks an envelope against its tool's schema (formats included) and its references.
pub fn validate(tool: Tool, envelope: &Value) -> Result<(), Vec<String>> {
    let validator = validator(tool).map_err(|e| vec![e])?;
    let mut problems: Vec<String> = validator
        .iter_errors(envelope)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    problems.extend(check_references(envelope));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// What a schema cannot say: source ids are unique and every reference resolves.
pub fn check_references(envelope: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids = HashSet::new();
    for s in envelope["provenance"]["sources"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let id = s["id"].as_str().unwrap_or_default();
        if !ids.insert(id.to_string()) {
            problems.push(format!("source id `{id}` is not unique"));
        }
    }
    let data = &envelope["data"];
    let mut refs: Vec<&str> = Vec::new();
    refs.extend(
        data["sourceRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str),
    );
    for d in data["datasets"].as_array().into_iter().flatten() {
        refs.extend(d["sourceRef"].as_str());
    }
    if let Some(per_row) = data["rowSourceRefs"].as_array() {
        let rows = data["rows"].as_array().map_or(0, Vec::len);
        if per_row.len() != rows {
            problems.push(format!(
                "rowSourceRefs has {} entries for {rows} rows",
                per_row.len()
            ));
        }
        for r in per_row {
            refs.extend(r.as_array().into_iter().flatten().filter_map(Value::as_str));
        }
    }
    for r in refs {
        if !ids.contains(r) {
            problems.push(format!("reference `{r}` resolves to no source"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `type` in a published schema names one type (what the MCP Inspector's strict
    /// check asks of a portable tool schema).
    #[test]
    fn published_schemas_use_single_types() {
        fn arrays(v: &Value, path: &str, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::Array(_)) = m.get("type") {
                        out.push(path.to_string());
                    }
                    for (k, v) in m {
                        arrays(v, &format!("{path}.{k}"), out);
                    }
                }
                Value::Array(items) => {
                    for (i, v) in items.iter().enumerate() {
                        arrays(v, &format!("{path}[{i}]"), out);
                    }
                }
                _ => {}
            }
        }
        for tool in Tool::ALL {
            let mut found = Vec::new();
            arrays(output_schema(tool), tool.name(), &mut found);
            assert!(found.is_empty(), "type arrays in {found:?}");
        }
        let mut nullable = json!({ "type": ["string", "null"], "description": "d" });
        portable(&mut nullable);
        assert_eq!(
            nullable,
            json!({ "anyOf": [{ "type": "string" }, { "type": "null" }], "description": "d" })
        );
    }

    fn minimal_query() -> Value {
        json!({
            "data": {
                "dataset_id": "x", "columns": ["a"], "rows": [["1"]], "total": 1, "next_cursor": null,
                "field_metadata": [], "notes": [], "resolved_fields": [], "sourceRefs": ["dataset:x"]
            },
            "provenance": {
                "generatedAt": "2026-01-01T00:00:00Z",
                "sources": [{
                    "id": "dataset:x", "uri": "urn:tally:dataset:x", "title": "x", "publisher": "p",
                    "retrievedAt": "2025-07-24", "sourceType": "dataset",
                    "contentHash": format!("sha256:{}", "0".repeat(64))
                }],
                "transformations": [], "warnings": []
            }
        })
    }

    #[test]
    fn a_valid_envelope_passes() {
        assert_eq!(validate(Tool::QueryRecords, &minimal_query()), Ok(()));
    }

    #[test]
    fn format_checking_is_on() {
        let mut bad = minimal_query();
        bad["provenance"]["generatedAt"] = json!("yesterday");
        assert!(
            validate(Tool::QueryRecords, &bad).is_err(),
            "a bad date-time is rejected"
        );
        let mut bad = minimal_query();
        bad["provenance"]["sources"][0]["retrievedAt"] = json!("2025-02-30");
        assert!(
            validate(Tool::QueryRecords, &bad).is_err(),
            "a bad date is rejected"
        );
        let mut bad = minimal_query();
        bad["provenance"]["sources"][0]["uri"] = json!("not a uri");
        assert!(
            validate(Tool::QueryRecords, &bad).is_err(),
            "a bad uri is rejected"
        );
        let mut bad = minimal_query();
        bad["provenance"]["sources"][0]["contentHash"] = json!("sha256:abc");
        assert!(
            validate(Tool::QueryRecords, &bad).is_err(),
            "a bad hash is rejected"
        );
    }

    #[test]
    fn references_must_resolve_and_ids_be_unique() {
        let mut bad = minimal_query();
        bad["data"]["sourceRefs"] = json!(["dataset:y"]);
        assert!(
            validate(Tool::QueryRecords, &bad)
                .is_err_and(|p| p.iter().any(|m| m.contains("resolves to no source")))
        );
        let mut bad = minimal_query();
        let s = bad["provenance"]["sources"][0].clone();
        bad["provenance"]["sources"] = json!([s.clone(), s]);
        assert!(
            validate(Tool::QueryRecords, &bad)
                .is_err_and(|p| p.iter().any(|m| m.contains("not unique")))
        );
        let mut bad = minimal_query();
        bad["data"]["rowSourceRefs"] = json!([["dataset:x"], ["dataset:x"]]);
        assert!(
            validate(Tool::QueryRecords, &bad)
                .is_err_and(|p| p.iter().any(|m| m.contains("entries for 1 rows")))
        );
    }

    #[test]
    fn unknown_keys_in_our_shapes_are_refused() {
        let mut bad = minimal_query();
        bad["data"]["surprise"] = json!(1);
        assert!(validate(Tool::QueryRecords, &bad).is_err());
    }

    #[test]
    fn only_list_may_cite_nothing() {
        let mut q = minimal_query();
        q["provenance"]["sources"] = json!([]);
        q["data"]["sourceRefs"] = json!([]);
        assert!(validate(Tool::QueryRecords, &q).is_err());
        let list = json!({
            "data": { "total": 0, "datasets": [], "broken_datasets": [] },
            "provenance": { "generatedAt": "2026-01-01T00:00:00.000Z", "sources": [], "transformations": [], "warnings": ["no dataset matches"] }
        });
        assert_eq!(validate(Tool::ListDatasets, &list), Ok(()));
    }
}
