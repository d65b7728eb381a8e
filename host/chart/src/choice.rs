//! Which chart a summary is drawn as.
//!
//! These are the rules of the HTML view, `chooseChart` in `host/mcp/ui/view.js`; the two must
//! stay the same, so that `tally summarize --chart` and the view show the same chart for the
//! same result. Change both together. The rules are [`choose`] here; the crate's public
//! [`crate::choose`] (in `render.rs`) reads the envelope and calls it.

use std::collections::HashSet;

use std::str::FromStr;

use serde_json::Value;

use crate::error::ChartError;
use crate::kind::Kind;
use crate::kind::MetricKind;
use crate::limits::LIMITS;
use crate::summary::Summary;
use crate::text::cell_label;

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
    /// What the metric computes (`metrics[].kind`).
    pub metric_kind: MetricKind,
    /// What its values are counted in (`metrics[].unit`), when declared.
    pub metric_unit: Option<String>,
    /// The grouping columns, in the result's order (the first is the bars' axis, the second
    /// the stacks' series or the heatmap's columns).
    pub groups: Vec<String>,
    /// The groups are parts of a whole (hence a pie or a treemap).
    pub share: bool,
}

/// The rules of `chooseChart` in `host/mcp/ui/view.js`, on a summary already read.
pub(crate) fn choose(summary: &Summary<'_>, metric_index: usize) -> Result<Choice, ChartError> {
    let m = summary.metric(metric_index)?;
    let choice = |kind: Kind, alternatives: &[Kind], share: bool| Choice {
        kind,
        alternatives: alternatives.to_vec(),
        metric: m.column.clone(),
        metric_kind: m.kind,
        metric_unit: m.unit.clone(),
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
