//! Parts of a whole (more than 7, at most [`LIMITS`]`.treemap_tiles` drawn, largest first, the
//! smallest past the bound as one "others" tile):
//! rectangles with areas in proportion to the values, laid out
//! by the squarified algorithm (Bruls, Huizing, van Wijk, 2000) so that tiles stay close to
//! square and their labels readable. plotters has no treemap; the layout is here and the tiles
//! are plotters rectangles.

use plotters::style::text_anchor::{HPos, VPos};
use serde_json::Value;

use super::pie::{left_out_note, parts};
use super::{Font, Layer, OTHERS, PAD, close, open, palette, text_on, what};
use crate::drawn::Chart;
use crate::error::ChartError;
use crate::kind::Kind;
use crate::limits::{ALL_IN_TABLE, LIMITS};
use crate::pick::{Sum, others_label, partial_note};
use crate::summary::{Metric, Summary};
use crate::text::{format_number, format_percent, text_width, truncate};

/// A rectangle in pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Tile {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// Tiles for `values` (positive, largest first) filling `area`, in the same order.
pub(crate) fn squarify(values: &[f64], area: Tile) -> Vec<Tile> {
    let total: f64 = values.iter().sum();
    if values.is_empty() || total <= 0.0 || area.w <= 0.0 || area.h <= 0.0 {
        return Vec::new();
    }
    let scale = area.w * area.h / total;
    let areas: Vec<f64> = values.iter().map(|v| v * scale).collect();
    let mut tiles = Vec::with_capacity(values.len());
    let mut free = area;
    let mut i = 0;
    while i < areas.len() {
        let side = free.w.min(free.h);
        // Add tiles to the strip along the free space's shorter side while that makes its
        // worst aspect ratio better.
        let mut end = i + 1;
        let mut best = worst(&areas[i..end], side);
        while end < areas.len() {
            let next = worst(&areas[i..=end], side);
            if next > best {
                break;
            }
            best = next;
            end += 1;
        }
        let strip: f64 = areas[i..end].iter().sum();
        if free.w >= free.h {
            // A column at the left.
            let w = if end == areas.len() {
                free.w
            } else {
                strip / free.h
            };
            let mut y = free.y;
            for a in &areas[i..end] {
                let h = a / strip * free.h;
                tiles.push(Tile { x: free.x, y, w, h });
                y += h;
            }
            free = Tile {
                x: free.x + w,
                w: (free.w - w).max(0.0),
                ..free
            };
        } else {
            // A row at the top.
            let h = if end == areas.len() {
                free.h
            } else {
                strip / free.w
            };
            let mut x = free.x;
            for a in &areas[i..end] {
                let w = a / strip * free.w;
                tiles.push(Tile { x, y: free.y, w, h });
                x += w;
            }
            free = Tile {
                y: free.y + h,
                h: (free.h - h).max(0.0),
                ..free
            };
        }
        i = end;
    }
    tiles
}

/// The worst aspect ratio of a strip of `areas` along a side of length `side`.
fn worst(areas: &[f64], side: f64) -> f64 {
    let sum: f64 = areas.iter().sum();
    let max = areas.iter().copied().fold(0.0, f64::max);
    let min = areas.iter().copied().fold(f64::INFINITY, f64::min);
    let (s2, w2) = (sum * sum, side * side);
    (w2 * max / s2).max(s2 / (w2 * min))
}

pub(crate) fn draw(
    summary: &Summary<'_>,
    metric: &Metric,
    width: u32,
) -> Result<Chart, ChartError> {
    let (parts, left_out) = parts(summary, metric);
    // The total and the shares are of every part: past the bound, the smallest parts are one
    // tile, "others", whose area is their sum.
    let total: f64 = parts.iter().map(|p| p.1).sum();
    let given = parts.len();
    let mut tiles_drawn: Vec<(String, f64, Value, Option<usize>)> = Vec::new();
    let mut others = Sum::default();
    let mut other_area = 0.0;
    for (i, (label, v, raw)) in parts.into_iter().enumerate() {
        if given > LIMITS.treemap_tiles && i + 1 >= LIMITS.treemap_tiles {
            others.add(raw);
            other_area += v;
        } else {
            tiles_drawn.push((label, v, raw.clone(), None));
        }
    }
    let folded = given.saturating_sub(tiles_drawn.len());
    let cut = (folded > 0).then(|| {
        format!(
            "The {} largest of {} groups are drawn, and the other {} as one tile, “{}”, their \
             sum; {ALL_IN_TABLE}",
            tiles_drawn.len(),
            format_number(given as f64, 0),
            format_number(folded as f64, 0),
            others_label(folded)
        )
    });
    if folded > 0 {
        tiles_drawn.push((
            others_label(folded),
            other_area,
            others.value(),
            Some(folded),
        ));
    }
    let parts = tiles_drawn;
    let mut canvas = open(width, summary, &what(metric, summary))?;

    let mut frame = Layer::new(width);
    frame.text(
        &summary.groups[0].name,
        PAD,
        canvas.y,
        Font::new(12.0).bold(),
    )?;
    canvas.y += 20.0;
    let height = (parts.len() as f64 * 24.0).clamp(260.0, 480.0);
    let area = Tile {
        x: PAD,
        y: canvas.y,
        w: canvas.inner_width(),
        h: height,
    };
    let values: Vec<f64> = parts.iter().map(|p| p.1).collect();
    // The tiles fill the area: every part is in one, and their shares are of the total.
    let tiles = squarify(&values, area);

    let mut marks = Layer::new(width);
    let mut labels = Layer::new(width);
    for (i, ((label, v, raw, others), t)) in parts.iter().zip(&tiles).enumerate() {
        let fill = if others.is_some() { OTHERS } else { palette(i) };
        // A 1-pixel gap on every side separates neighbours.
        let mut tile = Layer::new(width);
        tile.rect(t.x + 1.0, t.y + 1.0, t.x + t.w - 1.0, t.y + t.h - 1.0, fill)?;
        let value = metric.format(raw);
        marks.mark_of(label, &value, *others, &tile.into_string());
        let room = t.w - 10.0;
        let ink = text_on(fill);
        if room >= 24.0 && t.h >= 20.0 {
            labels.text(
                &truncate(label, room, 12.0),
                t.x + 5.0,
                t.y + 5.0,
                Font::new(12.0).color(ink).anchor(HPos::Left, VPos::Top),
            )?;
        }
        if room >= 24.0 && t.h >= 38.0 {
            // The share when it fits, else the value alone, cut only as a last resort.
            let with_share = format!("{value} ({})", format_percent(v / total));
            let line = if text_width(&with_share, 11.0) <= room {
                with_share
            } else {
                truncate(&value, room, 11.0)
            };
            labels.text(
                &line,
                t.x + 5.0,
                t.y + 22.0,
                Font::new(11.0).color(ink).anchor(HPos::Left, VPos::Top),
            )?;
        }
    }
    canvas.plot(Kind::Treemap.as_str(), frame, marks, tiles.len(), labels);
    canvas.y += height + 12.0;

    let mut extra: Vec<String> = cut
        .into_iter()
        .chain(left_out_note(&left_out))
        .chain(partial_note(summary, folded > 0))
        .collect();
    extra.push(format!(
        "total {}; a tile's area is its share",
        metric.format_f64(total)
    ));
    close(
        canvas,
        Kind::Treemap,
        summary,
        &what(metric, summary),
        &extra,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(values: &[f64]) {
        let area = Tile {
            x: 10.0,
            y: 20.0,
            w: 600.0,
            h: 300.0,
        };
        let tiles = squarify(values, area);
        assert_eq!(tiles.len(), values.len());
        let total: f64 = values.iter().sum();
        for (v, t) in values.iter().zip(&tiles) {
            let expected = v / total * area.w * area.h;
            assert!(
                (t.w * t.h - expected).abs() < 1e-6 * area.w * area.h,
                "{t:?} for {v}"
            );
            assert!(t.x >= area.x - 1e-9 && t.y >= area.y - 1e-9);
            assert!(t.x + t.w <= area.x + area.w + 1e-6 && t.y + t.h <= area.y + area.h + 1e-6);
        }
        // No two tiles overlap.
        for (i, a) in tiles.iter().enumerate() {
            for b in &tiles[i + 1..] {
                let dx = (a.x + a.w).min(b.x + b.w) - a.x.max(b.x);
                let dy = (a.y + a.h).min(b.y + b.h) - a.y.max(b.y);
                assert!(dx <= 1e-6 || dy <= 1e-6, "{a:?} overlaps {b:?}");
            }
        }
    }

    #[test]
    fn tiles_fill_the_area_in_proportion_without_overlap() {
        check(&[6.0, 6.0, 4.0, 3.0, 2.0, 2.0, 1.0]);
        check(&[100.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
        check(&[5.0]);
        check(&(1..=40).rev().map(f64::from).collect::<Vec<_>>());
    }
}
