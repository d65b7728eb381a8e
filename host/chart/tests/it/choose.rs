//! The choice of chart: the rules of `chooseChart` in host/mcp/ui/view.js. The cases are
//! one table, tests/cases/charts.json, which the view's browser test reads too
//! (tests/e2e/test_views.py): a rule changed on one side only fails one of them.

use std::path::Path;

use serde_json::{Map, Value, json};
use tally_chart::{ChartError, Kind, MetricKind, choose};

use crate::common::*;

#[track_caller]
fn check(envelope: &Value, metric: usize, kind: Kind, alternatives: &[Kind]) {
    let choice = choose(envelope, metric).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(choice.kind, kind, "{choice:?}");
    assert_eq!(choice.alternatives, alternatives, "{choice:?}");
}

use Kind::Pie;

/// The shared table: every case, the chart and what its metric is, as both sides read them.
#[test]
fn the_shared_cases_choose_as_the_view_does() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases/charts.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let table: Value = serde_json::from_str(&text).expect("the table is JSON");
    let cases = table["cases"].as_array().expect("`cases` is a list");
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let mut failed = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("a case has a name");
        let env = shared_case(&table["metrics"], case);
        let metric = case["metric"].as_u64().expect("`metric` is an index") as usize;
        let expect = &case["expect"];
        let choice = match choose(&env, metric) {
            Ok(c) => c,
            Err(e) => {
                failed.push(format!("{name}: {e}"));
                continue;
            }
        };
        let names = |kinds: &[Kind]| kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>();
        let got = json!({
            "chart": choice.kind.as_str(),
            "alternatives": names(&choice.alternatives),
            "share": choice.share,
            "kind": choice.metric_kind.as_str(),
            "additive": choice.metric_kind.additive(),
            "unit": choice.metric_unit,
        });
        if &got != expect {
            failed.push(format!("{name}: expected {expect}, chose {got}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{} case(s) differ:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A summary as the table describes it (see its `about`).
fn shared_case(metrics: &Value, case: &Value) -> Value {
    let groups: Vec<&str> = case["groups"]
        .as_array()
        .expect("`groups`")
        .iter()
        .map(|g| g.as_str().expect("a group is a name"))
        .collect();
    let metas: Vec<Value> = case["metrics"]
        .as_array()
        .expect("`metrics`")
        .iter()
        .map(|m| {
            let key = m.as_str().expect("a metric is a key of `metrics`");
            metrics
                .get(key)
                .unwrap_or_else(|| panic!("no metric `{key}` in the table"))
                .clone()
        })
        .collect();
    let mut env = envelope(&groups, &metas, case["rows"].clone());
    if let Some(extra) = case.get("extra_columns").and_then(Value::as_array) {
        let columns = env["data"]["columns"].as_array_mut().expect("columns");
        columns.extend(extra.iter().cloned());
    }
    if let Some(truncated) = case.get("truncated") {
        env["data"]["truncated"] = truncated.clone();
    }
    if let Some(Value::Object(given)) = case.get("parameters") {
        let parameters: &mut Map<String, Value> = env["data"]["parameters"]
            .as_object_mut()
            .expect("parameters");
        for (k, v) in given {
            parameters.insert(k.clone(), v.clone());
        }
    }
    env
}

/// The engine always writes `having: []`; a result without the key at all is no condition
/// either.
#[test]
fn regression_an_absent_having_is_no_condition() {
    let mut env = by_ministry(3);
    env["data"]["parameters"]
        .as_object_mut()
        .unwrap()
        .remove("having");
    check(&env, 0, Pie, &[Pie, Kind::Bar, Kind::Table]);
}

/// What a metric is comes from `metrics[].kind`, never from its name: an `avg:` column said
/// to be a share is drawn as one, and a summary without the statement is refused.
#[test]
fn the_metric_kind_is_read_not_guessed() {
    let kind = |m: Value| {
        let env = envelope(
            &[MINISTRY],
            &[m],
            json!([["総務省", 0.5], ["法務省", 0.25]]),
        );
        choose(&env, 0).map(|c| c.metric_kind)
    };
    assert_eq!(kind(rate()).unwrap(), MetricKind::Share);
    assert_eq!(kind(ratio()).unwrap(), MetricKind::Ratio);
    let mut field = avg("総手続件数");
    field["kind"] = json!("share");
    assert_eq!(kind(field).unwrap(), MetricKind::Share);
    let mut unsaid = rate();
    unsaid.as_object_mut().unwrap().remove("kind");
    let err = kind(unsaid).unwrap_err().to_string();
    assert!(
        err.contains("metrics[0] (`avg:オンライン率`) has no `kind`"),
        "{err}"
    );
    let mut unknown = rate();
    unknown["kind"] = json!("rate");
    let err = kind(unknown).unwrap_err().to_string();
    assert!(
        err.contains("has kind `rate`, not one of count, sum, average, min, max, ratio, share"),
        "{err}"
    );
}

#[test]
fn a_metric_that_is_not_there_is_refused_with_the_ones_that_are() {
    let env = envelope(&[MINISTRY], &[count(), rate()], json!([["総務省", 3, 0.5]]));
    let err = choose(&env, 2).unwrap_err();
    assert!(
        matches!(err, ChartError::NoSuchMetric { index: 2, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("0 = count") && msg.contains(&format!("1 = {RATE}")),
        "{msg}"
    );
}

#[test]
fn what_is_not_a_summary_is_refused_saying_what_it_is() {
    let cases = [
        (json!([1, 2]), "a list of 2"),
        (
            json!({"columns": [], "metrics": []}),
            "pass the whole envelope",
        ),
        (
            json!({"data": {"columns": [], "rows": [], "total": 0}, "provenance": {}}),
            "query_records",
        ),
        (
            with(by_ministry(2), "/data/rows", json!([["総務省"]])),
            "row 0 has 1 cells for 2 columns",
        ),
        (
            with(by_ministry(2), "/data/rows", json!("none")),
            "`data.rows` is a string",
        ),
    ];
    for (env, expected) in cases {
        let err = choose(&env, 0).unwrap_err();
        assert!(matches!(err, ChartError::NotASummary { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(expected), "{msg}");
        assert!(msg.contains("summarize_records"), "{msg}");
    }
}

#[test]
fn kind_names_read_as_the_view_writes_them() {
    for kind in Kind::ALL {
        assert_eq!(kind.as_str().parse::<Kind>().unwrap(), kind);
        assert_eq!(kind.to_string(), kind.as_str());
    }
    assert_eq!(" Pie ".parse::<Kind>().unwrap(), Pie);
    let err = "donut".parse::<Kind>().unwrap_err().to_string();
    assert!(err.contains("donut") && err.contains("bar, pie"), "{err}");
}
