//! Server-side charts of a `summarize_records` result.
//!
//! The chart is chosen from the result's shape by the same rules as the HTML view
//! (`chooseChart` in `host/mcp/ui/view.js`, ported in `src/choice.rs`; [`choose`] here
//! reads the envelope and applies them): no grouping → figures ([`Kind::Card`]); one
//! grouping field → the parts of a whole as a [`Kind::Pie`] (up to 7) or [`Kind::Treemap`],
//! anything else as [`Kind::Bar`]s; two → [`Kind::Stacked`] bars or a [`Kind::Heatmap`]; more →
//! a table, which this crate does not draw.
//!
//! A chart is an SVG drawn with plotters ([`svg`]) and, when an image is wanted, rasterised
//! with resvg ([`png`]). Every chart carries what the result says about its numbers: the
//! warnings above the plot, the source and the steps Tally computed under it.
//!
//! A chart's size does not grow with the result: at most [`LIMITS`] are drawn (the same as
//! the view's), the rest said in the notes, and a PNG's pixels are at most
//! [`MAX_PNG_PIXEL_BYTES`].
//!
//! ```no_run
//! # fn main() -> Result<(), tally_chart::ChartError> {
//! # let envelope = serde_json::json!({});
//! // `envelope` is summarize_records' result: {"data": {...}, "provenance": {...}}.
//! let chart = tally_chart::svg(&envelope, &tally_chart::Options::default())?;
//! std::fs::write("chart.svg", &chart.svg).ok();
//! let fonts = tally_chart::Fonts::system();
//! let image = tally_chart::png(&chart, &fonts)?;
//! if let Some(warning) = image.warning() {
//!     eprintln!("{warning}");
//! }
//! std::fs::write("chart.png", &image.png).ok();
//! # Ok(()) }
//! ```
//!
//! **Architecture Invariant:** this crate reads a result envelope (JSON) and nothing else of
//! Tally: no MCP, no DataFusion, no datasets. Its only IO is reading font files, in [`Fonts`].
//!
//! [`Fonts::system`] scans the machine's fonts; a server loads them once and shares them
//! (`Fonts` is cheap to clone, and `Send + Sync`).
//!
//! # What a test (or a reader) can rely on in the SVG
//!
//! - The root `<svg>` has `data-kind` (`bar`, `pie`, …) and `data-marks` (how many data were
//!   drawn), a `<title>` and a `<desc>`.
//! - Its parts are groups, in this order: `<g class="header">`, `<g class="warnings">` (only
//!   when the result has warnings), `<g class="legend">` (stacked), `<g class="plot"
//!   data-kind="…">`, `<g class="notes">`, `<g class="source">`.
//! - Every datum drawn is one `<g class="mark" data-label="…" data-value="…">` inside the
//!   plot's `<g class="marks">`: one per bar, per stacked segment, per heatmap cell, per pie
//!   slice, per treemap tile and per card figure. A row whose value is null has no mark (bars
//!   say "(no value)" in its place, a heatmap leaves its cell grey); pies and treemaps draw
//!   only values above zero, and say which were left out. Past [`LIMITS`] the notes say
//!   what was drawn of how many ("The 100 largest of 10,000 groups are drawn; …").

mod choice;
mod draw;
mod error;
mod kind;
mod limits;
mod raster;
mod summary;
mod text;

use serde_json::Value;

pub use choice::Choice;
pub use error::ChartError;
pub use kind::Kind;
pub use limits::{LIMITS, Limits, MAX_PNG_PIXEL_BYTES};
pub use raster::{Fonts, Raster, png};
/// What a metric's value is, as the summary's `metrics[].kind` says it.
pub use tally_semantic::resolve::ValueKind as MetricKind;

use summary::Summary;

/// How to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Which of the result's metrics to chart (its position in `metrics`). A card shows them
    /// all.
    pub metric: usize,
    /// The kind to draw instead of the one chosen; it must be one of [`Choice::alternatives`].
    pub kind: Option<Kind>,
    /// The width in pixels (360 to 8000). The height follows from the content; a heatmap
    /// with many columns may be wider (its columns are at most [`Limits::heatmap_columns`]).
    pub width: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            metric: 0,
            kind: None,
            width: 800,
        }
    }
}

impl Options {
    /// The options a result is drawn with when nothing is asked: its first metric, or, for a
    /// comparison of periods (`compare`), its first change, which is what was asked.
    pub fn for_result(envelope: &Value) -> Options {
        Options {
            metric: default_metric(envelope),
            ..Options::default()
        }
    }
}

/// The metric a result is charted by when none is asked (as `renderSummary` in
/// `host/mcp/ui/view.js` starts): the first whose kind is `change`, else the first.
pub fn default_metric(envelope: &Value) -> usize {
    envelope["data"]["metrics"]
        .as_array()
        .and_then(|metrics| {
            metrics
                .iter()
                .position(|m| m["kind"] == MetricKind::Change.as_str())
        })
        .unwrap_or(0)
}

/// A chart drawn as SVG.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// What was drawn.
    pub kind: Kind,
    /// Size in CSS pixels (the PNG is twice this, or less for a very large chart: see
    /// [`MAX_PNG_PIXEL_BYTES`]).
    pub width: u32,
    pub height: u32,
    /// How many data were drawn (the `<g class="mark">` elements).
    pub marks: usize,
    /// A standalone SVG document.
    pub svg: String,
}

/// The chart the HTML view would draw for `envelope`, charting `metrics[metric]`: the
/// envelope read, then the rules of `chooseChart` (in `src/choice.rs`).
///
/// Returns [`Kind::Table`] where the view shows a table (three or more grouping fields, or no
/// rows); [`svg`] refuses those with an error that says what would work.
pub fn choose(envelope: &Value, metric: usize) -> Result<Choice, ChartError> {
    choice::choose(&Summary::read(envelope)?, metric)
}

/// Draws `envelope` (a `summarize_records` result) as an SVG chart.
pub fn svg(envelope: &Value, options: &Options) -> Result<Chart, ChartError> {
    let summary = Summary::read(envelope)?;
    let choice = choice::choose(&summary, options.metric)?;
    let kind = match options.kind {
        None => choice.kind,
        Some(asked) if choice.alternatives.contains(&asked) => asked,
        Some(asked) => {
            return Err(ChartError::KindNotAvailable {
                asked,
                reason: unavailable(asked, &choice),
                available: choice.alternatives.clone(),
            });
        }
    };
    let metric = summary.metric(options.metric)?;
    let width = options.width.clamp(360, 8000);
    match kind {
        Kind::Card => draw::card::draw(&summary, width),
        Kind::Bar => draw::bar::draw(&summary, metric, width),
        Kind::Pie => draw::pie::draw(&summary, metric, width),
        Kind::Treemap => draw::treemap::draw(&summary, metric, width),
        Kind::Stacked => draw::stacked::draw(&summary, metric, width),
        Kind::Heatmap => draw::heatmap::draw(&summary, metric, width),
        Kind::Table if summary.groups.len() > 2 => Err(ChartError::TooManyGroups {
            groups: summary.groups.iter().map(|g| g.name.clone()).collect(),
        }),
        Kind::Table if summary.rows.is_empty() => Err(ChartError::NoRows),
        Kind::Table => Err(ChartError::KindNotAvailable {
            asked: Kind::Table,
            reason: "tables are not drawn as images; ask for the HTML view".to_owned(),
            available: choice.alternatives.clone(),
        }),
    }
}

/// Why `asked` does not fit, for the error that refuses it.
fn unavailable(asked: Kind, choice: &Choice) -> String {
    let groups = choice.groups.len();
    match asked {
        Kind::Card => format!(
            "figures are for a summary without grouping, and this one has {groups} grouping fields"
        ),
        Kind::Bar if groups != 1 => {
            format!("bars are for one grouping field, and this summary has {groups}")
        }
        Kind::Pie | Kind::Treemap if groups == 1 => format!(
            "a {asked} shows the parts of a whole: a count or sum, every group present (not truncated, no `having`), \
             records in one part each (no `explode`), no negative value, at least 2 groups, and {} for a pie",
            if asked == Kind::Pie {
                "at most 7"
            } else {
                "more than 7"
            }
        ),
        Kind::Pie | Kind::Treemap => {
            format!("a {asked} is for one grouping field, and this summary has {groups}")
        }
        Kind::Stacked if groups == 2 => "stacked bars add up a count or sum".to_owned(),
        Kind::Stacked | Kind::Heatmap => {
            format!("a {asked} is for two grouping fields, and this summary has {groups}")
        }
        _ => "no chart fits this summary".to_owned(),
    }
}

#[cfg(test)]
mod default_metric_tests {
    use super::default_metric;
    use serde_json::json;

    #[test]
    fn a_comparison_is_charted_by_its_first_change() {
        let compared = json!({ "data": { "metrics": [
            { "column": "sum:n (2010)", "kind": "sum" },
            { "column": "sum:n (2020)", "kind": "sum" },
            { "column": "sum:n change", "kind": "change" },
            { "column": "sum:n change %", "kind": "percent_change" },
        ] } });
        assert_eq!(default_metric(&compared), 2);
        let plain = json!({ "data": { "metrics": [{ "column": "count", "kind": "count" }] } });
        assert_eq!(default_metric(&plain), 0);
    }
}
