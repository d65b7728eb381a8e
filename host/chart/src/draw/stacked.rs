//! Horizontal stacked bars: the first grouping field's values as bars (largest total first),
//! the second's as the stacked series in code order, one colour each; at most
//! [`LIMITS`]`.stacked_categories` bars and `.stacked_series` series, the smallest past them
//! folded into one "others" bar or series (`pick::Grid`).

use plotters::style::RGBColor;
use plotters::style::text_anchor::{HPos, VPos};

use super::{
    Canvas, Font, Layer, OTHERS, PAD, Scale, close, label_column, open, palette, rate_note,
    text_on, what,
};
use crate::drawn::Chart;
use crate::error::ChartError;
use crate::kind::Kind;
use crate::limits::LIMITS;
use crate::pick::{Grid, partial_note};
use crate::summary::{Metric, Summary};
use crate::text::{text_width, truncate};

const ROW: f64 = 28.0;
const BAR_HEIGHT: f64 = 20.0;
const LABEL_PX: f64 = 12.0;

/// The colour of series `b`: the palette's, grey for "others".
fn series_colour(grid: &Grid, b: usize) -> RGBColor {
    if grid.second.folded > 0 && b == grid.second.values.len() {
        OTHERS
    } else {
        palette(b)
    }
}

/// Whether the cell at (`a`, `b`) stands for groups folded into "others", and how many: those
/// of its row's grouping when the row is "others", else those of its column's.
pub(crate) fn folded_at(grid: &Grid, a: usize, b: usize) -> Option<usize> {
    if grid.first.folded > 0 && a == grid.first.values.len() {
        Some(grid.first.folded)
    } else if grid.second.folded > 0 && b == grid.second.values.len() {
        Some(grid.second.folded)
    } else {
        None
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
    let (first, second) = (grid.first.labels(), grid.second.labels());
    let mut canvas = open(width, summary, &what(metric, summary))?;
    legend(&mut canvas, &summary.groups[1].name, &second, |b| {
        series_colour(&grid, b)
    })?;

    let w = f64::from(width);
    // Each bar's positive parts stack rightwards from zero, its negative parts leftwards.
    let mut pos = vec![0.0; first.len()];
    let mut neg = vec![0.0; first.len()];
    for (a, _, v) in &grid.cells {
        let a = *a;
        match v.as_f64() {
            Some(x) if x >= 0.0 => pos[a] += x,
            Some(x) => neg[a] += x,
            None => {}
        }
    }
    let totals: Vec<String> = (0..first.len())
        .map(|a| metric.format_f64(pos[a] + neg[a]))
        .collect();
    let title_w = text_width(&summary.groups[0].name, 12.0).max(40.0);
    let label_w = label_column(&first, LABEL_PX, title_w, (w * 0.3).min(240.0));
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
    let bottom = top + ROW * first.len() as f64;
    let below = scale.draw(&mut frame, top, bottom, metric)?;

    let label_font = Font::new(LABEL_PX).anchor(HPos::Right, VPos::Center);
    let mut marks = Layer::new(width);
    let mut labels = Layer::new(width);
    let mut count = 0;
    let mut pos_end = vec![0.0; first.len()];
    let mut neg_end = vec![0.0; first.len()];
    for (a, name) in first.iter().enumerate() {
        let mid = top + ROW * a as f64 + ROW / 2.0;
        frame.text(
            &truncate(name, label_w, LABEL_PX),
            plot_x0 - 8.0,
            mid,
            label_font,
        )?;
    }
    // Series in legend order, so that colours stack the same way in every bar.
    for (b, series) in second.iter().enumerate() {
        for (a, _, v) in grid.cells.iter().filter(|c| c.1 == b) {
            let a = *a;
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
            let fill = series_colour(&grid, b);
            let mut seg = Layer::new(width);
            seg.rect(x0, mid - BAR_HEIGHT / 2.0, x1, mid + BAR_HEIGHT / 2.0, fill)?;
            let label = format!("{} × {series}", first[a]);
            let value = metric.format(v);
            marks.mark_of(&label, &value, folded_at(&grid, a, b), &seg.into_string());
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
    let chart_notes: Vec<String> = grid
        .note("bars", "series", metric)
        .into_iter()
        .chain(partial_note(summary, grid.folded()))
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
fn legend(
    canvas: &mut Canvas,
    title: &str,
    series: &[String],
    colours: impl Fn(usize) -> RGBColor,
) -> Result<(), ChartError> {
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
        layer.rect(x, y - 5.0, x + 10.0, y + 5.0, colours(i))?;
        layer.text(&name, x + 14.0, y, font)?;
        x += item;
    }
    canvas.group("legend", layer);
    canvas.y = y + 9.0 + 10.0;
    Ok(())
}
