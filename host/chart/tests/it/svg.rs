//! Drawing: what each kind of chart shows, and what every chart carries.

use serde_json::{Value, json};
use tally_chart::{Chart, ChartError, Kind, Options, svg};

use crate::common::*;

#[track_caller]
fn draw(envelope: &Value) -> Chart {
    draw_with(envelope, &Options::default())
}

#[track_caller]
fn draw_with(envelope: &Value, options: &Options) -> Chart {
    let chart = svg(envelope, options).unwrap_or_else(|e| panic!("{e}"));
    parses(&chart.svg);
    assert!(chart.svg.contains(&format!("data-kind=\"{}\"", chart.kind)));
    assert!(chart.svg.contains(&format!(
        "width=\"{}\" height=\"{}\"",
        chart.width, chart.height
    )));
    assert_eq!(
        mark_count(&chart.svg),
        chart.marks,
        "data-marks and the marks drawn agree"
    );
    assert!(
        chart
            .svg
            .contains(&format!("data-marks=\"{}\"", chart.marks))
    );
    chart
}

/// Each kind: the kind chosen, one mark per datum.
#[test]
fn every_kind_draws_one_mark_per_datum() {
    let three_kinds = ["申請", "届出", "報告"];
    let cases: Vec<(&str, Value, usize, Kind, usize)> = vec![
        ("3 groups of count", by_ministry(3), 0, Kind::Pie, 3),
        ("9 groups of count", by_ministry(9), 0, Kind::Treemap, 9),
        (
            "truncated",
            with(by_ministry(5), "/data/truncated", json!(true)),
            0,
            Kind::Bar,
            5,
        ),
        (
            "2 groups, 3 series",
            by_ministry_and_kind(4, &three_kinds),
            0,
            Kind::Stacked,
            12,
        ),
        (
            "2 groups of a rate",
            by_ministry_and_kind(4, &three_kinds),
            1,
            Kind::Heatmap,
            12,
        ),
        (
            "no grouping",
            envelope(&[], &[count(), rate()], json!([[12345, 0.4321]])),
            0,
            Kind::Card,
            2,
        ),
    ];
    for (name, env, metric, kind, marks) in cases {
        let chart = draw_with(
            &env,
            &Options {
                metric,
                ..Options::default()
            },
        );
        assert_eq!((name, chart.kind, chart.marks), (name, kind, marks));
    }
}

#[test]
fn bars_run_largest_first_with_nulls_last() {
    let env = envelope(
        &[MINISTRY],
        &[avg("総手続件数")],
        json!([
            ["法務省", 20.5],
            [null, 99],
            ["総務省", null],
            ["外務省", 1234.5678],
            ["財務省", -3]
        ]),
    );
    let chart = draw(&env);
    assert_eq!(chart.kind, Kind::Bar);
    // The null value has no bar; the null key reads "(no value)".
    assert_eq!(
        mark_labels(&chart.svg),
        vec!["外務省", "(no value)", "法務省", "財務省"]
    );
    assert!(
        chart.svg.contains("1,234.5678"),
        "thousands separators, 4 decimals at most"
    );
    // 総務省 is listed (its label drawn) with "(no value)" for its bar.
    assert!(chart.svg.contains("総務省"));
    assert!(chart.svg.matches("(no value)").count() >= 2);
}

#[test]
fn rates_read_as_percentages_with_their_denominator() {
    let env = envelope(
        &[MINISTRY],
        &[rate(), count()],
        json!([["総務省", 0.5234, 1200], ["法務省", 0.1, 3]]),
    );
    let chart = draw(&env);
    assert_eq!(chart.kind, Kind::Bar);
    assert!(chart.svg.contains("52.34 % (n = 1,200)"), "{}", chart.svg);
    assert!(chart.svg.contains("data-value=\"10 %\""));
    assert!(chart.svg.contains("shown as a percentage"));
    // Axis ticks are percentages too.
    assert!(chart.svg.contains("60 %"));
}

#[test]
fn rounding_follows_rounded_to_decimals() {
    let mut m = sum("金額");
    m["rounded_to_decimals"] = json!(1);
    let env = envelope(
        &[MINISTRY],
        &[m],
        json!([["総務省", 1234567.891], ["法務省", 2.25]]),
    );
    let chart = draw_with(
        &env,
        &Options {
            kind: Some(Kind::Bar),
            ..Options::default()
        },
    );
    assert!(
        chart.svg.contains("data-value=\"1,234,567.9\""),
        "{}",
        chart.svg
    );
}

#[test]
fn axis_titles_are_the_field_and_metric_names() {
    let chart = draw(&with(by_ministry(3), "/data/truncated", json!(true)));
    let texts = texts(&chart.svg);
    assert!(texts.iter().any(|t| t == MINISTRY), "{texts:?}");
    assert!(texts.iter().any(|t| t == "count"), "{texts:?}");
    assert!(
        texts.iter().any(|t| t == "count by 所管府省庁"),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t == "行政手続等の棚卸調査結果"),
        "the title is the source's title"
    );
}

#[test]
fn the_title_is_the_dataset_id_without_a_source_title() {
    let mut env = by_ministry(3);
    env["provenance"]["sources"][0]
        .as_object_mut()
        .unwrap()
        .remove("title");
    let chart = draw(&env);
    assert!(texts(&chart.svg).iter().any(|t| t == "procedures"));
}

#[test]
fn the_source_line_is_under_the_chart() {
    for env in [
        by_ministry(3),
        by_ministry(9),
        by_ministry_and_kind(3, &["申請", "届出"]),
    ] {
        let chart = draw(&env);
        let texts = texts(&chart.svg);
        assert!(texts.iter().any(|t| t == SOURCE_LINE), "{texts:?}");
        let plot = chart.svg.find("<g class=\"plot\"").unwrap();
        let source = chart.svg.find("<g class=\"source\"").unwrap();
        assert!(plot < source);
    }
}

#[test]
fn warnings_come_before_the_plot_wrapped_and_cut() {
    let long = "集計対象のうち 3 件は所管府省庁が空欄です。".repeat(40);
    let env = with(
        by_ministry(3),
        "/provenance/warnings",
        json!(["一部の値は概数です。", long, "w3", "w4", "w5", "w6", "w7"]),
    );
    let chart = draw(&env);
    let warnings = chart
        .svg
        .find("<g class=\"warnings\"")
        .expect("a warnings group");
    let plot = chart.svg.find("<g class=\"plot\"").unwrap();
    assert!(warnings < plot, "warnings above the chart");
    let block = &chart.svg[warnings..plot];
    assert!(block.contains("Warning: 一部の値は概数です。"));
    // The long warning is wrapped to three lines, the last cut with an ellipsis.
    let lines: Vec<String> = texts(block)
        .into_iter()
        .filter(|t| t.contains("空欄"))
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[2].ends_with('…'));
    // Five shown, the rest counted.
    assert!(block.contains("Warning: w5") && !block.contains("Warning: w6"));
    assert!(block.contains("and 2 more warnings"));
}

#[test]
fn no_warnings_no_warnings_box() {
    assert!(!draw(&by_ministry(3)).svg.contains("class=\"warnings\""));
}

#[test]
fn pie_slices_are_polygons_with_shares() {
    let chart = draw(&by_ministry(3));
    assert_eq!(chart.kind, Kind::Pie);
    assert_eq!(mark_shapes(&chart.svg), vec![vec!["polygon"]; 3]);
    // Together the wedges make a whole ring: nothing clipped (the ring is 240 px across).
    let (mut x0, mut y0, mut x1, mut y1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
    let doc = roxmltree::Document::parse(&chart.svg).unwrap();
    for polygon in doc.descendants().filter(|n| n.has_tag_name("polygon")) {
        let scale: f64 = polygon
            .parent()
            .and_then(|g| g.attribute("transform"))
            .and_then(|t| t.strip_prefix("scale(")?.strip_suffix(')')?.parse().ok())
            .unwrap_or(1.0);
        for point in polygon.attribute("points").unwrap().split_whitespace() {
            let (x, y) = point.split_once(',').unwrap();
            let (x, y) = (
                x.parse::<f64>().unwrap() * scale,
                y.parse::<f64>().unwrap() * scale,
            );
            (x0, y0, x1, y1) = (x0.min(x), y0.min(y), x1.max(x), y1.max(y));
        }
    }
    assert!(
        (x1 - x0 - 240.0).abs() < 2.0 && (y1 - y0 - 240.0).abs() < 2.0,
        "{x0},{y0} – {x1},{y1}"
    );
    // 3234 + 2234 + 1234 = 6702; 3234 / 6702 = 48.25 %.
    assert!(chart.svg.contains("48.25 %"), "{}", chart.svg);
    assert!(chart.svg.contains("3,234"));
}

#[test]
fn pie_and_treemap_leave_out_what_has_no_area_and_say_so() {
    let env = envelope(
        &[MINISTRY],
        &[count()],
        json!([
            ["総務省", 3],
            ["法務省", 0],
            ["外務省", null],
            ["財務省", 2]
        ]),
    );
    let pie = draw(&env);
    assert_eq!((pie.kind, pie.marks), (Kind::Pie, 2));
    assert!(
        pie.svg
            .contains("not drawn (no value, or 0): 法務省 (0), 外務省 (no value)"),
        "{}",
        pie.svg
    );
    let bar = draw_with(
        &env,
        &Options {
            kind: Some(Kind::Bar),
            ..Options::default()
        },
    );
    assert_eq!(bar.marks, 3, "bars draw a 0, not a null");
}

#[test]
fn treemap_tiles_are_rectangles() {
    let chart = draw(&by_ministry(12));
    assert_eq!(chart.kind, Kind::Treemap);
    assert_eq!(mark_shapes(&chart.svg), vec![vec!["rect"]; 12]);
    assert_eq!(mark_labels(&chart.svg)[0], "総務省", "largest first");
}

#[test]
fn stacked_bars_have_a_legend_and_bars_by_total() {
    let mut env = by_ministry_and_kind(3, &["申請", "届出", "報告"]);
    // Make the last ministry the largest.
    env["data"]["rows"][6][2] = json!(5000);
    let chart = draw(&env);
    assert_eq!(chart.kind, Kind::Stacked);
    let legend = chart.svg.find("<g class=\"legend\"").expect("a legend");
    let plot = chart.svg.find("<g class=\"plot\"").unwrap();
    assert!(legend < plot);
    for series in ["申請", "届出", "報告", PROCEDURE_KIND] {
        assert!(chart.svg[legend..plot].contains(series), "{series}");
    }
    let labels = texts(&chart.svg[plot..]);
    let first = |m: &str| labels.iter().position(|t| t == m).unwrap();
    assert!(
        first("外務省") < first("総務省"),
        "bars ordered by total: {labels:?}"
    );
    assert!(mark_labels(&chart.svg).contains(&"外務省 × 申請".to_owned()));
}

#[test]
fn heatmap_has_a_colour_scale_and_a_cell_per_value() {
    let mut env = by_ministry_and_kind(3, &["申請", "届出"]);
    env["data"]["rows"][1][3] = Value::Null;
    let chart = draw_with(
        &env,
        &Options {
            metric: 1,
            ..Options::default()
        },
    );
    assert_eq!(chart.kind, Kind::Heatmap);
    assert_eq!(chart.marks, 5, "the null cell has no mark");
    let plot = chart.svg.find("<g class=\"plot\"").unwrap();
    let scale = chart.svg[plot..]
        .find("<g class=\"legend\"")
        .expect("a colour scale under the plot");
    let scale_texts = texts(&chart.svg[plot + scale..]);
    assert!(
        scale_texts.contains(&"2.34 %".to_owned()),
        "{scale_texts:?}"
    );
    assert!(scale_texts.contains(&RATE.to_owned()));
}

#[test]
fn a_wide_heatmap_grows_rather_than_squeezing_its_cells() {
    let kinds: Vec<String> = (1..=40)
        .map(|i| format!("とても長い手続類型の名前{i}"))
        .collect();
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    let chart = draw(&by_ministry_and_kind(2, &kinds));
    assert_eq!(chart.kind, Kind::Heatmap);
    assert!(chart.width > 800);
    assert_eq!(chart.marks, 80);
    assert!(
        chart.svg.contains("rotate(270"),
        "long column names are turned"
    );
}

#[test]
fn cards_show_every_metric() {
    let env = envelope(&[], &[count(), rate()], json!([[12345, 0.4321]]));
    let chart = draw(&env);
    assert_eq!(mark_labels(&chart.svg), vec!["count", RATE]);
    assert!(chart.svg.contains("data-value=\"12,345\""));
    assert!(chart.svg.contains("data-value=\"43.21 %\""));
    assert!(chart.svg.contains("of 12,345 records"));
}

#[test]
fn long_labels_are_cut_with_an_ellipsis() {
    let long = "独立行政法人".repeat(20);
    let env = envelope(
        &[MINISTRY],
        &[rate()],
        json!([[long, 0.5], ["総務省", 0.25]]),
    );
    let chart = draw(&env);
    let cut = texts(&chart.svg)
        .into_iter()
        .find(|t| t.starts_with("独立行政法人") && t.ends_with('…'));
    assert!(cut.is_some_and(|t| t.chars().count() < 50));
    // The full label is kept on the mark.
    assert!(mark_labels(&chart.svg).contains(&long));
}

#[test]
fn text_from_data_is_escaped() {
    let hostile = "<script>alert(\"x\")</script> & 'quotes'";
    let env = envelope(
        &[MINISTRY],
        &[rate()],
        json!([[hostile, 0.5], ["総務省", 0.25]]),
    );
    let chart = draw(&env);
    assert!(!chart.svg.contains("<script>"));
    assert!(
        mark_labels(&chart.svg)
            .iter()
            .any(|l| l.contains("&lt;script&gt;"))
    );
}

#[test]
fn control_characters_in_data_do_not_break_the_document() {
    let env = envelope(
        &[MINISTRY, PROCEDURE_KIND],
        &[count()],
        json!([
            ["総\u{1}務省", "申\u{fffe}請", 3],
            ["法務省\u{7}", "届出", 2]
        ]),
    );
    let mut env = env;
    env["provenance"]["warnings"] = json!(["注意\u{0}書き"]);
    let chart = draw(&env);
    assert!(chart.svg.contains("総 務省"));
}

#[test]
fn a_card_without_rows_shows_no_value() {
    let chart = draw(&envelope(&[], &[count()], json!([])));
    assert_eq!(chart.kind, Kind::Card);
    assert!(chart.svg.contains("data-value=\"(no value)\""));
}

#[test]
fn a_kind_asked_for_must_fit() {
    let env = by_ministry(3);
    let bar = draw_with(
        &env,
        &Options {
            kind: Some(Kind::Bar),
            ..Options::default()
        },
    );
    assert_eq!(bar.kind, Kind::Bar);
    let err = svg(
        &env,
        &Options {
            kind: Some(Kind::Heatmap),
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(matches!(
        err,
        ChartError::KindNotAvailable {
            asked: Kind::Heatmap,
            ..
        }
    ));
    assert!(
        err.to_string().contains("available: pie, bar, table"),
        "{err}"
    );
    let avg2 = by_ministry_and_kind(3, &["申請"]);
    let err = svg(
        &avg2,
        &Options {
            metric: 1,
            kind: Some(Kind::Stacked),
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("count or sum"), "{err}");
    let err = svg(
        &env,
        &Options {
            kind: Some(Kind::Table),
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("HTML view"), "{err}");
}

#[test]
fn three_groups_are_refused_with_what_would_work() {
    let env = envelope(
        &[MINISTRY, PROCEDURE_KIND, "年度"],
        &[count()],
        json!([["総務省", "申請", "2023", 1]]),
    );
    let err = svg(&env, &Options::default()).unwrap_err();
    assert!(matches!(err, ChartError::TooManyGroups { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("at most two"), "{msg}");
    assert!(msg.contains("\"所管府省庁\", \"手続類型\""), "{msg}");
    assert!(msg.contains("HTML view"), "{msg}");
}

#[test]
fn no_rows_is_refused() {
    let err = svg(
        &envelope(&[MINISTRY], &[count()], json!([])),
        &Options::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ChartError::NoRows), "{err:?}");
}

#[test]
fn drawing_is_deterministic() {
    let env = by_ministry_and_kind(3, &["申請", "届出"]);
    assert_eq!(draw(&env), draw(&env));
}

#[test]
fn the_svg_asks_for_japanese_fonts() {
    let chart = draw(&by_ministry(3));
    assert!(chart.svg.contains("font-family=\"&quot;Noto Sans CJK JP&quot;, &quot;Noto Sans JP&quot;, &quot;IPAGothic&quot;"));
}

/// The text content of every `<text>`, trimmed, in document order.
pub fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|s| {
            let body = &s[s.find('>')? + 1..];
            Some(unescape(body[..body.find("</text>")?].trim()))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// For each mark, in order, the names of the shapes it holds (read as XML).
fn mark_shapes(svg: &str) -> Vec<Vec<String>> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let marks = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("marks"))
        .expect("a marks group");
    marks
        .children()
        .filter(|n| n.attribute("class") == Some("mark"))
        .map(|m| {
            m.descendants()
                .filter(|n| ["rect", "polygon", "text"].contains(&n.tag_name().name()))
                .map(|n| n.tag_name().name().to_owned())
                .collect()
        })
        .collect()
}

/// The second grouping's values in code order (numbers as numbers, no value last), as the
/// view's `byCode`: in the stacked legend and stacks, and the heatmap's columns.
#[test]
fn the_second_grouping_is_in_code_order() {
    let kinds = ["10 その他", "2-1 届出", "", "1 申請", "2 報告"];
    let mut rows = Vec::new();
    for m in ["総務省", "法務省"] {
        for k in kinds {
            rows.push(json!([m, k, 3]));
        }
    }
    let env = envelope(&[MINISTRY, PROCEDURE_KIND], &[count()], json!(rows));
    let expected = ["1 申請", "2 報告", "2-1 届出", "10 その他", "(no value)"];

    let stacked = draw(&env);
    assert_eq!(stacked.kind, Kind::Stacked);
    let legend = stacked.svg.find("<g class=\"legend\"").unwrap();
    let plot = stacked.svg.find("<g class=\"plot\"").unwrap();
    let legend_texts = texts(&stacked.svg[legend..plot]);
    assert_eq!(legend_texts[1..], expected, "{legend_texts:?}");
    let series: Vec<String> = mark_labels(&stacked.svg)
        .iter()
        .filter(|l| l.starts_with("総務省 × "))
        .map(|l| l.trim_start_matches("総務省 × ").to_owned())
        .collect();
    assert_eq!(series, expected, "stacked in legend order");

    let heatmap = draw_with(
        &env,
        &Options {
            kind: Some(Kind::Heatmap),
            ..Options::default()
        },
    );
    let columns: Vec<String> = mark_labels(&heatmap.svg)
        .iter()
        .filter(|l| l.starts_with("総務省 × "))
        .map(|l| l.trim_start_matches("総務省 × ").to_owned())
        .collect();
    assert_eq!(columns, expected);
    let plot = &heatmap.svg[heatmap.svg.find("<g class=\"plot\"").unwrap()..];
    let headers: Vec<String> = texts(plot)
        .into_iter()
        .filter(|t| expected.contains(&t.as_str()))
        .collect();
    assert_eq!(headers, expected, "column headers in code order");
}

/// The numbers written in a heatmap's cells (the plot's texts that are numbers).
fn cell_labels(chart: &Chart) -> usize {
    let plot = chart.svg.find("<g class=\"plot\"").unwrap();
    let end = chart.svg[plot..].find("<g class=\"legend\"").unwrap() + plot;
    texts(&chart.svg[plot..end])
        .iter()
        .filter(|t| t.replace(',', "").parse::<f64>().is_ok())
        .count()
}

/// As the view: values in the cells up to 300 cells (rows × columns drawn), none past.
#[test]
fn heatmap_cells_are_labelled_up_to_300_cells() {
    let heatmap = Options {
        kind: Some(Kind::Heatmap),
        ..Options::default()
    };
    let at_limit = draw_with(&grid(15, 20), &heatmap);
    assert_eq!(at_limit.marks, 300);
    assert_eq!(cell_labels(&at_limit), 300);
    let over = draw_with(&grid(16, 20), &heatmap);
    assert_eq!(over.marks, 320);
    assert_eq!(cell_labels(&over), 0);
}

/// A null value is drawn as no cell at all, like a combination without a row: the grey grid
/// shows through (not a dash, not the palest colour, which is a value's).
#[test]
fn a_null_heatmap_cell_is_left_grey() {
    let mut env = by_ministry_and_kind(3, &["申請", "届出"]);
    env["data"]["rows"][1][3] = Value::Null;
    env["data"]["rows"].as_array_mut().unwrap().remove(2);
    let chart = draw_with(
        &env,
        &Options {
            metric: 1,
            ..Options::default()
        },
    );
    assert_eq!(
        chart.marks, 4,
        "neither the null nor the absent combination is a cell"
    );
    assert!(!texts(&chart.svg).iter().any(|t| t == "–"));
    let plot = chart.svg.find("<g class=\"plot\"").unwrap();
    let marks = chart.svg[plot..].find("<g class=\"marks\"").unwrap() + plot;
    assert!(
        chart.svg[plot..marks].contains("fill=\"#E4E7EC\""),
        "the grey grid under the cells"
    );
    assert!(!chart.svg[marks..].contains("fill=\"#E4E7EC\""));
}

/// A computed measure that is not a share (a sum_ratio: no `share`, no `null_excluded_column`)
/// was shown as a percentage: 2,345.5 read "234,550 %".
#[test]
fn regression_a_ratio_is_a_number_not_a_percentage() {
    let env = envelope(
        &[MINISTRY],
        &[ratio(), count()],
        json!([["総務省", 2345.5, 12], ["法務省", 0.12345, 3]]),
    );
    let chart = draw(&env);
    assert_eq!(chart.kind, Kind::Bar);
    assert!(
        chart.svg.contains("data-value=\"2,345.5\""),
        "{}",
        chart.svg
    );
    assert!(
        chart.svg.contains("data-value=\"0.1235\""),
        "up to 4 decimals"
    );
    assert!(!chart.svg.contains("234,550"));
    assert!(!chart.svg.contains(" %"), "no percentage anywhere");
    assert!(
        !chart.svg.contains("(n = "),
        "a ratio is not a share of the records"
    );
    let notes = texts(&chart.svg[chart.svg.find("<g class=\"notes\"").unwrap()..]);
    assert!(
        notes.contains(&format!(
            "{RATIO} = sum(手数料) / sum(件数); rounded to 4 decimals"
        )),
        "{notes:?}"
    );
    let card = draw(&envelope(&[], &[ratio(), count()], json!([[2345.5, 12]])));
    assert!(card.svg.contains("data-value=\"2,345.5\""));
    assert!(!card.svg.contains("of 12 records"));
}
