//! Walking every cursor page returns every matching row exactly once, in order.

use serde_json::{Value, json};
use tally_semantic::Tool;

use crate::cases::run_case;

fn walk(mut args: Value) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut total;
    let mut pages = 0;
    loop {
        let out = run_case(Tool::QueryRecords, &args);
        let data = &out["data"];
        assert!(data.is_object(), "page failed: {out}");
        total = data["total"].as_u64().expect("total") as usize;
        let columns: Vec<&str> = data["columns"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let id_col = columns
            .iter()
            .position(|c| *c == "手続ID")
            .expect("id column");
        for row in data["rows"].as_array().expect("rows") {
            ids.push(row[id_col].as_str().expect("id").to_string());
        }
        pages += 1;
        assert!(pages < 100, "paging does not end");
        match data["next_cursor"].as_str() {
            Some(c) => args["cursor"] = json!(c),
            None => break,
        }
    }
    (ids, total)
}

#[test]
fn every_row_exactly_once_in_file_order() {
    let (ids, total) = walk(json!({ "dataset_id": "fixture", "select": ["手続ID"], "limit": 5 }));
    assert_eq!(total, 12);
    let expected: Vec<String> = (1..=12).map(|i| format!("P{i:02}")).collect();
    assert_eq!(ids, expected);
}

#[test]
fn every_row_exactly_once_with_ties_and_nulls_in_the_order_key() {
    for order in ["総手続件数", "-総手続件数", "所管府省庁", "-備考"] {
        let (ids, total) = walk(
            json!({ "dataset_id": "fixture", "select": ["手続ID"], "order_by": [order], "limit": 2 }),
        );
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            ids.len(),
            "{order}: a row came twice: {ids:?}"
        );
        assert_eq!(ids.len(), total, "{order}: rows missing: {ids:?}");
    }
}

#[test]
fn filtered_pages_keep_the_filter() {
    let (ids, total) = walk(
        json!({ "dataset_id": "fixture", "select": ["手続ID"], "where": {"手続類型": ["1 申請等"]}, "limit": 3 }),
    );
    assert_eq!(total, 9);
    assert_eq!(ids.len(), 9);
}

#[test]
fn a_cursor_from_another_query_is_refused() {
    let first = run_case(
        Tool::QueryRecords,
        &json!({ "dataset_id": "fixture", "limit": 2 }),
    );
    let cursor = first["data"]["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_string();
    let other = run_case(
        Tool::QueryRecords,
        &json!({ "dataset_id": "fixture", "limit": 2, "cursor": cursor, "where": {"所管府省庁": "省"} }),
    );
    assert_eq!(other["error"]["code"], "invalid_cursor", "{other}");
    let garbage = run_case(
        Tool::QueryRecords,
        &json!({ "dataset_id": "fixture", "cursor": "AAAA" }),
    );
    assert_eq!(garbage["error"]["code"], "invalid_cursor", "{garbage}");
}
