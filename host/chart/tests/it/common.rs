//! Summaries built in the tests: small envelopes shaped as summarize_records returns them.

use serde_json::{Value, json};

pub const MINISTRY: &str = "所管府省庁";
pub const PROCEDURE_KIND: &str = "手続類型";
pub const RATE: &str = "avg:オンライン率";
pub const SOURCE_LINE: &str = "Source: 行政手続等の棚卸調査結果 · デジタル庁 · retrieved 2024-06-02 · computed by Tally: extract → filter → aggregate";

pub const MINISTRIES: [&str; 12] = [
    "総務省",
    "法務省",
    "外務省",
    "財務省",
    "文部科学省",
    "厚生労働省",
    "農林水産省",
    "経済産業省",
    "国土交通省",
    "環境省",
    "防衛省",
    "デジタル庁",
];

pub fn count() -> Value {
    json!({"column": "count", "description": "number of records in the group (of parts, when exploded)", "kind": "count"})
}

pub fn sum(field: &str) -> Value {
    json!({
        "column": format!("sum:{field}"),
        "description": format!("sum of {field} over records where it is not null"),
        "null_excluded_column": format!("{field}:null_excluded"),
        "kind": "sum",
    })
}

/// An average of a field (its nulls counted apart): not a rate.
pub fn avg(field: &str) -> Value {
    json!({
        "column": format!("avg:{field}"),
        "description": format!("average of {field} over records where it is not null"),
        "null_excluded_column": format!("{field}:null_excluded"),
        "kind": "average",
    })
}

/// An average of a computed measure that is a share of records (a `count_where` measure, which
/// the engine marks `"kind": "share"`): shown as a percentage.
pub fn rate() -> Value {
    json!({
        "column": RATE,
        "description": "count(rows where オンライン化の実施状況 in [1 実施済]) / count(rows); rounded to 4 decimals",
        "rounded_to_decimals": 4,
        "kind": "share",
    })
}

pub const RATIO: &str = "avg:一件あたり手数料";

/// An average of a computed measure that is not a share (a `sum_ratio` measure: no `share`, no
/// `null_excluded_column`, `"kind": "ratio"`): a plain ratio.
pub fn ratio() -> Value {
    json!({
        "column": RATIO,
        "description": "sum(手数料) / sum(件数); rounded to 4 decimals",
        "rounded_to_decimals": 4,
        "kind": "ratio",
    })
}

/// One grouping field with `n` groups `グループ1`.. and a count each, `n` down to 1; with
/// `truncated` so that the chart chosen is bars.
pub fn many_groups(n: usize) -> Value {
    let rows: Vec<Value> = (0..n)
        .map(|i| json!([format!("グループ{}", i + 1), n - i]))
        .collect();
    envelope(&[MINISTRY], &[count()], json!(rows))
}

/// Two grouping fields, `first` × `second` values (`行1`.., `列1`..), a count each.
pub fn grid(first: usize, second: usize) -> Value {
    let mut rows = Vec::with_capacity(first * second);
    for i in 0..first {
        for j in 0..second {
            rows.push(json!([
                format!("行{}", i + 1),
                format!("列{}", j + 1),
                i * second + j + 1
            ]));
        }
    }
    envelope(&[MINISTRY, PROCEDURE_KIND], &[count()], json!(rows))
}

/// A summary grouped by `groups`, with `metrics`, its rows given (group cells first, then one
/// cell per metric).
pub fn envelope(groups: &[&str], metrics: &[Value], rows: Value) -> Value {
    let mut columns: Vec<Value> = groups.iter().map(|g| json!(g)).collect();
    columns.extend(metrics.iter().map(|m| m["column"].clone()));
    let n = rows.as_array().map_or(0, Vec::len);
    let fields: Vec<Value> = groups
        .iter()
        .map(|g| json!({"name": g, "role": "dim", "data_type": "string", "description": format!("{g}。")}))
        .collect();
    json!({
        "data": {
            "dataset_id": "procedures",
            "dataset_version": "0123456789abcdef",
            "columns": columns,
            "rows": rows,
            "total_group_count": n,
            "returned": n,
            "total_records": 12345,
            "field_metadata": fields,
            "metrics": metrics,
            "notes": [],
            "resolved_fields": [],
            "parameters": {
                "dataset_id": "procedures",
                "metrics": metrics.iter().map(|m| m["column"].clone()).collect::<Vec<_>>(),
                "group_by": groups,
                "where": [],
                "having": [],
                "explode": [],
                "order_by": [],
                "limit": 200,
            },
            "sourceRefs": ["dataset:procedures"],
        },
        "provenance": {
            "generatedAt": "2024-06-03T09:00:00Z",
            "sources": [{
                "id": "dataset:procedures",
                "uri": "https://example.org/procedures",
                "title": "行政手続等の棚卸調査結果",
                "publisher": "デジタル庁",
                "retrievedAt": "2024-06-02T10:11:12Z",
                "license": "CC-BY-4.0",
                "contentHash": "sha256:00",
            }],
            "transformations": [
                {"type": "extract", "description": "read 12,345 records", "toolVersion": "tally 0.1.0"},
                {"type": "filter", "description": "kept all", "toolVersion": "tally 0.1.0"},
                {"type": "aggregate", "description": "grouped", "toolVersion": "tally 0.1.0"},
            ],
            "warnings": [],
        },
    })
}

/// One grouping field (所管府省庁), the first `n` ministries, a count each (decreasing).
pub fn by_ministry(n: usize) -> Value {
    let rows: Vec<Value> = MINISTRIES
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, m)| json!([m, 1000 * (n - i) + 234]))
        .collect();
    envelope(&[MINISTRY], &[count()], json!(rows))
}

/// Two grouping fields: each ministry × each of `kinds`, a count and a rate.
pub fn by_ministry_and_kind(ministries: usize, kinds: &[&str]) -> Value {
    let mut rows = Vec::new();
    for (i, m) in MINISTRIES.iter().take(ministries).enumerate() {
        for (j, k) in kinds.iter().enumerate() {
            let n = 10 * (i + 1) + j;
            rows.push(json!([m, k, n, ((i + j) % 10) as f64 / 10.0 + 0.0234]));
        }
    }
    envelope(&[MINISTRY, PROCEDURE_KIND], &[count(), rate()], json!(rows))
}

/// `envelope` with the value at `pointer` replaced.
pub fn with(mut envelope: Value, pointer: &str, value: Value) -> Value {
    match envelope.pointer_mut(pointer) {
        Some(slot) => *slot = value,
        None => {
            let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
            envelope
                .pointer_mut(parent)
                .and_then(Value::as_object_mut)
                .expect("the parent exists")
                .insert(key.to_owned(), value);
        }
    }
    envelope
}

/// The `data-label`s of the marks, in document order.
pub fn mark_labels(svg: &str) -> Vec<String> {
    svg.split("<g class=\"mark\" data-label=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap_or_default().to_owned())
        .collect()
}

pub fn mark_count(svg: &str) -> usize {
    svg.matches("<g class=\"mark\"").count()
}

/// The SVG parses as resvg reads it (as XML, in a build without PNG charts).
pub fn parses(svg: &str) {
    #[cfg(feature = "png")]
    if let Err(e) = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()) {
        panic!("the SVG does not parse: {e}\n{svg}");
    }
    if let Err(e) = roxmltree::Document::parse(svg) {
        panic!("the SVG is not XML: {e}\n{svg}");
    }
}
