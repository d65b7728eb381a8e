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
//! the view's): the largest groups by the charted metric, the rest folded into one "others"
//! group (their sum) when the metric adds up, else left out, and said in the notes; a PNG's
//! pixels are at most [`MAX_PNG_PIXEL_BYTES`].
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
//!   what was drawn of how many ("The 99 largest of 10,000 groups are drawn, and the other
//!   9,901 as one bar, “(9,901 others)”, their sum; …"); a mark that stands for groups folded
//!   into one has `data-others` (how many: of its row's grouping for a cell of an "others"
//!   row, else of its column's).

mod choice;
mod draw;
mod drawn;
mod error;
mod kind;
mod limits;
mod pick;
mod raster;
mod render;
mod summary;
mod text;

pub use choice::Choice;
pub use drawn::{Chart, Options, default_metric};
pub use error::ChartError;
pub use kind::{Kind, MetricKind};
pub use limits::{LIMITS, Limits, MAX_PNG_PIXEL_BYTES};
pub use raster::{Fonts, Raster, png};
pub use render::{choose, svg};
