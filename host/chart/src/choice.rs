//! Which chart a summary is drawn as.
//!
//! These are the rules of the HTML view, `chooseChart` in `host/server/ui/view.js`; the two must
//! stay the same, so that `tally summarize --chart` and the view show the same chart for the
//! same result. Change both together. The rules are [`choose`] here; the crate's public
//! [`crate::choose`] (in `lib.rs`) reads the envelope and calls it.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::error::ChartError;
use crate::limits::LIMITS;
use crate::summary::Summary;
use crate::text::cell_label;

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

impl FromStr for Kind {
    type Err = ChartError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == wanted)
            .ok_or_else(|| ChartError::UnknownKind {
                given: s.to_owned(),
            })
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

/// The chart chosen for a summary, and what it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The chart the summary is drawn as.
    pub kind: Kind,
    /// The kinds the summary may be drawn as, `kind` first (the view's switcher); `Table`
    /// is always among them.
    pub alternatives: Vec<Kind>,
    /// The metric column charted.
    pub metric: String,
    /// What the metric computes.
    pub metric_kind: MetricKind,
    /// The grouping columns, in the result's order (the first is the bars' axis, the second
    /// the stacks' series or the heatmap's columns).
    pub groups: Vec<String>,
    /// The groups are parts of a whole (hence a pie or a treemap).
    pub share: bool,
}

/// The rules of `chooseChart` in `host/server/ui/view.js`, on a summary already read.
pub(crate) fn choose(summary: &Summary<'_>, metric_index: usize) -> Result<Choice, ChartError> {
    let m = summary.metric(metric_index)?;
    let choice = |kind: Kind, alternatives: &[Kind], share: bool| Choice {
        kind,
        alternatives: alternatives.to_vec(),
        metric: m.column.clone(),
        metric_kind: m.kind.clone(),
        groups: summary.groups.iter().map(|g| g.name.clone()).collect(),
        share,
    };
    let rows = &summary.rows;
    if summary.groups.is_empty() {
        return Ok(choice(Kind::Card, &[Kind::Card, Kind::Table], false));
    }
    if rows.is_empty() {
        return Ok(choice(Kind::Table, &[Kind::Table], false));
    }
    let col = m.index;
    match summary.groups.len() {
        1 => {
            let non_negative = rows.iter().all(|r| match &r[col] {
                Value::Null => true,
                v => v.as_f64().is_some_and(|x| x >= 0.0),
            });
            // A share of a whole: parts that add up to the records matched. Not when records
            // can be in several parts (explode), some groups were cut (limit, having) or a
            // value is negative.
            let share = m.additive()
                && !summary.exploded
                && !summary.truncated
                && !summary.having
                && non_negative
                && rows.len() >= 2;
            if share {
                let k = if rows.len() <= LIMITS.pie_slices {
                    Kind::Pie
                } else {
                    Kind::Treemap
                };
                Ok(choice(k, &[k, Kind::Bar, Kind::Table], true))
            } else {
                Ok(choice(Kind::Bar, &[Kind::Bar, Kind::Table], false))
            }
        }
        2 => {
            let second = summary.groups[1].index;
            let distinct: HashSet<String> = rows.iter().map(|r| cell_label(&r[second])).collect();
            if m.additive() && distinct.len() <= LIMITS.stacked_series {
                Ok(choice(
                    Kind::Stacked,
                    &[Kind::Stacked, Kind::Heatmap, Kind::Table],
                    false,
                ))
            } else if m.additive() {
                Ok(choice(
                    Kind::Heatmap,
                    &[Kind::Heatmap, Kind::Stacked, Kind::Table],
                    false,
                ))
            } else {
                Ok(choice(Kind::Heatmap, &[Kind::Heatmap, Kind::Table], false))
            }
        }
        _ => Ok(choice(Kind::Table, &[Kind::Table], false)),
    }
}
