//! A grid coloured by value: the first grouping field's values as rows (largest first: by
//! total when the metric adds up, else by their largest value), the second's largest as
//! columns in code order, with a colour scale under it; at most [`LIMITS`]`.heatmap_rows` rows
//! and `.heatmap_columns` columns, the rest folded into one "others" row or column when the
//! metric adds up, else left out (`pick::Grid`).

use plotters::style::RGBColor;
use plotters::style::text_anchor::{HPos, VPos};

use super::stacked::folded_at;
use super::{
    Canvas, Font, Layer, OTHERS, PAD, close, label_column, open, rate_note, text_on, what,
};
use crate::drawn::Chart;
use crate::error::ChartError;
use crate::kind::Kind;
use crate::limits::LIMITS;
use crate::pick::{Grid, partial_note};
use crate::summary::{Metric, Summary};
use crate::text::{text_width, truncate};

const ROW: f64 = 26.0;
const LABEL_PX: f64 = 12.0;
const HEADER_PX: f64 = 11.0;
// The view's scale (visualMap, `--heat-low` to `--heat-high` in view.css): from a pale to the
// accent blue.
const LOW: RGBColor = RGBColor(0xf4, 0xf8, 0xff);
const HIGH: RGBColor = RGBColor(0x2f, 0x6f, 0xdf);
/// The grid under the cells (the view's `--absent`): a combination without a row, or whose
/// value is null, has no cell and shows this grey, which no value's colour is.
const ABSENT: RGBColor = RGBColor(0xe4, 0xe7, 0xec);
/// Values are written in the cells when the grid drawn has at most this many cells (rows ×
/// columns), as the view's `label.show`; more would be too small to read.
const MAX_LABELLED_CELLS: usize = 300;

fn mix(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let c = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * t).round() as u8;
    RGBColor(c(LOW.0, HIGH.0), c(LOW.1, HIGH.1), c(LOW.2, HIGH.2))
}

/// The grid picked, with the labels of its rows and columns ("others" last when folded).
struct Labelled<'g> {
    grid: &'g Grid,
    first: Vec<String>,
    second: Vec<String>,
}

/// Where the grid's parts go across the chart.
struct Layout {
    /// The chart's width: the width asked for, or wider when the cells need it.
    width: u32,
    /// The width of the row labels' column.
    label_w: f64,
    /// Where the first column of cells starts.
    plot_x0: f64,
    cell_w: f64,
}

impl Layout {
    /// Lays out the row labels and the cells across `width`.
    fn new(summary: &Summary<'_>, grid: &Labelled<'_>, width: u32) -> Self {
        let cols = grid.second.len();
        let w = f64::from(width);
        let title_w = text_width(&summary.groups[0].name, 12.0).max(40.0);
        let label_w = label_column(&grid.first, LABEL_PX, title_w, (w * 0.3).min(220.0));
        let plot_x0 = PAD + label_w + 10.0;
        // Cells share the width, between 28 and 96 pixels; with many columns the chart grows
        // wider rather than the cells becoming unreadable.
        let cell_w = ((w - PAD - plot_x0) / cols as f64).clamp(28.0, 96.0);
        let width = width.max((plot_x0 + cell_w * cols as f64 + PAD).ceil() as u32);
        Layout {
            width,
            label_w,
            plot_x0,
            cell_w,
        }
    }
}

pub(crate) fn draw(
    summary: &Summary<'_>,
    metric: &Metric,
    width: u32,
) -> Result<Chart, ChartError> {
    let picked = Grid::new(summary, metric, LIMITS.heatmap_rows, LIMITS.heatmap_columns);
    let grid = Labelled {
        first: picked.first.labels(),
        second: picked.second.labels(),
        grid: &picked,
    };
    let rows = grid.first.len();
    let layout = Layout::new(summary, &grid, width);
    let width = layout.width;

    let mut canvas = open(width, summary, &what(metric, summary))?;

    let mut frame = Layer::new(width);
    headers(&mut frame, &mut canvas, summary, &grid, &layout)?;
    let top = canvas.y;
    row_labels(&mut frame, &grid, &layout, top)?;

    // The colour scale is of the cells drawn apart: "others" stands for many groups, would
    // hold the largest value and pale every other cell; it is drawn grey with its value.
    let values: Vec<f64> = picked
        .cells
        .iter()
        .filter(|c| folded_at(&picked, c.0, c.1).is_none())
        .filter_map(|c| c.2.as_f64())
        .collect();
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (marks, labels, count) = cells(&grid, metric, &layout, top, min, max)?;
    canvas.plot(Kind::Heatmap.as_str(), frame, marks, count, labels);
    canvas.y = top + ROW * rows as f64 + 12.0;

    if !values.is_empty() {
        colour_scale(&mut canvas, metric, min, max, layout.plot_x0)?;
    }
    let chart_notes: Vec<String> = picked
        .note("rows", "columns", metric)
        .into_iter()
        .chain(partial_note(summary, picked.folded()))
        .chain(rate_note(metric, summary))
        .collect();
    close(
        canvas,
        Kind::Heatmap,
        summary,
        &what(metric, summary),
        &chart_notes,
    )
}

/// Draws the fields' names and the column headers into `frame`, and moves `canvas.y` below
/// them, to the top of the cells.
fn headers(
    frame: &mut Layer,
    canvas: &mut Canvas,
    summary: &Summary<'_>,
    grid: &Labelled<'_>,
    layout: &Layout,
) -> Result<(), ChartError> {
    let Layout {
        label_w,
        plot_x0,
        cell_w,
        ..
    } = *layout;
    // The columns' field centred over the columns; the rows' field over the row labels, on
    // the line of the column headers.
    let bold = Font::new(12.0).bold();
    let columns_w = cell_w * grid.second.len() as f64;
    frame.text(
        &truncate(&summary.groups[1].name, columns_w.max(120.0), 12.0),
        plot_x0 + columns_w / 2.0,
        canvas.y,
        bold.anchor(HPos::Center, VPos::Top),
    )?;
    canvas.y += 20.0;

    // Column headers: level when every one fits its cell, else turned to read upwards.
    let level = grid
        .second
        .iter()
        .all(|s| text_width(s, HEADER_PX) <= cell_w - 4.0);
    let header_h = if level {
        18.0
    } else {
        grid.second
            .iter()
            .map(|s| text_width(s, HEADER_PX))
            .fold(0.0, f64::max)
            .min(160.0)
            + 8.0
    };
    for (b, name) in grid.second.iter().enumerate() {
        let cx = plot_x0 + cell_w * (b as f64 + 0.5);
        if level {
            frame.text(
                name,
                cx,
                canvas.y,
                Font::new(HEADER_PX).anchor(HPos::Center, VPos::Top),
            )?;
        } else {
            let font = Font::new(HEADER_PX)
                .rotated()
                .anchor(HPos::Left, VPos::Center);
            frame.text(
                &truncate(name, header_h - 8.0, HEADER_PX),
                cx,
                canvas.y + header_h - 4.0,
                font,
            )?;
        }
    }
    frame.text(
        &truncate(&summary.groups[0].name, label_w, 12.0),
        plot_x0 - 8.0,
        canvas.y + header_h - 4.0,
        bold.anchor(HPos::Right, VPos::Bottom),
    )?;
    canvas.y += header_h;
    Ok(())
}

/// Draws the row labels and, under where the cells go, the grey grid into `frame`.
fn row_labels(
    frame: &mut Layer,
    grid: &Labelled<'_>,
    layout: &Layout,
    top: f64,
) -> Result<(), ChartError> {
    let Layout {
        label_w,
        plot_x0,
        cell_w,
        ..
    } = *layout;
    let label_font = Font::new(LABEL_PX).anchor(HPos::Right, VPos::Center);
    for (a, name) in grid.first.iter().enumerate() {
        let y = top + ROW * a as f64;
        frame.text(
            &truncate(name, label_w, LABEL_PX),
            plot_x0 - 8.0,
            y + ROW / 2.0,
            label_font,
        )?;
    }
    // The grey grid: what has no cell shows it.
    frame.rect(
        plot_x0,
        top,
        plot_x0 + cell_w * grid.second.len() as f64,
        top + ROW * grid.first.len() as f64,
        ABSENT,
    )?;
    Ok(())
}

/// Draws a cell for every value, coloured by where it lies from `min` to `max`, with the
/// value in it when the cells are few enough to read: the marks, the value labels and how
/// many marks.
fn cells(
    grid: &Labelled<'_>,
    metric: &Metric,
    layout: &Layout,
    top: f64,
    min: f64,
    max: f64,
) -> Result<(Layer, Layer, usize), ChartError> {
    let Layout {
        width,
        plot_x0,
        cell_w,
        ..
    } = *layout;
    let t = |v: f64| {
        if max > min {
            (v - min) / (max - min)
        } else {
            1.0
        }
    };
    let show_values = grid.first.len() * grid.second.len() <= MAX_LABELLED_CELLS;
    let mut marks = Layer::new(width);
    let mut labels = Layer::new(width);
    let mut count = 0;
    for (a, b, v) in &grid.grid.cells {
        let (a, b) = (*a, *b);
        let x = plot_x0 + cell_w * b as f64;
        let y = top + ROW * a as f64;
        let value = metric.format(v);
        let Some(number) = v.as_f64() else {
            continue;
        };
        let others = folded_at(grid.grid, a, b);
        let fill = if others.is_some() {
            OTHERS
        } else {
            mix(t(number))
        };
        let mut cell = Layer::new(width);
        cell.rect(x + 1.0, y + 1.0, x + cell_w - 1.0, y + ROW - 1.0, fill)?;
        marks.mark_of(
            &format!("{} × {}", grid.first[a], grid.second[b]),
            &value,
            others,
            &cell.into_string(),
        );
        count += 1;
        if show_values && text_width(&value, 10.0) <= cell_w - 4.0 {
            let font = Font::new(10.0)
                .color(text_on(fill))
                .anchor(HPos::Center, VPos::Center);
            labels.text(&value, x + cell_w / 2.0, y + ROW / 2.0, font)?;
        }
    }
    Ok((marks, labels, count))
}

/// The colours from the smallest value to the largest, in steps (plotters draws no gradient).
fn colour_scale(
    canvas: &mut Canvas,
    metric: &Metric,
    min: f64,
    max: f64,
    x0: f64,
) -> Result<(), ChartError> {
    const STEPS: usize = 24;
    const WIDTH: f64 = 240.0;
    let mut layer = canvas.layer();
    let y = canvas.y;
    let font = Font::new(11.0).muted().anchor(HPos::Right, VPos::Center);
    let min_label = metric.format_f64(min);
    let x0 = x0.max(PAD + text_width(&min_label, 11.0) + 8.0);
    layer.text(&min_label, x0 - 6.0, y + 6.0, font)?;
    let step = WIDTH / STEPS as f64;
    for i in 0..STEPS {
        let x = x0 + step * i as f64;
        layer.rect(
            x,
            y,
            x + step + 0.5,
            y + 12.0,
            mix(i as f64 / (STEPS - 1) as f64),
        )?;
    }
    layer.text(
        &metric.format_f64(max),
        x0 + WIDTH + 6.0,
        y + 6.0,
        font.anchor(HPos::Left, VPos::Center),
    )?;
    layer.text(&metric.label(), x0, y + 16.0, Font::new(11.0).muted())?;
    canvas.group("legend", layer);
    canvas.y += 36.0;
    Ok(())
}
