//! Every metric equals an independent computation (a plain loop) on random data with nulls,
//! empty groups, zero denominators and multi-value cells.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tally_semantic::Tool;

use crate::fixture::{block_on, write_dataset};

pub(crate) const YAML: &str = r#"
title: random
fields:
- {name: id, role: id}
- {name: grp, role: dim}
- name: status
  role: dim
  codelist: ["1 done", "2 open"]
- {name: tags, role: attr, multi_value: true}
- {name: n, role: measure, data_type: integer}
- {name: d, role: measure, data_type: integer}
- {name: v, role: measure, data_type: number}
computed_measures:
- {name: share, mode: count_where, condition_field: status, condition_values: ["1 done"]}
- {name: ratio, mode: sum_ratio, numerator: n, denominator: d}
"#;

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
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub grp: Option<String>,
    pub status: Option<String>,
    pub tags: Option<String>,
    pub n: Option<i64>,
    pub d: Option<i64>,
    pub v: Option<f64>,
}

/// The rows as the fixture writer takes them, in `YAML`'s field order (ids `r0`, `r1`, …).
pub(crate) fn as_json(rows: &[Row]) -> Vec<Vec<Value>> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                json!(format!("r{i}")),
                json!(r.grp),
                json!(r.status),
                json!(r.tags),
                json!(r.n),
                json!(r.d),
                json!(r.v),
            ]
        })
        .collect()
}

pub(crate) fn random_rows(seed: u64, count: usize) -> Vec<Row> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|_| {
            // Group E only ever has null measures; group F has zero denominators.
            let grp = match rng.below(7) {
                0 => None,
                k => Some(["A", "B", "C", "D", "E", "F"][k as usize - 1].to_string()),
            };
            let measures_null = grp.as_deref() == Some("E");
            let status = match rng.below(4) {
                0 => None,
                1 => Some("2 open".to_string()),
                _ => Some("1 done".to_string()),
            };
            let tags = match rng.below(5) {
                0 => None,
                1 => Some(" ".to_string()),
                2 => Some("x; y".to_string()),
                3 => Some("y;;z ".to_string()),
                _ => Some("x".to_string()),
            };
            let n = (!measures_null && rng.below(5) != 0).then(|| rng.below(1000) as i64);
            let d = if grp.as_deref() == Some("F") {
                Some(0)
            } else {
                (!measures_null && rng.below(5) != 0).then(|| rng.below(50) as i64)
            };
            let v =
                (!measures_null && rng.below(4) != 0).then(|| (rng.below(10_000) as f64) / 100.0);
            Row {
                grp,
                status,
                tags,
                n,
                d,
                v,
            }
        })
        .collect()
}

fn round(v: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (v * p).round() / p
}

/// A group key as text: a missing value (JSON null) as "", which no present key is.
fn key(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => other.as_str().expect("a text key or null").to_string(),
    }
}

fn close(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(1.0),
        _ => a == b,
    }
}

#[derive(Default)]
struct Acc {
    count: i64,
    n_sum: i64,
    n_nulls: i64,
    n_min: Option<i64>,
    v_sum: f64,
    v_count: i64,
    v_max: Option<f64>,
    v_nulls: i64,
    done: i64,
    ratio_num: f64,
    ratio_den: f64,
    any_num: bool,
    any_den: bool,
}

fn expected(rows: &[Row]) -> BTreeMap<String, Vec<Value>> {
    let mut groups: BTreeMap<String, Acc> = BTreeMap::new();
    for r in rows {
        // A missing key (null or blank) is the group null, keyed "" here.
        let a = groups
            .entry(r.grp.clone().filter(|g| !g.is_empty()).unwrap_or_default())
            .or_default();
        a.count += 1;
        match r.n {
            Some(n) => {
                a.n_sum += n;
                a.n_min = Some(a.n_min.map_or(n, |m| m.min(n)));
                a.ratio_num += n as f64;
                a.any_num = true;
            }
            None => a.n_nulls += 1,
        }
        if let Some(d) = r.d {
            a.ratio_den += d as f64;
            a.any_den = true;
        }
        match r.v {
            Some(v) => {
                a.v_sum += v;
                a.v_count += 1;
                a.v_max = Some(a.v_max.map_or(v, |m| m.max(v)));
            }
            None => a.v_nulls += 1,
        }
        if r.status.as_deref() == Some("1 done") {
            a.done += 1;
        }
    }
    groups
        .into_iter()
        .map(|(k, a)| {
            let avg_v = (a.v_count > 0).then(|| round(a.v_sum / a.v_count as f64, 2));
            let share = round(a.done as f64 / a.count as f64, 4);
            // A sum over no value is null (as SQL), and so is a ratio whose numerator is one.
            let ratio = (a.any_num && a.any_den && a.ratio_den != 0.0)
                .then(|| round(a.ratio_num / a.ratio_den, 4));
            (
                k,
                vec![
                    json!(a.count),
                    json!(a.any_num.then_some(a.n_sum)),
                    json!(a.n_nulls),
                    json!(avg_v),
                    json!(a.v_nulls),
                    json!(a.n_min),
                    json!(a.n_nulls),
                    json!(a.v_max),
                    json!(a.v_nulls),
                    json!(share),
                    json!(ratio),
                ],
            )
        })
        .collect()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "the hand loop is the oracle: it stays one readable piece"
)]
fn summarize_metrics_equal_a_hand_loop() {
    for seed in [1u64, 7, 42] {
        let rows = random_rows(seed, 500);
        let tmp = tempfile::tempdir().expect("tmp");
        let json_rows = as_json(&rows);
        write_dataset(&tmp.path().join("random"), YAML, &json_rows);
        let engine = tally_engine::Engine::open(tmp.path());
        let out = block_on(engine.call(
            Tool::SummarizeRecords,
            &json!({
                "dataset_id": "random",
                "group_by": ["grp"],
                "metrics": ["count", "sum:n", "avg:v", "min:n", "max:v", "avg:share", "avg:ratio"],
            }),
        ))
        .unwrap_or_else(|e| panic!("seed {seed}: {}", e.to_json()));
        let data = &out["data"];
        let columns: Vec<&str> = data["columns"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            columns,
            [
                "grp",
                "count",
                "sum:n",
                "n:null_excluded",
                "avg:v",
                "v:null_excluded",
                "min:n",
                "max:v",
                "avg:share",
                "avg:ratio"
            ],
        );
        let want = expected(&rows);
        let got: BTreeMap<String, Vec<Value>> = data["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                let r = r.as_array().expect("row");
                (key(&r[0]), r[1..].to_vec())
            })
            .collect();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "seed {seed}: groups"
        );
        for (k, w) in &want {
            let g = &got[k];
            // The engine reports null_excluded once per field (n and v each appear twice above).
            let w_dedup = vec![
                w[0].clone(),
                w[1].clone(),
                w[2].clone(),
                w[3].clone(),
                w[4].clone(),
                w[5].clone(),
                w[7].clone(),
                w[9].clone(),
                w[10].clone(),
            ];
            assert_eq!(g.len(), w_dedup.len(), "seed {seed} group {k}: {g:?}");
            for (i, (a, b)) in g.iter().zip(&w_dedup).enumerate() {
                assert!(
                    close(a, b),
                    "seed {seed} group `{k}` column {}: engine {a} vs loop {b}",
                    columns[i + 1]
                );
            }
        }
        // Groups are ordered by count descending, ties by key, the missing key last.
        let counts: Vec<(i64, String)> = data["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| (r[1].as_i64().expect("count"), key(&r[0])))
            .collect();
        let mut sorted = counts.clone();
        sorted.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(a.1.is_empty().cmp(&b.1.is_empty()))
                .then(a.1.cmp(&b.1))
        });
        assert_eq!(counts, sorted, "seed {seed}: order");

        // Exploded counts: one per trimmed, non-empty part; records without parts form no
        // group and are counted in records_without_value.
        let out = block_on(engine.call(
            Tool::SummarizeRecords,
            &json!({ "dataset_id": "random", "group_by": ["tags"] }),
        ))
        .unwrap_or_else(|e| panic!("{}", e.to_json()));
        let mut parts: BTreeMap<String, i64> = BTreeMap::new();
        let mut without = 0i64;
        for r in &rows {
            let ps: Vec<String> = r
                .tags
                .as_deref()
                .unwrap_or("")
                .split(';')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect();
            if ps.is_empty() {
                without += 1;
            }
            for p in ps {
                *parts.entry(p).or_default() += 1;
            }
        }
        let got: BTreeMap<String, i64> = out["data"]["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| (key(&r[0]), r[1].as_i64().expect("count")))
            .collect();
        assert_eq!(got, parts, "seed {seed}: exploded counts");
        assert_eq!(
            out["data"]["records_without_value"]["tags"],
            json!(without),
            "seed {seed}: records without parts"
        );
        assert_eq!(out["data"]["pre_explode_records"], json!(rows.len()));
    }
}
