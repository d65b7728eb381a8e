//! `summarize_records`: counts, sums, averages, extremes and computed measures per group.
//!
//! Order of operations: filters on ordinary fields → explode multi-value fields into their
//! parts (a record without parts joins the "" group) → filters on exploded fields, applied to
//! each part → group (null key shown as "") → metrics → `having` → order (first metric
//! descending, nulls last, ties by key) → `total_group_count` → limit.

use datafusion::arrow::array::{
    Array as _, ArrayRef, Decimal128Array, Int64Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::datatypes::DataType;
use datafusion::functions::expr_fn::{coalesce, round};
use datafusion::functions_aggregate::expr_fn::{avg, max, min, sum};
use std::ops::Not;

use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, cast, lit, when};
use datafusion::prelude::{DataFrame, ident};
use serde_json::Value;
use tally_semantic::definition::{DataType as FieldType, FieldId, Formula};
use tally_semantic::request::{Notice, Op, Scalar};
use tally_semantic::resolve::{Filter, HavingFilter, Metric, SummarizePlan};

use crate::call::{Asked, Call, HasConditions};
use crate::compare::Grouped;
use crate::context::Cx;
use crate::envelope::{Provenance, TransformationType};
use crate::error::EngineError;
use crate::meta::{self, echo, field_meta};
use crate::plan::{Planner, conjunction};
use crate::results::{CountsByName, MetricMeta, SummaryResult};
use tally_storage::dataset::{
    Codes, Dataset, Prepared, code_column, dictionary_column, share_column,
};
use tally_storage::udf::StreamCodes;

/// Hidden result column: records per group (before exploding, the matched total is its sum).
const ROWS_COL: &str = "__tally_rows";

/// The records a grouping counted: the sum of its per-group counts.
fn records_in(batches: &[RecordBatch]) -> usize {
    batches
        .iter()
        .filter_map(|b| b.column_by_name(ROWS_COL))
        .filter_map(|c| c.as_any().downcast_ref::<Int64Array>())
        .map(|a| a.iter().flatten().map(|v| v.max(0) as u64).sum::<u64>())
        .sum::<u64>() as usize
}

/// One page of groups, ordered, as JSON rows.
struct Page {
    rows: Vec<Vec<Value>>,
    /// Groups before the limit.
    total: usize,
    /// Integer sums that left the 64-bit range in some returned group (shown as floats).
    beyond_i64: Vec<String>,
}

/// Orders the groups (first metric descending, nulls last, then the group keys ascending)
/// in Arrow and turns only the returned page into JSON: a wide grouping never becomes
/// millions of JSON values. In phases: the sort columns ([`sort_columns`]), the page taken,
/// its sums past 64 bits named ([`beyond_i64`]), its rows as JSON with codes read as their
/// values ([`decode_codes`]).
fn page_groups(
    batches: &[RecordBatch],
    columns: &[String],
    coded: &[Option<Codes>],
    ranks: &[Option<std::sync::Arc<Vec<u32>>>],
    keys: usize,
    order: &[(usize, bool)],
    limit: usize,
) -> Result<Page, datafusion::arrow::error::ArrowError> {
    use datafusion::arrow::compute::{concat_batches, lexsort_to_indices};
    let Some(first) = batches.first() else {
        return Ok(Page {
            rows: Vec::new(),
            total: 0,
            beyond_i64: Vec::new(),
        });
    };
    let batch = concat_batches(&first.schema(), batches)?;
    let total = batch.num_rows();
    let sort = sort_columns(&batch, columns, ranks, keys, order)?;
    let indices = if sort.is_empty() {
        UInt32Array::from_iter_values(0..total.min(limit) as u32)
    } else {
        lexsort_to_indices(&sort, Some(limit))?
    };
    let page = datafusion::arrow::compute::take_record_batch(&batch, &indices)?;
    let beyond_i64 = beyond_i64(&page, columns);
    let mut rows = crate::json::rows(&[page], columns);
    decode_codes(&mut rows, coded);
    Ok(Page {
        rows,
        total,
        beyond_i64,
    })
}

/// The column `name` of `batch`.
fn column_of(
    batch: &RecordBatch,
    name: &str,
) -> Result<ArrayRef, datafusion::arrow::error::ArrowError> {
    batch.column_by_name(name).cloned().ok_or_else(|| {
        datafusion::arrow::error::ArrowError::SchemaError(format!("no column {name}"))
    })
}

/// What the groups are sorted by: the columns `order` names, then the group keys it does not
/// name, ascending.
fn sort_columns(
    batch: &RecordBatch,
    columns: &[String],
    ranks: &[Option<std::sync::Arc<Vec<u32>>>],
    keys: usize,
    order: &[(usize, bool)],
) -> Result<Vec<datafusion::arrow::compute::SortColumn>, datafusion::arrow::error::ArrowError> {
    use datafusion::arrow::compute::{SortColumn, SortOptions};
    // A group key sorts as its text (codes by the rank of their values); a metric as a
    // number, NaN and infinities (shown as null, JSON has no such numbers) with the nulls,
    // last.
    let key_values = |k: usize| -> Result<ArrayRef, datafusion::arrow::error::ArrowError> {
        let values = column_of(batch, &columns[k])?;
        Ok(
            match (&ranks[k], values.as_any().downcast_ref::<UInt32Array>()) {
                // Codes are numbered in the order values were met; their ranks order them
                // as the values would be ordered.
                // A missing key (code 0, with or without its null bit) sorts as a null, not
                // as "", which would come first.
                (Some(rank), Some(codes)) => std::sync::Arc::new(
                    codes
                        .iter()
                        .map(|c| {
                            c.filter(|&c| c != 0)
                                .map(|c| rank.get(c as usize).copied().unwrap_or(0))
                        })
                        .collect::<UInt32Array>(),
                ),
                _ => values,
            },
        )
    };
    let metric_values = |m: usize| -> Result<ArrayRef, datafusion::arrow::error::ArrowError> {
        let values =
            datafusion::arrow::compute::cast(&column_of(batch, &columns[m])?, &DataType::Float64)?;
        Ok(values
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Float64Array>()
            .map(|a| {
                std::sync::Arc::new(
                    a.iter()
                        .map(|v| v.filter(|x| x.is_finite()))
                        .collect::<datafusion::arrow::array::Float64Array>(),
                ) as ArrayRef
            })
            .unwrap_or(values))
    };
    let mut sort: Vec<SortColumn> = Vec::new();
    for &(c, descending) in order {
        let values = if c < keys {
            key_values(c)?
        } else {
            metric_values(c)?
        };
        sort.push(SortColumn {
            values,
            // Missing values last in both directions (docs/semantics.md): a null group
            // ahead of every value reads as the first answer when it is none.
            options: Some(SortOptions {
                descending,
                nulls_first: false,
            }),
        });
    }
    for k in (0..keys).filter(|k| !order.iter().any(|(c, _)| c == k)) {
        sort.push(SortColumn {
            values: key_values(k)?,
            options: Some(SortOptions {
                descending: false,
                nulls_first: false,
            }),
        });
    }
    Ok(sort)
}

/// The integer sums of `page` that left the 64-bit range in some group (shown as floats).
fn beyond_i64(page: &RecordBatch, columns: &[String]) -> Vec<String> {
    let mut beyond_i64 = Vec::new();
    for name in columns {
        if let Some(d) = page
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<Decimal128Array>())
            && d.iter()
                .flatten()
                .any(|v| v > i128::from(i64::MAX) || v < i128::from(i64::MIN))
        {
            beyond_i64.push(name.clone());
        }
    }
    beyond_i64
}

/// Each coded group key of `rows` read as its value.
fn decode_codes(rows: &mut [Vec<Value>], coded: &[Option<Codes>]) {
    for row in rows {
        for (k, code) in coded.iter().enumerate() {
            if let Some(values) = code {
                // Code 0 is a missing value.
                row[k] = match row[k].as_u64().unwrap_or(0) as usize {
                    0 => Value::Null,
                    i => values
                        .get(i)
                        .map_or(Value::Null, |v| Value::String(v.to_string())),
                };
            }
        }
    }
}

/// Decimals of averages and of ratios (as the reference server rounds them).
pub const AVG_DECIMALS: i64 = 2;
pub const RATIO_DECIMALS: i64 = 4;

fn explode_col(i: usize) -> String {
    format!("__tally_explode_{i}")
}

impl HasConditions for SummarizePlan {
    fn labels(&self, def: &tally_semantic::DatasetDef) -> Vec<String> {
        self.filters
            .iter()
            .filter(|f| !self.explode.contains(&f.field))
            .map(|f| format!("`{}`", f.describe(def)))
            .collect()
    }
}

/// The aggregates of a summary, each computed once however many metrics use it (DataFusion
/// refuses two aggregates that simplify to the same expression, e.g. `sum(n)` twice).
struct Aggregates {
    keys: Vec<String>,
    exprs: Vec<Expr>,
    /// For each `last:` metric's field: each record's group's latest period with a value of
    /// the field ([`latest_of_groups`]).
    last_periods: Vec<(FieldId, Expr)>,
    /// `count` that stops the aggregation past the group and explode caps.
    count: datafusion::logical_expr::AggregateUDF,
    /// Whether each row stands for [`crate::pregroup::WEIGHT`] records.
    weighted: bool,
}

impl Aggregates {
    fn new(caps: crate::groups::Caps, weighted: bool) -> Aggregates {
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
    fn records(&mut self) -> Expr {
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
    fn add(&mut self, key: String, expr: impl FnOnce() -> Expr) -> Expr {
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
fn plan_def_weight(ds: &Dataset, f: FieldId) -> Option<FieldId> {
    ds.def.fields[f].weight
}

fn hidden(i: usize) -> String {
    format!("__tally_agg_{i}")
}

/// A metric's final expression (over hidden aggregates) and its `F:null_excluded` expression.
fn metric_exprs(
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

/// A `having` condition on a result column.
fn having_expr(planner: &Planner<'_>, h: &HavingFilter, metric: bool) -> Result<Expr, EngineError> {
    let column = ident(&h.column);
    if !metric {
        // A group key: text, one value per row.
        return Ok(planner.part_filter(column, &h.op));
    }
    let number = |v: &Scalar| {
        v.number().map(lit).ok_or_else(|| {
            EngineError::Request(
                tally_semantic::RequestError::invalid(
                    format!("having.{}", h.column),
                    format!("`{}` is a number; `{}` is not", h.column, v.text()),
                )
                .hint("compare metrics with numbers, e.g. {\"count\": {\"$gte\": 10}}"),
            )
        })
    };
    let as_f64 = cast(column.clone(), DataType::Float64);
    Ok(match &h.op {
        Op::In(values) => as_f64.in_list(
            values.iter().map(number).collect::<Result<Vec<_>, _>>()?,
            false,
        ),
        Op::Eq(v) => as_f64.eq(number(v)?),
        Op::Ne(v) => as_f64.not_eq(number(v)?),
        Op::Nin(values) => as_f64.in_list(
            values.iter().map(number).collect::<Result<Vec<_>, _>>()?,
            true,
        ),
        Op::Gt(v) => as_f64.gt(number(v)?),
        Op::Gte(v) => as_f64.gt_eq(number(v)?),
        Op::Lt(v) => as_f64.lt(number(v)?),
        Op::Lte(v) => as_f64.lt_eq(number(v)?),
        Op::Contains(t) => planner.functions.icontains(cast(column, DataType::Utf8), t),
        Op::NotContains(t) => planner
            .functions
            .icontains(cast(column, DataType::Utf8), t)
            .not(),
        Op::NotEmpty(true) => column.is_not_null(),
        Op::NotEmpty(false) => column.is_null(),
    })
}

/// The fields a summary reads besides its filters, and how many computed measures it has.
fn reads_of(ds: &Dataset, plan: &SummarizePlan) -> (Vec<FieldId>, usize) {
    let mut read = crate::lookup::read_fields(&ds.def, &plan.group_by);
    read.extend(plan.explode.iter().copied());
    read.extend(plan.latest.map(|l| l.field));
    let mut computed = 0;
    for m in &plan.metrics {
        match m {
            Metric::Count => {}
            Metric::Sum(f) | Metric::Avg(f) | Metric::Min(f) | Metric::Max(f) | Metric::Last(f) => {
                read.push(*f);
                // `last:` reads the periods too.
                if matches!(m, Metric::Last(_)) {
                    read.extend(ds.def.time_field());
                }
                // A rate averaged by its weight reads the weight too.
                if matches!(m, Metric::Avg(_)) {
                    read.extend(plan_def_weight(ds, *f));
                }
            }
            Metric::AvgComputed(_) => computed += 1,
        }
    }
    // A ratio or weighted average over several periods is said to pool them: the periods are
    // read.
    if plan
        .metrics
        .iter()
        .any(|m| matches!(measures_of(&ds.def, m), Some((_, Some(_)))))
    {
        read.extend(ds.def.time_field());
    }
    (read, computed)
}

/// Runs a summary; `call` is the call as resolved, completed with what is read while running
/// (the latest period of the time field).
pub async fn run(
    engine: &Cx<'_>,
    ds: &Dataset,
    mut plan: SummarizePlan,
    call_made: &mut Value,
    lookups: &crate::lookup::Lookups,
) -> Result<(SummaryResult, Provenance), EngineError> {
    // Conditions on looked-up fields are conditions on their keys; a grouping by one reads
    // its key.
    crate::lookup::rewrite(&ds.def, &mut plan.filters, lookups)?;
    let (read, computed) = reads_of(ds, &plan);
    let call = Call::open(
        engine,
        ds,
        &mut plan.filters,
        &mut plan.resolved_fields,
        plan.as_of.as_deref(),
        crate::call::Reads {
            fields: &read,
            computed,
            q: None,
        },
    )
    .await?;
    crate::periods::hold(&call, &mut plan, call_made).await?;
    // The conditions before the one on the latest period: what the groups left out by it are
    // found under.
    let before_latest = plan.filters.clone();
    if let Some(latest) = plan.latest {
        call.read_latest(
            latest,
            &mut plan.filters,
            &mut plan.resolved_fields,
            &mut plan.notices,
            call_made,
        )
        .await?;
    }
    // The rows cap is on what exploding adds beyond one row per record: a summary that
    // explodes nothing reads any number of records.
    let caps = crate::groups::Caps {
        groups: engine.limits().max_groups,
        rows: if plan.explode.is_empty() {
            u64::MAX
        } else {
            engine.limits().max_explode_rows
        },
    };
    // Filters on exploded fields apply to each part, after exploding; the others to records.
    let (part_filters, row_filters): (Vec<&Filter>, Vec<&Filter>) = plan
        .filters
        .iter()
        .partition(|f| plan.explode.contains(&f.field));
    let mut conditions = Vec::new();
    for f in &row_filters {
        conditions.push(call.planner.filter(f)?);
    }
    let df = match conjunction(conditions.clone()) {
        Some(e) => call.base.clone().filter(e)?,
        None => call.base.clone(),
    };
    // An exploded field of a prepared table is split on its part codes (integers, each part
    // numbered once per version) unless its parts are filtered or a `having` tests keys.
    let having_on_keys = plan.having.iter().any(|h| {
        plan.group_by
            .iter()
            .any(|g| call.def().fields[*g].name == h.column)
    });
    // Read from its files on this server, it is split into parts numbered as the call meets
    // them, under the same conditions.
    let on_cluster = on_cluster(&call);
    let indexes: Vec<Option<Split>> = plan
        .explode
        .iter()
        .map(|e| {
            let filtered = part_filters.iter().any(|f| f.field == *e);
            if filtered || having_on_keys {
                return None;
            }
            if let Some(index) = call.prepared.part_index(call.def(), *e) {
                return Some(Split::Index(index));
            }
            let field = &call.def().fields[*e];
            let separator = field.multi_value.clone()?;
            (!call.prepared.is_prepared() && !on_cluster && !field.data_type.is_numeric()).then(
                || Split::Streamed {
                    codes: std::sync::Arc::new(StreamCodes::default()),
                    separator,
                },
            )
        })
        .collect();
    // Read from its files (on this server or a cluster), a summary that only counts explodes
    // groups of records made first, unless its parts are filtered. (Not a prepared table yet:
    // its coded keys are grouped on code columns the grouped table does not keep.)
    let groups_first = !call.prepared.is_prepared() && part_filters.is_empty();
    let pregrouped = crate::pregroup::grouped(&call, &plan, &df, lookups, groups_first).await?;
    let weighted = pregrouped.is_some();
    let df = pregrouped.unwrap_or(df);
    // Records matched before exploding, the records without a part in each exploded field,
    // and the rows exploding would make, counted before any is made.
    let (pre_explode, without_value) =
        count_before_exploding(&call.planner, &plan, &df, caps, &indexes, weighted).await?;
    // While aggregating, the rows are bounded by the records and the cap on what exploding
    // adds to them.
    let caps = crate::groups::Caps {
        rows: pre_explode.map_or(caps.rows, |records| {
            caps.rows.saturating_add(records as u64)
        }),
        ..caps
    };
    let mut said: Vec<Notice> = Vec::new();
    said.extend(say_pooled(&call, &plan, &df).await?);
    let records = df.clone();
    let df = explode(&call.planner, &plan, df, &part_filters, &indexes)?;
    // The documents the counted records come from (a plugin's row sources), cited by the
    // summary as a query cites its rows': with a filter on an exploded field's parts, only
    // the records with a part it keeps.
    let counted_records = if part_filters.is_empty() {
        &records
    } else {
        &df
    };
    let documents = meta::sources_of_records(counted_records, &call.prepared).await?;
    let grouped = aggregate(&call, &plan, df, caps, &indexes, lookups, weighted).await?;
    said.extend(say_left_out(&call, &plan, &before_latest, lookups, caps).await?);
    let matched = pre_explode.unwrap_or_else(|| records_in(&grouped.batches));
    // Periods side by side and ranks, over every group.
    let grouped = crate::compare::apply(call.def(), &plan, grouped)
        .map_err(|e| EngineError::backend(&call.def().id, e))?;
    let page = order_and_page(&call, &plan, grouped).await?;
    let counted = Counted {
        matched,
        without_value,
        row_filters: !row_filters.is_empty(),
        documents,
    };
    plan.notices.extend(said);
    let (data, mut provenance) = cite(&call, &plan, &conditions, page, counted).await?;
    crate::lookup::cite(&mut provenance, lookups);
    Ok((data, provenance))
}

/// A ratio or a weighted average over records of several periods pools them (every period's
/// sums divided): said, with how to get each period's. Not when the summary is of one period
/// or is grouped by the time field.
async fn say_pooled(
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
async fn say_left_out(
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

/// Explode: one row per part of each exploded field (records without parts make no row;
/// they are counted in `records_without_value`), then the filters on the parts.
fn explode(
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

/// Execute: group and compute the metrics (each aggregate once), with the records per group
/// (with `weighted`, `df` is of groups of records made before exploding: each row stands for
/// [`crate::pregroup::WEIGHT`] records).
async fn aggregate(
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

/// The column two group keys are grouped on as one.
const PAIR_KEY: &str = "__tally_key_pair";

/// What a summary groups on, and the group keys read back from its groups. Two keys that are
/// both 32-bit codes (a prepared table's code columns, text numbered as the call reads it,
/// exploded parts) are grouped as one 64-bit integer, the first code in its high half, and
/// split again once grouped: one integer is hashed and compared per record instead of two
/// columns (a third of a two-field summary's time went to grouping the two). A missing
/// value's code is 0, whether or not it is null, so a null code is taken as 0.
fn one_key(
    group_exprs: &[Expr],
    coded: &[Option<KeyCodes>],
    names: &[String],
    schema: &datafusion::common::DFSchema,
) -> (Vec<Expr>, Vec<Expr>) {
    use datafusion::logical_expr::ExprSchemable;
    let codes = group_exprs.len() == 2
        && coded.len() == 2
        && coded.iter().all(Option::is_some)
        && group_exprs
            .iter()
            .all(|e| matches!(e.get_type(schema), Ok(DataType::UInt32)));
    if !codes {
        return (group_exprs.to_vec(), names.iter().map(ident).collect());
    }
    let half = lit(1u64 << 32);
    let wide = |e: &Expr| {
        cast(
            coalesce(vec![e.clone().unalias(), lit(0u32)]),
            DataType::UInt64,
        )
    };
    let pair = (wide(&group_exprs[0]) * half.clone() + wide(&group_exprs[1])).alias(PAIR_KEY);
    let finals = vec![
        cast(ident(PAIR_KEY) / half.clone(), DataType::UInt32).alias(&names[0]),
        cast(ident(PAIR_KEY) % half, DataType::UInt32).alias(&names[1]),
    ];
    (vec![pair], finals)
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

/// A page of groups, shaped for the result.
struct GroupPage {
    columns: Vec<String>,
    group_names: Vec<String>,
    metric_columns: Vec<String>,
    rows: Vec<Vec<Value>>,
    total_groups: usize,
    cut: Option<meta::Cut>,
    beyond_i64: Vec<String>,
}

/// Shape: `having`, then the order asked for (else the first metric descending; then the
/// group keys), the page, and the budgets.
async fn order_and_page(
    call: &Call<'_>,
    plan: &SummarizePlan,
    grouped: Grouped,
) -> Result<GroupPage, EngineError> {
    let def = call.def();
    let Grouped {
        mut batches,
        schema,
        columns,
        group_names,
        metric_columns,
        coded,
        keys: key_fields,
        sort_first,
    } = grouped;
    let mut having = Vec::new();
    for h in &plan.having {
        having.push(having_expr(
            &call.planner,
            h,
            metric_columns.contains(&h.column),
        )?);
    }
    if let Some(e) = conjunction(having) {
        let table = MemTable::try_new(schema, vec![batches])
            .map_err(|e| EngineError::computing(&def.id, e))?;
        batches = call
            .ctx
            .read_table(std::sync::Arc::new(table))?
            .filter(e)?
            .collect()
            .await
            .map_err(|e| EngineError::computing(&def.id, e))?;
    }
    let keys = group_names.len();
    let mut order: Vec<(usize, bool)> = plan
        .order_by
        .iter()
        .filter_map(|s| {
            columns
                .iter()
                .position(|c| *c == s.column)
                .map(|i| (i, s.descending))
        })
        .collect();
    if order.is_empty() && !plan.metrics.is_empty() {
        order.push((keys + sort_first, true));
    }
    let ranks: Vec<Option<std::sync::Arc<Vec<u32>>>> = key_fields
        .iter()
        .zip(&coded)
        .map(|(g, code)| {
            code.as_ref().map(|c| {
                if plan.explode.contains(g) || !call.prepared.is_prepared() {
                    std::sync::Arc::new(c.ranks())
                } else {
                    call.prepared.code_ranks(*g)
                }
            })
        })
        .collect();
    let page = page_groups(&batches, &columns, &coded, &ranks, keys, &order, plan.limit)
        .map_err(|e| EngineError::backend(&def.id, e))?;
    let mut rows = page.rows;
    let limits = call.engine.limits();
    let cut = meta::cap_rows_within(&mut rows, limits.max_result_bytes, limits.max_result_tokens);
    Ok(GroupPage {
        columns,
        group_names,
        metric_columns,
        rows,
        total_groups: page.total,
        cut,
        beyond_i64: page.beyond_i64,
    })
}

/// What was counted on the way: records matched (before exploding), records without a part
/// per exploded field, and whether any condition applied to records.
struct Counted {
    matched: usize,
    without_value: Vec<(String, u64)>,
    row_filters: bool,
    /// The row sources of the records matched, when the backend reports them (a plugin).
    documents: Option<std::collections::BTreeSet<u32>>,
}

/// Cite: the warnings of this result, what the keys and metrics mean, the caveats of the
/// fields used, the hints, the call as resolved and the source, and the steps taken.
async fn cite(
    call: &Call<'_>,
    plan: &SummarizePlan,
    conditions: &[Expr],
    page: GroupPage,
    counted: Counted,
) -> Result<(SummaryResult, Provenance), EngineError> {
    let def = call.def();
    let (mut provenance, source_id) = call.provenance();
    warn_page(&mut provenance, &page, call.engine.limits());
    warn_gaps(&mut provenance, def, plan, &page);
    let (rows, total_groups, matched) = (page.rows, page.total_groups, counted.matched);
    let exploded = !plan.explode.is_empty();
    let field_metadata: Vec<_> = crate::compare::result_keys(plan)
        .iter()
        .map(|g| field_meta(&def.fields[*g]))
        .collect();
    let metrics: Vec<MetricMeta> = plan
        .metrics
        .iter()
        .flat_map(|m| compared(def, plan, metric_description(def, m)))
        .chain(ranks_described(def, plan))
        .collect();
    let mut context = meta::context(
        &mut provenance,
        def,
        &fields_used(def, plan),
        &plan.resolved_fields,
        &plan.notices,
        &call.engine.call.chosen,
    );
    if rows.len() < total_groups {
        provenance.warn(format!(
            "{} of {total_groups} groups returned (limit {}); raise limit or add having to see the rest",
            rows.len(),
            plan.limit
        ));
    }
    let asked = Asked {
        plan,
        filters: &plan.filters,
        conditions,
        ask_conditions: matched == 0 && counted.row_filters,
        nothing_matched: matched == 0,
    };
    call.cite(
        &mut provenance,
        &mut context,
        asked,
        echo(plan.to_json(def)),
        source_id.clone(),
        &plan.resolved_fields,
    )
    .await?;
    // What the records counted came from, as a query cites its rows' sources.
    if let Some(documents) = &counted.documents {
        let cited = meta::document_sources(&mut provenance, &call.prepared, &source_id, documents);
        context.source_refs.extend(cited);
    }
    cite_steps(
        &mut provenance,
        def,
        plan,
        &Counts {
            matched,
            groups: total_groups,
            returned: rows.len(),
        },
        &page.group_names,
        &page.metric_columns,
    );
    let data = SummaryResult {
        dataset_id: def.id.clone(),
        dataset_version: call.ds.version.clone(),
        columns: page.columns,
        returned: rows.len(),
        rows,
        total_group_count: total_groups,
        truncated: page.cut.is_some(),
        total_records: matched,
        pre_explode_records: exploded.then_some(matched),
        records_without_value: exploded.then_some(CountsByName(counted.without_value)),
        field_metadata,
        metrics,
        context,
    };
    Ok((data, provenance))
}

/// The page's caveats, as warnings: cut to a budget, sums past the range of 64-bit integers.
fn warn_page(provenance: &mut Provenance, page: &GroupPage, limits: &crate::limits::Limits) {
    if let Some(cut) = page.cut {
        provenance.warn(match cut {
            meta::Cut::Tokens => format!(
                "the result was cut to {} groups to fit its context budget (about {} tokens); order by what matters (order_by), add having or filters, or lower limit",
                page.rows.len(),
                limits.max_result_tokens
            ),
            meta::Cut::Bytes => format!(
                "the result was cut to {} groups to stay within the result size budget ({} bytes); add filters or having, or lower limit",
                page.rows.len(),
                limits.max_result_bytes
            ),
        });
    }
    for column in &page.beyond_i64 {
        provenance.warn(format!(
            "`{column}` exceeds the range of 64-bit integers in some groups; those totals are shown as floating-point numbers, exact to about 15 significant digits"
        ));
    }
}

/// What the page leaves null or reads at another period, said: a metric null in a group (no
/// record of it has a value: an aggregate over no value is null, never 0), and a `last:`
/// value of an earlier period than the latest any group's is of.
fn warn_gaps(
    provenance: &mut Provenance,
    def: &tally_semantic::DatasetDef,
    plan: &SummarizePlan,
    page: &GroupPage,
) {
    let at = |name: &str| page.columns.iter().position(|c| c == name);
    let keys: Vec<usize> = page.group_names.iter().filter_map(|g| at(g)).collect();
    let label = |row: &[Value]| meta::group_label(keys.iter().map(|k| &row[*k]));
    let (listed, groups) = (meta::listed, meta::groups);
    for m in &plan.metrics {
        if let Some((a, Some(b))) = measures_of(def, m)
            && let (Some(pa), Some(pb)) = (&def.fields[a].period, &def.fields[b].period)
            && pa != pb
        {
            let how = if matches!(m, Metric::AvgComputed(_)) {
                "divides"
            } else {
                "weights"
            };
            provenance.warn(format!(
                "`{}` {how} {} of {pa} by {} of {pb}: the measures are of different periods (their declared `period`), so the result mixes them",
                m.column(def),
                def.fields[a].name,
                def.fields[b].name
            ));
        }
        if matches!(m, Metric::Count) {
            continue;
        }
        let name = m.column(def);
        let field = match (m.field(), measures_of(def, m)) {
            (Some(f), _) => def.fields[f].name.clone(),
            (None, Some((a, Some(b)))) => format!(
                "{} over {} (or whose {1} sums to 0)",
                def.fields[a].name, def.fields[b].name
            ),
            _ => "its condition field".to_string(),
        };
        // The metric's columns: itself, or its value at each period compared.
        for (i, column) in page.columns.iter().enumerate() {
            if *column != name && !column.starts_with(&format!("{name} (")) {
                continue;
            }
            let nulls: Vec<String> = page
                .rows
                .iter()
                .filter(|r| r[i].is_null())
                .map(|r| label(r))
                .collect();
            if nulls.is_empty() {
                continue;
            }
            if keys.is_empty() {
                provenance.warn(format!(
                    "`{column}` is null: no record read has a value of {field} (an aggregate over no value is null, not 0)"
                ));
            } else {
                provenance.warn(format!(
                    "`{column}` is null for {} of {} shown, which have no record with a value of {field} (an aggregate over no value is null, not 0): {}",
                    nulls.len(),
                    groups(page.rows.len()),
                    listed(nulls)
                ));
            }
        }
        let Some(period_column) = m.period_column(def).and_then(|c| at(&c)) else {
            continue;
        };
        let periods: Vec<&Value> = page.rows.iter().map(|r| &r[period_column]).collect();
        let latest = periods
            .iter()
            .filter(|p| !p.is_null())
            .max_by(|a, b| crate::json::compare_values(a, b));
        let Some(latest) = latest.copied() else {
            continue;
        };
        let earlier: Vec<String> = page
            .rows
            .iter()
            .filter(|r| !r[period_column].is_null() && r[period_column] != *latest)
            .map(|r| {
                format!(
                    "{} {}",
                    label(r),
                    crate::json::value_text(&r[period_column])
                )
            })
            .collect();
        if !earlier.is_empty() {
            provenance.warn(format!(
                "`{name}` is not of {} for {} of {} shown: each is at its own last period with a value of {field} (`{name} period`): {}",
                crate::json::value_text(latest),
                earlier.len(),
                groups(page.rows.len()),
                listed(earlier)
            ));
        }
    }
}

/// The fields a summary uses: its group keys, the fields of its filters and of its metrics.
fn fields_used(def: &tally_semantic::DatasetDef, plan: &SummarizePlan) -> Vec<FieldId> {
    let mut used: Vec<FieldId> = plan.group_by.clone();
    used.extend(plan.filters.iter().map(|f| f.field));
    for m in &plan.metrics {
        match m {
            Metric::AvgComputed(k) => used.extend(def.computed_measures[*k].fields()),
            other => used.extend(other.field()),
        }
    }
    used
}

/// Whether the call's physical work is sent to a cluster (whose executors rebuild Tally's
/// functions by name: none that holds this server's memory can go there).
fn on_cluster(call: &Call<'_>) -> bool {
    call.ctx
        .state()
        .config()
        .get_extension::<tally_storage::cluster::ClusterCall>()
        .is_some()
}

/// How an exploded field is split into parts numbered by code.
enum Split {
    /// A prepared table's index of the field's parts.
    Index(std::sync::Arc<tally_storage::udf::PartIndex>),
    /// Data read from its files on this server: parts numbered as the call meets them.
    Streamed {
        codes: std::sync::Arc<StreamCodes>,
        separator: String,
    },
}

impl Split {
    /// The codes of each record's parts (a list).
    fn codes(&self, planner: &Planner<'_>, field: FieldId) -> Expr {
        match self {
            Split::Index(index) => planner.functions.part_codes(planner.column(field), index),
            Split::Streamed { codes, separator } => {
                planner
                    .functions
                    .stream_part_codes(planner.column(field), codes, separator, false)
            }
        }
    }

    /// How many parts each record has.
    fn count(&self, planner: &Planner<'_>, field: FieldId) -> Expr {
        match self {
            Split::Index(index) => planner.functions.part_count(planner.column(field), index),
            Split::Streamed { codes, separator } => {
                planner
                    .functions
                    .stream_part_codes(planner.column(field), codes, separator, true)
            }
        }
    }

    /// The values of the codes, as a group key.
    fn key_codes(&self) -> KeyCodes {
        match self {
            Split::Index(index) => KeyCodes::Fixed(Codes::of(index.parts.clone())),
            Split::Streamed { codes, .. } => KeyCodes::Streamed(std::sync::Arc::clone(codes)),
        }
    }
}

/// How a group key is grouped on integer codes.
enum KeyCodes {
    /// The codes of a prepared table's code column (or of an index's parts).
    Fixed(Codes),
    /// Codes numbered by the call itself as it reads text from the files.
    Streamed(std::sync::Arc<StreamCodes>),
}

/// Per group key, the values of its code column when it is grouped on codes, and the key
/// expressions. A field with an integer code column is grouped on its codes (integers hash
/// far faster than strings) and the codes are turned back into values afterwards; a `having`
/// on the key itself needs the text, so then the text is grouped.
/// How a summary's group keys may be read.
#[derive(Debug, Clone, Copy)]
struct KeyRead {
    /// A `having` tests the keys themselves (grouped on their text).
    having_on_keys: bool,
    /// The plan is sent to a cluster (no call's code tables there).
    on_cluster: bool,
    /// The table read has the streamed table's dictionary columns (not groups made first).
    dictionaries: bool,
}

#[allow(clippy::type_complexity)]
fn group_keys(
    planner: &Planner<'_>,
    prepared: &tally_storage::dataset::Prepared,
    plan: &SummarizePlan,
    read: KeyRead,
    indexes: &[Option<Split>],
    lookups: &crate::lookup::Lookups,
) -> (Vec<Option<KeyCodes>>, Vec<Expr>) {
    let KeyRead {
        having_on_keys,
        on_cluster,
        dictionaries,
    } = read;
    let def = planner.def;
    let part_of = |field: FieldId| {
        plan.explode
            .iter()
            .position(|e| *e == field)
            .map(explode_col)
    };
    let coded: Vec<Option<KeyCodes>> = plan
        .group_by
        .iter()
        .map(|g| match plan.explode.iter().position(|e| e == g) {
            // Exploded on part codes: the codes of the field's parts.
            Some(k) => indexes[k].as_ref().map(Split::key_codes),
            None if having_on_keys || lookups.contains_key(g) => None,
            None => match prepared.codes(*g) {
                Some(codes) => Some(KeyCodes::Fixed(codes)),
                // Text read from its files, on this server: numbered as the call meets it.
                None if !prepared.is_prepared()
                    && !on_cluster
                    && !def.fields[*g].data_type.is_numeric() =>
                {
                    Some(KeyCodes::Streamed(std::sync::Arc::new(
                        StreamCodes::default(),
                    )))
                }
                None => None,
            },
        })
        .collect();
    let group_exprs: Vec<Expr> = plan
        .group_by
        .iter()
        .zip(&coded)
        .map(|(&g, code)| {
            let text = !def.fields[g].data_type.is_numeric();
            let name = &def.fields[g].name;
            // A missing value (null or blank) is the key null, never "" (which reads like a
            // value).
            if let Some(lookup) = lookups.get(&g) {
                return crate::lookup::value(planner, lookup).alias(name);
            }
            match (part_of(g), code) {
                // Exploded parts are never empty.
                (Some(col), _) => ident(col).alias(name),
                (None, Some(KeyCodes::Fixed(_))) => ident(code_column(g)).alias(name),
                // Read as a dictionary array where the files store it so (a condition on
                // the field has it read as text: conditions are planned on the text).
                (None, Some(KeyCodes::Streamed(codes))) => {
                    let text = if dictionaries
                        && prepared.dictionary_of(g)
                        && !plan.filters.iter().any(|f| f.field == g)
                    {
                        ident(dictionary_column(g))
                    } else {
                        planner.column(g)
                    };
                    planner.functions.code(text, codes).alias(name)
                }
                // A text column without missing values is its own key: no copy of every value.
                (None, None) if text && !prepared.has_missing(g).unwrap_or(true) => {
                    planner.column(g).alias(name)
                }
                (None, None) if text => {
                    datafusion::functions::expr_fn::nullif(planner.column(g), lit("")).alias(name)
                }
                // A number is its own key, returned as a number (a year is `2020`, not "2020").
                (None, None) => planner.column(g).alias(name),
            }
        })
        .collect();
    (coded, group_exprs)
}

/// How many records matched, how many groups they made and how many were returned.
#[derive(Debug, Clone, Copy)]
struct Counts {
    matched: usize,
    groups: usize,
    returned: usize,
}

/// The transformations a summary cites: the filter, then the aggregation in words (explode,
/// grouping, metrics, having, order, counts).
fn cite_steps(
    provenance: &mut Provenance,
    def: &tally_semantic::DatasetDef,
    plan: &SummarizePlan,
    counts: &Counts,
    group_names: &[String],
    metric_columns: &[String],
) {
    if !plan.filters.is_empty() {
        provenance.step(
            TransformationType::Filter,
            format!(
                "kept records where {}: {} matched",
                plan.filters
                    .iter()
                    .map(|f| f.describe(def))
                    .collect::<Vec<_>>()
                    .join(" and "),
                counts.matched
            ),
        );
    }
    let mut agg = Vec::new();
    if !plan.explode.is_empty() {
        agg.push(format!(
            "split {} into their parts (one row per part; records without a value form no group and are counted in records_without_value)",
            plan.explode.iter().map(|e| def.fields[*e].name.clone()).collect::<Vec<_>>().join(", ")
        ));
    }
    agg.push(if plan.group_by.is_empty() {
        "aggregated all matching records into one row".to_string()
    } else {
        format!(
            "grouped by {} (a missing value is the key null)",
            group_names.join(", ")
        )
    });
    agg.push(format!("computed {}", metric_columns.join(", ")));
    match &plan.compare {
        Some(tally_semantic::resolve::Compare::Periods { field, from, to, .. }) => agg.push(format!(
            "set {t} {} and {t} {} side by side per group: each metric at both, the difference ({1} − {0}) and the percent change (of the {0} value)",
            from.text(),
            to.text(),
            t = def.fields[*field].name
        )),
        Some(tally_semantic::resolve::Compare::Previous { field, .. }) => agg.push(format!(
            "compared each {t} with the group's previous {t} in the answer: the difference and the percent change",
            t = def.fields[*field].name
        )),
        None => {}
    }
    if plan.rank {
        agg.push("ranked the groups by the first metric, largest first".to_string());
    }
    if !plan.having.is_empty() {
        agg.push(format!(
            "kept groups where {}",
            plan.having
                .iter()
                .map(HavingFilter::describe)
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    let ordered = if plan.order_by.is_empty() {
        let first = plan
            .metrics
            .first()
            .map(|m| m.column(def))
            .unwrap_or_default();
        // Two periods side by side are ordered by the later one.
        let first = match &plan.compare {
            Some(c @ tally_semantic::resolve::Compare::Periods { .. }) => {
                c.columns(&first, false).pop().unwrap_or(first)
            }
            _ => first,
        };
        format!("{first} descending")
    } else {
        plan.order_by
            .iter()
            .map(|s| {
                format!(
                    "{} {}",
                    s.column,
                    if s.descending {
                        "descending"
                    } else {
                        "ascending"
                    }
                )
            })
            .collect::<Vec<_>>()
            .join(", then ")
    };
    agg.push(format!(
        "ordered by {ordered}, ties by group key; {} groups, {} returned",
        counts.groups, counts.returned
    ));
    provenance.step(TransformationType::Aggregate, agg.join("; "));
}

/// Before exploding: the records matched, per exploded field the records without a part
/// (they form no group; they are reported), and the rows exploding would make — every
/// combination of the parts of several fields is a row, so a few long cells can multiply
/// into billions; past the cap the call stops here, before any row is made. One pass; only
/// when exploding.
async fn count_before_exploding(
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

/// A metric's description as the columns `compare` makes of it: its value at each period,
/// its change and its percent change.
fn compared(
    def: &tally_semantic::DatasetDef,
    plan: &SummarizePlan,
    meta: MetricMeta,
) -> Vec<MetricMeta> {
    use tally_semantic::resolve::{Compare, ValueKind};
    let Some(compare) = &plan.compare else {
        return vec![meta];
    };
    let t = &def.fields[compare.field()].name;
    let names = compare.columns(&meta.column, true);
    let excluded = meta
        .null_excluded_column
        .as_ref()
        .map(|c| compare.columns(c, false));
    let (values, earlier, later): (Vec<(String, String)>, String, String) = match compare {
        Compare::Periods { from, to, .. } => (
            vec![
                (
                    names[0].clone(),
                    format!("{} at {t} {}", meta.description, from.text()),
                ),
                (
                    names[1].clone(),
                    format!("{} at {t} {}", meta.description, to.text()),
                ),
            ],
            names[0].clone(),
            names[1].clone(),
        ),
        Compare::Previous { .. } => (
            vec![(names[0].clone(), meta.description.clone())],
            format!("{} of the group's previous {t} in the answer", meta.column),
            meta.column.clone(),
        ),
    };
    let n = values.len();
    let mut out: Vec<MetricMeta> = values
        .into_iter()
        .enumerate()
        .map(|(i, (column, description))| MetricMeta {
            column,
            description,
            null_excluded_column: excluded
                .as_ref()
                .and_then(|e| e.get(i.min(e.len() - 1)).cloned()),
            ..meta.clone()
        })
        .collect();
    out.push(MetricMeta {
        column: names[n].clone(),
        description: format!("{later} − {earlier} (null where either is)"),
        rounded_to_decimals: meta.rounded_to_decimals,
        null_excluded_column: None,
        kind: ValueKind::Change,
        unit: meta.unit.clone(),
        aggregation: None,
        period: None,
    });
    out.push(MetricMeta {
        column: names[n + 1].clone(),
        description: format!(
            "({later} − {earlier}) / |{earlier}| × 100 (null where the earlier value is 0 or either is null)"
        ),
        rounded_to_decimals: Some(AVG_DECIMALS),
        null_excluded_column: None,
        kind: ValueKind::PercentChange,
        unit: Some("%".into()),
        aggregation: None,
        period: None,
    });
    out
}

/// The rank columns, described.
fn ranks_described(def: &tally_semantic::DatasetDef, plan: &SummarizePlan) -> Vec<MetricMeta> {
    use tally_semantic::resolve::{Compare, ValueKind};
    if !plan.rank {
        return Vec::new();
    }
    let first = plan
        .metrics
        .first()
        .map(|m| m.column(def))
        .unwrap_or_default();
    let time = def.time_field().filter(|t| plan.group_by.contains(t));
    let of: Vec<String> = match &plan.compare {
        Some(c @ Compare::Periods { .. }) => c.columns(&first, false),
        _ => vec![first],
    };
    Compare::rank_columns(plan.compare.as_ref())
        .into_iter()
        .zip(of)
        .map(|(column, of)| MetricMeta {
            column,
            description: format!(
                "place of the group by {of}, largest first (1); ties share a place; {}",
                match (&plan.compare, time) {
                    (None | Some(Compare::Previous { .. }), Some(t)) =>
                        format!("among the groups of the same {}", def.fields[t].name),
                    _ => "among all groups".to_string(),
                }
            ),
            rounded_to_decimals: None,
            null_excluded_column: None,
            kind: ValueKind::Rank,
            unit: None,
            aggregation: None,
            period: None,
        })
        .collect()
}

fn metric_description(def: &tally_semantic::DatasetDef, m: &Metric) -> MetricMeta {
    let column = m.column(def);
    let (description, rounding) = match m {
        Metric::Count => (
            "number of records in the group (of parts, when exploded)".to_string(),
            None,
        ),
        Metric::Sum(f) => (
            format!(
                "sum of {} over records where it is not null (null when no record has a value)",
                def.fields[*f].name
            ),
            None,
        ),
        Metric::Avg(f) => (
            match def.fields[*f].weight {
                Some(w) => format!(
                    "mean of {} weighted by {}: sum({0} × {1}) / sum({1}) over records where both are not null",
                    def.fields[*f].name, def.fields[w].name
                ),
                None => format!(
                    "mean of {} over records where it is not null",
                    def.fields[*f].name
                ),
            },
            Some(AVG_DECIMALS),
        ),
        Metric::Min(f) => (format!("smallest {}", def.fields[*f].name), None),
        Metric::Max(f) => (format!("largest {}", def.fields[*f].name), None),
        Metric::Last(f) => (
            format!(
                "sum of {0} over the records of the group's latest period with a value of {0} (each group at its own; `last:{0} period` says which; null when no record has a value)",
                def.fields[*f].name
            ),
            None,
        ),
        Metric::AvgComputed(k) => {
            let cm = &def.computed_measures[*k];
            (cm.formula_text(&def.fields), Some(RATIO_DECIMALS))
        }
    };
    MetricMeta {
        column,
        description,
        rounded_to_decimals: rounding,
        null_excluded_column: m.null_excluded_column(def),
        kind: m.value_kind(def),
        unit: m.unit(def).map(str::to_owned),
        aggregation: m.field().and_then(|f| def.fields[f].aggregation),
        period: metric_period(def, m),
    }
}

/// The period a metric's measures are declared to be of (`period:`): the measure's, a rate's
/// with its weight's, a ratio's numerator's with its denominator's (`2020 / 2015` when they
/// differ). `None` when none is declared.
fn metric_period(def: &tally_semantic::DatasetDef, m: &Metric) -> Option<String> {
    let (a, b) = measures_of(def, m)?;
    let pa = def.fields[a].period.clone();
    let pb = b.and_then(|b| def.fields[b].period.clone());
    match (pa, pb) {
        (Some(x), Some(y)) if x != y => Some(format!("{x} / {y}")),
        (Some(x), _) | (None, Some(x)) => Some(x),
        (None, None) => None,
    }
}

/// The measure a metric reads, and the second one it is weighted or divided by.
fn measures_of(def: &tally_semantic::DatasetDef, m: &Metric) -> Option<(FieldId, Option<FieldId>)> {
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
