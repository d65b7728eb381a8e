//! The vocabulary of charts: the kinds a summary can be drawn as, and what a metric column
//! computes. Shared by the choice of a chart, its drawing and its errors; imports nothing of
//! this crate.

use std::fmt;

/// A kind of chart. `Table` is what the view shows when no chart fits; this crate does not draw
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Big figures, one per metric: a summary without grouping.
    Card,
    /// Horizontal bars, largest first.
    Bar,
    /// Parts of a whole, up to 7 of them.
    Pie,
    /// Parts of a whole, more than 7: nested rectangles sized by value.
    Treemap,
    /// Horizontal stacked bars: two grouping fields, an additive metric.
    Stacked,
    /// A grid coloured by value: two grouping fields.
    Heatmap,
    /// The rows as a table (not drawn by this crate).
    Table,
}

impl Kind {
    /// Every kind, in the order the view lists them.
    pub const ALL: [Kind; 7] = [
        Kind::Card,
        Kind::Bar,
        Kind::Pie,
        Kind::Treemap,
        Kind::Stacked,
        Kind::Heatmap,
        Kind::Table,
    ];

    /// The name the view, the CLI and the SVG's `data-kind` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Card => "card",
            Kind::Bar => "bar",
            Kind::Pie => "pie",
            Kind::Treemap => "treemap",
            Kind::Stacked => "stacked",
            Kind::Heatmap => "heatmap",
            Kind::Table => "table",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a metric column computes, read from its name and metadata as the view reads it
/// (`metricInfo` in view.js).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricKind {
    /// `count`.
    Count,
    /// `sum:x`.
    Sum,
    /// `avg:x` of a field (its nulls counted apart in `null_excluded_column`).
    Avg,
    /// `min:x`.
    Min,
    /// `max:x`.
    Max,
    /// `avg:x` of a computed measure that is a share of records (0..1; the engine marks it
    /// `"share": true`, a `count_where` measure): shown as a percentage.
    Rate,
    /// `avg:x` of any other computed measure (a ratio of sums, say): shown as the number it
    /// is, with up to 4 decimals. A ratio is not a share; 23.455 is not "2,345.5 %".
    Ratio,
    /// A prefix this crate does not know; drawn as a plain number.
    Other(String),
}

/// The kind of a metric column: `count`, else its prefix before `:`. An `avg:` without a
/// `null_excluded_column` averages a computed measure: a rate (a percentage) when its metadata
/// says `"share": true`, else a plain ratio. `share` on anything else changes nothing, as in
/// the view.
pub(crate) fn metric_kind(column: &str, has_null_excluded_column: bool, share: bool) -> MetricKind {
    if column == "count" {
        return MetricKind::Count;
    }
    match column.split(':').next().unwrap_or(column) {
        "sum" => MetricKind::Sum,
        "avg" if has_null_excluded_column => MetricKind::Avg,
        "avg" if share => MetricKind::Rate,
        "avg" => MetricKind::Ratio,
        "min" => MetricKind::Min,
        "max" => MetricKind::Max,
        other => MetricKind::Other(other.to_owned()),
    }
}
