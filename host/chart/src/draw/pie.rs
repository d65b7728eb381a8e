//! Parts of a whole (up to 7): a ring of wedges, largest first from twelve o'clock clockwise,
//! with a legend that gives each part's value and share.
//!
//! The wedges are plotters polygons computed here rather than plotters' `Pie` element: `Pie`
//! places its points about 0.4 px apart on whole-pixel coordinates, which draws a visible
//! staircase and thousands of points per slice; it also sets its labels itself, where a
//! legend reads better for long Japanese names.

use std::f64::consts::PI;

use plotters::style::RGBColor;
use plotters::style::text_anchor::{HPos, VPos};

use super::{Font, Layer, PAD, close, open, palette, text_on, what};
use crate::drawn::Chart;
use crate::error::ChartError;
use crate::kind::Kind;
use crate::pick::by_value_desc;
use crate::summary::{Metric, Summary};
use crate::text::{cell_label, format_percent, text_width, truncate};

const RADIUS: f64 = 120.0;
const HOLE: f64 = 54.0;

/// One part of the whole: its label, its value and the cell it came from.
pub(crate) type Part<'a> = (String, f64, &'a serde_json::Value);

/// The parts that can be drawn as areas (values above zero), largest first, and the labels
/// of those that cannot.
pub(crate) fn parts<'a>(summary: &Summary<'a>, metric: &Metric) -> (Vec<Part<'a>>, Vec<String>) {
    let group = summary.groups[0].index;
    let mut drawn = Vec::new();
    let mut left_out = Vec::new();
    for r in by_value_desc(&summary.rows, metric.index) {
        let label = cell_label(&r[group]);
        match r[metric.index].as_f64() {
            Some(v) if v > 0.0 => drawn.push((label, v, &r[metric.index])),
            _ if r[metric.index].is_null() => left_out.push(format!("{label} (no value)")),
            _ => left_out.push(format!("{label} ({})", metric.format(&r[metric.index]))),
        }
    }
    (drawn, left_out)
}

pub(crate) fn left_out_note(left_out: &[String]) -> Option<String> {
    (!left_out.is_empty()).then(|| format!("not drawn (no value, or 0): {}", left_out.join(", ")))
}

/// The outline of a ring's wedge from angle `a0` to `a1` (radians, clockwise on screen).
fn wedge(center: (f64, f64), a0: f64, a1: f64) -> Vec<(f64, f64)> {
    // A point per degree at most keeps the chords under 2.1 px on the outer arc.
    let steps = ((a1 - a0) / 1f64.to_radians()).ceil().max(1.0) as usize;
    let at = |r: f64, a: f64| (center.0 + r * a.cos(), center.1 + r * a.sin());
    let angle = |i: usize| a0 + (a1 - a0) * i as f64 / steps as f64;
    let outer = (0..=steps).map(|i| at(RADIUS, angle(i)));
    let inner = (0..=steps).rev().map(|i| at(HOLE, angle(i)));
    outer.chain(inner).collect()
}

pub(crate) fn draw(
    summary: &Summary<'_>,
    metric: &Metric,
    width: u32,
) -> Result<Chart, ChartError> {
    let (parts, left_out) = parts(summary, metric);
    let total: f64 = parts.iter().map(|p| p.1).sum();
    let mut canvas = open(width, summary, &what(metric, summary))?;

    let top = canvas.y;
    let center = (PAD + RADIUS + 8.0, top + RADIUS + 8.0);
    let colours: Vec<RGBColor> = (0..parts.len()).map(palette).collect();
    let mut frame = Layer::new(width);
    let mut marks = Layer::new(width);
    let mut labels = Layer::new(width);
    let mut start = -PI / 2.0;
    for (i, (label, v, raw)) in parts.iter().enumerate() {
        let angle = v / total * 2.0 * PI;
        let mut slice = Layer::new(width);
        slice.fine_polygon(&wedge(center, start, start + angle), colours[i])?;
        marks.mark(label, &metric.format(raw), &slice.into_string());
        // The share inside the wedge when the wedge is wide enough to hold it.
        if angle > 0.35 {
            let mid = start + angle / 2.0;
            let r = (RADIUS + HOLE) / 2.0;
            let (x, y) = (center.0 + r * mid.cos(), center.1 + r * mid.sin());
            let font = Font::new(11.0)
                .color(text_on(colours[i]))
                .anchor(HPos::Center, VPos::Center);
            labels.text(&format_percent(v / total), x, y, font)?;
        }
        start += angle;
    }

    // The legend: colour, name, and value with share, the values' column right-aligned.
    let legend_x = center.0 + RADIUS + 32.0;
    let right = f64::from(width) - PAD;
    let row = 24.0;
    let font = Font::new(12.0).anchor(HPos::Left, VPos::Center);
    let values: Vec<String> = parts
        .iter()
        .map(|(_, v, raw)| format!("{} ({})", metric.format(raw), format_percent(v / total)))
        .collect();
    let value_w = values
        .iter()
        .map(|v| text_width(v, 12.0))
        .fold(0.0, f64::max);
    let names_w = parts
        .iter()
        .map(|p| text_width(&p.0, 12.0))
        .fold(0.0, f64::max);
    let name_w = names_w.min((right - legend_x - 18.0 - value_w - 16.0).max(40.0));
    let values_right = (legend_x + 18.0 + name_w + 16.0 + value_w).min(right);
    frame.text(
        &truncate(&summary.groups[0].name, right - legend_x, 12.0),
        legend_x,
        top,
        Font::new(12.0).bold(),
    )?;
    let legend_top = top + 24.0;
    for (i, (label, _, _)) in parts.iter().enumerate() {
        let y = legend_top + row * i as f64 + row / 2.0;
        frame.rect(legend_x, y - 6.0, legend_x + 12.0, y + 6.0, colours[i])?;
        frame.text(&truncate(label, name_w, 12.0), legend_x + 18.0, y, font)?;
        frame.text(
            &values[i],
            values_right,
            y,
            font.anchor(HPos::Right, VPos::Center),
        )?;
    }
    canvas.plot(Kind::Pie.as_str(), frame, marks, parts.len(), labels);
    let legend_bottom = legend_top + row * parts.len() as f64;
    canvas.y = (top + 2.0 * RADIUS + 16.0).max(legend_bottom) + 12.0;

    let mut extra: Vec<String> = left_out_note(&left_out).into_iter().collect();
    extra.push(format!("total {}", metric.format_f64(total)));
    close(canvas, Kind::Pie, summary, &what(metric, summary), &extra)
}
