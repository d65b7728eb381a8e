//! Metrics: the aggregates of a summary, each computed once, and each metric's expression
//! over them (with the records its value leaves out), and the measures a metric reads.

use datafusion::arrow::datatypes::DataType;
use datafusion::functions::expr_fn::{coalesce, round};
use datafusion::functions_aggregate::expr_fn::{avg, max, min, sum};
use datafusion::logical_expr::{Expr, cast, lit, when};
use datafusion::prelude::ident;
use tally_semantic::definition::{DataType as FieldType, FieldId, Formula};
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::{Filter, Metric};
use tally_storage::dataset::{Dataset, Prepared, share_column};

use crate::plan::Planner;

/// Decimals of averages and of ratios (as the reference server rounds them).
pub const AVG_DECIMALS: i64 = 2;
pub const RATIO_DECIMALS: i64 = 4;

/// The aggregates of a summary, each computed once however many metrics use it (DataFusion
/// refuses two aggregates that simplify to the same expression, e.g. `sum(n)` twice).
pub(super) struct Aggregates {
    keys: Vec<String>,
    pub(super) exprs: Vec<Expr>,
    /// For each `last:` metric's field: each record's group's latest period with a value of
    /// the field (`latest_of_groups`, in [`super::aggregate`]).
    pub(super) last_periods: Vec<(FieldId, Expr)>,
    /// `count` that stops the aggregation past the group and explode caps.
    count: datafusion::logical_expr::AggregateUDF,
    /// Whether each row stands for [`crate::pregroup::WEIGHT`] records.
    weighted: bool,
}

impl Aggregates {
    pub(super) fn new(caps: crate::groups::Caps, weighted: bool) -> Aggregates {
        Aggregates {
            keys: Vec::new(),
            exprs: Vec::new(),
            last_periods: Vec::new(),
            count: crate::groups::capped_count(caps),
            weighted,
        }
    }

    /// Records per group, counted by the capped count (added up from the records each row
    /// stands for, when weighted: the groups are checked against the cap once made).
    pub(super) fn records(&mut self) -> Expr {
        if self.weighted {
            return self.add("count".into(), || sum(ident(crate::pregroup::WEIGHT)));
        }
        let count = self.count.clone();
        self.add("count".into(), move || count.call(vec![lit(1i64)]))
    }

    /// The sum of a field: integers are summed as 128-bit decimals, so a total past the
    /// 64-bit range is never wrapped (it is shown as a float with a warning).
    fn sum(&mut self, planner: &Planner<'_>, f: FieldId) -> Expr {
        let column = planner.column(f);
        let integer = planner.def.fields[f].data_type == FieldType::Integer;
        let functions = planner.functions.clone();
        self.add(format!("sum:{f}"), move || {
            if integer {
                sum(functions.exact(column))
            } else {
                sum(column)
            }
        })
    }

    /// The hidden column holding `expr`, added under `key` unless already there.
    pub(super) fn add(&mut self, key: String, expr: impl FnOnce() -> Expr) -> Expr {
        let i = match self.keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                self.keys.push(key);
                self.exprs.push(expr().alias(hidden(self.exprs.len())));
                self.exprs.len() - 1
            }
        };
        ident(hidden(i))
    }
}

/// The weight a field is averaged by, if it is a rate that declares one.
pub(super) fn plan_def_weight(ds: &Dataset, f: FieldId) -> Option<FieldId> {
    ds.def.fields[f].weight
}

fn hidden(i: usize) -> String {
    format!("__tally_agg_{i}")
}

/// A metric's final expression (over hidden aggregates) and its `F:null_excluded` expression.
pub(super) fn metric_exprs(
    planner: &Planner<'_>,
    prepared: &Prepared,
    aggs: &mut Aggregates,
    m: &Metric,
) -> (Expr, Option<Expr>) {
    let def = planner.def;
    let column = |f: FieldId| planner.column(f);
    // Rows left out because the value is null; 0 (not null) when there are no rows.
    let nulls = |aggs: &mut Aggregates, f: FieldId| {
        let n = aggs.add(format!("nulls:{f}"), || {
            sum(when(column(f).is_null(), lit(1i64))
                .otherwise(lit(0i64))
                .unwrap_or(lit(0i64)))
        });
        coalesce(vec![n, lit(0i64)])
    };
    match m {
        Metric::Count => (aggs.records(), None),
        Metric::Sum(f) => {
            // The sum of no value (every value null, or no record) is null, as in SQL: never a
            // 0 a reader takes for a real total. The records left out are counted beside it.
            let total = aggs.sum(planner, *f);
            (total, Some(cast(nulls(aggs, *f), DataType::Int64)))
        }
        Metric::Avg(f) if def.fields[*f].weight.is_some() => weighted_avg(planner, aggs, *f),
        Metric::Avg(f) => {
            let mean = aggs.add(format!("avg:{f}"), || {
                avg(cast(column(*f), DataType::Float64))
            });
            (
                round(vec![mean, lit(AVG_DECIMALS)]),
                Some(cast(nulls(aggs, *f), DataType::Int64)),
            )
        }
        Metric::Min(f) => (
            aggs.add(format!("min:{f}"), || min(column(*f))),
            Some(cast(nulls(aggs, *f), DataType::Int64)),
        ),
        Metric::Max(f) => (
            aggs.add(format!("max:{f}"), || max(column(*f))),
            Some(cast(nulls(aggs, *f), DataType::Int64)),
        ),
        Metric::Last(f) => {
            // The records of the group's latest period with a value of `f`; with no time field
            // (refused when resolved) or no such period, none: the value is null.
            let period = aggs
                .last_periods
                .iter()
                .find(|(g, _)| g == f)
                .map(|(_, at)| at.clone());
            let (at, skipped) = match (def.time_field(), period) {
                (Some(t), Some(period)) => (
                    column(t).eq(period.clone()),
                    // Records passed over: without a value, at that period or after it (or
                    // anywhere, in a group with no value at all).
                    column(*f)
                        .is_null()
                        .and(period.clone().is_null().or(column(t).gt_eq(period))),
                ),
                _ => (lit(false), column(*f).is_null()),
            };
            let integer = def.fields[*f].data_type == FieldType::Integer;
            let value = if integer {
                cast(column(*f), DataType::Decimal128(38, 0))
            } else {
                column(*f)
            };
            let null_value = if integer {
                lit(datafusion::common::ScalarValue::Decimal128(None, 38, 0))
            } else {
                lit(datafusion::common::ScalarValue::Float64(None))
            };
            let total = aggs.add(format!("last:{f}"), || {
                sum(when(at.clone(), value)
                    .otherwise(null_value.clone())
                    .unwrap_or(null_value))
            });
            let missing = aggs.add(format!("last-nulls:{f}"), || {
                sum(when(skipped, lit(1i64))
                    .otherwise(lit(0i64))
                    .unwrap_or(lit(0i64)))
            });
            (
                total,
                Some(cast(coalesce(vec![missing, lit(0i64)]), DataType::Int64)),
            )
        }
        Metric::AvgComputed(k) => match &def.computed_measures[*k].formula {
            Formula::CountWhere {
                condition_field,
                condition_values,
            } => {
                if prepared.shares.contains(k) {
                    let share = aggs.add(format!("share:{k}"), || avg(ident(share_column(*k))));
                    return (round(vec![share, lit(RATIO_DECIMALS)]), None);
                }
                let member = planner
                    .filter(&Filter {
                        field: *condition_field,
                        op: Op::In(
                            condition_values
                                .iter()
                                .map(|v| Scalar::Str(v.clone()))
                                .collect(),
                        ),
                    })
                    .unwrap_or(lit(false));
                let share = aggs.add(format!("share:{k}"), || {
                    avg(when(member, lit(1.0f64))
                        .otherwise(lit(0.0f64))
                        .unwrap_or(lit(0.0f64)))
                });
                (round(vec![share, lit(RATIO_DECIMALS)]), None)
            }
            Formula::SumRatio {
                numerator,
                denominator,
            } => {
                let scale = def.computed_measures[*k].scale.unwrap_or(1.0);
                let num = cast(aggs.sum(planner, *numerator), DataType::Float64) * lit(scale);
                let den = cast(aggs.sum(planner, *denominator), DataType::Float64);
                let null = lit(datafusion::common::ScalarValue::Float64(None));
                let value = when(
                    den.clone().is_null().or(den.clone().eq(lit(0.0f64))),
                    null.clone(),
                )
                .otherwise(round(vec![num / den, lit(RATIO_DECIMALS)]))
                .unwrap_or(null);
                (value, None)
            }
        },
    }
}

/// A rate averaged by its declared weight: sum(rate × weight) / sum(weight) over the records
/// that have both; a record missing either is left out (and counted so).
fn weighted_avg(planner: &Planner<'_>, aggs: &mut Aggregates, f: FieldId) -> (Expr, Option<Expr>) {
    let column = |f: FieldId| planner.column(f);
    let w = planner.def.fields[f].weight.unwrap_or(f);
    let both = column(f).is_not_null().and(column(w).is_not_null());
    let value = cast(column(f), DataType::Float64);
    let weight = cast(column(w), DataType::Float64);
    let none = || lit(datafusion::common::ScalarValue::Float64(None));
    let weighted = aggs.add(format!("weighted:{f}"), || {
        sum(when(both.clone(), value * weight.clone())
            .otherwise(none())
            .unwrap_or(lit(0.0f64)))
    });
    let weights = aggs.add(format!("weights:{f}"), || {
        sum(when(both.clone(), weight)
            .otherwise(none())
            .unwrap_or(lit(0.0f64)))
    });
    let left_out = aggs.add(format!("unweighted:{f}"), || {
        sum(when(both, lit(0i64))
            .otherwise(lit(1i64))
            .unwrap_or(lit(0i64)))
    });
    let mean = when(
        weights
            .clone()
            .is_null()
            .or(weights.clone().eq(lit(0.0f64))),
        none(),
    )
    .otherwise(round(vec![weighted / weights, lit(AVG_DECIMALS)]))
    .unwrap_or(none());
    (
        mean,
        Some(cast(coalesce(vec![left_out, lit(0i64)]), DataType::Int64)),
    )
}

/// The measure a metric reads, and the second one it is weighted or divided by.
pub(super) fn measures_of(
    def: &tally_semantic::DatasetDef,
    m: &Metric,
) -> Option<(FieldId, Option<FieldId>)> {
    match m {
        Metric::Count => None,
        Metric::Avg(f) => Some((*f, def.fields[*f].weight)),
        Metric::Sum(f) | Metric::Min(f) | Metric::Max(f) | Metric::Last(f) => Some((*f, None)),
        Metric::AvgComputed(k) => match &def.computed_measures[*k].formula {
            Formula::SumRatio {
                numerator,
                denominator,
            } => Some((*numerator, Some(*denominator))),
            Formula::CountWhere { .. } => None,
        },
    }
}
