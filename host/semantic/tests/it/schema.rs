//! The published JSON Schema of `dataset.yaml` (`schemas/dataset.schema.json`, `tally
//! schema`) against the reader it is generated from: the committed file is the generator's
//! output, every definition of the repository and of the docs validates, and what the reader
//! refuses in a definition's shape (an unknown key, a value of the wrong kind, a name outside
//! a vocabulary) the schema refuses too, while every form the reader accepts validates.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tally_semantic::definition::keys::{SECTIONS, Section};
use tally_semantic::definition::{
    DefinitionError, Diagnostic, SCHEMA_FILE, Severity, json_schema, load_definition, schema_text,
};
use tally_semantic::yaml;

use crate::harness::{data_dir, reference_dir, workspace_root};

fn validator() -> jsonschema::Validator {
    jsonschema::draft7::new(&json_schema()).expect("the schema compiles")
}

/// The schema's complaints about `instance`, each with where it is.
fn problems(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// The reader's diagnostics of a definition, and whether it was served.
fn read(text: &str) -> (bool, Vec<Diagnostic>) {
    match load_definition("datasets/x/dataset.yaml", "x", text) {
        Ok(loaded) => (true, loaded.warnings),
        Err(DefinitionError { diagnostics, .. }) => (false, diagnostics),
    }
}

fn unknown_keys(diagnostics: &[Diagnostic]) -> Vec<&Diagnostic> {
    diagnostics
        .iter()
        .filter(|d| d.message.starts_with("unknown key"))
        .collect()
}

#[test]
fn the_committed_schema_is_what_tally_schema_prints() {
    let path = workspace_root().join(SCHEMA_FILE);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = schema_text();
    if committed == generated {
        return;
    }
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &generated)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    panic!(
        "{SCHEMA_FILE} is not the schema the reader's key tables give (a key, a shape or a vocabulary changed). \
         Regenerate it with `cargo run -p tally -- schema > {SCHEMA_FILE}` (or run this test with UPDATE_EXPECT=1), \
         review the diff and commit it."
    );
}

#[test]
fn the_schema_is_a_valid_draft_07_schema() {
    let schema = json_schema();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    if let Err(e) = jsonschema::meta::validate(&schema) {
        panic!(
            "the schema is not a valid JSON Schema: {e} at {}",
            e.instance_path()
        );
    }
}

/// Every object of the schema that refuses unknown keys, with its keys in order.
fn closed_objects<'s>(schema: &'s Value, at: String, out: &mut Vec<(String, Vec<&'s str>)>) {
    match schema {
        Value::Object(m) => {
            if m.get("additionalProperties") == Some(&Value::Bool(false)) {
                let keys = m
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                out.push((at.clone(), keys));
            }
            for (k, v) in m {
                closed_objects(v, format!("{at}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                closed_objects(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_key_of_the_readers_tables_is_a_property_of_the_schema_and_no_other() {
    let schema = json_schema();
    let mut closed = Vec::new();
    closed_objects(&schema, String::new(), &mut closed);
    for section in SECTIONS {
        let names = section.names();
        let found: Vec<&String> = closed
            .iter()
            .filter(|(_, keys)| *keys == names)
            .map(|(at, _)| at)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "section `{}` ({names:?}) is one closed object of the schema: {found:?}",
            section.name
        );
    }
    assert_eq!(
        closed.len(),
        SECTIONS.len(),
        "every object that refuses unknown keys is a section of the reader's: {closed:#?}"
    );
    // Nothing else takes keys by name: the other objects (codes, roll-ups, pairs, a plugin's
    // config) are mappings of names the definition chooses.
    let mut named = 0;
    properties_anywhere(&schema, &mut named);
    assert_eq!(named, SECTIONS.len(), "objects with `properties`");
}

fn properties_anywhere(schema: &Value, count: &mut usize) {
    match schema {
        Value::Object(m) => {
            // The conditions of `allOf` name a key of their section, not a key of their own.
            if m.contains_key("properties") && m.contains_key("type") {
                *count += 1;
            }
            for (k, v) in m {
                if k != "if" {
                    properties_anywhere(v, count);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| properties_anywhere(v, count)),
        _ => {}
    }
}

/// Every `dataset.yaml` and `*.dataset.yaml` under `dir`, outside build and tool folders.
fn definitions_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && !matches!(name.as_str(), "target" | "node_modules") {
                definitions_under(&path, out);
            }
        } else if name == "dataset.yaml" || name.ends_with(".dataset.yaml") {
            out.push(path);
        }
    }
}

#[test]
fn every_definition_of_the_repository_validates() {
    let root = workspace_root();
    let mut files = Vec::new();
    definitions_under(&root, &mut files);
    if let Some(reference) = reference_dir() {
        definitions_under(&reference, &mut files);
    }
    files.sort();
    assert!(
        files.len() >= 11,
        "the repository's definitions were found: {files:?}"
    );
    let validator = validator();
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        let instance = yaml::parse(&text)
            .unwrap_or_else(|e| panic!("{}: {}", file.display(), e.message))
            .to_json();
        let found = problems(&validator, &instance);
        if !found.is_empty() {
            failures.push(format!("{}:\n  {}", file.display(), found.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The reader's own cases: a definition it reads without an unknown key validates when it is
/// served, and one with an unknown key is refused by the schema.
#[test]
fn the_readers_cases_and_the_schema_agree() {
    let validator = validator();
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in crate::harness::cases(&data_dir("definitions"), "yaml") {
        let text = std::fs::read_to_string(&path).expect("readable");
        let Ok(node) = yaml::parse(&text) else {
            continue;
        };
        let (served, diagnostics) = read(&text);
        let found = problems(&validator, &node.to_json());
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !unknown_keys(&diagnostics).is_empty() {
            checked += 1;
            if found.is_empty() {
                failures.push(format!(
                    "{name}: the reader warns of an unknown key, the schema accepts it"
                ));
            }
        } else if served {
            checked += 1;
            if !found.is_empty() {
                failures.push(format!(
                    "{name}: served by the reader, refused by the schema: {found:#?}"
                ));
            }
        }
    }
    assert!(checked >= 8, "cases checked: {checked}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The fenced YAML blocks of README.md and docs/*.md that are dataset definitions (or parts
/// of one), with where each starts. A block is one when a top-level key is a key of
/// `dataset.yaml` (policies, deployments and scrape configurations have none), or when it is
/// a list of fields.
fn docs_definitions() -> Vec<(String, Value)> {
    let root = workspace_root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let top_keys = tally_semantic::definition::keys::DATASET.names();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        let mut block: Option<(usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            match &mut block {
                None if line.trim_start() == "```yaml" => block = Some((i + 1, String::new())),
                None => {}
                Some((start, body)) if line.trim_start().starts_with("```") => {
                    let at = format!(
                        "{}:{start}",
                        file.strip_prefix(&root).unwrap_or(&file).display()
                    );
                    let node = yaml::parse(body)
                        .unwrap_or_else(|e| panic!("{at}: the example is not YAML: {}", e.message));
                    match node.to_json() {
                        Value::Object(mut m)
                            if m.keys().any(|k| top_keys.contains(&k.as_str())) =>
                        {
                            // `fields: [...]` stands for fields left out of the example.
                            m.retain(|_, v| *v != json!(["..."]));
                            out.push((at, Value::Object(m)));
                        }
                        Value::Array(items)
                            if !items.is_empty()
                                && items.iter().all(|f| {
                                    f.get("name").is_some() && f.get("role").is_some()
                                }) =>
                        {
                            out.push((at, json!({"fields": items})));
                        }
                        _ => {}
                    }
                    block = None;
                }
                Some((_, body)) => {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

#[test]
fn the_docs_definitions_validate() {
    // A part of a definition need not hold every required key.
    let mut schema = json_schema();
    if let Some(m) = schema.as_object_mut() {
        m.remove("required");
    }
    let validator = jsonschema::draft7::new(&schema).expect("compiles");
    let examples = docs_definitions();
    assert!(
        examples.len() >= 12,
        "the docs' definitions were found: {:?}",
        examples.iter().map(|(at, _)| at).collect::<Vec<_>>()
    );
    let mut failures = Vec::new();
    for (at, instance) in &examples {
        let found = problems(&validator, instance);
        if !found.is_empty() {
            failures.push(format!("{at}:\n  {}", found.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A definition that holds every section, which the reader reads without a word.
fn every_section() -> Value {
    json!({
        "schema_version": "1",
        "title": "t",
        "as_of_date": "2025-07-24",
        "source": {"url": "https://example.org/data", "type": "dataset", "csv_header_rows": 1},
        "backend": {"kind": "parquet"},
        "fields": [
            {"name": "id", "role": "id"},
            {"name": "year", "role": "time", "grain": "year"},
            {"name": "law", "role": "dim", "codelist": ["1 a", {"2 b": "two"}], "rollup": {"group": {"g": ["1 a", "2 b"]}}},
            {"name": "tags", "role": "attr", "multi_value": {"separator": "|"}},
            {"name": "date", "role": "attr"},
            {"name": "people", "role": "measure", "data_type": "integer", "aggregation": "stock"},
            {"name": "rate", "role": "measure", "aggregation": "rate", "weight": "people"},
        ],
        "computed_measures": [
            {"name": "share", "mode": "count_where", "condition_field": "law", "condition_values": ["1 a"]},
        ],
        "revisions": {"key": "id", "effective": "date"},
        "links": [{"to": "other", "on": {"id": "id"}}],
        "relations": [{"dataset": "other", "on": {"id": "id"}, "fields": ["region"]}],
    })
}

/// Where each section's mapping is in [`every_section`].
const SECTION_AT: &[(&str, &str)] = &[
    ("dataset", ""),
    ("source", "/source"),
    ("backend", "/backend"),
    ("field", "/fields/0"),
    ("multi_value", "/fields/3/multi_value"),
    ("computed_measure", "/computed_measures/0"),
    ("revisions", "/revisions"),
    ("link", "/links/0"),
    ("relation", "/relations/0"),
];

fn text_of(value: &Value) -> String {
    // JSON is YAML: the reader reads the definition as it would a file.
    serde_json::to_string_pretty(value).expect("serializes")
}

#[test]
fn a_definition_with_every_section_is_read_without_a_word_and_validates() {
    let definition = every_section();
    let (served, diagnostics) = read(&text_of(&definition));
    assert!(served && diagnostics.is_empty(), "{diagnostics:#?}");
    assert_eq!(problems(&validator(), &definition), Vec::<String>::new());
    let covered: Vec<&str> = SECTION_AT.iter().map(|(s, _)| *s).collect();
    let sections: Vec<&str> = SECTIONS.iter().map(|s: &&Section| s.name).collect();
    assert_eq!(
        covered, sections,
        "every section is placed in the definition"
    );
}

/// A key the reader does not know is reported and ignored; an editor flags it as it is typed.
#[test]
fn a_key_the_reader_does_not_know_is_refused_by_the_schema_too() {
    let validator = validator();
    for (section, at) in SECTION_AT {
        let section = SECTIONS
            .iter()
            .find(|s| s.name == *section)
            .expect("a section");
        // A misspelling of its first key, and a word of no section.
        for typo in [misspelt(section.keys[0].name), "colour".to_string()] {
            let mut definition = every_section();
            definition
                .pointer_mut(at)
                .and_then(Value::as_object_mut)
                .expect("the section's mapping")
                .insert(typo.clone(), json!("x"));
            let (_, diagnostics) = read(&text_of(&definition));
            let unknown = unknown_keys(&diagnostics);
            assert_eq!(
                unknown.len(),
                1,
                "{}: the reader reports `{typo}`: {diagnostics:#?}",
                section.name
            );
            assert_eq!(unknown[0].severity, Severity::Warning);
            let errors: Vec<jsonschema::ValidationError> =
                validator.iter_errors(&definition).collect();
            assert_eq!(
                errors.len(),
                1,
                "{}: the schema refuses `{typo}`: {errors:?}",
                section.name
            );
            assert_eq!(
                errors[0].instance_path().to_string(),
                *at,
                "{}",
                section.name
            );
            assert!(errors[0].to_string().contains(&typo), "{}", errors[0]);
        }
    }
}

/// `name` with its last two letters swapped (`nmae` is not, `naem` is).
fn misspelt(name: &str) -> String {
    let mut chars: Vec<char> = name.chars().collect();
    let n = chars.len();
    if n >= 2 {
        chars.swap(n - 1, n - 2);
    }
    let out: String = chars.into_iter().collect();
    if out == name { format!("{name}s") } else { out }
}

/// Sets the value at `at` (a JSON pointer into [`every_section`]; the last step a key).
fn with(at: &str, value: Value) -> Value {
    let mut definition = every_section();
    let (parent, key) = at.rsplit_once('/').expect("a key");
    let parent = definition.pointer_mut(parent).expect("the parent");
    match parent {
        Value::Object(m) => {
            m.insert(key.to_string(), value);
        }
        Value::Array(items) => items[key.parse::<usize>().expect("an index")] = value,
        _ => panic!("{at}"),
    }
    definition
}

/// Values of the wrong kind, or names outside a vocabulary: the reader refuses each with an
/// error, the schema too.
#[test]
fn values_the_reader_refuses_the_schema_refuses() {
    let validator = validator();
    let cases = [
        ("/fields/0/role", json!("dimensoin")),
        ("/fields/0/role", json!(1)),
        ("/fields/0/name", json!(["id"])),
        ("/fields/4/data_type", json!("strnig")),
        ("/fields/5/aggregation", json!("flwo")),
        ("/fields/1/grain", json!("yaer")),
        ("/fields/2/codelist", json!("autp")),
        ("/fields/2/codelist", json!([])),
        ("/fields/2/codelist", json!([["1 a"]])),
        ("/fields/2/codelist/1", json!({"2 b": "two", "note": "x"})),
        ("/fields/2/codelist/1", json!({"2 b": 2})),
        ("/fields/2/rollup", json!(["g"])),
        ("/fields/2/rollup/group", json!({})),
        ("/fields/3/multi_value", json!("yes")),
        ("/fields/4/locator", json!("lwa")),
        ("/fields/4/csv_col_index", json!(-1)),
        ("/fields/4/notes", json!(3)),
        ("/fields/4/groupable", json!("no")),
        ("/fields/5/unit", json!("x".repeat(33))),
        ("/fields/5/period", json!(["2020"])),
        ("/fields/5/period", Value::Null),
        ("/fields/1", json!({"name": "year", "role": "time"})),
        ("/fields", json!([])),
        ("/fields", json!({"id": {"role": "id"}})),
        ("/computed_measures/0/mode", json!("count")),
        ("/computed_measures/0/scale", json!(0)),
        ("/computed_measures/0/condition_values", json!([])),
        (
            "/computed_measures/0",
            json!({"name": "r", "mode": "sum_ratio", "numerator": "people"}),
        ),
        ("/source/type", json!("page")),
        ("/source/url", json!("ftp://example.org/")),
        ("/source/url", json!("https://")),
        ("/source/csv_header_rows", json!("2")),
        ("/backend/kind", json!("wsam")),
        ("/backend/config", json!("folder")),
        ("/backend", json!({"kind": "wasm"})),
        ("/as_of_date", json!("2025-13-01")),
        ("/as_of_date", json!("24/07/2025")),
        ("/as_of_date", json!("2025-07-24 09:00")),
        ("/published_at", json!(20250724)),
        ("/enabled", json!("yes")),
        ("/tags", json!({"a": 1})),
        ("/revisions", Value::Null),
        ("/links/0/on", json!({})),
        ("/links/0/on", json!({"id": 1})),
        ("/relations/0/on", json!({"id": "id", "law": "law"})),
        ("/relations/0/fields", json!([])),
        ("/relations", json!({"dataset": "other"})),
    ];
    let mut failures = Vec::new();
    for (at, value) in cases {
        let definition = with(at, value.clone());
        let (_, diagnostics) = read(&text_of(&definition));
        let refused = diagnostics.iter().any(|d| d.severity == Severity::Error);
        let found = problems(&validator, &definition);
        if !refused {
            failures.push(format!(
                "{at} = {value}: the reader accepts it: {diagnostics:#?}"
            ));
        }
        if found.is_empty() {
            failures.push(format!("{at} = {value}: the schema accepts it"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The other forms the reader reads (a synonym, one text for a list, a number for a text,
/// an empty value for a key left out): the schema takes each.
#[test]
fn every_form_the_reader_accepts_validates() {
    let validator = validator();
    let cases = [
        ("/schema_version", json!(1)),
        ("/schema_version", Value::Null),
        ("/description", Value::Null),
        ("/tags", json!("one")),
        ("/tags", json!(["a", 2020])),
        ("/notes", Value::Null),
        ("/published_at", json!("2025-07-24T09:00:00+09:00")),
        ("/retrieved_at", json!("2025-07-24T00:00:00.5Z")),
        ("/source", Value::Null),
        ("/backend", Value::Null),
        ("/backend/kind", Value::Null),
        (
            "/backend/config",
            json!({"folder": "docs", "limits": {"rows": 3}}),
        ),
        ("/source/null_markers", json!("-")),
        ("/source/csv_header_rows", Value::Null),
        ("/fields/0/role", json!("dimension")),
        ("/fields/4/role", json!("attribute")),
        ("/fields/4/data_type", json!("text")),
        ("/fields/5/data_type", json!("int")),
        ("/fields/5/data_type", Value::Null),
        ("/fields/2/codelist", json!("auto")),
        ("/fields/2/codelist", json!([1, 2, "1 a"])),
        ("/fields/2/codelist/1", json!({"2 b": null})),
        ("/fields/2/codelist", Value::Null),
        ("/fields/2/rollup/group/g", json!("1 a")),
        ("/fields/3/multi_value", json!(true)),
        ("/fields/3/multi_value", json!(false)),
        ("/fields/3/multi_value", json!({})),
        ("/fields/3/codelist", json!("auto_split")),
        ("/fields/4/locator", json!("law")),
        ("/fields/4/aliases", json!("tags")),
        ("/fields/4/aliases", json!(["tags"])),
        ("/fields/4/csv_col_index", json!(4)),
        ("/fields/4/groupable", Value::Null),
        ("/fields/5/period", json!(2020)),
        ("/fields/5/period", json!("2020年度")),
        ("/fields/6/unit", json!("%")),
        ("/computed_measures", Value::Null),
        ("/computed_measures/0/condition_values", json!("1 a")),
        ("/links", Value::Null),
        ("/links/0/on", json!({"id": "id", "law": "law_num"})),
        ("/relations/0/fields", json!("region")),
        ("/relations", Value::Null),
    ];
    let mut failures = Vec::new();
    for (at, value) in cases {
        let definition = with(at, value.clone());
        let (served, diagnostics) = read(&text_of(&definition));
        let found = problems(&validator, &definition);
        if !served || !diagnostics.is_empty() {
            failures.push(format!("{at} = {value}: the reader says {diagnostics:#?}"));
        }
        if !found.is_empty() {
            failures.push(format!("{at} = {value}: the schema refuses it: {found:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
