//! What a chart draws at most (`LIMITS`, the same as view.js): a large result draws the first
//! or largest groups, says what it left out, and stays a bounded size.

use serde_json::{Value, json};
use tally_chart::{Chart, Kind, LIMITS, Options, svg};

use crate::common::*;
use crate::svg::texts;

#[track_caller]
fn draw(envelope: &Value, kind: Option<Kind>) -> Chart {
    let chart = svg(
        envelope,
        &Options {
            kind,
            ..Options::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        mark_count(&chart.svg),
        chart.marks,
        "data-marks counts what is drawn"
    );
    assert!(
        chart
            .svg
            .contains(&format!("data-marks=\"{}\"", chart.marks))
    );
    chart
}

/// The notes under the plot, their wrapped lines joined again (a note is wrapped at spaces).
fn notes(chart: &Chart) -> Notes {
    Notes(match chart.svg.find("<g class=\"notes\"") {
        Some(at) => {
            let end = chart.svg[at..].find("<g class=\"source\"").unwrap() + at;
            texts(&chart.svg[at..end]).join(" ")
        }
        None => String::new(),
    })
}

/// The text of a chart's notes.
#[derive(Debug)]
struct Notes(String);

impl Notes {
    /// Whether the notes say `sentence`.
    fn contains(&self, sentence: &str) -> bool {
        self.0.contains(sentence)
    }
}

/// view.js as the server serves it: its `LIMITS` object and the pie threshold of
/// `chooseChart`, read from the file (a change to either side alone fails here).
fn view_js() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../mcp/ui/view.js"),
    )
    .expect("host/mcp/ui/view.js")
}

/// The number after `key:` in `text`.
fn number_after(text: &str, key: &str) -> usize {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("view.js has no `{key}`"))
        + key.len();
    let digits: String = text[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("`{key}` is followed by no number in view.js"))
}

#[test]
fn the_limits_are_the_views() {
    let js = view_js();
    let start = js.find("var LIMITS = {").expect("view.js declares LIMITS");
    let end = start + js[start..].find('}').expect("the LIMITS object ends");
    let object = &js[start..end];
    for (key, rust) in [
        ("bars:", LIMITS.bars),
        ("stackedCategories:", LIMITS.stacked_categories),
        ("stackedSeries:", LIMITS.stacked_series),
        ("heatmapRows:", LIMITS.heatmap_rows),
        ("heatmapColumns:", LIMITS.heatmap_columns),
        ("treemapTiles:", LIMITS.treemap_tiles),
    ] {
        assert_eq!(number_after(object, key), rust, "view.js LIMITS.{key}");
    }
    // chooseChart: `rows.length <= N ? 'pie' : 'treemap'`.
    let pie = js
        .find("? 'pie' : 'treemap'")
        .expect("view.js chooses a pie or a treemap");
    let threshold = &js[js[..pie].rfind("<=").expect("a pie threshold")..pie];
    assert_eq!(
        number_after(threshold, "<="),
        LIMITS.pie_slices,
        "view.js pie threshold"
    );
}

/// The `data-others` of the marks that stand for groups folded into one, by label.
fn others(svg: &str) -> Vec<(String, String, usize)> {
    svg.split("<g class=\"mark\" data-label=\"")
        .skip(1)
        .filter_map(|s| {
            let label = s.split('"').next()?.to_owned();
            let head = &s[..s.find('>')?];
            let value = head
                .split("data-value=\"")
                .nth(1)?
                .split('"')
                .next()?
                .to_owned();
            let n = head
                .split("data-others=\"")
                .nth(1)?
                .split('"')
                .next()?
                .parse()
                .ok()?;
            Some((label, value, n))
        })
        .collect()
}

/// `n (n + 1) / 2`: the sum of 1..=n, what the smallest `n` groups of `many_groups` add to.
fn triangle(n: u64) -> u64 {
    n * (n + 1) / 2
}

/// A bar chart of 10,000 groups was about 260,000 px tall (a 3 GB PNG). Issue 61: past the
/// bound the smallest are one "others" bar, their exact sum.
#[test]
fn regression_a_bar_chart_of_10000_groups_draws_the_99_largest_and_the_others() {
    let chart = draw(&many_groups(10_000), Some(Kind::Bar));
    assert_eq!(chart.marks, 100);
    let labels = mark_labels(&chart.svg);
    assert_eq!(labels.first().map(String::as_str), Some("グループ1"));
    assert_eq!(labels[98], "グループ99");
    assert_eq!(labels.last().map(String::as_str), Some("(9,901 others)"));
    // グループ100 … グループ10000 count 9,901 … 1.
    assert_eq!(
        others(&chart.svg),
        [("(9,901 others)".to_owned(), "49,019,851".to_owned(), 9901)]
    );
    assert_eq!(triangle(9901), 49_019_851);
    assert!(
        notes(&chart).contains(
            "The 99 largest of 10,000 groups are drawn, and the other 9,901 as one bar, \
              “(9,901 others)”, their sum; the result's table has them all."
        ),
        "{:?}",
        notes(&chart)
    );
    assert!(chart.height < 3200, "{} px tall", chart.height);
    assert!(chart.svg.len() < 2_000_000, "{} bytes", chart.svg.len());
}

/// An average does not add up: past the bound the rest are left out, and said, not folded.
#[test]
fn bars_of_a_metric_that_does_not_add_up_leave_the_rest_out() {
    let rows: Vec<Value> = (0..150)
        .map(|i| json!([format!("グループ{}", i + 1), 150.0 - f64::from(i) / 2.0]))
        .collect();
    let chart = draw(
        &envelope(&[MINISTRY], &[avg("総手続件数")], json!(rows)),
        None,
    );
    assert_eq!(chart.kind, Kind::Bar);
    assert_eq!(chart.marks, 100);
    assert!(others(&chart.svg).is_empty());
    assert_eq!(mark_labels(&chart.svg).last().unwrap(), "グループ100");
    assert!(
        notes(&chart).contains(
            "The 100 largest of 150 groups by avg:総手続件数 are drawn; the other 50 are left \
              out, as avg:総手続件数 does not add up across groups; the result's table has \
              them all."
        ),
        "{:?}",
        notes(&chart)
    );
}

#[test]
fn bars_within_the_limit_leave_nothing_out() {
    let chart = draw(&many_groups(100), Some(Kind::Bar));
    assert_eq!(chart.marks, 100);
    assert!(others(&chart.svg).is_empty());
    assert!(!chart.svg.contains("are drawn"), "{:?}", notes(&chart));
}

/// Rows cut by the result's own limit: the chart folds the rows it holds, and says that the
/// result held fewer groups than there are.
#[test]
fn a_page_of_groups_folds_what_it_holds_and_says_so() {
    let mut env = many_groups(150);
    env["data"]["total_group_count"] = json!(3000);
    env["data"]["truncated"] = json!(true);
    let chart = draw(&env, None);
    assert_eq!(chart.kind, Kind::Bar);
    assert_eq!(
        others(&chart.svg),
        [("(51 others)".to_owned(), "1,326".to_owned(), 51)]
    );
    assert!(
        notes(&chart).contains(
            "The result holds 150 of 3,000 groups (its limit or its size budget); the chart is \
             of those, and “others” sums the ones it holds."
        ),
        "{:?}",
        notes(&chart)
    );
}

#[test]
fn a_treemap_draws_the_199_largest_tiles_and_the_others() {
    let chart = draw(&many_groups(10_000), None);
    assert_eq!(chart.kind, Kind::Treemap);
    assert_eq!(chart.marks, 200);
    assert_eq!(mark_labels(&chart.svg)[0], "グループ1");
    assert_eq!(
        others(&chart.svg),
        [("(9,801 others)".to_owned(), "48,034,701".to_owned(), 9801)]
    );
    assert_eq!(triangle(9801), 48_034_701);
    let notes = notes(&chart);
    assert!(
        notes.contains(
            "The 199 largest of 10,000 groups are drawn, and the other 9,801 as one tile, \
              “(9,801 others)”, their sum; the result's table has them all."
        ),
        "{notes:?}"
    );
    assert!(chart.height < 1000, "{} px tall", chart.height);
}

/// The value of `grid(first, second)`'s cell (row `i`, column `j`), both from 1.
fn grid_value(second: usize, i: usize, j: usize) -> u64 {
    ((i - 1) * second + j) as u64
}

#[test]
fn a_500_by_500_heatmap_draws_the_largest_rows_and_columns_and_folds_the_rest() {
    let chart = draw(&grid(500, 500), None);
    assert_eq!(chart.kind, Kind::Heatmap);
    assert_eq!(chart.marks, 60 * 40);
    let labels = mark_labels(&chart.svg);
    // Rows by total (the last row's counts are the largest), the largest columns by total (the
    // last ones) in code order, "others" last of each.
    assert_eq!(labels[0], "行500 × 列462");
    assert_eq!(labels[38], "行500 × 列500");
    assert_eq!(labels[39], "行500 × (461 others)");
    assert_eq!(labels[59 * 40], "(441 others) × 列462");
    assert_eq!(
        labels.last().map(String::as_str),
        Some("(441 others) × (461 others)")
    );
    // Each "others" cell is the exact sum of the cells it stands for.
    let folded = others(&chart.svg);
    let value = |label: &str| {
        folded
            .iter()
            .find(|o| o.0 == label)
            .map(|o| o.1.clone())
            .unwrap_or_else(|| panic!("no {label}"))
    };
    let sum = |rows: &[usize], columns: &[usize]| -> u64 {
        let mut s = 0;
        for &i in rows {
            for &j in columns {
                s += grid_value(500, i, j);
            }
        }
        s
    };
    let (small_rows, small_columns): (Vec<usize>, Vec<usize>) =
        ((1..=441).collect(), (1..=461).collect());
    let fmt = |n: u64| {
        let s = n.to_string();
        let mut out = String::new();
        for (k, c) in s.chars().enumerate() {
            if k > 0 && (s.len() - k).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    assert_eq!(
        value("行500 × (461 others)"),
        fmt(sum(&[500], &small_columns))
    );
    assert_eq!(value("(441 others) × 列462"), fmt(sum(&small_rows, &[462])));
    assert_eq!(
        value("(441 others) × (461 others)"),
        fmt(sum(&small_rows, &small_columns))
    );
    let notes = notes(&chart);
    assert!(
        notes.contains(
            "The 59 largest of 500 rows are drawn, and the other 441 as one, “(441 others)”, \
              their sum; the 39 largest of 500 columns are drawn, and the other 461 as one, \
              “(461 others)”, their sum; the result's table has them all."
        ),
        "{notes:?}"
    );
    assert!(
        chart.width <= 2000 && chart.height < 2400,
        "{}×{}",
        chart.width,
        chart.height
    );
}

/// A rate does not add up: the largest rows and columns by their largest value are drawn, the
/// rest left out, and said.
#[test]
fn a_heatmap_of_a_rate_past_its_bounds_leaves_the_rest_out() {
    let mut rows = Vec::new();
    for i in 0..70 {
        for j in 0..3 {
            rows.push(json!([
                format!("行{}", i + 1),
                format!("列{}", j + 1),
                f64::from(i * 3 + j) / 1000.0
            ]));
        }
    }
    let chart = draw(
        &envelope(&[MINISTRY, PROCEDURE_KIND], &[rate()], json!(rows)),
        None,
    );
    assert_eq!(chart.kind, Kind::Heatmap);
    assert_eq!(chart.marks, 60 * 3);
    assert!(others(&chart.svg).is_empty());
    assert_eq!(mark_labels(&chart.svg)[0], "行70 × 列1");
    assert!(
        notes(&chart).contains(&format!(
            "The 60 largest of 70 rows by {RATE} are drawn and the other 10 left out, as it \
                 does not add up across groups; the result's table has them all."
        )),
        "{:?}",
        notes(&chart)
    );
}

#[test]
fn a_heatmap_cut_one_way_says_which() {
    let rows = draw(&grid(70, 3), Some(Kind::Heatmap));
    assert_eq!(rows.marks, 60 * 3);
    assert!(
        notes(&rows).contains(
            "The 59 largest of 70 rows are drawn, and the other 11 as one, “(11 others)”, \
              their sum; the result's table has them all."
        ),
        "{:?}",
        notes(&rows)
    );
    let columns = draw(&grid(2, 45), None);
    assert_eq!(columns.marks, 2 * 40);
    assert!(
        notes(&columns).contains(
            "The 39 largest of 45 columns are drawn, and the other 6 as one, “(6 others)”, \
              their sum; the result's table has them all."
        ),
        "{:?}",
        notes(&columns)
    );
}

#[test]
fn stacked_bars_draw_the_59_largest_and_11_series_and_the_others() {
    let chart = draw(&grid(100, 5), None);
    assert_eq!(chart.kind, Kind::Stacked);
    assert_eq!(chart.marks, 60 * 5);
    assert!(
        notes(&chart).contains(
            "The 59 largest of 100 bars are drawn, and the other 41 as one, “(41 others)”, \
              their sum; the result's table has them all."
        ),
        "{:?}",
        notes(&chart)
    );
    // Stacked bars asked for by name with more series than a stack shows.
    let wide = draw(&grid(3, 20), Some(Kind::Stacked));
    assert_eq!(wide.marks, 3 * 12);
    assert!(
        notes(&wide).contains(
            "The 11 largest of 20 series are drawn, and the other 9 as one, “(9 others)”, \
              their sum; the result's table has them all."
        ),
        "{:?}",
        notes(&wide)
    );
    let legend = wide.svg.find("<g class=\"legend\"").unwrap();
    let plot = wide.svg.find("<g class=\"plot\"").unwrap();
    assert!(texts(&wide.svg[legend..plot]).contains(&"(9 others)".to_owned()));
}
