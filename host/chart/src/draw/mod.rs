//! Drawing: the parts every chart shares (title, warnings, notes, source line, value axis) and
//! the canvas the parts are composed on.
//!
//! Every shape and text is drawn by plotters' SVG backend, one element at a time, and the
//! elements are composed here into groups with classes (`warnings`, `header`, `plot`, `mark`,
//! `legend`, `source`). plotters has no notion of groups or classes, so each call renders into
//! a fresh backend and the enclosing `<svg>` is dropped; what is kept is plotters' output
//! as it wrote it. The alternative, one backend for the whole chart, would leave no way to
//! tell a bar from a grid line in the result.

pub(crate) mod bar;
pub(crate) mod card;
pub(crate) mod heatmap;
pub(crate) mod pie;
pub(crate) mod stacked;
pub(crate) mod treemap;

use plotters::coord::Shift;
use plotters::element::{PathElement, Polygon, Rectangle, Text};
use plotters::prelude::{DrawingArea, IntoDrawingArea, SVGBackend};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{
    Color, FontDesc, FontFamily, FontStyle, FontTransform, RGBColor, ShapeStyle, TextStyle,
};

use crate::error::{ChartError, render};
use crate::summary::{Metric, Summary};
use crate::text::{escape_xml, format_number, printable, text_width, truncate, wrap};

/// The fonts asked for, Japanese first: the labels are in the data's language. The rasteriser
/// falls back per character to any installed font that has it.
pub(crate) const FONT_FAMILY: &str = "\"Noto Sans CJK JP\", \"Noto Sans JP\", \"IPAGothic\", \
                                      \"Hiragino Sans\", \"Yu Gothic\", sans-serif";

/// Outer margin.
pub(crate) const PAD: f64 = 16.0;

// The HTML view's light theme (host/mcp/ui/view.css), so that both read alike.
pub(crate) const FG: RGBColor = RGBColor(0x1d, 0x24, 0x30);
pub(crate) const MUTED: RGBColor = RGBColor(0x5b, 0x64, 0x74);
pub(crate) const LINE: RGBColor = RGBColor(0xdd, 0xe2, 0xea);
pub(crate) const PANEL: RGBColor = RGBColor(0xf6, 0xf8, 0xfb);
pub(crate) const BAR: RGBColor = RGBColor(0x4d, 0x7f, 0xe0);
pub(crate) const WHITE: RGBColor = RGBColor(0xff, 0xff, 0xff);
/// What stands for several groups folded into one, "others" (the view's `--others`): a grey
/// no value's colour and no series' is.
pub(crate) const OTHERS: RGBColor = RGBColor(0xb4, 0xbc, 0xc8);
const WARN_BG: RGBColor = RGBColor(0xff, 0xf6, 0xe0);
const WARN_LINE: RGBColor = RGBColor(0xe0, 0xa8, 0x00);

/// Categorical colours for series and parts (Tableau 10 and two more): distinguishable in
/// print and by most colour-blind readers for the first eight.
pub(crate) const PALETTE: [RGBColor; 12] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
    RGBColor(0x2f, 0x4b, 0x7c),
    RGBColor(0x86, 0xbc, 0xb6),
];

pub(crate) fn palette(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Dark text on light fills, white on dark ones.
pub(crate) fn text_on(fill: RGBColor) -> RGBColor {
    let RGBColor(r, g, b) = fill;
    let luminance = 0.299 * f64::from(r) + 0.587 * f64::from(g) + 0.114 * f64::from(b);
    if luminance > 150.0 { FG } else { WHITE }
}

/// How a text is set.
#[derive(Clone, Copy)]
pub(crate) struct Font {
    px: f64,
    color: RGBColor,
    bold: bool,
    h: HPos,
    v: VPos,
    rotated: bool,
}

impl Font {
    /// `px` pixels, the foreground colour, anchored at its top left.
    pub fn new(px: f64) -> Self {
        Font {
            px,
            color: FG,
            bold: false,
            h: HPos::Left,
            v: VPos::Top,
            rotated: false,
        }
    }

    pub fn px(self) -> f64 {
        self.px
    }

    pub fn color(self, color: RGBColor) -> Self {
        Font { color, ..self }
    }

    pub fn muted(self) -> Self {
        self.color(MUTED)
    }

    pub fn bold(self) -> Self {
        Font { bold: true, ..self }
    }

    pub fn anchor(self, h: HPos, v: VPos) -> Self {
        Font { h, v, ..self }
    }

    /// Read bottom to top.
    pub fn rotated(self) -> Self {
        Font {
            rotated: true,
            ..self
        }
    }

    fn style(&self) -> TextStyle<'static> {
        let style = if self.bold {
            FontStyle::Bold
        } else {
            FontStyle::Normal
        };
        // plotters' SVG backend writes `font-size` as the size given divided by 1.24 (its
        // em-box convention), so the size given is scaled to get `px` in the SVG.
        let mut desc = FontDesc::new(FontFamily::Name(FONT_FAMILY), self.px * 1.24, style);
        if self.rotated {
            desc = desc.transform(FontTransform::Rotate270);
        }
        desc.color(&self.color).pos(Pos::new(self.h, self.v))
    }
}

/// Renders with plotters into the elements of an SVG (without the enclosing `<svg>`).
fn fragment<F>(width: u32, draw: F) -> Result<String, ChartError>
where
    F: for<'b> FnOnce(&DrawingArea<SVGBackend<'b>, Shift>) -> Result<(), ChartError>,
{
    // plotters clips what it draws to the backend's size; beyond that, the size only goes
    // into the `<svg>` dropped below. The height grows with the content, so it is any.
    const ANY_HEIGHT: u32 = 1 << 20;
    let mut buf = String::new();
    {
        let area = SVGBackend::with_string(&mut buf, (width, ANY_HEIGHT)).into_drawing_area();
        draw(&area)?;
        area.present().map_err(render)?;
    }
    let start = buf
        .find("<svg")
        .and_then(|s| buf[s..].find('>').map(|e| s + e + 1))
        .ok_or_else(|| render("plotters wrote no <svg> element"))?;
    let end = buf
        .rfind("</svg>")
        .ok_or_else(|| render("plotters left the <svg> element open"))?;
    Ok(buf[start..end].trim_matches('\n').to_owned() + "\n")
}

fn px(v: f64) -> i32 {
    v.round() as i32
}

/// A group of elements being drawn.
#[derive(Debug)]
pub(crate) struct Layer {
    width: u32,
    out: String,
}

impl Layer {
    pub fn new(width: u32) -> Self {
        Layer {
            width,
            out: String::new(),
        }
    }

    /// A filled rectangle.
    pub fn rect(
        &mut self,
        x0: f64,
        y0: f64,
        x1: f64,
        y1: f64,
        fill: RGBColor,
    ) -> Result<(), ChartError> {
        let r = Rectangle::new([(px(x0), px(y0)), (px(x1), px(y1))], fill.filled());
        self.push(fragment(self.width, |a| a.draw(&r).map_err(render))?);
        Ok(())
    }

    /// A rectangle's outline.
    pub fn outline(
        &mut self,
        x0: f64,
        y0: f64,
        x1: f64,
        y1: f64,
        stroke: RGBColor,
    ) -> Result<(), ChartError> {
        let r = Rectangle::new(
            [(px(x0), px(y0)), (px(x1), px(y1))],
            ShapeStyle::from(stroke),
        );
        self.push(fragment(self.width, |a| a.draw(&r).map_err(render))?);
        Ok(())
    }

    /// A filled polygon with sub-pixel corners: plotters' coordinates are whole pixels, so
    /// the points are drawn at `FINE` times their size and scaled back. Curves (pie wedges)
    /// drawn at whole pixels show a staircase.
    pub fn fine_polygon(
        &mut self,
        points: &[(f64, f64)],
        fill: RGBColor,
    ) -> Result<(), ChartError> {
        const FINE: f64 = 8.0;
        let path: Vec<(i32, i32)> = points
            .iter()
            .map(|&(x, y)| (px(x * FINE), px(y * FINE)))
            .collect();
        let e = Polygon::new(path, fill.filled());
        // plotters clips to the area, which must be as large as the enlarged drawing.
        let inner = fragment(self.width * FINE as u32, |a| a.draw(&e).map_err(render))?;
        self.push(format!(
            "<g transform=\"scale({})\">\n{inner}</g>\n",
            1.0 / FINE
        ));
        Ok(())
    }

    /// A line through `points`.
    pub fn line(
        &mut self,
        points: &[(f64, f64)],
        stroke: RGBColor,
        width: u32,
    ) -> Result<(), ChartError> {
        let path: Vec<(i32, i32)> = points.iter().map(|&(x, y)| (px(x), px(y))).collect();
        let e = PathElement::new(path, stroke.stroke_width(width));
        self.push(fragment(self.width, |a| a.draw(&e).map_err(render))?);
        Ok(())
    }

    /// One line of text.
    pub fn text(&mut self, s: &str, x: f64, y: f64, font: Font) -> Result<(), ChartError> {
        if s.is_empty() {
            return Ok(());
        }
        let t = Text::new(printable(s), (px(x), px(y)), font.style());
        self.push(fragment(self.width, |a| a.draw(&t).map_err(render))?);
        Ok(())
    }

    /// Lines of text, `line_height` apart, from `y`.
    pub fn lines(
        &mut self,
        lines: &[String],
        x: f64,
        y: f64,
        line_height: f64,
        font: Font,
    ) -> Result<(), ChartError> {
        for (i, l) in lines.iter().enumerate() {
            self.text(l, x, y + line_height * i as f64, font)?;
        }
        Ok(())
    }

    /// One datum: the shapes in `shapes`, grouped with its label and value so that a reader
    /// (or a test) can tell which is which, and a `<title>` a browser shows on hover.
    pub fn mark(&mut self, label: &str, value: &str, shapes: &str) {
        self.mark_of(label, value, None, shapes);
    }

    /// [`mark`](Self::mark), of `others` groups folded into one when given: the group says
    /// how many (`data-others`).
    pub fn mark_of(&mut self, label: &str, value: &str, others: Option<usize>, shapes: &str) {
        let others = others.map_or(String::new(), |n| format!(" data-others=\"{n}\""));
        self.out.push_str(&format!(
            "<g class=\"mark\" data-label=\"{l}\" data-value=\"{v}\"{others}><title>{l}: {v}</title>\n{shapes}</g>\n",
            l = escape_xml(label),
            v = escape_xml(value),
        ));
    }

    /// The elements of `inner` as a group of class `class`.
    pub fn group(&mut self, class: &str, inner: Layer) {
        if !inner.out.is_empty() {
            self.out
                .push_str(&format!("<g class=\"{class}\">\n{}</g>\n", inner.out));
        }
    }

    pub fn push(&mut self, elements: String) {
        self.out.push_str(&elements);
    }

    pub fn into_string(self) -> String {
        self.out
    }
}

/// The chart being composed, top to bottom.
#[derive(Debug)]
pub(crate) struct Canvas {
    pub width: u32,
    /// Where the next part goes.
    pub y: f64,
    body: Layer,
    marks: usize,
}

impl Canvas {
    pub fn new(width: u32) -> Self {
        Canvas {
            width,
            y: PAD,
            body: Layer::new(width),
            marks: 0,
        }
    }

    pub fn layer(&self) -> Layer {
        Layer::new(self.width)
    }

    /// The usable width inside the margins.
    pub fn inner_width(&self) -> f64 {
        f64::from(self.width) - 2.0 * PAD
    }

    pub fn group(&mut self, class: &str, layer: Layer) {
        self.body.group(class, layer);
    }

    /// The plot: its frame (grid, axes, labels) under its marks, each mark a `<g
    /// class="mark">`, and `labels` (value labels) over them.
    pub fn plot(&mut self, kind: &str, frame: Layer, marks: Layer, count: usize, labels: Layer) {
        self.marks += count;
        self.body.push(format!(
            "<g class=\"plot\" data-kind=\"{kind}\">\n{}<g class=\"marks\" data-count=\"{count}\">\n{}</g>\n{}</g>\n",
            frame.into_string(),
            marks.into_string(),
            labels.into_string(),
        ));
    }

    /// The finished chart, `y` high; `title` and `description` say what it shows to a reader
    /// that cannot see it.
    pub fn finish(
        self,
        kind: crate::kind::Kind,
        title: &str,
        description: &str,
    ) -> crate::drawn::Chart {
        let height = self.y.ceil().max(1.0) as u32;
        let width = self.width;
        let svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
             viewBox=\"0 0 {width} {height}\" role=\"img\" data-kind=\"{kind}\" \
             data-marks=\"{marks}\" font-family=\"{family}\">\n<title>{title}</title>\n\
             <desc>{desc}</desc>\n<rect class=\"background\" width=\"100%\" height=\"100%\" \
             fill=\"#FFFFFF\"/>\n{body}</svg>\n",
            kind = kind.as_str(),
            marks = self.marks,
            family = escape_xml(FONT_FAMILY),
            title = escape_xml(title),
            desc = escape_xml(description),
            body = self.body.into_string(),
        );
        crate::drawn::Chart {
            kind,
            width,
            height,
            marks: self.marks,
            svg,
        }
    }
}

/// A chart's top: title, what is drawn, the caption and the warnings (a caveat is never
/// under the picture). `what` is the chart's subject, e.g. "avg:F by G".
pub(crate) fn open(width: u32, summary: &Summary<'_>, what: &str) -> Result<Canvas, ChartError> {
    let mut canvas = Canvas::new(width);
    header(&mut canvas, summary, what, &caption(summary))?;
    warnings(&mut canvas, summary)?;
    Ok(canvas)
}

/// A chart's bottom: its notes, the source line, and the finished document.
pub(crate) fn close(
    mut canvas: Canvas,
    kind: crate::kind::Kind,
    summary: &Summary<'_>,
    what: &str,
    chart_notes: &[String],
) -> Result<crate::drawn::Chart, ChartError> {
    notes(&mut canvas, chart_notes)?;
    source(&mut canvas, summary)?;
    let title = format!("{}: {what}", summary.title());
    Ok(canvas.finish(kind, &title, &caption(summary)))
}

/// The title block: the dataset's title, what is charted, and the counts behind it.
pub(crate) fn header(
    canvas: &mut Canvas,
    summary: &Summary<'_>,
    what: &str,
    caption: &str,
) -> Result<(), ChartError> {
    let mut layer = canvas.layer();
    let w = canvas.inner_width();
    let title = Font::new(18.0).bold();
    layer.text(
        &truncate(&summary.title(), w, title.px()),
        PAD,
        canvas.y,
        title,
    )?;
    canvas.y += 26.0;
    let sub = Font::new(14.0);
    layer.text(&truncate(what, w, sub.px()), PAD, canvas.y, sub)?;
    canvas.y += 20.0;
    let small = Font::new(12.0).muted();
    let lines = wrap(caption, w, small.px(), 3);
    layer.lines(&lines, PAD, canvas.y, 16.0, small)?;
    canvas.y += 16.0 * lines.len() as f64 + 8.0;
    canvas.group("header", layer);
    Ok(())
}

/// `N records · M groups by a × b · the first K shown · …`, as the view's subtitle.
pub(crate) fn caption(summary: &Summary<'_>) -> String {
    let mut parts = Vec::new();
    if let Some(n) = summary.total_records {
        parts.push(format!("{} records", format_number(n as f64, 0)));
    }
    if !summary.groups.is_empty() {
        let by: Vec<&str> = summary.groups.iter().map(|g| g.name.as_str()).collect();
        let n = summary
            .total_group_count
            .unwrap_or(summary.rows.len() as u64);
        parts.push(format!(
            "{} groups by {}",
            format_number(n as f64, 0),
            by.join(" × ")
        ));
    }
    if summary.truncated {
        let shown = summary.returned.unwrap_or(summary.rows.len() as u64);
        parts.push(format!(
            "the first {} shown",
            format_number(shown as f64, 0)
        ));
    }
    if summary.exploded {
        parts.push(
            "a record can be in several parts: the parts do not add up to the records".to_owned(),
        );
    }
    parts.join(" · ")
}

/// The result's warnings, above the chart: a caveat must be read before the figures. Each is
/// wrapped to at most three lines, and at most five are shown; the rest are counted.
pub(crate) fn warnings(canvas: &mut Canvas, summary: &Summary<'_>) -> Result<(), ChartError> {
    const SHOWN: usize = 5;
    if summary.warnings.is_empty() {
        return Ok(());
    }
    let font = Font::new(13.0);
    let line_height = 18.0;
    let text_x = PAD + 12.0;
    let w = canvas.inner_width() - 20.0;
    let mut lines: Vec<String> = Vec::new();
    for warning in summary.warnings.iter().take(SHOWN) {
        lines.extend(wrap(&format!("Warning: {warning}"), w, font.px(), 3));
    }
    if summary.warnings.len() > SHOWN {
        lines.push(format!(
            "and {} more warnings (see provenance.warnings in the result)",
            summary.warnings.len() - SHOWN
        ));
    }
    let height = line_height * lines.len() as f64 + 12.0;
    let mut layer = canvas.layer();
    let (x0, y0) = (PAD, canvas.y);
    let x1 = f64::from(canvas.width) - PAD;
    layer.rect(x0, y0, x1, y0 + height, WARN_BG)?;
    layer.rect(x0, y0, x0 + 4.0, y0 + height, WARN_LINE)?;
    layer.lines(&lines, text_x, y0 + 7.0, line_height, font)?;
    canvas.group("warnings", layer);
    canvas.y += height + 12.0;
    Ok(())
}

/// Notes under the plot (what a rate is, what was left out). Each is wrapped to at most three
/// lines.
pub(crate) fn notes(canvas: &mut Canvas, notes: &[String]) -> Result<(), ChartError> {
    if notes.is_empty() {
        return Ok(());
    }
    let font = Font::new(12.0).muted();
    let mut layer = canvas.layer();
    let w = canvas.inner_width();
    for note in notes {
        let lines = wrap(note, w, font.px(), 3);
        layer.lines(&lines, PAD, canvas.y, 16.0, font)?;
        canvas.y += 16.0 * lines.len() as f64;
    }
    canvas.y += 6.0;
    canvas.group("notes", layer);
    Ok(())
}

/// The source line under the chart: `Source: <title> · <publisher> · retrieved <date> ·
/// computed by Tally: extract → filter → aggregate`.
pub(crate) fn source_line(summary: &Summary<'_>) -> String {
    let sources: Vec<String> = summary
        .cited_sources()
        .iter()
        .map(|s| {
            let mut bits = vec![s.title.clone().unwrap_or_else(|| s.id.clone())];
            bits.extend(s.publisher.clone());
            if let Some(at) = &s.retrieved_at {
                bits.push(format!(
                    "retrieved {}",
                    at.chars().take(10).collect::<String>()
                ));
            }
            bits.join(" · ")
        })
        .collect();
    let computed = if summary.transformations.is_empty() {
        "computed by Tally".to_owned()
    } else {
        format!("computed by Tally: {}", summary.transformations.join(" → "))
    };
    match sources.len() {
        0 => format!("Source: {} · {computed}", summary.dataset_id),
        1 => format!("Source: {} · {computed}", sources[0]),
        _ => format!("Sources: {} · {computed}", sources.join("; ")),
    }
}

pub(crate) fn source(canvas: &mut Canvas, summary: &Summary<'_>) -> Result<(), ChartError> {
    let font = Font::new(11.0).muted();
    let lines = wrap(&source_line(summary), canvas.inner_width(), font.px(), 4);
    let mut layer = canvas.layer();
    canvas.y += 4.0;
    layer.line(
        &[(PAD, canvas.y), (f64::from(canvas.width) - PAD, canvas.y)],
        LINE,
        1,
    )?;
    canvas.y += 6.0;
    layer.lines(&lines, PAD, canvas.y, 15.0, font)?;
    canvas.y += 15.0 * lines.len() as f64 + PAD;
    canvas.group("source", layer);
    Ok(())
}

/// `<metric> by <group> × <group>`.
pub(crate) fn what(metric: &Metric, summary: &Summary<'_>) -> String {
    let by: Vec<&str> = summary.groups.iter().map(|g| g.name.as_str()).collect();
    format!("{} by {}", metric.label(), by.join(" × "))
}

/// The note that says what a computed measure is, as the view writes it: its formula, and for
/// a rate that it is shown as a percentage of the group's records.
pub(crate) fn rate_note(metric: &Metric, summary: &Summary<'_>) -> Option<String> {
    use crate::kind::MetricKind::{Ratio, Share};
    match metric.kind {
        Share => Some(format!(
            "{} = {}, shown as a percentage{}",
            metric.column,
            metric.description,
            if summary.column("count").is_some() {
                "; n = records in the group"
            } else {
                ""
            }
        )),
        Ratio => Some(format!("{} = {}", metric.column, metric.description)),
        _ => None,
    }
}

/// A linear value scale onto `[x0, x1]` pixels, its domain widened to round ticks.
#[derive(Debug, Clone)]
pub(crate) struct Scale {
    pub lo: f64,
    pub hi: f64,
    pub x0: f64,
    pub x1: f64,
    pub ticks: Vec<f64>,
}

impl Scale {
    /// A scale over `[min(lo, 0), max(hi, 0)]`: bars start at zero.
    pub fn from_zero(lo: f64, hi: f64, x0: f64, x1: f64) -> Self {
        let (lo, hi) = (lo.min(0.0), hi.max(0.0));
        let ticks = nice_ticks(lo, hi);
        Scale {
            lo: ticks.first().copied().unwrap_or(lo),
            hi: ticks.last().copied().unwrap_or(hi),
            x0,
            x1,
            ticks,
        }
    }

    pub fn x(&self, v: f64) -> f64 {
        if self.hi <= self.lo {
            return self.x0;
        }
        self.x0 + (v - self.lo) / (self.hi - self.lo) * (self.x1 - self.x0)
    }

    /// Grid lines and tick labels between `top` and `bottom`, the axis title under them.
    /// Returns the height used under `bottom`.
    pub fn draw(
        &self,
        layer: &mut Layer,
        top: f64,
        bottom: f64,
        metric: &Metric,
    ) -> Result<f64, ChartError> {
        let tick = Font::new(11.0).muted().anchor(HPos::Center, VPos::Top);
        for &t in &self.ticks {
            let x = self.x(t);
            let colour = if t == 0.0 { MUTED } else { LINE };
            layer.line(&[(x, top), (x, bottom)], colour, 1)?;
            layer.text(&metric.format_tick(t), x, bottom + 4.0, tick)?;
        }
        let title = Font::new(12.0).anchor(HPos::Center, VPos::Top);
        let mid = (self.x0 + self.x1) / 2.0;
        let label = truncate(&metric.label(), self.x1 - self.x0, title.px());
        layer.text(&label, mid, bottom + 22.0, title)?;
        Ok(42.0)
    }
}

/// Round ticks covering `[lo, hi]`, about five of them.
fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo, lo + 1.0) };
    let raw = (hi - lo) / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = magnitude
        * match raw / magnitude {
            n if n < 1.5 => 1.0,
            n if n < 3.0 => 2.0,
            n if n < 7.0 => 5.0,
            _ => 10.0,
        };
    let first = (lo / step).floor() as i64;
    let last = (hi / step).ceil() as i64;
    // Multiplying the index, not adding steps, keeps 0.1 * 3 from drifting to 0.30000000000000004
    // in a way a label could show.
    (first..=last)
        .map(|i| {
            let t = i as f64 * step;
            let digits = (-magnitude.log10()).max(0.0) as i32 + 1;
            let p = 10f64.powi(digits);
            (t * p).round() / p
        })
        .collect()
}

/// The width of the widest of `labels` at `px`, within `[min, max]`.
pub(crate) fn label_column(labels: &[String], px: f64, min: f64, max: f64) -> f64 {
    labels
        .iter()
        .map(|l| text_width(l, px))
        .fold(min, f64::max)
        .min(max)
}

#[cfg(test)]
mod tests {
    use super::nice_ticks;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 3000.0),
            vec![0.0, 500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0]
        );
        assert_eq!(nice_ticks(0.0, 1.0), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(
            nice_ticks(0.0, 0.3),
            vec![0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]
        );
        let t = nice_ticks(-120.0, 40.0);
        assert!(t[0] <= -120.0 && *t.last().unwrap() >= 40.0 && t.contains(&0.0));
    }
}
