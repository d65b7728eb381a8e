//! What a summary says of itself while it runs: metrics that pool several periods, and the
//! groups a summary of one period leaves out.

use datafusion::prelude::DataFrame;
use tally_semantic::request::{Notice, Op};
use tally_semantic::resolve::{Filter, SummarizePlan};

use super::metrics::measures_of;
use crate::call::Call;
use crate::error::EngineError;

/// A ratio or a weighted average over records of several periods pools them (every period's
/// sums divided): said, with how to get each period's. Not when the summary is of one period
/// or is grouped by the time field.
pub(super) async fn say_pooled(
    call: &Call<'_>,
    plan: &SummarizePlan,
    df: &DataFrame,
) -> Result<Option<Notice>, EngineError> {
    let def = call.def();
    let Some(time) = def.time_field() else {
        return Ok(None);
    };
    if plan.group_by.contains(&time) || plan.latest.is_some() || plan.compare.is_some() {
        return Ok(None);
    }
    let pooled: Vec<String> = plan
        .metrics
        .iter()
        .filter(|m| matches!(measures_of(def, m), Some((_, Some(_)))))
        .map(|m| m.column(def))
        .collect();
    if pooled.is_empty() {
        return Ok(None);
    }
    let Some((first, last)) = crate::periods::spanned(call, df).await? else {
        return Ok(None);
    };
    let t = &def.fields[time].name;
    Ok(Some(Notice {
        parameter: "metrics".into(),
        message: format!(
            "{} pools the records of {t} {}–{}: each is the sum over every period divided by the sum over every period (the ratio of the pooled records, not a mean of each period's); group_by `{t}` for each period's, or name one period in where",
            pooled
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", "),
            first.text(),
            last.text()
        ),
    }))
}

/// A summary of one period grouped by other fields leaves out the groups with no record at
/// that period: said, with each one's last period.
pub(super) async fn say_left_out(
    call: &Call<'_>,
    plan: &SummarizePlan,
    before_latest: &[Filter],
    lookups: &crate::lookup::Lookups,
    caps: crate::groups::Caps,
) -> Result<Option<Notice>, EngineError> {
    let (Some(latest), Some(time)) = (plan.latest, call.def().time_field()) else {
        return Ok(None);
    };
    let Some(period) = plan.filters.iter().rev().find_map(|f| match &f.op {
        Op::Eq(p) if f.field == time => Some(p.clone()),
        _ => None,
    }) else {
        return Ok(None);
    };
    let mut conditions = Vec::new();
    for f in before_latest
        .iter()
        .filter(|f| !plan.explode.contains(&f.field))
    {
        conditions.push(call.planner.filter(f)?);
    }
    Ok(
        crate::periods::left_out_at(call, plan, conditions, &period, lookups, caps)
            .await?
            .map(|message| Notice {
                parameter: format!("where.{}", call.def().fields[latest.field].name),
                message,
            }),
    )
}
