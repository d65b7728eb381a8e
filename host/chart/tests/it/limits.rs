//! What a chart draws at most (`LIMITS`, the same as view.js): a large result draws the first
//! or largest groups, says what it left out, and stays a bounded size.

use serde_json::Value;
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

/// The notes under the plot, each wrapped line as a text.
fn notes(chart: &Chart) -> Vec<String> {
    match chart.svg.find("<g class=\"notes\"") {
        Some(at) => {
            let end = chart.svg[at..].find("<g class=\"source\"").unwrap() + at;
            texts(&chart.svg[at..end])
        }
        None => Vec::new(),
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

/// A bar chart of 10,000 groups was about 260,000 px tall (a 3 GB PNG).
#[test]
fn regression_a_bar_chart_of_10000_groups_draws_the_100_largest() {
    let chart = draw(&many_groups(10_000), Some(Kind::Bar));
    assert_eq!(chart.marks, 100);
    let labels = mark_labels(&chart.svg);
    assert_eq!(labels.first().map(String::as_str), Some("グループ1"));
    assert_eq!(labels.last().map(String::as_str), Some("グループ100"));
    assert!(
        notes(&chart).contains(
            &"The 100 largest of 10,000 groups are drawn; the result's table has them all."
                .to_owned()
        ),
        "{:?}",
        notes(&chart)
    );
    assert!(chart.height < 3200, "{} px tall", chart.height);
    assert!(chart.svg.len() < 2_000_000, "{} bytes", chart.svg.len());
}

#[test]
fn bars_within_the_limit_leave_nothing_out() {
    let chart = draw(&many_groups(100), Some(Kind::Bar));
    assert_eq!(chart.marks, 100);
    assert!(!chart.svg.contains("are drawn"), "{:?}", notes(&chart));
}

#[test]
fn a_treemap_draws_the_200_largest_tiles() {
    let chart = draw(&many_groups(10_000), None);
    assert_eq!(chart.kind, Kind::Treemap);
    assert_eq!(chart.marks, 200);
    assert_eq!(mark_labels(&chart.svg)[0], "グループ1");
    let notes = notes(&chart);
    assert!(
        notes.contains(
            &"The 200 largest of 10,000 groups are drawn; the result's table has them all."
                .to_owned()
        ),
        "{notes:?}"
    );
    assert!(chart.height < 1000, "{} px tall", chart.height);
}

#[test]
fn a_500_by_500_heatmap_draws_60_rows_and_40_columns() {
    let chart = draw(&grid(500, 500), None);
    assert_eq!(chart.kind, Kind::Heatmap);
    assert_eq!(chart.marks, 60 * 40);
    let labels = mark_labels(&chart.svg);
    // Rows by total (the last row's counts are the largest), columns in code order.
    assert_eq!(labels[0], "行500 × 列1");
    assert_eq!(labels[39], "行500 × 列40");
    assert_eq!(labels.last().map(String::as_str), Some("行441 × 列40"));
    let notes = notes(&chart);
    assert!(
        notes.contains(
            &"The first 60 of 500 rows and 40 of 500 columns are drawn; the result's table has \
              them all."
                .to_owned()
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

#[test]
fn a_heatmap_cut_one_way_says_which() {
    let rows = draw(&grid(70, 3), Some(Kind::Heatmap));
    assert_eq!(rows.marks, 60 * 3);
    assert!(
        notes(&rows).contains(
            &"The first 60 of 70 rows are drawn; the result's table has them all.".to_owned()
        ),
        "{:?}",
        notes(&rows)
    );
    let columns = draw(&grid(2, 45), None);
    assert_eq!(columns.marks, 2 * 40);
    assert!(
        notes(&columns).contains(
            &"The first 40 of 45 columns are drawn; the result's table has them all.".to_owned()
        ),
        "{:?}",
        notes(&columns)
    );
}

#[test]
fn stacked_bars_draw_the_60_largest_and_12_series() {
    let chart = draw(&grid(100, 5), None);
    assert_eq!(chart.kind, Kind::Stacked);
    assert_eq!(chart.marks, 60 * 5);
    assert!(
        notes(&chart).contains(
            &"The 60 largest of 100 bars are drawn; the result's table has them all.".to_owned()
        ),
        "{:?}",
        notes(&chart)
    );
    // Stacked bars asked for by name with more series than a stack shows.
    let wide = draw(&grid(3, 20), Some(Kind::Stacked));
    assert_eq!(wide.marks, 3 * 12);
    assert!(
        notes(&wide).contains(
            &"The first 12 of 20 series are drawn; the result's table has them all.".to_owned()
        ),
        "{:?}",
        notes(&wide)
    );
}
