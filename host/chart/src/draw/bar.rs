//! Horizontal bars, one per group, largest first (nulls last); at most [`LIMITS`]`.bars` of
//! them.

use plotters::style::text_anchor::{HPos, VPos};
use serde_json::Value;

use super::{BAR, Font, Layer, MUTED, PAD, Scale, close, label_column, open, rate_note, what};
use crate::drawn::Chart;
use crate::error::ChartError;
use crate::kind::Kind;
use crate::limits::{LIMITS, largest_note};
use crate::summary::{Metric, Summary};
use crate::text::{NO_VALUE, cell_label, format_number, text_width, truncate};

const ROW: f64 = 26.0;
const BAR_HEIGHT: f64 = 18.0;
const LABEL_PX: f64 = 12.0;

/// Rows ordered by `col`, largest first, nulls (and anything not a number) last; the order of
/// equal values is kept.
pub(crate) fn by_value_desc<'a>(rows: &[&'a [Value]], col: usize) -> Vec<&'a [Value]> {
    let mut rows = rows.to_vec();
    rows.sort_by(|a, b| match (a[col].as_f64(), b[col].as_f64()) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    rows
}

/// The groups drawn, in order, with their labels.
struct Bars<'a> {
    rows: Vec<&'a [Value]>,
    /// What says how many groups are left out, when some are.
    left_out: Option<String>,
    /// Each row's group, as its label.
    labels: Vec<String>,
    /// Each row's value, as written beside its bar.
    value_labels: Vec<String>,
}

impl<'a> Bars<'a> {
    /// Picks the largest groups (nulls last), as many as are drawn, and labels them.
    fn pick(summary: &Summary<'a>, metric: &Metric) -> Self {
        let group = &summary.groups[0];
        let mut rows = by_value_desc(&summary.rows, metric.index);
        let left_out =
            (rows.len() > LIMITS.bars).then(|| largest_note(LIMITS.bars, rows.len(), "groups"));
        rows.truncate(LIMITS.bars);
        let count_col = summary.column("count");
        let labels: Vec<String> = rows.iter().map(|r| cell_label(&r[group.index])).collect();
        // A rate says how many records it is a share of, as in the view.
        let value_labels: Vec<String> = rows
            .iter()
            .map(|r| {
                let v = metric.format(&r[metric.index]);
                match count_col {
                    Some(c) if metric.kind == crate::kind::MetricKind::Share && !r[c].is_null() => {
                        format!(
                            "{v} (n = {})",
                            format_number(r[c].as_f64().unwrap_or(0.0), 0)
                        )
                    }
                    _ => v,
                }
            })
            .collect();
        Bars {
            rows,
            left_out,
            labels,
            value_labels,
        }
    }
}

/// Where the plot's parts go.
struct Plot {
    width: u32,
    /// The width of the group labels' column.
    label_w: f64,
    /// Where the bars' axis starts.
    plot_x0: f64,
    /// The top of the first bar's row.
    top: f64,
    scale: Scale,
}

pub(crate) fn draw(
    summary: &Summary<'_>,
    metric: &Metric,
    width: u32,
) -> Result<Chart, ChartError> {
    let group = &summary.groups[0];
    let bars = Bars::pick(summary, metric);

    let mut canvas = open(width, summary, &what(metric, summary))?;

    let w = f64::from(width);
    // The column is wide enough for the field's name above it too, within the same bound.
    let label_w = label_column(
        &bars.labels,
        LABEL_PX,
        text_width(&group.name, 12.0).max(40.0),
        (w * 0.35).min(260.0),
    );
    let value_w = label_column(&bars.value_labels, 11.0, 30.0, 200.0) + 8.0;
    let plot_x0 = PAD + label_w + 10.0;
    let plot_x1 = w - PAD - value_w;
    let values: Vec<f64> = bars
        .rows
        .iter()
        .filter_map(|r| r[metric.index].as_f64())
        .collect();
    let lo = values.iter().copied().fold(0.0, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    let scale = Scale::from_zero(lo, hi, plot_x0, plot_x1);

    let mut frame = Layer::new(width);
    let axis_title = Font::new(12.0).bold().anchor(HPos::Right, VPos::Top);
    frame.text(
        &truncate(&group.name, label_w, 12.0),
        plot_x0 - 10.0,
        canvas.y,
        axis_title,
    )?;
    canvas.y += 20.0;
    let top = canvas.y;
    let bottom = top + ROW * bars.rows.len() as f64;
    let below = scale.draw(&mut frame, top, bottom, metric)?;

    let plot = Plot {
        width,
        label_w,
        plot_x0,
        top,
        scale,
    };
    let (marks, value_layer, count) = rows(&bars, metric, &plot, &mut frame)?;
    let plot_bottom = bottom + below;
    canvas.plot(Kind::Bar.as_str(), frame, marks, count, value_layer);
    canvas.y = plot_bottom + 8.0;

    let chart_notes: Vec<String> = bars
        .left_out
        .into_iter()
        .chain(rate_note(metric, summary))
        .collect();
    close(
        canvas,
        Kind::Bar,
        summary,
        &what(metric, summary),
        &chart_notes,
    )
}

/// Draws each group's label into `frame`, and its bar and value: the marks, the value
/// labels and how many marks.
fn rows(
    bars: &Bars<'_>,
    metric: &Metric,
    plot: &Plot,
    frame: &mut Layer,
) -> Result<(Layer, Layer, usize), ChartError> {
    let Plot {
        width,
        label_w,
        plot_x0,
        top,
        ref scale,
    } = *plot;
    let w = f64::from(width);
    let (labels, value_labels) = (&bars.labels, &bars.value_labels);
    let mut marks = Layer::new(width);
    let mut value_layer = Layer::new(width);
    let mut count = 0;
    let label_font = Font::new(LABEL_PX).anchor(HPos::Right, VPos::Center);
    let value_font = Font::new(11.0).anchor(HPos::Left, VPos::Center);
    let zero = scale.x(0.0);
    for (i, row) in bars.rows.iter().enumerate() {
        let y = top + ROW * i as f64;
        let mid = y + ROW / 2.0;
        frame.text(
            &truncate(&labels[i], label_w, LABEL_PX),
            plot_x0 - 8.0,
            mid,
            label_font,
        )?;
        match row[metric.index].as_f64() {
            Some(v) => {
                let x = scale.x(v);
                let mut bar = Layer::new(width);
                let bar_top = mid - BAR_HEIGHT / 2.0;
                bar.rect(zero.min(x), bar_top, zero.max(x), bar_top + BAR_HEIGHT, BAR)?;
                marks.mark(
                    &labels[i],
                    &metric.format(&row[metric.index]),
                    &bar.into_string(),
                );
                count += 1;
                // A negative bar's label goes left of its end, a positive one's right.
                let (lx, font) = if v < 0.0 {
                    (x - 4.0, value_font.anchor(HPos::Right, VPos::Center))
                } else {
                    (x + 4.0, value_font)
                };
                let room = if v < 0.0 { lx - plot_x0 } else { w - PAD - lx };
                if text_width(&value_labels[i], 11.0) <= room {
                    value_layer.text(&value_labels[i], lx, mid, font)?;
                }
            }
            None => {
                value_layer.text(NO_VALUE, zero + 4.0, mid, value_font.color(MUTED))?;
            }
        }
    }
    Ok((marks, value_layer, count))
}
