//! The choice of chart: the rules of `chooseChart` in host/mcp/ui/view.js, case by case.

use serde_json::{Value, json};
use tally_chart::{ChartError, Kind, MetricKind, choose};

use crate::common::*;

#[track_caller]
fn check(envelope: &Value, metric: usize, kind: Kind, alternatives: &[Kind]) {
    let choice = choose(envelope, metric).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(choice.kind, kind, "{choice:?}");
    assert_eq!(choice.alternatives, alternatives, "{choice:?}");
}

use Kind::{Bar, Card, Heatmap, Pie, Stacked, Table, Treemap};

#[test]
fn one_group_of_counts_is_a_share_of_the_whole() {
    check(&by_ministry(3), 0, Pie, &[Pie, Bar, Table]);
    check(&by_ministry(7), 0, Pie, &[Pie, Bar, Table]);
    check(&by_ministry(8), 0, Treemap, &[Treemap, Bar, Table]);
    check(&by_ministry(9), 0, Treemap, &[Treemap, Bar, Table]);
    let choice = choose(&by_ministry(3), 0).unwrap();
    assert!(choice.share);
    assert_eq!(choice.metric, "count");
    assert_eq!(choice.metric_kind, MetricKind::Count);
    assert_eq!(choice.groups, vec![MINISTRY]);
}

#[test]
fn sums_are_shares_too() {
    let env = envelope(
        &[MINISTRY],
        &[sum("総手続件数")],
        json!([["総務省", 1500], ["法務省", 1400]]),
    );
    check(&env, 0, Pie, &[Pie, Bar, Table]);
}

#[test]
fn a_null_value_does_not_stop_a_share() {
    let env = envelope(
        &[MINISTRY],
        &[count()],
        json!([["総務省", 3], [null, null]]),
    );
    check(&env, 0, Pie, &[Pie, Bar, Table]);
}

#[test]
fn parts_that_do_not_make_a_whole_are_bars() {
    let cases = [
        (
            "truncated",
            with(by_ministry(3), "/data/truncated", json!(true)),
        ),
        (
            "exploded",
            with(
                by_ministry(3),
                "/data/parameters/explode",
                json!([MINISTRY]),
            ),
        ),
        (
            "explode as one value",
            with(by_ministry(3), "/data/parameters/explode", json!(MINISTRY)),
        ),
        (
            "having",
            with(
                by_ministry(3),
                "/data/parameters/having",
                json!(["count ≥ 2"]),
            ),
        ),
        ("one group", by_ministry(1)),
        (
            "negative",
            envelope(
                &[MINISTRY],
                &[sum("差額")],
                json!([["総務省", 10], ["法務省", -5]]),
            ),
        ),
        (
            "average of a field",
            envelope(
                &[MINISTRY],
                &[avg("総手続件数")],
                json!([["総務省", 10.5], ["法務省", 3]]),
            ),
        ),
        (
            "rate",
            envelope(
                &[MINISTRY],
                &[rate()],
                json!([["総務省", 0.5234], ["法務省", 0.1]]),
            ),
        ),
    ];
    for (name, env) in cases {
        let choice = choose(&env, 0).unwrap();
        assert_eq!((name, choice.kind), (name, Bar));
        assert_eq!(choice.alternatives, vec![Bar, Table], "{name}");
        assert!(!choice.share, "{name}");
    }
}

/// The engine always writes `having: []` and `explode: []`; an empty list is no condition.
/// (The view read `having: []` as a condition and never chose a pie for a real result.)
#[test]
fn regression_empty_having_and_explode_lists_are_no_condition() {
    let env = by_ministry(3);
    assert_eq!(env["data"]["parameters"]["having"], json!([]));
    check(&env, 0, Pie, &[Pie, Bar, Table]);
    check(
        &with(env.clone(), "/data/parameters/having", Value::Null),
        0,
        Pie,
        &[Pie, Bar, Table],
    );
    let absent = {
        let mut e = env;
        e["data"]["parameters"]
            .as_object_mut()
            .unwrap()
            .remove("having");
        e
    };
    check(&absent, 0, Pie, &[Pie, Bar, Table]);
}

#[test]
fn the_metric_charted_decides() {
    let env = envelope(
        &[MINISTRY],
        &[count(), rate()],
        json!([["総務省", 3, 0.3333], ["法務省", 2, 0.5]]),
    );
    check(&env, 0, Pie, &[Pie, Bar, Table]);
    check(&env, 1, Bar, &[Bar, Table]);
    assert_eq!(choose(&env, 1).unwrap().metric_kind, MetricKind::Rate);
}

/// A percentage only when the metadata says `"share": true` (a count_where measure); any
/// other computed measure is a ratio. `share` on an average of a field changes nothing, as in
/// the view.
#[test]
fn only_a_share_is_a_rate() {
    let kind = |m: Value| {
        let env = envelope(
            &[MINISTRY],
            &[m],
            json!([["総務省", 0.5], ["法務省", 0.25]]),
        );
        choose(&env, 0).unwrap().metric_kind
    };
    assert_eq!(kind(rate()), MetricKind::Rate);
    assert_eq!(kind(ratio()), MetricKind::Ratio);
    let mut not_a_share = rate();
    not_a_share["share"] = json!(false);
    assert_eq!(kind(not_a_share), MetricKind::Ratio);
    let mut field = avg("総手続件数");
    field["share"] = json!(true);
    assert_eq!(kind(field), MetricKind::Avg);
}

#[test]
fn two_groups_stack_when_additive_with_few_series() {
    check(
        &by_ministry_and_kind(4, &["申請", "届出", "報告"]),
        0,
        Stacked,
        &[Stacked, Heatmap, Table],
    );
    let twelve: Vec<String> = (1..=12).map(|i| format!("類型{i}")).collect();
    let twelve: Vec<&str> = twelve.iter().map(String::as_str).collect();
    check(
        &by_ministry_and_kind(2, &twelve),
        0,
        Stacked,
        &[Stacked, Heatmap, Table],
    );
    let thirteen: Vec<String> = (1..=13).map(|i| format!("類型{i}")).collect();
    let thirteen: Vec<&str> = thirteen.iter().map(String::as_str).collect();
    check(
        &by_ministry_and_kind(2, &thirteen),
        0,
        Heatmap,
        &[Heatmap, Stacked, Table],
    );
}

#[test]
fn two_groups_of_an_average_are_a_heatmap() {
    check(
        &by_ministry_and_kind(4, &["申請", "届出", "報告"]),
        1,
        Heatmap,
        &[Heatmap, Table],
    );
}

#[test]
fn null_and_empty_second_values_are_one_series() {
    let mut rows = Vec::new();
    for i in 0..11 {
        rows.push(json!(["総務省", format!("類型{i}"), 1]));
    }
    rows.push(json!(["総務省", null, 1]));
    rows.push(json!(["法務省", "", 1]));
    let env = envelope(&[MINISTRY, PROCEDURE_KIND], &[count()], json!(rows));
    check(&env, 0, Stacked, &[Stacked, Heatmap, Table]);
}

#[test]
fn no_grouping_is_a_card() {
    let env = envelope(&[], &[count(), rate()], json!([[12345, 0.4321]]));
    check(&env, 0, Card, &[Card, Table]);
    let empty = envelope(&[], &[count()], json!([]));
    check(&empty, 0, Card, &[Card, Table]);
}

#[test]
fn no_rows_or_three_groups_are_a_table() {
    check(
        &envelope(&[MINISTRY], &[count()], json!([])),
        0,
        Table,
        &[Table],
    );
    let three = envelope(
        &[MINISTRY, PROCEDURE_KIND, "年度"],
        &[count()],
        json!([["総務省", "申請", "2023", 1]]),
    );
    check(&three, 0, Table, &[Table]);
}

#[test]
fn helper_columns_are_not_groups() {
    let mut env = envelope(
        &[MINISTRY],
        &[sum("総手続件数")],
        json!([["総務省", 1500, 1], ["法務省", 1400, 0]]),
    );
    env["data"]["columns"] = json!([MINISTRY, "sum:総手続件数", "総手続件数:null_excluded"]);
    let choice = choose(&env, 0).unwrap();
    assert_eq!(choice.groups, vec![MINISTRY]);
    assert_eq!(choice.kind, Pie);
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
