//! Horizontal stacked bars: the first grouping field's values as bars (largest total first),
//! the second's as the stacked series in code order, one colour each; at most
//! [`LIMITS`]`.stacked_categories` bars and `.stacked_series` series.

use std::collections::{HashMap, HashSet};

use plotters::style::text_anchor::{HPos, VPos};
use serde_json::Value;

use super::{
    Canvas, Font, Layer, PAD, Scale, close, label_column, open, palette, rate_note, text_on, what,
};
use crate::drawn::Chart;
use crate::error::ChartError;
use crate::kind::Kind;
use crate::limits::{ALL_IN_TABLE, LIMITS};
use crate::summary::{Metric, Summary};
use crate::text::{cell_label, code_order, format_number, text_width, truncate};

const ROW: f64 = 28.0;
const BAR_HEIGHT: f64 = 20.0;
const LABEL_PX: f64 = 12.0;

/// The two grouping fields' values, as the view orders them: the first by total when the
/// metric adds up (else as the rows come), the second in code order ([`code_order`]); at most
/// `max_first` and `max_second` of them; and the cells within those, ordered by (first,
/// second).
pub(crate) struct Grid<'a> {
    pub first: Vec<String>,
    pub second: Vec<String>,
    pub cells: Vec<(usize, usize, &'a Value)>,
    /// How many values each grouping has, drawn or not.
    pub first_total: usize,
    pub second_total: usize,
}

impl<'a> Grid<'a> {
    pub fn new(
        summary: &Summary<'a>,
        metric: &Metric,
        max_first: usize,
        max_second: usize,
    ) -> Self {
        let (g1, g2) = (summary.groups[0].index, summary.groups[1].index);
        // Labels once per row; positions by hash, as a result can have 100,000 rows.
        let labels: Vec<(String, String)> = summary
            .rows
            .iter()
            .map(|r| (cell_label(&r[g1]), cell_label(&r[g2])))
            .collect();
        let mut first: Vec<&str> = Vec::new();
        let mut first_at: HashMap<&str, usize> = HashMap::new();
        let mut second: Vec<&str> = Vec::new();
        let mut seen_second: HashSet<&str> = HashSet::new();
        let mut totals: Vec<f64> = Vec::new();
        for (r, (a, b)) in summary.rows.iter().zip(&labels) {
            let i = *first_at.entry(a).or_insert_with(|| {
                first.push(a);
                totals.push(0.0);
                first.len() - 1
            });
            totals[i] += r[metric.index].as_f64().unwrap_or(0.0);
            if seen_second.insert(b) {
                second.push(b);
            }
        }
        if metric.additive() {
            // Stable: equal totals keep the rows' order, as the view's sort.
            let mut order: Vec<usize> = (0..first.len()).collect();
            order.sort_by(|&a, &b| totals[b].total_cmp(&totals[a]));
            first = order.iter().map(|&i| first[i]).collect();
        }
        second.sort_by(|a, b| code_order(a, b));
        let (first_total, second_total) = (first.len(), second.len());
        first.truncate(max_first);
        second.truncate(max_second);
        let first_at: HashMap<&str, usize> =
            first.iter().enumerate().map(|(i, a)| (*a, i)).collect();
        let second_at: HashMap<&str, usize> =
            second.iter().enumerate().map(|(i, b)| (*b, i)).collect();
        let mut cells: Vec<(usize, usize, &Value)> = summary
            .rows
            .iter()
            .zip(&labels)
            .filter_map(|(r, (a, b))| {
                Some((
                    *first_at.get(a.as_str())?,
                    *second_at.get(b.as_str())?,
                    &r[metric.index],
                ))
            })
            .collect();
        // Row by row as drawn, so that the marks read in the chart's order.
        cells.sort_by_key(|&(a, b, _)| (a, b));
        Grid {
            first: first.into_iter().map(str::to_owned).collect(),
            second: second.into_iter().map(str::to_owned).collect(),
            cells,
            first_total,
            second_total,
        }
    }

    /// The note that says what was left out, if anything: "The first 60 of 500 rows and 40 of
    /// 500 columns are drawn; the result's table has them all." `largest` when the first
    /// grouping's values are ordered by total ("The 60 largest of 100 bars …").
    pub fn left_out_note(
        &self,
        first_what: &str,
        second_what: &str,
        largest: bool,
    ) -> Option<String> {
        let count = |n: usize| format_number(n as f64, 0);
        let (n, total) = (self.first.len(), count(self.first_total));
        let first = if largest {
            format!("{n} largest of {total} {first_what}")
        } else {
            format!("first {n} of {total} {first_what}")
        };
        let second = format!(
            "{} of {} {second_what}",
            self.second.len(),
            count(self.second_total)
        );
        let drawn = match (
            self.first.len() < self.first_total,
            self.second.len() < self.second_total,
        ) {
            (false, false) => return None,
            (true, false) => format!("The {first}"),
            (false, true) => format!("The first {second}"),
            (true, true) if largest => format!("The {first} and the first {second}"),
            (true, true) => format!("The {first} and {second}"),
        };
        Some(format!("{drawn} are drawn; {ALL_IN_TABLE}"))
    }
}

pub(crate) fn draw(
    summary: &Summary<'_>,
    metric: &Metric,
    width: u32,
) -> Result<Chart, ChartError> {
    let grid = Grid::new(
        summary,
        metric,
        LIMITS.stacked_categories,
        LIMITS.stacked_series,
    );
    let mut canvas = open(width, summary, &what(metric, summary))?;
    legend(&mut canvas, &summary.groups[1].name, &grid.second)?;

    let w = f64::from(width);
    // Each bar's positive parts stack rightwards from zero, its negative parts leftwards.
    let mut pos = vec![0.0; grid.first.len()];
    let mut neg = vec![0.0; grid.first.len()];
    for &(a, _, v) in &grid.cells {
        match v.as_f64() {
            Some(x) if x >= 0.0 => pos[a] += x,
            Some(x) => neg[a] += x,
            None => {}
        }
    }
    let totals: Vec<String> = (0..grid.first.len())
        .map(|a| metric.format_f64(pos[a] + neg[a]))
        .collect();
    let title_w = text_width(&summary.groups[0].name, 12.0).max(40.0);
    let label_w = label_column(&grid.first, LABEL_PX, title_w, (w * 0.3).min(240.0));
    let value_w = label_column(&totals, 11.0, 30.0, 160.0) + 8.0;
    let plot_x0 = PAD + label_w + 10.0;
    let plot_x1 = w - PAD - value_w;
    let lo = neg.iter().copied().fold(0.0, f64::min);
    let hi = pos.iter().copied().fold(0.0, f64::max);
    let scale = Scale::from_zero(lo, hi, plot_x0, plot_x1);

    let mut frame = Layer::new(width);
    let axis_title = Font::new(12.0).bold().anchor(HPos::Right, VPos::Top);
    frame.text(
        &truncate(&summary.groups[0].name, label_w, 12.0),
        plot_x0 - 10.0,
        canvas.y,
        axis_title,
    )?;
    canvas.y += 20.0;
    let top = canvas.y;
    let bottom = top + ROW * grid.first.len() as f64;
    let below = scale.draw(&mut frame, top, bottom, metric)?;

    let label_font = Font::new(LABEL_PX).anchor(HPos::Right, VPos::Center);
    let mut marks = Layer::new(width);
    let mut labels = Layer::new(width);
    let mut count = 0;
    let mut pos_end = vec![0.0; grid.first.len()];
    let mut neg_end = vec![0.0; grid.first.len()];
    for (a, name) in grid.first.iter().enumerate() {
        let mid = top + ROW * a as f64 + ROW / 2.0;
        frame.text(
            &truncate(name, label_w, LABEL_PX),
            plot_x0 - 8.0,
            mid,
            label_font,
        )?;
    }
    // Series in legend order, so that colours stack the same way in every bar.
    for b in 0..grid.second.len() {
        for &(a, _, v) in grid.cells.iter().filter(|c| c.1 == b) {
            let Some(x) = v.as_f64() else { continue };
            let (from, to) = if x >= 0.0 {
                let from = pos_end[a];
                pos_end[a] += x;
                (from, pos_end[a])
            } else {
                let from = neg_end[a];
                neg_end[a] += x;
                (neg_end[a], from)
            };
            let (x0, x1) = (scale.x(from), scale.x(to));
            let mid = top + ROW * a as f64 + ROW / 2.0;
            let fill = palette(b);
            let mut seg = Layer::new(width);
            seg.rect(x0, mid - BAR_HEIGHT / 2.0, x1, mid + BAR_HEIGHT / 2.0, fill)?;
            let label = format!("{} × {}", grid.first[a], grid.second[b]);
            let value = metric.format(v);
            marks.mark(&label, &value, &seg.into_string());
            count += 1;
            // The part's value inside it when it fits.
            if text_width(&value, 10.0) + 6.0 <= x1 - x0 {
                let font = Font::new(10.0)
                    .color(text_on(fill))
                    .anchor(HPos::Center, VPos::Center);
                labels.text(&value, (x0 + x1) / 2.0, mid, font)?;
            }
        }
    }
    let total_font = Font::new(11.0).anchor(HPos::Left, VPos::Center);
    for (a, total) in totals.iter().enumerate() {
        let mid = top + ROW * a as f64 + ROW / 2.0;
        labels.text(total, scale.x(pos[a]) + 4.0, mid, total_font)?;
    }
    canvas.plot(Kind::Stacked.as_str(), frame, marks, count, labels);
    canvas.y = bottom + below + 8.0;

    // Bars by total, largest first, as they are drawn; series in code order.
    let left_out = grid.left_out_note("bars", "series", metric.additive());
    let chart_notes: Vec<String> = left_out
        .into_iter()
        .chain(rate_note(metric, summary))
        .collect();
    close(
        canvas,
        Kind::Stacked,
        summary,
        &what(metric, summary),
        &chart_notes,
    )
}

/// The series' colours with their names, in rows that wrap at the width.
fn legend(canvas: &mut Canvas, title: &str, series: &[String]) -> Result<(), ChartError> {
    let font = Font::new(12.0).anchor(HPos::Left, VPos::Center);
    let mut layer = canvas.layer();
    let right = f64::from(canvas.width) - PAD;
    let title_font = Font::new(12.0).bold().anchor(HPos::Left, VPos::Center);
    let title = truncate(title, 200.0, 12.0);
    let mut y = canvas.y + 9.0;
    layer.text(&title, PAD, y, title_font)?;
    let start = PAD + text_width(&title, 12.0) + 12.0;
    let mut x = start;
    for (i, name) in series.iter().enumerate() {
        let name = truncate(name, 180.0, 12.0);
        let item = 14.0 + text_width(&name, 12.0) + 14.0;
        if x + item > right && x > start {
            x = start;
            y += 20.0;
        }
        layer.rect(x, y - 5.0, x + 10.0, y + 5.0, palette(i))?;
        layer.text(&name, x + 14.0, y, font)?;
        x += item;
    }
    canvas.group("legend", layer);
    canvas.y = y + 9.0 + 10.0;
    Ok(())
}
