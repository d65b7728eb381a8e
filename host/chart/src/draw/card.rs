//! A summary without grouping: one big figure per metric, as the view's cards.

use plotters::style::text_anchor::{HPos, VPos};
use serde_json::Value;

use super::{Font, LINE, Layer, PAD, PANEL, close, open};
use crate::drawn::Chart;
use crate::error::ChartError;
use crate::kind::{Kind, MetricKind};
use crate::summary::Summary;
use crate::text::{format_number, truncate, wrap};

const CARD_HEIGHT: f64 = 124.0;
const GAP: f64 = 12.0;

pub(crate) fn draw(summary: &Summary<'_>, width: u32) -> Result<Chart, ChartError> {
    let what = summary
        .metrics
        .iter()
        .map(|m| m.column.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let mut canvas = open(width, summary, &what)?;

    let null = Value::Null;
    let row = summary.rows.first().copied();
    let value = |i: usize| row.and_then(|r| r.get(i)).unwrap_or(&null);
    let count_col = summary.column("count");
    let per_row = summary.metrics.len().clamp(1, 3);
    let card_w = (canvas.inner_width() - GAP * (per_row - 1) as f64) / per_row as f64;
    let top = canvas.y;
    let mut frame = Layer::new(width);
    let mut marks = Layer::new(width);
    for (i, m) in summary.metrics.iter().enumerate() {
        let x = PAD + (card_w + GAP) * (i % per_row) as f64;
        let y = top + (CARD_HEIGHT + GAP) * (i / per_row) as f64;
        frame.rect(x, y, x + card_w, y + CARD_HEIGHT, PANEL)?;
        frame.outline(x, y, x + card_w, y + CARD_HEIGHT, LINE)?;
        let inner = card_w - 24.0;
        frame.text(
            &truncate(&m.label(), inner, 12.0),
            x + 12.0,
            y + 10.0,
            Font::new(12.0).muted(),
        )?;
        let v = value(m.index);
        let figure = m.format(v);
        let mut text = Layer::new(width);
        text.text(
            &truncate(&figure, inner, 30.0),
            x + 12.0,
            y + 30.0,
            Font::new(30.0).bold(),
        )?;
        marks.mark(&m.column, &figure, &text.into_string());
        // A rate says how many records it is a share of, on the description's second line.
        let of_records = count_col
            .map(value)
            .and_then(Value::as_f64)
            .filter(|_| m.kind == MetricKind::Share);
        let mut lines = wrap(
            &m.description,
            inner,
            11.0,
            if of_records.is_some() { 1 } else { 2 },
        );
        if let Some(n) = of_records {
            lines.push(format!("of {} records", format_number(n, 0)));
        }
        frame.lines(
            &lines,
            x + 12.0,
            y + 76.0,
            15.0,
            Font::new(11.0).muted().anchor(HPos::Left, VPos::Top),
        )?;
    }
    let n = summary.metrics.len();
    canvas.plot(Kind::Card.as_str(), frame, marks, n, Layer::new(width));
    let card_rows = n.div_ceil(per_row).max(1);
    canvas.y = top + (CARD_HEIGHT + GAP) * card_rows as f64;

    let rates: Vec<String> = summary
        .metrics
        .iter()
        .filter_map(|m| super::rate_note(m, summary))
        .collect();
    close(canvas, Kind::Card, summary, &what, &rates)
}
