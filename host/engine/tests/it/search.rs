//! Text search through a prepared table's dictionaries (issue 39) gives exactly what the
//! record-by-record test gives: `q` over every text field, `$contains` and `$not_contains` on
//! one, on generated text that mixes scripts, full- and half-width forms and letters that
//! fold into several (`ｶﾞ` → `ガ`, `Ⅻ` → `xii`, `㈱` → `(株)`), and on the real survey.
//! Each answer of a prepared engine (which searches the dictionaries) is compared with the
//! same call on an engine that reads the file at every call (which tests every record), and
//! with an independent count (a plain loop, NFKC and lower case).

use std::path::Path;

use serde_json::{Value, json};
use tally_engine::{Engine, Limits};
use tally_semantic::Tool;
use tally_storage::dataset::Serving;
use unicode_normalization::UnicodeNormalization;

use crate::fixture::{block_on, write_dataset};

fn engine(dir: &Path, serving: Serving) -> Engine {
    Engine::open_with(
        dir,
        Limits {
            serving,
            ..Default::default()
        },
    )
}

/// Text as the independent count compares it.
fn folded(s: &str) -> String {
    s.nfkc().collect::<String>().to_lowercase()
}

/// splitmix64: deterministic across platforms.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// Pieces of generated text: kana full- and half-width (with voiced marks that compose),
/// kanji, Latin in both cases and widths, digits, brackets and dashes of both widths, spaces,
/// and letters whose folded form is longer or different (`Ⅻ`, `㈱`, `ﬁ`, `İ`).
const PIECES: &[&str] = &[
    "ア", "カ", "ガ", "パ", "ｱ", "ｶ", "ｶﾞ", "ﾊﾟ", "ﾞ", "あ", "が", "電", "子", "申", "請", "手続",
    "A", "b", "Z", "e", "ａ", "Ｂ", "Ｅ", "ｚ", "1", "１", "0", "０", "(", ")", "（", "）", "-",
    "－", " ", "\u{3000}", "Ⅻ", "xii", "㈱", "(株)", "ﬁ", "fi", "İ", "i", "ß", "、", "・",
];

/// `least` pieces and up to `spread - 1` more.
fn text(rng: &mut Rng, least: usize, spread: usize) -> String {
    let pieces = least + rng.below(spread);
    (0..pieces).map(|_| rng.pick(PIECES)).collect()
}

/// A needle as a person types it: a piece of a value, as it is, folded, in upper case, or
/// with its Latin letters and digits full-width; sometimes pieces no value need hold.
fn needle(rng: &mut Rng, pool: &[String]) -> String {
    let chars: Vec<char> = pool[rng.below(pool.len())].chars().collect();
    let base: String = if chars.is_empty() || rng.below(5) == 0 {
        text(rng, 1, 2)
    } else {
        let start = rng.below(chars.len());
        let len = 1 + rng.below(3.min(chars.len() - start));
        chars[start..start + len].iter().collect()
    };
    let out = match rng.below(4) {
        0 => base,
        1 => folded(&base),
        2 => base.to_uppercase(),
        _ => base
            .chars()
            .map(|c| match c {
                '!'..='~' => char::from_u32(c as u32 - 0x21 + 0xFF01).unwrap_or(c),
                _ => c,
            })
            .collect(),
    };
    // A needle of spaces only is trimmed to nothing by some callers: keep one that is not.
    if out.trim().is_empty() {
        "電".to_string()
    } else {
        out
    }
}

const YAML: &str = r#"
title: generated text
fields:
- {name: id, role: id}
- {name: title, role: attr}
- {name: kind, role: dim}
- {name: note, role: attr}
- {name: n, role: measure, data_type: integer}
"#;

/// Rows whose titles repeat (a pool) with some of their own, kinds of a few values, notes
/// mostly missing.
fn rows(rng: &mut Rng, count: usize) -> (Vec<Vec<Value>>, Vec<String>) {
    let pool: Vec<String> = (0..400).map(|_| text(rng, 1, 8)).collect();
    let kinds: Vec<String> = (0..12).map(|_| text(rng, 1, 3)).collect();
    let rows = (0..count)
        .map(|i| {
            let title = if i % 7 == 0 {
                text(rng, 1, 10)
            } else {
                pool[rng.below(pool.len())].clone()
            };
            let note = (rng.below(4) == 0).then(|| text(rng, 0, 6));
            vec![
                json!(format!("r{i}")),
                json!(title),
                json!(kinds[rng.below(kinds.len())]),
                json!(note),
                json!(i as i64 % 97),
            ]
        })
        .collect();
    (rows, pool)
}

/// A call's total and its rows.
async fn answer(engine: &Engine, args: Value) -> (i64, Value) {
    let out = engine
        .call(Tool::QueryRecords, &args)
        .await
        .unwrap_or_else(|e| panic!("{args}: {}", e.to_json()));
    (
        out["data"]["total"].as_i64().expect("total"),
        out["data"]["rows"].clone(),
    )
}

/// The search went through the dictionaries (a search kept by the prepared table).
fn searched_the_dictionaries(engine: &Engine, dataset: &str) -> bool {
    engine
        .view(tally_engine::Caller::everyone("tests"))
        .dataset(dataset)
        .and_then(|ds| ds.ready())
        .is_some_and(|p| p.searches_kept() > 0)
}

#[test]
fn generated_text_is_found_as_the_record_by_record_test_finds_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut rng = Rng(39);
    let (rows, pool) = rows(&mut rng, 4000);
    write_dataset(&tmp.path().join("texts"), YAML, &rows);
    let prepared = engine(tmp.path(), Serving::Prepared);
    let files = engine(tmp.path(), Serving::Streaming);
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|r| [0, 1, 2, 3].map(|c| r[c].as_str().map(folded).unwrap_or_default()))
        .collect();
    block_on(async {
        prepared
            .prepare(&tally_engine::Caller::operator(), "texts")
            .await;
        let mut nonzero = 0;
        for case in 0..150 {
            let needle = needle(&mut rng, &pool);
            let want = folded(&needle);
            let count = |columns: &[usize]| {
                cells
                    .iter()
                    .filter(|r| columns.iter().any(|c| r[*c].contains(&want)))
                    .count() as i64
            };
            let calls = [
                (json!({"q": needle}), count(&[0, 1, 2, 3])),
                (
                    json!({"where": {"title": {"$contains": needle}}}),
                    count(&[1]),
                ),
                (
                    json!({"where": {"note": {"$not_contains": needle}}}),
                    rows.len() as i64 - count(&[3]),
                ),
                (
                    json!({"q": needle, "where": {"kind": {"$contains": needle}}}),
                    count(&[2]),
                ),
            ];
            for (mut args, want) in calls {
                args["dataset_id"] = json!("texts");
                args["limit"] = json!(30);
                let (total, page) = answer(&prepared, args.clone()).await;
                let (streamed_total, streamed_page) = answer(&files, args.clone()).await;
                assert_eq!(total, want, "case {case}: {args} (prepared)");
                assert_eq!(streamed_total, want, "case {case}: {args} (from the file)");
                assert_eq!(page, streamed_page, "case {case}: {args}");
                nonzero += usize::from(want > 0);
            }
        }
        assert!(nonzero > 300, "most needles find something: {nonzero}");
    });
    assert!(searched_the_dictionaries(&prepared, "texts"));
    // Hundreds of searches made; the table keeps its last eight.
    let kept = prepared
        .view(tally_engine::Caller::everyone("tests"))
        .dataset("texts")
        .and_then(|ds| ds.ready())
        .map(|p| p.searches_kept());
    assert_eq!(
        kept,
        Some(8),
        "a prepared table keeps its last eight searches"
    );
}

/// The real survey: a set of needles a person would type (Japanese without spaces, forms
/// written full-width in the data, codes, punctuation) and pieces of its own cells.
#[test]
fn the_survey_is_searched_as_the_record_by_record_test_searches_it() {
    let Some((tmp, _)) = crate::survey::survey_folder() else {
        return;
    };
    let prepared = engine(tmp.path(), Serving::Prepared);
    let files = engine(tmp.path(), Serving::Streaming);
    block_on(async {
        prepared
            .prepare(&tally_engine::Caller::operator(), "survey")
            .await;
        let mut needles: Vec<String> = [
            "電子",
            "e-Tax",
            "ｅ－Ｔａｘ",
            "E-TAX",
            "（",
            "(",
            "申請",
            "ｶ",
            "手続",
            "P2401",
            "第１項",
            "第1項",
            "1 実施済",
            "実施済",
            "ＧＰＳ",
            "押印+印鑑",
            "３０日",
            "30日",
            "オンライン化",
            "省",
            "zz-no-such-text",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        // Pieces of cells (every 997th record's name, two to four characters from its middle).
        let (_, page) = answer(
            &files,
            json!({"dataset_id": "survey", "select": ["手続名"], "limit": 5000}),
        )
        .await;
        for row in page.as_array().expect("rows").iter().step_by(997) {
            let name: Vec<char> = row[0].as_str().unwrap_or("").chars().collect();
            if name.len() >= 6 {
                let start = name.len() / 3;
                needles.push(name[start..start + 2 + name.len() % 3].iter().collect());
            }
        }
        for needle in &needles {
            for args in [
                json!({"q": needle, "select": ["手続ID"], "limit": 25}),
                json!({"where": {"手続名": {"$contains": needle}}, "select": ["手続ID"], "limit": 25}),
                json!({"where": {"情報システム(事務処理)": {"$not_contains": needle}}, "select": ["手続ID"], "limit": 25}),
            ] {
                let mut args = args;
                args["dataset_id"] = json!("survey");
                let (total, page) = answer(&prepared, args.clone()).await;
                let (streamed_total, streamed_page) = answer(&files, args.clone()).await;
                assert_eq!(total, streamed_total, "{args}");
                assert_eq!(page, streamed_page, "{args}");
            }
        }
    });
    assert!(searched_the_dictionaries(&prepared, "survey"));
}
