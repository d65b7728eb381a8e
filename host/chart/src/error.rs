//! The one error type of this crate.

use std::path::PathBuf;

use crate::kind::Kind;

/// What went wrong, named by who must act: the caller's input (`NotASummary`, `NoSuchMetric`,
/// `UnknownKind`, `KindNotAvailable`), the shape of the result (`TooManyGroups`, `NoRows`), a
/// resource limit (`TooLarge`), the machine (`FontFile`), the build (`NoPng`), or this crate
/// (`Render`, a bug).
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// The value given is not the envelope of a `summarize_records` result.
    #[error(
        "not a summarize_records result: {problem}; expected the whole envelope \
         {{\"data\": {{\"columns\", \"rows\", \"metrics\", \"field_metadata\", …}}, \"provenance\": {{…}}}} \
         that summarize_records returned"
    )]
    NotASummary { problem: String },

    /// The metric asked for is not one of the result's metrics.
    #[error(
        "the summary has no metric number {index}; it has {}: {}",
        available.len(),
        numbered(available)
    )]
    NoSuchMetric {
        index: usize,
        available: Vec<String>,
    },

    /// A chart kind name that is not one of [`Kind::ALL`].
    #[error("unknown chart kind `{given}`; use one of {}", Kind::ALL.map(Kind::as_str).join(", "))]
    UnknownKind { given: String },

    /// The kind asked for does not fit this summary.
    #[error(
        "{asked} is not available for this summary: {reason}; available: {}",
        kinds(available)
    )]
    KindNotAvailable {
        asked: Kind,
        reason: String,
        available: Vec<Kind>,
    },

    /// More grouping fields than a chart can show; the view for these is a table.
    #[error(
        "a chart shows at most two grouping fields, and this summary is grouped by {}: {}; \
         summarize again grouped by at most two of them (e.g. group_by: [{}]), or ask for the \
         HTML view, which shows the table",
        groups.len(),
        groups.join(", "),
        groups.iter().take(2).map(|g| format!("{g:?}")).collect::<Vec<_>>().join(", ")
    )]
    TooManyGroups { groups: Vec<String> },

    /// Nothing to draw: no group came back.
    #[error(
        "the summary has no groups to draw (no record matched, or `having` removed every \
         group); loosen the filters, or ask for the HTML view, which says so in a table"
    )]
    NoRows,

    /// The chart's PNG would take more pixel memory than [`crate::MAX_PNG_PIXEL_BYTES`] even at
    /// 1×. Within [`crate::LIMITS`] only a very wide chart is.
    #[error(
        "the chart is too large for a PNG: {width}×{height} px would take {} MiB of pixels even \
         at 1×, and the limit is {} MiB; ask for a narrower chart (a smaller width), or fewer \
         groups (a smaller `limit`, or a filter), or the SVG, which has no such limit",
        bytes.div_ceil(1 << 20),
        max_bytes >> 20
    )]
    TooLarge {
        width: u32,
        height: u32,
        /// Pixel memory at 1× (width × height × 4).
        bytes: u64,
        max_bytes: u64,
    },

    /// This build has no PNG charts (tally-chart without its `png` feature).
    #[error(
        "this tally was built without PNG charts; ask for the SVG instead (chart: \"svg\", or a \
         .svg file), or use a build that draws PNG: a release archive, or `cargo install \
         --locked --path host/server --features png-charts` (or `--features full`)"
    )]
    NoPng,

    /// A font file given with `--font` could not be used.
    #[error("cannot use the font file {}: {reason}", path.display())]
    FontFile { path: PathBuf, reason: String },

    /// Drawing or rasterising failed. This is a bug in this crate.
    #[error("drawing the chart failed (a bug in tally-chart, please report it): {0}")]
    Render(String),
}

fn numbered(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_owned();
    }
    names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{i} = {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn kinds(kinds: &[Kind]) -> String {
    kinds
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Any failure of plotters or resvg: neither should fail on what this crate gives them.
pub(crate) fn render(e: impl std::fmt::Display) -> ChartError {
    ChartError::Render(e.to_string())
}
