//! The declared shape of every tool's result (JSON Schema 2020-12), derived from the result
//! types ([`crate::results`], [`crate::envelope`]), and the check that each envelope has it
//! before it leaves the server.
//!
//! The MCP server publishes these as `outputSchema`; the engine validates every envelope
//! against its tool's schema with format checking on (date, date-time, uri), then checks in
//! code what a schema cannot say: every source reference resolves and source ids are unique.
//! An envelope that fails is a bug: it is logged and answered as an internal error.

use std::collections::HashSet;
use std::sync::OnceLock;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};
use tally_semantic::Tool;

use crate::envelope::Envelope;
use crate::results::{
    CiteResult, InspectResult, ListResult, QueryResult, SummaryResult, VerifyResult,
};

/// The schema of the envelope of `T`, derived from the types: `additionalProperties: false`
/// on every object of ours, `minItems: 1` on the sources of a result that must cite one, in
/// the portable form.
fn derived<T: JsonSchema>(sources_may_be_empty: bool) -> Value {
    let generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let mut schema = generator.into_root_schema_for::<Envelope<T>>().to_value();
    if let Some(m) = schema.as_object_mut() {
        // The generic type's name (`Envelope_for_QueryResult`) says nothing to a client.
        m.remove("title");
    }
    close_objects(&mut schema);
    absent_not_null(&mut schema);
    if !sources_may_be_empty {
        let provenance = schema["properties"]["provenance"]["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix('#'))
            .map(str::to_string);
        let target = match provenance {
            Some(pointer) => schema.pointer_mut(&pointer),
            None => schema.pointer_mut("/properties/provenance"),
        };
        if let Some(sources) = target.and_then(|p| p.pointer_mut("/properties/sources")) {
            sources["minItems"] = json!(1);
        }
    }
    portable(&mut schema);
    schema
}

/// Every object schema that lists its properties admits no others: a key the types do not
/// have is a bug, caught before sending.
fn close_objects(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            map.values_mut().for_each(close_objects);
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// A property a result may leave out is left out when it has no value, never sent as null
/// (every such field of the result types is skipped when empty): its schema does not admit
/// null. Doc comments wrapped over lines become one line each.
fn absent_not_null(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let required: Vec<String> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            if let Some(Value::Object(properties)) = map.get_mut("properties") {
                for (name, property) in properties.iter_mut() {
                    if !required.contains(name) {
                        without_null(property);
                    }
                }
            }
            if let Some(Value::String(d)) = map.get_mut("description") {
                *d = d.replace('\n', " ");
            }
            map.values_mut().for_each(absent_not_null);
        }
        Value::Array(items) => items.iter_mut().for_each(absent_not_null),
        _ => {}
    }
}

/// `anyOf: [X, {"type": "null"}]` as X; `type: [T, "null"]` as T.
fn without_null(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    let null = json!({ "type": "null" });
    if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
        branches.retain(|b| *b != null);
        if let [only] = branches.as_slice() {
            let only = only.clone();
            map.remove("anyOf");
            if let Value::Object(inner) = only {
                for (k, v) in inner {
                    map.entry(k).or_insert(v);
                }
            }
        }
    } else if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
    }
}

/// The formats JSON Schema defines that results use; others (such as the `uint64` or
/// `double` a schema generator writes for Rust numbers) are left out of published schemas.
const FORMATS: [&str; 3] = ["date", "date-time", "uri"];

/// The schema in the form portable clients accept: a `type` that lists several types (legal
/// JSON Schema, but rejected or flattened by clients that map schemas onto a single-`type`
/// dialect) becomes `anyOf` branches of one type each, and a format JSON Schema does not
/// define is left out. The instances it admits are the same.
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
            if let Some(Value::String(format)) = map.get("format")
                && !FORMATS.contains(&format.as_str())
            {
                map.remove("format");
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
    static SCHEMAS: OnceLock<[Value; 6]> = OnceLock::new();
    let all = SCHEMAS.get_or_init(|| {
        [
            derived::<ListResult>(true),
            derived::<InspectResult>(false),
            derived::<QueryResult>(false),
            derived::<SummaryResult>(false),
            derived::<VerifyResult>(true),
            derived::<CiteResult>(false),
        ]
    });
    match tool {
        Tool::ListDatasets => &all[0],
        Tool::InspectDataset => &all[1],
        Tool::QueryRecords => &all[2],
        Tool::SummarizeRecords => &all[3],
        Tool::VerifyAnswer => &all[4],
        Tool::CiteProvisions => &all[5],
    }
}

/// The output schema a client is shown (`outputSchema` in `tools/list`): the envelope, its
/// `data` and `provenance` with every key a result has and each key's JSON type, without the
/// nested detail and prose of [`output_schema`]. Every conversation pays for the tool list in
/// context, and the full schemas were four fifths of it (57,000 characters of 73,000); a
/// model reads the keys and types, and the prose is in the tool descriptions.
///
/// It only ever leaves constraints out of the full schema (no `additionalProperties: false`,
/// no nested shapes, no formats), so every envelope the full schema admits — and each is
/// checked against the full one before it is sent — is admitted by this one too.
pub fn published_output_schema(tool: Tool) -> &'static Value {
    static SCHEMAS: OnceLock<Vec<Value>> = OnceLock::new();
    let all = SCHEMAS.get_or_init(|| {
        Tool::ALL
            .iter()
            .map(|t| {
                let full = output_schema(*t);
                compact(full, full, 0)
            })
            .collect()
    });
    let i = Tool::ALL.iter().position(|t| *t == tool).unwrap_or(0);
    &all[i]
}

/// How deep the published schema keeps keys: the envelope (0), `data` and `provenance` (1),
/// and their keys (2), which keep only their type.
const PUBLISHED_DEPTH: usize = 2;

/// `schema` with references resolved against `root`, keys kept down to
/// [`PUBLISHED_DEPTH`] and below that only the JSON type.
fn compact(schema: &Value, root: &Value, depth: usize) -> Value {
    let resolved = resolve(schema, root);
    let Some(map) = resolved.as_object() else {
        return json!({});
    };
    if depth >= PUBLISHED_DEPTH {
        return match json_types(&resolved, root).as_slice() {
            [] => json!({}),
            [one] => json!({ "type": one }),
            many => {
                json!({ "anyOf": many.iter().map(|t| json!({ "type": t })).collect::<Vec<_>>() })
            }
        };
    }
    let mut out = serde_json::Map::new();
    if let Some(properties) = map.get("properties").and_then(Value::as_object) {
        out.insert("type".into(), json!("object"));
        // `prov` is there only when asked for (`provenance_format`), and says what it is.
        let kept: serde_json::Map<String, Value> = properties
            .iter()
            .filter(|(k, _)| !(depth == 0 && k.as_str() == "prov"))
            .map(|(k, v)| (k.clone(), compact(v, root, depth + 1)))
            .collect();
        out.insert("properties".into(), Value::Object(kept));
        // The envelope's own two keys are required; inside them, which keys a result may
        // leave out is detail a model does not need to write a call.
        if depth == 0
            && let Some(required) = map.get("required")
        {
            out.insert("required".into(), required.clone());
        }
        return Value::Object(out);
    }
    compact(&resolved, root, PUBLISHED_DEPTH)
}

/// `schema` itself, or what its `$ref` points at in `root` (followed a few times at most).
fn resolve(schema: &Value, root: &Value) -> Value {
    let mut current = schema.clone();
    for _ in 0..8 {
        let Some(pointer) = current
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
        else {
            return current;
        };
        match root.pointer(pointer) {
            Some(target) => current = target.clone(),
            None => return json!({}),
        }
    }
    current
}

/// The JSON types a schema admits (empty: any).
fn json_types(schema: &Value, root: &Value) -> Vec<String> {
    let schema = resolve(schema, root);
    if let Some(t) = schema.get("type") {
        return match t {
            Value::String(one) => vec![one.clone()],
            Value::Array(many) => many
                .iter()
                .filter_map(|t| t.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };
    }
    let mut out: Vec<String> = Vec::new();
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            for b in branches {
                let types = json_types(b, root);
                if types.is_empty() {
                    // A branch that admits anything makes the whole admit anything.
                    return Vec::new();
                }
                for t in types {
                    if !out.contains(&t) {
                        out.push(t);
                    }
                }
            }
        }
    }
    if schema.get("properties").is_some() {
        out.push("object".into());
    }
    // `integer` is a `number`: listing both is redundant.
    if out.iter().any(|t| t == "number") {
        out.retain(|t| t != "integer");
    }
    out
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
                "dataset_id": "x", "dataset_version": "v1", "columns": ["a"], "rows": [["1"]],
                "total": 1, "offset": 0, "returned": 1, "next_cursor": null,
                "field_metadata": [], "notes": [], "resolved_fields": [], "parameters": {},
                "sourceRefs": ["dataset:x"]
            },
            "provenance": {
                "generatedAt": "2026-01-01T00:00:00Z",
                "query": {"tool": "query_records", "arguments": {"dataset_id": "x"}, "toolVersion": "tally 0.1.0"},
                "resultHash": format!("sha256:{}", "1".repeat(64)),
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
    fn optional_keys_are_left_out_not_null() {
        let mut bad = minimal_query();
        bad["data"]["truncated"] = json!(null);
        assert!(validate(Tool::QueryRecords, &bad).is_err());
        let mut bad = minimal_query();
        bad["provenance"]["sources"][0]["locator"] = json!(null);
        assert!(validate(Tool::QueryRecords, &bad).is_err());
        // A key that is always sent may be null where the type says so.
        let mut ok = minimal_query();
        ok["data"]["next_cursor"] = json!(null);
        assert_eq!(validate(Tool::QueryRecords, &ok), Ok(()));
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
            "provenance": { "generatedAt": "2026-01-01T00:00:00.000Z", "resultHash": format!("sha256:{}", "2".repeat(64)), "sources": [], "transformations": [], "warnings": ["no dataset matches"] }
        });
        assert_eq!(validate(Tool::ListDatasets, &list), Ok(()));
    }
}
