//! Where `retrievedAt` and `uri` come from: `.fetch.json`, else `retrieved_at`, else the file's
//! modification time with a warning; the publisher's URL, else a stable URN.

use serde_json::{Value, json};
use tally_semantic::Tool;

use crate::fixture::{block_on, write_dataset};

const ROWS: &str = r#"[["a", 1], ["b", 2]]"#;

fn envelope(yaml: &str, fetch: Option<&str>) -> Value {
    let tmp = tempfile::tempdir().expect("tmp");
    let folder = tmp.path().join("d");
    let rows: Vec<Vec<Value>> = serde_json::from_str(ROWS).expect("rows");
    write_dataset(&folder, yaml, &rows);
    if let Some(f) = fetch {
        std::fs::write(folder.join(".fetch.json"), f).expect("fetch record");
    }
    let engine = tally_engine::Engine::open(tmp.path());
    block_on(engine.call(
        Tool::QueryRecords,
        &json!({ "dataset_id": "d", "limit": 1 }),
    ))
    .unwrap_or_else(|e| panic!("{}", e.to_json()))
}

const FIELDS: &str =
    "fields:\n- {name: k, role: id}\n- {name: n, role: measure, data_type: integer}\n";

#[test]
fn fetch_record_wins_and_keeps_its_date_form() {
    let yaml = format!(
        "title: t\nretrieved_at: \"2024-01-01\"\nsource: {{url: https://example.org/x}}\n{FIELDS}"
    );
    let env = envelope(
        &yaml,
        Some(r#"{"fetched_at": "2025-09-24", "fetched_from": "https://example.org/x.csv"}"#),
    );
    let s = &env["provenance"]["sources"][0];
    assert_eq!(s["retrievedAt"], "2025-09-24", "a date stays a date");
    assert_eq!(s["uri"], "https://example.org/x");
    let env = envelope(
        &yaml,
        Some(r#"{"fetched_at": "2025-09-24T10:00:00+09:00"}"#),
    );
    assert_eq!(
        env["provenance"]["sources"][0]["retrievedAt"],
        "2025-09-24T10:00:00+09:00"
    );
}

#[test]
fn definition_date_when_no_fetch_record() {
    let yaml =
        format!("title: t\nretrieved_at: \"2024-01-01\"\npublished_at: \"2023-12-01\"\n{FIELDS}");
    let env = envelope(&yaml, None);
    let s = &env["provenance"]["sources"][0];
    assert_eq!(s["retrievedAt"], "2024-01-01");
    assert_eq!(s["publishedAt"], "2023-12-01");
    assert_eq!(
        s["uri"], "urn:tally:dataset:d",
        "no URL: a stable URN, never a path"
    );
    assert!(s.get("effectiveAt").is_none(), "never invented");
}

#[test]
fn file_time_with_a_warning_as_the_last_resort() {
    let env = envelope(&format!("title: t\n{FIELDS}"), Some("not json"));
    let s = &env["provenance"]["sources"][0];
    let t = s["retrievedAt"].as_str().expect("retrievedAt");
    assert!(t.contains('T') && t.ends_with('Z'), "{t}");
    let warnings = env["provenance"]["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("modification time"))),
        "{warnings:?}"
    );
    assert!(s.get("publishedAt").is_none());
}
