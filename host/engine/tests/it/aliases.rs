//! A field's `aliases`: a law named by its short title or its law number (in kanji or in
//! digits) finds the records of its full title, disclosed; a full title always wins over
//! another law's short title; a name no record has is offered the nearest titles and short
//! titles. Both ways of serving data (prepared, read from the files) answer alike. The real
//! e-Gov files are read through the law plugin in `host/server/tests/it/laws.rs` and
//! `tests/e2e/test_laws.py`.

use serde_json::{Value, json};
use tally_engine::{Engine, Limits};
use tally_semantic::Tool;
use tally_storage::dataset::Serving;

use crate::fixture::{block_on, write_dataset};

const YAML: &str = r#"title: 法令（試験）
fields:
- {name: law_title, role: dim, aliases: [law_abbrev, law_num]}
- {name: law_abbrev, role: attr, multi_value: {separator: ","}}
- {name: law_num, role: attr}
- {name: article, role: dim}
"#;

const FUSEI: &str = "不正アクセス行為の禁止等に関する法律";
const BANGO: &str = "行政手続における特定の個人を識別するための番号の利用等に関する法律";

fn rows() -> Vec<Vec<Value>> {
    let law = |title: &str, abbrev: Option<&str>, num: &str, article: &str| {
        vec![json!(title), json!(abbrev), json!(num), json!(article)]
    };
    vec![
        law(
            FUSEI,
            Some("不正アクセス禁止法"),
            "平成十一年法律第百二十八号",
            "第一条",
        ),
        law(
            FUSEI,
            Some("不正アクセス禁止法"),
            "平成十一年法律第百二十八号",
            "第二条",
        ),
        law(
            BANGO,
            Some("マイナンバー法,個人番号法,番号法"),
            "平成二十五年法律第二十七号",
            "第一条",
        ),
        law(
            BANGO,
            Some("マイナンバー法,個人番号法,番号法"),
            "平成二十五年法律第二十七号",
            "第二条",
        ),
        law(
            BANGO,
            Some("マイナンバー法,個人番号法,番号法"),
            "平成二十五年法律第二十七号",
            "第三条",
        ),
        law("行政手続法", None, "平成五年法律第八十八号", "第一条"),
        // A law whose short title is another record's full title: the full title wins.
        law(
            "個人情報の保護に関する法律",
            Some("個人情報保護法"),
            "平成十五年法律第五十七号",
            "第一条",
        ),
        law("個人情報保護法", None, "令和九年法律第一号", "第一条"),
    ]
}

fn engines() -> (tempfile::TempDir, Vec<(Serving, Engine)>) {
    let tmp = tempfile::tempdir().expect("temp dir");
    write_dataset(&tmp.path().join("laws"), YAML, &rows());
    let engines = [Serving::Prepared, Serving::Streaming]
        .into_iter()
        .map(|serving| {
            (
                serving,
                Engine::open_with(
                    tmp.path(),
                    Limits {
                        serving,
                        ..Default::default()
                    },
                ),
            )
        })
        .collect();
    (tmp, engines)
}

fn query(engine: &Engine, conditions: Value) -> Value {
    block_on(engine.call(
        Tool::QueryRecords,
        &json!({"dataset_id": "laws", "where": conditions, "select": ["law_title", "article"], "limit": 100}),
    ))
    .unwrap_or_else(|e| panic!("{conditions}: {}", e.to_json()))
}

fn titles(envelope: &Value) -> Vec<String> {
    envelope["data"]["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r[0].as_str().unwrap_or(""),
                r[1].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn resolved(envelope: &Value) -> Vec<(String, String)> {
    envelope["data"]["resolved_fields"]
        .as_array()
        .expect("resolved_fields")
        .iter()
        .map(|r| {
            (
                r["input"].as_str().unwrap_or("").to_string(),
                r["canonical"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Regression (issue 37, "law short titles"): `["不正アクセス禁止法"]` on the title found no
/// record, and nothing said the law is served under its full title.
#[test]
fn a_short_title_or_a_law_number_names_the_law() {
    let (_tmp, engines) = engines();
    for (serving, engine) in &engines {
        let full = query(engine, json!({"law_title": [FUSEI]}));
        assert_eq!(full["data"]["total"], 2, "{serving:?}");
        assert!(
            resolved(&full).is_empty(),
            "{serving:?}: a full title is read as it is"
        );
        let expected = titles(&full);
        for (typed, read) in [
            ("不正アクセス禁止法", format!("{FUSEI} (its law_abbrev)")),
            (
                "平成十一年法律第百二十八号",
                format!("{FUSEI} (its law_num)"),
            ),
            (
                "平成11年法律第128号",
                format!("{FUSEI} (its law_num 平成十一年法律第百二十八号)"),
            ),
            (
                "平成１１年法律第１２８号",
                format!("{FUSEI} (its law_num 平成十一年法律第百二十八号)"),
            ),
        ] {
            for conditions in [
                json!({"law_title": [typed]}),
                json!({"law_title": {"$eq": typed}}),
                json!({"law_title": {"$in": [typed, "行政手続法"]}}),
                json!({"law_title": typed}),
            ] {
                let env = query(engine, conditions.clone());
                let got: Vec<String> = titles(&env)
                    .into_iter()
                    .filter(|t| !t.starts_with("行政手続法 "))
                    .collect();
                assert_eq!(got, expected, "{serving:?} {conditions}");
                assert_eq!(
                    resolved(&env),
                    vec![(typed.to_string(), read.clone())],
                    "{serving:?} {conditions}"
                );
                let warned = env["provenance"]["warnings"].to_string();
                assert!(
                    warned.contains(&format!("`{typed}`")),
                    "{serving:?}: {warned}"
                );
            }
        }
        // Any one of several short titles (a multi-value alias), and `$ne` leaves the law out.
        let env = query(engine, json!({"law_title": ["番号法"]}));
        assert_eq!(env["data"]["total"], 3, "{serving:?}");
        let env = query(engine, json!({"law_title": {"$ne": "不正アクセス禁止法"}}));
        assert_eq!(env["data"]["total"], 6, "{serving:?}");
        assert!(!titles(&env).iter().any(|t| t.starts_with(FUSEI)));
        // Counted alike by summarize_records.
        let env = block_on(engine.call(
            Tool::SummarizeRecords,
            &json!({"dataset_id": "laws", "where": {"law_title": ["マイナンバー法"]}, "group_by": ["law_title"]}),
        ))
        .expect("summary");
        assert_eq!(env["data"]["rows"], json!([[BANGO, 3]]), "{serving:?}");
        assert_eq!(
            resolved(&env),
            vec![(
                "マイナンバー法".to_string(),
                format!("{BANGO} (its law_abbrev)")
            )]
        );
    }
}

#[test]
fn a_full_title_wins_over_another_laws_short_title() {
    let (_tmp, engines) = engines();
    for (serving, engine) in &engines {
        let env = query(engine, json!({"law_title": ["個人情報保護法"]}));
        assert_eq!(titles(&env), ["個人情報保護法 第一条"], "{serving:?}");
        assert!(resolved(&env).is_empty(), "{serving:?}");
        // A plain string that some title contains stays a substring search.
        let env = query(engine, json!({"law_title": "行政手続"}));
        assert_eq!(env["data"]["total"], 4, "{serving:?}");
        assert!(resolved(&env).is_empty(), "{serving:?}");
    }
}

#[test]
fn a_name_no_law_has_is_offered_the_nearest_titles_and_short_titles() {
    let (_tmp, engines) = engines();
    for (serving, engine) in &engines {
        let env = query(engine, json!({"law_title": ["不正アクセス法"]}));
        assert_eq!(env["data"]["total"], 0, "{serving:?}");
        let hints = env["data"]["hints"].to_string();
        assert!(
            hints.contains("nor as its law_abbrev or law_num")
                && hints.contains("`不正アクセス禁止法` (the law_abbrev of 2 records)"),
            "{serving:?}: {hints}"
        );
    }
}
