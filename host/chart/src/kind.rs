//! The vocabulary of charts: the kinds a summary can be drawn as. Shared by the choice of a
//! chart, its drawing and its errors; imports nothing of this crate. What a metric column
//! computes is not guessed here: the summary says it (`metrics[].kind`, read as
//! [`tally_semantic::resolve::ValueKind`]).

use std::fmt;

/// What a metric's value is, as the summary's `metrics[].kind` says it.
pub use tally_semantic::resolve::ValueKind as MetricKind;

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
