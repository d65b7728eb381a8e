//! Explode: the records and the rows exploding would make, counted (and capped) before any
//! is made; then one row per part of each exploded field, and the filters on the parts.

use datafusion::arrow::array::Array as _;
use datafusion::arrow::datatypes::DataType;
use datafusion::functions_aggregate::expr_fn::sum;
use datafusion::logical_expr::{cast, lit, when};
use datafusion::prelude::{DataFrame, ident};
use tally_semantic::definition::FieldId;
use tally_semantic::resolve::{Filter, SummarizePlan};

use super::keys::{Split, explode_col};
use crate::error::EngineError;
use crate::plan::{Planner, conjunction};

/// Before exploding: the records matched, per exploded field the records without a part
/// (they form no group; they are reported), and the rows exploding would make — every
/// combination of the parts of several fields is a row, so a few long cells can multiply
/// into billions; past the cap the call stops here, before any row is made. One pass; only
/// when exploding.
pub(super) async fn count_before_exploding(
    planner: &Planner<'_>,
    plan: &SummarizePlan,
    df: &datafusion::dataframe::DataFrame,
    caps: crate::groups::Caps,
    indexes: &[Option<Split>],
    weighted: bool,
) -> Result<(Option<usize>, Vec<(String, u64)>), EngineError> {
    let def = planner.def;
    let mut without_value: Vec<(String, u64)> = Vec::new();
    if plan.explode.is_empty() {
        return Ok((None, without_value));
    }
    {
        // The records a row stands for: one, or, over groups made before exploding, those of
        // its group.
        let (records, each) = if weighted {
            let weight = ident(crate::pregroup::WEIGHT);
            (sum(weight.clone()), weight)
        } else {
            (
                datafusion::functions_aggregate::expr_fn::count(lit(1i64)),
                lit(1i64),
            )
        };
        let mut aggs = vec![records.alias("records")];
        // The parts of a record, counted (no list built): from the field's index when it
        // has one, else split and counted (each distinct value once).
        let count = |k: usize, e: FieldId| match &indexes[k] {
            Some(split) => split.count(planner, e),
            None => planner.part_count(e),
        };
        for (k, &e) in plan.explode.iter().enumerate() {
            let none = count(k, e).eq(lit(0i64));
            aggs.push(
                sum(when(none, each.clone())
                    .otherwise(lit(0i64))
                    .unwrap_or(lit(0i64)))
                .alias(format!("without_{k}")),
            );
        }
        let product = plan
            .explode
            .iter()
            .enumerate()
            .map(|(k, &e)| cast(count(k, e), DataType::Float64))
            .reduce(|a, b| a * b)
            .unwrap_or(lit(1.0f64));
        // What exploding adds beyond one row per record (a record of one part, or none,
        // adds nothing): what the cap bounds.
        aggs.push(
            sum(when(
                product.clone().gt(lit(1.0f64)),
                (product - lit(1.0f64)) * cast(each, DataType::Float64),
            )
            .otherwise(lit(0.0f64))
            .unwrap_or(lit(0.0f64)))
            .alias("fanout"),
        );
        let counted = df
            .clone()
            .aggregate(vec![], aggs)?
            .collect()
            .await
            .map_err(|e| EngineError::computing(&def.id, e))?;
        let value = |name: &str| -> f64 {
            counted
                .first()
                .filter(|b| b.num_rows() > 0)
                .and_then(|b| b.column_by_name(name))
                .and_then(|c| {
                    datafusion::arrow::compute::cast(c, &DataType::Float64)
                        .ok()
                        .and_then(|a| {
                            a.as_any()
                                .downcast_ref::<datafusion::arrow::array::Float64Array>()
                                .filter(|a| a.is_valid(0))
                                .map(|a| a.value(0))
                        })
                })
                .unwrap_or(0.0)
        };
        if value("fanout") > caps.rows as f64 {
            return Err(EngineError::computing(
                &def.id,
                datafusion::error::DataFusionError::External(Box::new(
                    crate::groups::Stopped::Rows { cap: caps.rows },
                )),
            ));
        }
        for (k, &e) in plan.explode.iter().enumerate() {
            without_value.push((
                def.fields[e].name.clone(),
                value(&format!("without_{k}")) as u64,
            ));
        }
        Ok((Some(value("records") as usize), without_value))
    }
}

/// Explode: one row per part of each exploded field (records without parts make no row;
/// they are counted in `records_without_value`), then the filters on the parts.
pub(super) fn explode(
    planner: &Planner<'_>,
    plan: &SummarizePlan,
    mut df: DataFrame,
    part_filters: &[&Filter],
    indexes: &[Option<Split>],
) -> Result<DataFrame, EngineError> {
    for (k, &e) in plan.explode.iter().enumerate() {
        let parts = match &indexes[k] {
            Some(split) => split.codes(planner, e),
            None => planner.parts(e, false),
        };
        df = df
            .with_column(&explode_col(k), parts)?
            .unnest_columns(&[explode_col(k).as_str()])?;
    }
    let mut part_conditions = Vec::new();
    for f in part_filters {
        // Partitioned by the caller: every part filter is on an exploded field.
        let col = plan
            .explode
            .iter()
            .position(|e| *e == f.field)
            .map(explode_col)
            .ok_or_else(|| {
                EngineError::internal(format!(
                    "a filter on the parts of `{}`, which is not exploded",
                    planner.def.fields[f.field].name
                ))
            })?;
        part_conditions.push(planner.part_filter(ident(col), &f.op));
    }
    Ok(match conjunction(part_conditions) {
        Some(e) => df.filter(e)?,
        None => df,
    })
}
