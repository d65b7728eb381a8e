//! The entry points: a summary's envelope read, its chart chosen by the view's rules, then
//! drawn.

use serde_json::Value;

use crate::choice::{self, Choice};
use crate::draw;
use crate::drawn::{Chart, Options};
use crate::error::ChartError;
use crate::kind::Kind;
use crate::summary::Summary;

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
