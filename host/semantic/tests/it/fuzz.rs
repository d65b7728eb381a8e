//! Arbitrary Unicode through the request parser, the resolver and the `dataset.yaml` reader:
//! whatever a caller or a dropped-in file holds, the answer is a value or a refusal, never a
//! panic (a panic reaches the caller as "internal error"). 100,000 generated cases each;
//! `TALLY_FUZZ_CASES` changes the count. Seeds are fixed by proptest's defaults per run;
//! a failure prints the smallest input it found.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value};
use tally_semantic::definition::{DatasetDef, load_definition};
use tally_semantic::request::{Request, Tool, parse};
use tally_semantic::resolve::{resolve_query, resolve_summarize};

use crate::harness::data_dir;

fn cases() -> u32 {
    std::env::var("TALLY_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn fixture_text() -> String {
    std::fs::read_to_string(data_dir("").join("fixture.dataset.yaml")).expect("fixture")
}

fn fixture() -> DatasetDef {
    load_definition("fixture/dataset.yaml", "fixture", &fixture_text())
        .expect("fixture definition is valid")
        .dataset
}

/// Characters whose case mapping or normalisation changes their length or script, and
/// the punctuation the parsers look at.
const TRICKY: &[&str] = &[
    "\u{212A}", // Kelvin sign: lower-cases to a one-byte `k`
    "\u{0130}", // İ: lower-cases to two characters
    "ß",
    "ﬃ",
    "Σ",
    "ς",
    "\u{0301}", // combining acute
    "\u{200B}",
    "\u{FEFF}",
    "ｅ－Ｔａｘ",
    "＋",
    "１０００",
    "㍻",
    "😀",
    "\u{10FFFF}",
    "\0",
    " AND ",
    " and ",
    " LIKE ",
    " IN (",
    ")",
    "'",
    "\"",
    "%",
    ">=",
    "<=",
    "!=",
    "<>",
    ">",
    "<",
    "=",
    ",",
    "$",
    "-",
    ":",
    "[",
    "]",
    "{",
    "}",
    "第5の2条第1項",
    "avg:",
    "sum:",
    "count",
    "e-Tax",
    "1e309",
    "-0",
    "NaN",
];

/// Names and values the fixture knows, so generated calls reach the resolver's deeper paths.
const KNOWN: &[&str] = &[
    "fixture",
    "procedures",
    "手続ID",
    "所管府省庁",
    "手続名",
    "手続類型",
    "オンライン化の実施状況",
    "手続が行われるイベント(個人)",
    "申請に関連する士業",
    "総手続件数",
    "実施済",
    "1 実施済",
    "2 未実施",
    "行政書士",
    "$contains",
    "$not_contains",
    "$gte",
    "$lt",
    "$in",
    "$eq",
    "$ne",
    "$exists",
    "$between",
    "-総手続件数",
    "avg:総手続件数",
    "sum:総手続件数",
    "count",
    "full",
];

fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => proptest::collection::vec(
            prop_oneof![
                2 => any::<char>(),
                1 => proptest::char::range('\u{3000}', '\u{30FF}'),
                1 => proptest::char::range('\u{FF00}', '\u{FFEF}'),
                1 => proptest::char::range(' ', '~'),
            ],
            0..6
        )
        .prop_map(|cs| cs.into_iter().collect::<String>()),
        3 => proptest::sample::select(TRICKY).prop_map(str::to_string),
        3 => proptest::sample::select(KNOWN).prop_map(str::to_string),
    ];
    proptest::collection::vec(piece, 0..5).prop_map(|parts| parts.concat())
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((text(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Arguments: mostly the tool's own parameters (so parsing gets past the unknown-name
/// check), some unknown ones, values of any shape; a value is sometimes sent as the JSON
/// text of itself, as models do.
fn arguments() -> impl Strategy<Value = (Tool, Value)> {
    let tool = proptest::sample::select(Tool::ALL.to_vec());
    tool.prop_flat_map(|tool| {
        let names: Vec<String> = tool.parameters().map(str::to_string).collect();
        let key = prop_oneof![
            8 => proptest::sample::select(names),
            1 => text(),
        ];
        let value = prop_oneof![
            3 => json(),
            1 => json().prop_map(|v| Value::String(v.to_string())),
        ];
        proptest::collection::vec((key, value), 0..6).prop_map(move |kv| {
            let mut map: Map<String, Value> = kv.into_iter().collect();
            if !map.contains_key("dataset_id") && tool != Tool::ListDatasets {
                map.insert("dataset_id".into(), Value::String("fixture".into()));
            }
            (tool, Value::Object(map))
        })
    })
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn requests_never_panic() {
    let def = fixture();
    runner()
        .run(&arguments(), |(tool, arguments)| {
            match parse(tool, &arguments) {
                Ok(Request::QueryRecords(args)) => {
                    if let Ok(plan) = resolve_query(&def, args) {
                        let _ = plan.to_json(&def);
                    }
                }
                Ok(Request::SummarizeRecords(args)) => {
                    if let Ok(plan) = resolve_summarize(&def, args) {
                        let _ = plan.to_json(&def);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = serde_json::to_string(&e).expect("a refusal serialises");
                }
            }
            Ok(())
        })
        .unwrap();
}

/// One edit of the fixture's text: a generated piece inserted at, or replacing, a point.
fn edited_fixture() -> impl Strategy<Value = String> {
    let base = fixture_text();
    let len = base.len();
    (0..=len, 0usize..40, text(), any::<bool>()).prop_map(move |(at, cut, piece, replace)| {
        let mut at = at;
        while !base.is_char_boundary(at) {
            at -= 1;
        }
        let mut end = if replace { (at + cut).min(len) } else { at };
        while !base.is_char_boundary(end) {
            end += 1;
        }
        format!("{}{}{}", &base[..at], piece, &base[end..])
    })
}

/// YAML-shaped text from the reader's own vocabulary: keys, indentation, anchors, aliases,
/// flow collections and quoting in any order.
fn yamlish() -> impl Strategy<Value = String> {
    const TOKENS: &[&str] = &[
        "\n",
        "\n  ",
        "\n- ",
        "  ",
        "- ",
        ": ",
        "? ",
        "&a ",
        "*a",
        "&b ",
        "*b",
        "!!str ",
        "!!int ",
        "[",
        "]",
        "{",
        "}",
        ", ",
        "'",
        "\"",
        "|\n  ",
        ">\n  ",
        "#",
        "---\n",
        "...\n",
        "\t",
        "\\",
        "fields:",
        "name: ",
        "role: ",
        "dim",
        "attr",
        "measure",
        "id",
        "codelist: ",
        "auto",
        "multi_value: true",
        "computed_measures:",
        "formula: ",
        "id_field: ",
        "title: ",
        "schema_version: \"1\"",
        "source:",
        "url: ",
        "null",
        "~",
        "1e400",
        "0x1F",
        "<<: *a",
    ];
    let piece = prop_oneof![
        6 => proptest::sample::select(TOKENS).prop_map(str::to_string),
        2 => text(),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|parts| parts.concat())
}

#[test]
fn dataset_definitions_never_panic() {
    let mut runner = runner();
    let input = prop_oneof![edited_fixture(), yamlish()];
    runner
        .run(&input, |text| {
            match load_definition("fuzz/dataset.yaml", "fuzz", &text) {
                Ok(loaded) => {
                    let _ = loaded.dataset.field_index("手続ID");
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Law references as people write them, with anything around them: the reader of provision
/// forms (`第5の2条第1項`, kanji and full-width numerals, lists) never panics either.
#[test]
fn law_references_never_panic() {
    const FORMS: &[&str] = &[
        "第",
        "条",
        "の",
        "項",
        "号",
        "附則",
        "別表",
        "5",
        "５",
        "五",
        "十",
        "百",
        "千",
        "万",
        "〇",
        "、",
        "・",
        "及び",
        "並びに",
        "から",
        "まで",
        "-",
        "～",
        "(",
        ")",
        "（",
        "）",
        "18446744073709551615",
        "99999999999999999999",
        "0",
    ];
    let piece = prop_oneof![
        4 => proptest::sample::select(FORMS).prop_map(str::to_string),
        1 => text(),
    ];
    let input = proptest::collection::vec(piece, 0..16).prop_map(|p| p.concat());
    runner()
        .run(&input, |text| {
            for reference in tally_plugin_api::locator::normalize_references(&text) {
                let _ = tally_plugin_api::locator::within(&reference, &reference);
            }
            Ok(())
        })
        .unwrap();
}
