//! `cite_provisions` a page at a time (issue 37): the provisions of a call are cut to the
//! result's context budget like `query_records`' records, with a signed cursor for the rest;
//! the pages of a call, walked, are its provisions exactly once, in order; an edited cursor is
//! refused; a page is checked again by `verify_answer`; the `where` filter and the groups are
//! stated in the transformations. (The real laws and survey: tests/e2e/test_provisions.py.)

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use tally_engine::{Engine, Limits};
use tally_semantic::{ErrorCode, Tool};

use crate::fixture::{block_on, write_dataset};

const LAWS: &str = "title: Laws\nfields:\n- {name: law_num, role: dim}\n- {name: law_title, role: dim}\n- {name: locator, role: attr, locator: law}\n- {name: text, role: attr}\n";
const REFS: &str = "title: References\nlinks: [{to: laws, on: {法令番号: law_num, 根拠条項号: locator}}]\nfields:\n- {name: id, role: id}\n- {name: 法令番号, role: dim}\n- {name: 根拠条項号, role: attr}\n- {name: 府省, role: dim}\n";
const LAW_A: &str = "平成五年法律第八十八号";
const LAW_B: &str = "平成二十五年法律第二十七号";
/// A budget that holds a handful of provisions (each about 200 characters of Japanese text).
const SMALL_BUDGET: usize = 1_500;

/// Two laws of 60 articles each, and 400 records resting on them: every article of both named
/// by records of every ministry, some by more than others, so counts differ and tie.
fn datasets(dir: &Path) {
    let mut laws = Vec::new();
    for (num, title) in [(LAW_A, "行政手続法"), (LAW_B, "番号法")] {
        for article in 1..=60 {
            let locator =
                tally_plugin_api::locator::normalize_references(&format!("第{article}条"))
                    .pop()
                    .expect("a locator");
            let text = format!(
                "{title}{locator}の規定。{}",
                "申請に対する処分の基準を定める。".repeat(12)
            );
            laws.push(vec![json!(num), json!(title), json!(locator), json!(text)]);
        }
    }
    write_dataset(&dir.join("laws"), LAWS, &laws);
    let refs: Vec<Vec<Value>> = (0..400)
        .map(|i| {
            vec![
                json!(format!("R{i:03}")),
                json!(if i % 2 == 0 { LAW_A } else { LAW_B }),
                json!(format!("第{}条", (i / 2) % 60 + 1)),
                json!(["A省", "B省", "C省"][i % 3]),
            ]
        })
        .collect();
    write_dataset(&dir.join("refs"), REFS, &refs);
}

fn engine(dir: &Path, max_result_tokens: usize) -> Engine {
    Engine::open_with(
        dir,
        Limits {
            max_result_tokens,
            ..Default::default()
        },
    )
}

fn cite(engine: &Engine, args: &Value) -> Value {
    block_on(engine.call(Tool::CiteProvisions, args)).unwrap_or_else(|e| panic!("{args}: {e:?}"))
}

/// The estimated tokens of a page's rows, as the budget counts them.
fn row_tokens(rows: &[Value]) -> usize {
    rows.iter()
        .map(|r| tally_engine::meta::estimated_tokens(&r.to_string()) + 1)
        .sum()
}

/// Every page of `args`, in order.
fn pages(engine: &Engine, args: &Value) -> Vec<Value> {
    let mut args = args.clone();
    let mut out: Vec<Value> = Vec::new();
    loop {
        let page = cite(engine, &args);
        let next = page["data"]["next_cursor"].as_str().map(str::to_string);
        out.push(page);
        assert!(out.len() < 200, "paging does not end");
        match next {
            Some(c) => args["cursor"] = json!(c),
            None => return out,
        }
    }
}

#[test]
fn a_broad_cite_is_paged_within_the_budget_and_its_pages_are_its_provisions_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    datasets(tmp.path());
    let args = json!({ "dataset_id": "refs", "group_by": ["府省"], "limit": 10000 });
    let whole = cite(&engine(tmp.path(), 10_000_000), &args);
    let all = whole["data"]["rows"].as_array().expect("rows").clone();
    let total = whole["data"]["total_provisions"].as_u64().expect("total") as usize;
    assert_eq!(all.len(), total, "an unbounded call holds every provision");
    assert!(whole["data"]["next_cursor"].is_null());
    assert!(
        row_tokens(&all) > 10 * SMALL_BUDGET,
        "the call is far past the small budget: {} tokens, {} rows, {}",
        row_tokens(&all),
        all.len(),
        all.first().unwrap_or(&Value::Null)
    );

    let small = engine(tmp.path(), SMALL_BUDGET);
    let walked = pages(&small, &args);
    assert!(walked.len() > 10, "{} pages", walked.len());
    let mut rows: Vec<Value> = Vec::new();
    for (i, page) in walked.iter().enumerate() {
        let data = &page["data"];
        let page_rows = data["rows"].as_array().expect("rows");
        assert!(!page_rows.is_empty(), "page {i} moves forward");
        assert!(
            row_tokens(page_rows) <= SMALL_BUDGET,
            "page {i}: {} tokens",
            row_tokens(page_rows)
        );
        assert_eq!(
            data["offset"],
            json!(rows.len()),
            "page {i} starts where the last ended"
        );
        assert_eq!(data["returned"], json!(page_rows.len()));
        assert_eq!(data["total_provisions"], json!(total));
        let refs = data["rowSourceRefs"].as_array().expect("row refs");
        assert_eq!(refs.len(), page_rows.len(), "a source per row");
        let warnings = page["provenance"]["warnings"].to_string();
        if i + 1 < walked.len() {
            assert!(
                warnings.contains("context budget") && warnings.contains("next_cursor"),
                "{warnings}"
            );
        }
        rows.extend(page_rows.iter().cloned());
    }
    assert_eq!(
        rows, all,
        "the pages, end to end, are the unbounded call's rows"
    );
}

#[test]
fn an_edited_or_foreign_cite_cursor_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    datasets(tmp.path());
    let small = engine(tmp.path(), SMALL_BUDGET);
    let args = json!({ "dataset_id": "refs" });
    let first = cite(&small, &args);
    let cursor = first["data"]["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    let refused = |cursor: &str, args: &Value| -> tally_semantic::RequestError {
        let mut args = args.clone();
        args["cursor"] = json!(cursor);
        match block_on(small.call(Tool::CiteProvisions, &args)) {
            Err(tally_engine::error::EngineError::Request(e)) => e,
            other => panic!("{cursor} was not refused: {other:?}"),
        }
    };
    // Its offset rewritten: the signature no longer matches.
    let (body, tag) = cursor.split_once('.').expect("two parts");
    let payload = String::from_utf8(URL_SAFE_NO_PAD.decode(body).expect("b64")).expect("utf8");
    let offset = serde_json::from_str::<Value>(&payload).expect("json")["o"].clone();
    let edited = payload.replace(&format!("\"o\":{offset}"), "\"o\":1");
    assert_ne!(edited, payload);
    let edited = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(edited.as_bytes()));
    let e = refused(&edited, &args);
    assert_eq!(e.code, ErrorCode::InvalidCursor);
    assert!(e.message.contains("edited"), "{}", e.message);
    // Another call's cursor (other conditions), and a query's: one cursor check for both.
    let e = refused(
        &cursor,
        &json!({ "dataset_id": "refs", "where": {"府省": ["A省"]} }),
    );
    assert!(e.message.contains("different query"), "{}", e.message);
    let query = block_on(small.call(
        Tool::QueryRecords,
        &json!({ "dataset_id": "refs", "limit": 1 }),
    ))
    .expect("query");
    let e = refused(
        query["data"]["next_cursor"].as_str().expect("cursor"),
        &args,
    );
    assert_eq!(e.code, ErrorCode::InvalidCursor, "{}", e.message);
}

#[test]
fn a_cite_page_is_recorded_with_its_cursor_and_verifies_identical() {
    let tmp = tempfile::tempdir().expect("tmp");
    datasets(tmp.path());
    let small = engine(tmp.path(), SMALL_BUDGET);
    let walked = pages(
        &small,
        &json!({ "dataset_id": "refs", "where": {"法令番号": [LAW_A]} }),
    );
    assert!(walked.len() > 2);
    let second = &walked[1];
    let recorded = &second["provenance"]["query"]["arguments"];
    assert_eq!(
        recorded["cursor"], walked[0]["data"]["next_cursor"],
        "the recorded call asks for this page"
    );
    let checked =
        block_on(small.call(Tool::VerifyAnswer, &json!({ "envelope": second }))).expect("verify");
    assert_eq!(
        checked["data"]["status"], "identical",
        "{}",
        checked["data"]
    );
    // The page's numbers edited: no longer identical.
    let mut altered = second.clone();
    altered["data"]["rows"][0][5] = json!(9999);
    let checked =
        block_on(small.call(Tool::VerifyAnswer, &json!({ "envelope": altered }))).expect("verify");
    assert_eq!(checked["data"]["status"], "altered", "{}", checked["data"]);
}

#[test]
fn a_cite_states_its_where_filter_and_groups() {
    let tmp = tempfile::tempdir().expect("tmp");
    datasets(tmp.path());
    let got = cite(
        &engine(tmp.path(), 10_000_000),
        &json!({ "dataset_id": "refs", "where": {"府省": ["A省"]}, "group_by": ["府省"] }),
    );
    let steps: Vec<(String, String)> = got["provenance"]["transformations"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|t| {
            (
                t["type"].as_str().unwrap_or("").to_string(),
                t["description"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let records = got["data"]["records_total"].as_u64().expect("records");
    assert_eq!(records, 134, "every third of 400 records, from the first");
    assert!(
        steps.iter().any(|(kind, d)| kind == "filter"
            && d.contains("府省 in [\"A省\"]")
            && d.contains(&format!("{records} matched"))),
        "{steps:?}"
    );
    assert!(
        steps
            .iter()
            .any(|(kind, d)| kind == "aggregate" && d.contains("`府省` (group_by)")),
        "{steps:?}"
    );
    // Without `where`, that is said too.
    let all = cite(
        &engine(tmp.path(), 10_000_000),
        &json!({ "dataset_id": "refs" }),
    );
    assert!(
        all["provenance"]["transformations"]
            .to_string()
            .contains("kept records of `refs` where (no condition): 400 matched"),
        "{}",
        all["provenance"]["transformations"]
    );
}

/// Issue 38: the fields of the dataset linked to are resolved against its own definition once,
/// when a call starts; a link naming a field it does not declare (it was renamed there) is
/// refused with the link's fields named, word for word as before.
#[test]
fn a_link_to_a_field_the_linked_dataset_lacks_is_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    datasets(tmp.path());
    let renamed = LAWS.replace("law_num", "law_no");
    write_dataset(
        &tmp.path().join("laws"),
        &renamed,
        &[vec![
            json!(LAW_A),
            json!("行政手続法"),
            json!("第一条"),
            json!("目的"),
        ]],
    );
    let engine = engine(tmp.path(), 10_000_000);
    match block_on(engine.call(Tool::CiteProvisions, &json!({ "dataset_id": "refs" }))) {
        Err(tally_engine::EngineError::Dataset {
            dataset, message, ..
        }) => {
            assert_eq!(dataset, "refs");
            assert_eq!(
                message,
                "its link to `laws` cannot be followed: `法令番号` or `law_num` is not a declared field"
            );
        }
        other => panic!("refused as a broken link, got {other:?}"),
    }
}
