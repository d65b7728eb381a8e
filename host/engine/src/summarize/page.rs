//! Shape: `having` on the groups, their order (the first metric descending unless asked
//! otherwise, then the keys), and one page of them turned into JSON within the budgets.

use datafusion::arrow::array::{
    Array as _, ArrayRef, Decimal128Array, Int64Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::datatypes::DataType;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, cast, lit};
use datafusion::prelude::ident;
use serde_json::Value;
use std::ops::Not;
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::{HavingFilter, SummarizePlan};
use tally_storage::dataset::Codes;

use crate::call::Call;
use crate::compare::Grouped;
use crate::error::EngineError;
use crate::meta;
use crate::plan::{Planner, conjunction};

/// Hidden result column: records per group (before exploding, the matched total is its sum).
pub(super) const ROWS_COL: &str = "__tally_rows";

/// The records a grouping counted: the sum of its per-group counts.
pub(super) fn records_in(batches: &[RecordBatch]) -> usize {
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

/// A page of groups, shaped for the result.
pub(super) struct GroupPage {
    pub(super) columns: Vec<String>,
    pub(super) group_names: Vec<String>,
    pub(super) metric_columns: Vec<String>,
    pub(super) rows: Vec<Vec<Value>>,
    pub(super) total_groups: usize,
    pub(super) cut: Option<meta::Cut>,
    pub(super) beyond_i64: Vec<String>,
}

/// Shape: `having`, then the order asked for (else the first metric descending; then the
/// group keys), the page, and the budgets.
pub(super) async fn order_and_page(
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
