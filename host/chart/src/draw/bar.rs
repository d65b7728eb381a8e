//! Horizontal bars, one per group, largest first (nulls last); at most [`LIMITS`]`.bars` of
//! them, the last one "others" when more groups are given and the metric adds up.

use plotters::style::text_anchor::{HPos, VPos};
use serde_json::Value;

use super::{
    BAR, Font, Layer, MUTED, OTHERS, PAD, Scale, close, label_column, open, rate_note, what,
};
use crate::drawn::Chart;
use crate::error::ChartError;
use crate::kind::Kind;
use crate::limits::LIMITS;
use crate::pick::{groups_note, partial_note, pick_groups};
use crate::summary::{Metric, Summary};
use crate::text::{NO_VALUE, cell_label, format_number, text_width, truncate};

const ROW: f64 = 26.0;
const BAR_HEIGHT: f64 = 18.0;
const LABEL_PX: f64 = 12.0;

/// The groups drawn, in order, with their labels.
struct Bars {
    /// Each bar's value (the "others" bar's is the sum of the groups it stands for).
    values: Vec<Value>,
    /// What says how many groups are folded or left out, when some are.
    left_out: Option<String>,
    /// Each bar's group, as its label.
    labels: Vec<String>,
    /// Each row's value, as written beside its bar.
    value_labels: Vec<String>,
    /// How many groups the last bar stands for, when it is "others".
    others: Option<usize>,
}

impl Bars {
    /// Picks the largest groups (nulls last), as many as are drawn, the rest as one "others"
    /// bar when the metric adds up, and labels them.
    fn pick(summary: &Summary<'_>, metric: &Metric) -> Self {
        let group = &summary.groups[0];
        let groups = pick_groups(&summary.rows, metric, LIMITS.bars);
        let left_out = groups_note(&groups, metric, "bar");
        let count_col = summary.column("count");
        let mut labels: Vec<String> = groups
            .rows
            .iter()
            .map(|r| cell_label(&r[group.index]))
            .collect();
        let mut values: Vec<Value> = groups
            .rows
            .iter()
            .map(|r| r[metric.index].clone())
            .collect();
        // A rate says how many records it is a share of, as in the view.
        let mut value_labels: Vec<String> = groups
            .rows
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
        let others = groups.others.map(|o| {
            labels.push(o.label());
            value_labels.push(metric.format(&o.value));
            values.push(o.value);
            o.groups
        });
        Bars {
            values,
            left_out,
            labels,
            value_labels,
            others,
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
    let values: Vec<f64> = bars.values.iter().filter_map(Value::as_f64).collect();
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
    let bottom = top + ROW * bars.values.len() as f64;
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
        .chain(partial_note(summary, bars.others.is_some()))
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
    bars: &Bars,
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
    for (i, value) in bars.values.iter().enumerate() {
        let y = top + ROW * i as f64;
        let mid = y + ROW / 2.0;
        frame.text(
            &truncate(&labels[i], label_w, LABEL_PX),
            plot_x0 - 8.0,
            mid,
            label_font,
        )?;
        match value.as_f64() {
            Some(v) => {
                let x = scale.x(v);
                let mut bar = Layer::new(width);
                let bar_top = mid - BAR_HEIGHT / 2.0;
                let others = bars.others.filter(|_| i + 1 == bars.values.len());
                let fill = if others.is_some() { OTHERS } else { BAR };
                bar.rect(
                    zero.min(x),
                    bar_top,
                    zero.max(x),
                    bar_top + BAR_HEIGHT,
                    fill,
                )?;
                marks.mark_of(
                    &labels[i],
                    &metric.format(value),
                    others,
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
