//! The periods a call's data has, and conditions on the time field held against them: a
//! period the data does not have is refused with the periods there are (first, last, gaps),
//! never answered as an empty table; `compare` ends named relative to the data (`"latest"`,
//! `"previous"`) are set to the periods they name.

use serde_json::Value;
use tally_semantic::RequestError;
use tally_semantic::definition::{DatasetDef, FieldId};
use tally_semantic::request::{Notice, Op, Scalar};
use tally_semantic::resolve::{Compare, Filter, Resolution};

use crate::call::{Call, MAX_PERIODS};
use crate::error::EngineError;

pub use tally_semantic::period::describe;

/// Whether the data's period `p` equals the condition's value `v` (a year as a number or as
/// text alike).
fn same(p: &Scalar, v: &Scalar) -> bool {
    p.text() == v.text() || matches!((p.number(), v.number()), (Some(a), Some(b)) if a == b)
}

/// Whether `p` is past a bound of a range (`after`: above the upper bound).
fn beyond(p: &Scalar, bound: &Scalar, below: bool, strict: bool) -> bool {
    let ordering = match (p.number(), bound.number()) {
        (Some(a), Some(b)) => a.partial_cmp(&b),
        _ => Some(p.text().cmp(&bound.text())),
    };
    match (ordering, below) {
        (Some(std::cmp::Ordering::Less), true) | (Some(std::cmp::Ordering::Greater), false) => true,
        (Some(std::cmp::Ordering::Equal), _) => strict,
        _ => false,
    }
}

/// Holds the conditions on the time field `field` against the periods there are: a period
/// named exactly (`2023`, `[2019, 2023]`) that the data does not have, or a range with no
/// period in it, is refused with the periods there are; a range reaching past the data's
/// first or last period is said in `notices`.
pub fn check(
    def: &DatasetDef,
    field: FieldId,
    filters: &[Filter],
    periods: &[Scalar],
    notices: &mut Vec<Notice>,
) -> Result<(), EngineError> {
    let name = &def.fields[field].name;
    let parameter = format!("where.{name}");
    let there = describe(periods);
    let refuse = |message: String| -> EngineError {
        RequestError::invalid(parameter.clone(), message)
            .hint(format!(
                "name periods the data has, a range within {}, or \"latest\"; inspect_dataset lists the periods of `{name}`",
                describe_span(periods)
            ))
            .into()
    };
    let mut kept: Vec<&Scalar> = periods.iter().collect();
    let mut ranged = false;
    for f in filters.iter().filter(|f| f.field == field) {
        match &f.op {
            Op::Eq(v) => {
                if !periods.iter().any(|p| same(p, v)) {
                    return Err(refuse(format!(
                        "`{name}` has no period {}: the data's periods are {there}",
                        v.text()
                    )));
                }
                kept.retain(|p| same(p, v));
            }
            Op::In(vs) => {
                let missing: Vec<String> = vs
                    .iter()
                    .filter(|v| !periods.iter().any(|p| same(p, v)))
                    .map(Scalar::text)
                    .collect();
                if !missing.is_empty() {
                    return Err(refuse(format!(
                        "`{name}` has no period {}: the data's periods are {there}",
                        missing.join(", ")
                    )));
                }
                kept.retain(|p| vs.iter().any(|v| same(p, v)));
            }
            Op::Gte(b) | Op::Gt(b) => {
                ranged = true;
                let strict = matches!(f.op, Op::Gt(_));
                kept.retain(|p| !beyond(p, b, true, strict));
            }
            Op::Lte(b) | Op::Lt(b) => {
                ranged = true;
                let strict = matches!(f.op, Op::Lt(_));
                kept.retain(|p| !beyond(p, b, false, strict));
            }
            _ => {}
        }
    }
    if ranged && kept.is_empty() && !periods.is_empty() {
        let asked: Vec<String> = filters
            .iter()
            .filter(|f| f.field == field)
            .filter_map(|f| match &f.op {
                Op::Gte(b) => Some(format!("≥ {}", b.text())),
                Op::Gt(b) => Some(format!("> {}", b.text())),
                Op::Lte(b) => Some(format!("≤ {}", b.text())),
                Op::Lt(b) => Some(format!("< {}", b.text())),
                _ => None,
            })
            .collect();
        return Err(refuse(format!(
            "no period of `{name}` is {}: the data's periods are {there}",
            asked.join(" and ")
        )));
    }
    if ranged && let (Some(first), Some(last)) = (periods.first(), periods.last()) {
        let reaching: Vec<String> = filters
            .iter()
            .filter(|f| f.field == field)
            .filter_map(|f| match &f.op {
                Op::Gte(b) | Op::Gt(b) if beyond(b, first, true, false) => {
                    Some(format!("the data's first is {}", first.text()))
                }
                Op::Lte(b) | Op::Lt(b) if beyond(b, last, false, false) => {
                    Some(format!("the data's last is {}", last.text()))
                }
                _ => None,
            })
            .collect();
        if !reaching.is_empty() {
            notices.push(Notice {
                parameter: parameter.clone(),
                message: format!(
                    "the range of `{name}` reaches past the periods there are ({}): it is read over {there}",
                    reaching.join("; ")
                ),
            });
        }
    }
    Ok(())
}

fn describe_span(periods: &[Scalar]) -> String {
    match (periods.first(), periods.last()) {
        (Some(a), Some(b)) => format!("{}..{}", a.text(), b.text()),
        _ => "the data's periods".into(),
    }
}

/// Sets `compare`'s ends named relative to the data to the periods they name, adds the
/// condition on the two periods, discloses each reading in `resolved` and writes the call as
/// answered; renames result columns the plan's order and `having` name by the word
/// (`sum:人口 (latest)` → `sum:人口 (2020)`).
pub fn settle_compare(
    def: &DatasetDef,
    plan: &mut tally_semantic::SummarizePlan,
    periods: &[Scalar],
    call_made: &mut Value,
) -> Result<(), EngineError> {
    let Some(compare) = plan.compare.as_mut() else {
        return Ok(());
    };
    let field = compare.field();
    let name = def.fields[field].name.clone();
    let set = compare.settle(periods).map_err(|r| -> EngineError {
        RequestError::invalid(
            format!("compare.{}", r.end),
            format!(
                "`compare.{}` is \"{}\", and `{name}` has {}",
                r.end,
                r.input,
                describe(periods)
            ),
        )
        .into()
    })?;
    if set.is_empty() {
        return Ok(());
    }
    for (r, period) in &set {
        let word = if r.previous { "previous" } else { "latest" };
        if let Some(res) = plan
            .resolved_fields
            .iter_mut()
            .find(|x| x.parameter == format!("compare.{}", r.end) && x.canonical == word)
        {
            res.canonical = period.text();
        } else {
            plan.resolved_fields.push(Resolution {
                parameter: format!("compare.{}", r.end),
                input: r.input.clone(),
                canonical: period.text(),
            });
        }
        let from = format!("({word})");
        let to = format!("({})", period.text());
        for s in &mut plan.order_by {
            s.column = s.column.replace(&from, &to);
        }
        for h in &mut plan.having {
            h.column = h.column.replace(&from, &to);
        }
    }
    if let Compare::Periods { from, to, .. } = &*compare {
        if from.text() == to.text() {
            return Err(RequestError::invalid(
                "compare",
                format!(
                    "`compare` needs two different periods; both are {} (`{name}` has {})",
                    from.text(),
                    describe(periods)
                ),
            )
            .into());
        }
        plan.filters.push(Filter {
            field,
            op: Op::In(vec![from.clone(), to.clone()]),
        });
    }
    if let Some(m) = call_made.as_object_mut() {
        m.insert("compare".into(), compare.to_json());
    }
    Ok(())
}

/// Whether a condition on the time field names periods ([`check`] holds them against the data):
/// one, a list or a bound; a substring or `$ne` reads no periods.
fn names_periods(filters: &[Filter], time: FieldId) -> bool {
    filters.iter().any(|f| {
        f.field == time
            && matches!(
                f.op,
                Op::Eq(_) | Op::In(_) | Op::Gt(_) | Op::Gte(_) | Op::Lt(_) | Op::Lte(_)
            )
    })
}

/// The periods there are, read for holding conditions against them; past
/// [`MAX_PERIODS`] none, and that said in `notices` (the conditions are answered unchecked).
async fn read_or_say(
    call: &Call<'_>,
    time: FieldId,
    notices: &mut Vec<Notice>,
) -> Result<Option<Vec<Scalar>>, EngineError> {
    let periods = call.periods(time).await?;
    if periods.is_none() {
        let name = &call.def().fields[time].name;
        notices.push(Notice {
            parameter: format!("where.{name}"),
            message: format!(
                "`{name}` has more than {MAX_PERIODS} periods: the condition on it was not checked against the periods there are"
            ),
        });
    }
    Ok(periods)
}

/// A summary's conditions on the time field held against the periods there are, and its
/// `compare` ends named relative to the data set (the periods read only when either is
/// there).
pub async fn hold(
    call: &Call<'_>,
    plan: &mut tally_semantic::SummarizePlan,
    call_made: &mut Value,
) -> Result<(), EngineError> {
    let def = call.def();
    let Some(time) = def.time_field() else {
        return Ok(());
    };
    let relative =
        matches!(&plan.compare, Some(Compare::Periods { relative, .. }) if !relative.is_empty());
    if !relative && !names_periods(&plan.filters, time) {
        return Ok(());
    }
    let Some(periods) = read_or_say(call, time, &mut plan.notices).await? else {
        if relative {
            return Err(RequestError::invalid(
                "compare",
                format!(
                    "`{}` has more than {MAX_PERIODS} periods, too many to find the latest among",
                    def.fields[time].name
                ),
            )
            .hint("name both periods")
            .into());
        }
        return Ok(());
    };
    settle_compare(def, plan, &periods, call_made)?;
    compared_in_data(def, time, plan.compare.as_ref(), &periods)?;
    check(def, time, &plan.filters, &periods, &mut plan.notices)
}

/// Each period compared is one the data has: a column of nulls is never the answer.
fn compared_in_data(
    def: &DatasetDef,
    time: FieldId,
    compare: Option<&Compare>,
    periods: &[Scalar],
) -> Result<(), EngineError> {
    let Some(Compare::Periods { from, to, .. }) = compare else {
        return Ok(());
    };
    for (end, v) in [("from", from), ("to", to)] {
        if !periods.iter().any(|p| same(p, v)) {
            let name = &def.fields[time].name;
            return Err(RequestError::invalid(
                format!("compare.{end}"),
                format!(
                    "`{name}` has no period {}: the data's periods are {}",
                    v.text(),
                    describe(periods)
                ),
            )
            .hint(format!(
                "compare two periods the data has (such as {} and \"latest\")",
                periods.first().map(Scalar::text).unwrap_or_default()
            ))
            .into());
        }
    }
    Ok(())
}

/// A query's conditions on the time field held against the periods there are.
pub async fn hold_query(
    call: &Call<'_>,
    plan: &mut tally_semantic::QueryPlan,
) -> Result<(), EngineError> {
    let def = call.def();
    let Some(time) = def.time_field() else {
        return Ok(());
    };
    if !names_periods(&plan.filters, time) {
        return Ok(());
    }
    match read_or_say(call, time, &mut plan.notices).await? {
        Some(periods) => check(def, time, &plan.filters, &periods, &mut plan.notices),
        None => Ok(()),
    }
}

/// For a summary of one period (the latest, asked or by default) grouped by other fields: the
/// groups the data has under the other conditions that have no record at that period, so left
/// out of the answer, with the last period each has (`沖縄県 (last 2019)`). Read in one pass
/// over the caller's view, stopped at the group cap (then nothing is said: the answer's own
/// grouping stops there too); any other failure (a deadline, a cancel) fails the call.
pub async fn left_out_at(
    call: &Call<'_>,
    plan: &tally_semantic::SummarizePlan,
    other_conditions: Vec<datafusion::prelude::Expr>,
    period: &Scalar,
    lookups: &crate::lookup::Lookups,
    caps: crate::groups::Caps,
) -> Result<Option<String>, EngineError> {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::functions_aggregate::expr_fn::max;
    use datafusion::logical_expr::{cast, lit};
    let def = call.def();
    let Some(time) = def.time_field() else {
        return Ok(None);
    };
    if plan.group_by.is_empty() || !plan.explode.is_empty() || plan.group_by.contains(&time) {
        return Ok(None);
    }
    let keys: Vec<datafusion::prelude::Expr> = plan
        .group_by
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let e = match lookups.get(g) {
                Some(l) => crate::lookup::value(&call.planner, l),
                None => cast(call.planner.column(*g), DataType::Utf8),
            };
            e.alias(format!("__tally_key_{i}"))
        })
        .collect();
    let n = keys.len();
    let mut df = call.base.clone();
    if let Some(e) = datafusion::logical_expr::utils::conjunction(other_conditions) {
        df = df.filter(e)?;
    }
    let counted = crate::groups::capped_count(caps).call(vec![lit(1i64)]);
    let last = max(call.planner.column(time)).alias("__tally_last");
    let batches = match df
        .aggregate(keys, vec![last, counted.alias("__tally_rows")])?
        .collect()
        .await
    {
        Ok(batches) => batches,
        Err(e) if crate::groups::stopped(&e).is_some() => return Ok(None),
        Err(e) => return Err(EngineError::computing(&def.id, e)),
    };
    // Every group's last period; those not at the period read are left out.
    let mut left: Vec<String> = Vec::new();
    for b in &batches {
        let columns: Vec<Vec<Value>> = (0..=n)
            .map(|i| crate::json::column_values(b.column(i)))
            .collect();
        for row in 0..b.num_rows() {
            let last = &columns[n][row];
            if !last.is_null() && crate::json::value_text(last) == period.text() {
                continue;
            }
            let label = crate::meta::group_label(columns[..n].iter().map(|c| &c[row]));
            let last = match last {
                Value::Null => "no period".to_string(),
                v => format!("last {}", crate::json::value_text(v)),
            };
            left.push(format!("{label} ({last})"));
        }
    }
    if left.is_empty() {
        return Ok(None);
    }
    left.sort();
    let count = left.len();
    let keys: Vec<&str> = plan
        .group_by
        .iter()
        .map(|g| def.fields[*g].name.as_str())
        .collect();
    Ok(Some(format!(
        "{} of {} {} no record at {} {}, the period this summary is of, and {} not in the answer: {}",
        crate::meta::groups(count),
        keys.join(" × "),
        if count == 1 { "has" } else { "have" },
        def.fields[time].name,
        period.text(),
        if count == 1 { "is" } else { "are" },
        crate::meta::listed(left)
    )))
}

/// The first and last period of the records a summary reads, when they are not one: a ratio
/// or a weighted average over them pools the periods (sums over every period, divided).
pub async fn spanned(
    call: &Call<'_>,
    df: &datafusion::prelude::DataFrame,
) -> Result<Option<(Scalar, Scalar)>, EngineError> {
    use datafusion::functions_aggregate::expr_fn::{max, min};
    let Some(time) = call.def().time_field() else {
        return Ok(None);
    };
    let t = call.planner.column(time);
    let batches = df
        .clone()
        .aggregate(vec![], vec![min(t.clone()).alias("a"), max(t).alias("b")])?
        .collect()
        .await
        .map_err(|e| EngineError::computing(&call.def().id, e))?;
    let Some(b) = batches.iter().find(|b| b.num_rows() > 0) else {
        return Ok(None);
    };
    let first = crate::call::period_of(&datafusion::common::ScalarValue::try_from_array(
        b.column(0),
        0,
    )?);
    let last = crate::call::period_of(&datafusion::common::ScalarValue::try_from_array(
        b.column(1),
        0,
    )?);
    Ok(match (first, last) {
        (Some(a), Some(b)) if a != b => Some((a, b)),
        _ => None,
    })
}
