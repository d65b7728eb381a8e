//! Execute: the groups made and each metric computed over them (each aggregate once), with
//! the period each group's `last:` value is of.

use datafusion::arrow::array::{Array as _, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::functions::expr_fn::coalesce;
use datafusion::functions_aggregate::expr_fn::max;
use datafusion::logical_expr::{Expr, cast, lit, when};
use datafusion::prelude::DataFrame;
use tally_semantic::definition::FieldId;
use tally_semantic::resolve::{Metric, SummarizePlan};
use tally_storage::dataset::Codes;

use super::keys::{KeyCodes, KeyRead, Split, group_keys, on_cluster, one_key};
use super::metrics::{Aggregates, metric_exprs};
use super::page::{ROWS_COL, records_in};
use crate::call::Call;
use crate::compare::Grouped;
use crate::error::EngineError;

/// Execute: group and compute the metrics (each aggregate once), with the records per group
/// (with `weighted`, `df` is of groups of records made before exploding: each row stands for
/// [`crate::pregroup::WEIGHT`] records).
pub(super) async fn aggregate(
    call: &Call<'_>,
    plan: &SummarizePlan,
    df: DataFrame,
    caps: crate::groups::Caps,
    indexes: &[Option<Split>],
    lookups: &crate::lookup::Lookups,
    weighted: bool,
) -> Result<Grouped, EngineError> {
    let def = call.def();
    let group_names: Vec<String> = plan
        .group_by
        .iter()
        .map(|g| def.fields[*g].name.clone())
        .collect();
    let having_on_keys = plan.having.iter().any(|h| group_names.contains(&h.column));
    let on_cluster = on_cluster(call);
    let (coded, group_exprs) = group_keys(
        &call.planner,
        &call.prepared,
        plan,
        KeyRead {
            having_on_keys,
            on_cluster,
            // Groups made first (`pregroup`) hold the keys' text, not the table's columns.
            dictionaries: !weighted,
        },
        indexes,
        lookups,
    );

    let mut aggregates = Aggregates::new(caps, weighted);
    let last: Vec<FieldId> = plan
        .metrics
        .iter()
        .filter_map(|m| match m {
            Metric::Last(f) => Some(*f),
            _ => None,
        })
        .collect();
    if !last.is_empty() {
        aggregates.last_periods = latest_of_groups(call, &df, &group_exprs, caps, &last).await?;
    }
    let (grouped_on, mut finals) = one_key(&group_exprs, &coded, &group_names, df.schema());
    let mut columns: Vec<String> = group_names.clone();
    let mut metric_columns: Vec<String> = Vec::new();
    for m in &plan.metrics {
        let (value, null_excluded) =
            metric_exprs(&call.planner, &call.prepared, &mut aggregates, m);
        let name = m.column(def);
        finals.push(value.alias(&name));
        columns.push(name.clone());
        metric_columns.push(name);
        if let (Some(ne), Some(ne_name)) = (null_excluded, m.null_excluded_column(def))
            && !columns.contains(&ne_name)
        {
            finals.push(ne.alias(&ne_name));
            columns.push(ne_name.clone());
            metric_columns.push(ne_name);
        }
        // `last:`: the period each group's value is of.
        if let (Metric::Last(f), Some(period_name), None) = (m, m.period_column(def), &plan.compare)
            && let Some((_, at)) = aggregates.last_periods.iter().find(|(g, _)| g == f)
            && !columns.contains(&period_name)
        {
            let at = at.clone();
            let period = aggregates.add(format!("last-period:{f}"), || max(at));
            finals.push(period.alias(&period_name));
            columns.push(period_name.clone());
            metric_columns.push(period_name);
        }
    }
    let records = aggregates.records();
    finals.push(records.alias(ROWS_COL));
    let grouped = df.aggregate(grouped_on, aggregates.exprs)?.select(finals)?;
    let schema = std::sync::Arc::new(grouped.schema().as_arrow().clone());
    let batches = grouped
        .collect()
        .await
        .map_err(|e| EngineError::computing(&def.id, e))?;
    // On one process the capped count stops the aggregation at the cap; on a cluster it holds
    // per task, so the whole answer is checked here too.
    let groups: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if groups > caps.groups {
        return Err(EngineError::computing(
            &def.id,
            datafusion::error::DataFusionError::External(Box::new(
                crate::groups::Stopped::Groups {
                    cap: caps.groups,
                    seen: groups,
                    rows: records_in(&batches) as u64,
                },
            )),
        ));
    }
    // The codes met while aggregating, read once the groups are made.
    let coded = coded
        .into_iter()
        .map(|c| {
            c.map(|c| match c {
                KeyCodes::Fixed(codes) => Ok(codes),
                KeyCodes::Streamed(codes) => codes
                    .values()
                    .map(Codes::of)
                    .map_err(|e| EngineError::computing(&def.id, e)),
            })
            .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Grouped {
        batches,
        schema,
        columns,
        group_names,
        metric_columns,
        coded,
        keys: plan.group_by.clone(),
        sort_first: 0,
    })
}

/// For `last:` metrics, per field, an expression giving each record its group's latest period
/// with a value of the field: one pass groups as the summary does and takes, per group and
/// field, the latest period where the field is not null; then each group's key (its key
/// values as text) is mapped to it. A group with no value of a field has no period (null).
async fn latest_of_groups(
    call: &Call<'_>,
    df: &DataFrame,
    group_exprs: &[Expr],
    caps: crate::groups::Caps,
    fields: &[FieldId],
) -> Result<Vec<(FieldId, Expr)>, EngineError> {
    use datafusion::common::ScalarValue;
    use datafusion::functions::string::expr_fn::concat_ws;
    let def = call.def();
    let Some(time) = def.time_field() else {
        return Ok(Vec::new());
    };
    let t = call.planner.column(time);
    // Capped as the summary's own grouping is: past the caps this pass stops first.
    let counted = crate::groups::capped_count(caps).call(vec![lit(1i64)]);
    let mut aggregates: Vec<Expr> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            max(when(call.planner.column(*f).is_not_null(), t.clone())
                .end()
                .unwrap_or_else(|_| t.clone()))
            .alias(format!("__tally_latest_{i}"))
        })
        .collect();
    aggregates.push(counted.alias("__tally_rows"));
    let batches = df
        .clone()
        .aggregate(group_exprs.to_vec(), aggregates)?
        .collect()
        .await
        .map_err(|e| EngineError::computing(&def.id, e))?;
    let keys_n = group_exprs.len();
    // One group: the latest period of all, per field.
    if group_exprs.is_empty() {
        let row = batches.iter().find(|b| b.num_rows() > 0);
        return fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let period = match row {
                    Some(b) => ScalarValue::try_from_array(b.column(i), 0)?,
                    None => ScalarValue::Null,
                };
                let typed =
                    datafusion::logical_expr::ExprSchemable::get_type(&t, call.base.schema())?;
                Ok((*f, cast(lit(period), typed)))
            })
            .collect();
    }
    // A group's key as text: each key's text (a missing one as U+0000) joined by U+001F, the
    // same here and in the plan.
    const MISSING: &str = "\u{0}";
    const SEP: &str = "\u{1f}";
    let key = concat_ws(
        lit(SEP),
        group_exprs
            .iter()
            .map(|e| {
                coalesce(vec![
                    cast(e.clone().unalias(), DataType::Utf8),
                    lit(MISSING),
                ])
            })
            .collect(),
    );
    let mut by_period: Vec<Vec<(ScalarValue, Vec<Expr>)>> = vec![Vec::new(); fields.len()];
    for b in &batches {
        let keys: Vec<ArrayRef> = (0..keys_n)
            .map(|i| datafusion::arrow::compute::cast(b.column(i), &DataType::Utf8))
            .collect::<Result<_, _>>()
            .map_err(|e| EngineError::backend(&def.id, e))?;
        let keys: Vec<&datafusion::arrow::array::StringArray> = keys
            .iter()
            .filter_map(|k| k.as_any().downcast_ref())
            .collect();
        for row in 0..b.num_rows() {
            let text: Vec<&str> = keys
                .iter()
                .map(|k| {
                    if k.is_null(row) {
                        MISSING
                    } else {
                        k.value(row)
                    }
                })
                .collect();
            let text = text.join(SEP);
            for (i, periods) in by_period.iter_mut().enumerate() {
                let period = ScalarValue::try_from_array(b.column(keys_n + i), row)?;
                if period.is_null() {
                    continue;
                }
                match periods.iter_mut().find(|(p, _)| *p == period) {
                    Some((_, keys)) => keys.push(lit(text.clone())),
                    None => periods.push((period, vec![lit(text.clone())])),
                }
            }
        }
    }
    let mut out = Vec::with_capacity(fields.len());
    for (f, periods) in fields.iter().zip(by_period) {
        let mut branches = periods
            .into_iter()
            .map(|(period, keys)| (key.clone().in_list(keys, false), lit(period)));
        let expr = match branches.next() {
            None => cast(
                lit(ScalarValue::Null),
                datafusion::logical_expr::ExprSchemable::get_type(&t, call.base.schema())?,
            ),
            Some((w, then)) => {
                let mut case = when(w, then);
                for (w, then) in branches {
                    case = case.when(w, then);
                }
                case.end()?
            }
        };
        out.push((*f, expr));
    }
    Ok(out)
}
