//! `query_records`: matching records, a page at a time, in a deterministic order.

use datafusion::arrow::array::{AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::{Int64Type, UInt64Type};
use datafusion::functions_aggregate::count::count;
use datafusion::logical_expr::{Expr, lit};
use datafusion::prelude::ident;
use serde_json::Value;
use tally_semantic::definition::FieldId;
use tally_semantic::resolve::QueryPlan;

use crate::call::{Asked, Call, HasConditions};
use crate::context::Cx;
use crate::cursor;
use crate::envelope::{Provenance, TransformationType};
use crate::error::EngineError;
use crate::first_rows::{Order, first_rows, rows_at};
use crate::meta::{self, echo, field_meta, is_uninformative};
use crate::plan::conjunction;
use crate::results::{OmittedColumn, QueryResult};
use tally_storage::dataset::{Dataset, ROW_COL};

/// The part of a plan that identifies its result set and order (not its page size).
fn identity(plan: &QueryPlan, def: &tally_semantic::DatasetDef) -> Value {
    let mut v = plan.to_json(def);
    if let Some(m) = v.as_object_mut() {
        for k in ["limit", "cursor", "resolved_fields", "notices"] {
            m.remove(k);
        }
    }
    v
}

pub async fn run(
    engine: &Cx<'_>,
    ds: &Dataset,
    mut plan: QueryPlan,
    select_given: bool,
    call_made: &mut Value,
) -> Result<(QueryResult, Provenance), EngineError> {
    let mut order: Vec<_> = plan.order_by.iter().map(|s| s.field).collect();
    order.extend(plan.latest.map(|l| l.field));
    let call = Call::open(
        engine,
        ds,
        &mut plan.filters,
        &mut plan.resolved_fields,
        plan.as_of.as_deref(),
        crate::call::Reads {
            fields: &order,
            computed: 0,
            q: plan.q.as_ref().map(|_| plan.search_fields.as_slice()),
        },
    )
    .await?;
    crate::periods::hold_query(&call, &mut plan).await?;
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
    let mut conditions = Vec::new();
    for f in &plan.filters {
        conditions.push(call.planner.filter(f)?);
    }
    if let Some(q) = &plan.q {
        conditions.push(call.planner.search(q, &plan.search_fields));
    }
    let mut page = fetch(&call, &plan, &conditions).await?;
    let shown = shape(
        call.def(),
        select_given,
        &plan,
        std::mem::take(&mut page.rows),
    );
    cite(&call, &plan, select_given, &conditions, page, shown).await
}

/// One page of matching records, before its columns are chosen.
struct Page {
    rows: Vec<Vec<Value>>,
    /// The row number of each row (for per-row sources).
    row_numbers: Vec<u64>,
    total: usize,
    offset: usize,
    next_cursor: Option<String>,
    cut: Option<meta::Cut>,
}

/// Execute, in two steps. First the matching records are counted while only their order
/// (the `order_by` fields and the row number) is kept for the first `offset + limit` of them,
/// so what a call holds is a page's worth of keys however many records match. Then the
/// page's records are fetched by their row numbers: straight from a prepared table, or by a
/// scan for those rows.
async fn fetch(
    call: &Call<'_>,
    plan: &QueryPlan,
    conditions: &[Expr],
) -> Result<Page, EngineError> {
    let def = call.def();
    let computing = |e| EngineError::computing(&def.id, e);
    let names: Vec<String> = plan
        .select
        .iter()
        .map(|i| def.fields[*i].name.clone())
        .collect();
    let fingerprint = cursor::fingerprint(&identity(plan, def));
    // Bounded by the records there are before the matches are counted.
    let offset = match &plan.cursor {
        Some(c) => cursor::decode(c, &call.ds.version, &fingerprint, call.prepared.rows)?,
        None => 0,
    };
    let source = match conjunction(conditions.to_vec()) {
        None => call.base.clone(),
        Some(e) => call.base.clone().filter(e)?,
    };
    let mut keys: Vec<Expr> = plan
        .order_by
        .iter()
        .map(|s| call.planner.column(s.field))
        .collect();
    keys.push(ident(ROW_COL));
    let wanted = offset.saturating_add(plan.limit);
    // One aggregation: the count, and the first `wanted` keys, which each partition (each
    // task, on a cluster) keeps of its own rows before they are merged.
    let order = Order {
        n: wanted,
        descending: plan.order_by.iter().map(|s| s.descending).collect(),
    };
    let found = source
        .aggregate(
            vec![],
            vec![
                count(lit(1)).alias("matched"),
                first_rows(order, keys).alias("first"),
            ],
        )?
        .collect()
        .await
        .map_err(computing)?;
    let Some(found) = found.into_iter().find(|b| b.num_rows() > 0) else {
        return Err(EngineError::internal(
            "an aggregation without groups gave no row",
        ));
    };
    let total = found
        .column(0)
        .as_primitive_opt::<Int64Type>()
        .map(|c| usize::try_from(c.value(0)).unwrap_or(0))
        .ok_or_else(|| EngineError::internal("a count that is not a number"))?;
    if let Some(c) = &plan.cursor {
        // Now against the records that match.
        cursor::decode(c, &call.ds.version, &fingerprint, total)?;
    }
    let page_rows: Vec<u64> = match rows_at(found.column(1), 0).map_err(computing)? {
        Some(kept) => {
            let rows = kept
                .column(kept.num_columns() - 1)
                .as_primitive_opt::<UInt64Type>()
                .ok_or_else(|| EngineError::internal("row numbers that are not numbers"))?;
            rows.values()
                .iter()
                .skip(offset)
                .take(plan.limit)
                .copied()
                .collect()
        }
        None => Vec::new(),
    };
    let page = rows_of(call, &names, &page_rows).await?;
    let limits = call.engine.limits();
    let mut rows = crate::json::rows(&page, &names);
    let cut = meta::cap_rows_within(&mut rows, limits.max_result_bytes, limits.max_result_tokens);
    let mut row_numbers = page_rows;
    row_numbers.truncate(rows.len());
    let next_offset = offset + rows.len();
    let next_cursor =
        (next_offset < total).then(|| cursor::encode(&call.ds.version, &fingerprint, next_offset));
    Ok(Page {
        rows,
        row_numbers,
        total,
        offset,
        next_cursor,
        cut,
    })
}

/// The records with the given row numbers, in that order, with the named columns: taken
/// from a prepared table, else scanned for.
async fn rows_of(
    call: &Call<'_>,
    names: &[String],
    rows: &[u64],
) -> Result<Vec<RecordBatch>, EngineError> {
    let def = call.def();
    let fields: Vec<FieldId> = names
        .iter()
        .filter_map(|n| {
            def.fields
                .iter()
                .position(|f| f.name == *n)
                .map(FieldId::at)
        })
        .collect();
    if let Some(taken) = call.prepared.take_rows(rows, &fields, names) {
        return Ok(vec![taken?]);
    }
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let found = call
        .base
        .clone()
        .filter(ident(ROW_COL).in_list(rows.iter().map(|r| lit(*r)).collect(), false))?
        .select(
            names
                .iter()
                .map(ident)
                .chain(std::iter::once(ident(ROW_COL)))
                .collect::<Vec<_>>(),
        )?
        .collect()
        .await
        .map_err(|e| EngineError::computing(&def.id, e))?;
    // In the page's order.
    let Some(first) = found.first() else {
        return Ok(Vec::new());
    };
    let all =
        concat_batches(&first.schema(), &found).map_err(|e| EngineError::backend(&def.id, e))?;
    let numbers = all
        .column(all.num_columns() - 1)
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| EngineError::internal("row numbers that are not numbers"))?;
    let at: std::collections::HashMap<u64, u32> = numbers
        .values()
        .iter()
        .enumerate()
        .map(|(i, r)| (*r, i as u32))
        .collect();
    let order: UInt32Array = rows.iter().filter_map(|r| at.get(r).copied()).collect();
    Ok(vec![
        take_record_batch(&all, &order).map_err(|e| EngineError::backend(&def.id, e))?,
    ])
}

/// The columns a page shows and the ones it leaves out.
struct Shown {
    columns: Vec<String>,
    rows: Vec<Vec<Value>>,
    omitted: Vec<OmittedColumn>,
    /// Left out because empty on this page (said in a warning of their own).
    empty: Vec<String>,
}

/// Shape: columns that say nothing on this page are left out when the caller did not choose
/// the columns, so a model is not fed 30 empty fields; the omission is reported.
fn shape(
    def: &tally_semantic::DatasetDef,
    select_given: bool,
    plan: &QueryPlan,
    rows: Vec<Vec<Value>>,
) -> Shown {
    let columns: Vec<String> = plan
        .select
        .iter()
        .map(|i| def.fields[*i].name.clone())
        .collect();
    if select_given || rows.is_empty() {
        return Shown {
            columns,
            rows,
            omitted: Vec::new(),
            empty: Vec::new(),
        };
    }
    let keep: Vec<bool> = (0..columns.len())
        .map(|c| {
            Some(columns[c].as_str()) == def.id_field.as_deref()
                || !rows
                    .iter()
                    .all(|r| is_uninformative(&r[c], &def.generic_values))
        })
        .collect();
    let empty: Vec<String> = columns
        .iter()
        .zip(&keep)
        .filter(|(_, k)| !**k)
        .map(|(n, _)| n.clone())
        .collect();
    let omitted = empty
        .iter()
        .map(|field| OmittedColumn {
            field: field.clone(),
            reason: "every value on this page is empty or a generic value".into(),
        })
        .collect();
    let kept = |values: Vec<Value>| -> Vec<Value> {
        values
            .into_iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(v, _)| v)
            .collect()
    };
    Shown {
        columns: columns
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(n, _)| n.clone())
            .collect(),
        rows: rows.into_iter().map(kept).collect(),
        omitted,
        empty,
    }
}

/// Cite: the warnings of this page, what each shown field means, the caveats of the fields
/// used, the hints, the call as resolved and the sources, and the steps taken.
async fn cite(
    call: &Call<'_>,
    plan: &QueryPlan,
    select_given: bool,
    conditions: &[Expr],
    page: Page,
    mut shown: Shown,
) -> Result<(QueryResult, Provenance), EngineError> {
    let def = call.def();
    let limits = call.engine.limits();
    let (total, offset, returned) = (page.total, page.offset, shown.rows.len());
    let (mut provenance, source_id) = call.provenance();
    if let Some(cut) = page.cut {
        provenance.warn(match cut {
            meta::Cut::Tokens => format!(
                "the page was cut to {returned} rows to fit the result's context budget (about {} tokens); pass next_cursor for the rest, or select fewer columns",
                limits.max_result_tokens
            ),
            meta::Cut::Bytes => format!(
                "the page was cut to {returned} rows to stay within the result size budget ({} bytes); pass next_cursor for the rest",
                limits.max_result_bytes
            ),
        });
    }
    if !select_given {
        omitted_by_default(def, plan, &mut provenance, &mut shown.omitted);
    }
    if !shown.empty.is_empty() {
        provenance.warn(format!(
            "{} column(s) left out because every value on this page is empty or generic: {}",
            shown.empty.len(),
            shown.empty.join(", ")
        ));
    }
    let mut used: Vec<FieldId> = plan.select.clone();
    used.extend(plan.filters.iter().map(|f| f.field));
    used.extend(plan.order_by.iter().map(|s| s.field));
    used.extend(plan.search_fields.iter().copied());
    let mut context = meta::context(
        &mut provenance,
        def,
        &used,
        &plan.resolved_fields,
        &plan.notices,
        &call.engine.call.chosen,
    );
    if page.next_cursor.is_some() {
        provenance.warn(format!(
            "{returned} of {total} matching records returned; pass next_cursor for the next page"
        ));
    }
    let mut parameters = echo(plan.to_json(def));
    if let (false, Some(m)) = (select_given, parameters.as_object_mut()) {
        m.remove("select");
    }
    let asked = Asked {
        plan,
        filters: &plan.filters,
        conditions,
        ask_conditions: total == 0 && (!plan.filters.is_empty() || plan.q.is_some()),
        nothing_matched: total == 0,
    };
    call.cite(
        &mut provenance,
        &mut context,
        asked,
        parameters,
        source_id.clone(),
        &plan.resolved_fields,
    )
    .await?;
    context.row_source_refs = meta::row_source_refs(
        &mut provenance,
        &call.prepared,
        &source_id,
        &page.row_numbers,
    );
    cite_steps(&mut provenance, def, plan, total, offset, returned);
    let field_metadata = shown
        .columns
        .iter()
        .filter_map(|n| def.field(n))
        .map(field_meta)
        .collect();
    let data = QueryResult {
        dataset_id: def.id.clone(),
        dataset_version: call.ds.version.clone(),
        columns: shown.columns,
        rows: shown.rows,
        total,
        offset,
        returned,
        next_cursor: page.next_cursor,
        truncated: page.cut.is_some(),
        field_metadata,
        omitted_columns: shown.omitted,
        context,
    };
    Ok((data, provenance))
}

/// The columns the default projection leaves out, named with how to get them.
fn omitted_by_default(
    def: &tally_semantic::DatasetDef,
    plan: &QueryPlan,
    provenance: &mut Provenance,
    omitted: &mut Vec<OmittedColumn>,
) {
    let hidden: Vec<&str> = def
        .fields
        .iter()
        .enumerate()
        .filter(|(i, _)| !plan.select.contains(&FieldId::at(*i)))
        .map(|(_, f)| f.name.as_str())
        .collect();
    if hidden.is_empty() {
        return;
    }
    provenance.warn(format!(
        "{} of {} columns are not shown by default: {}; name them in select to get them",
        hidden.len(),
        def.fields.len(),
        hidden.join(", ")
    ));
    for name in hidden {
        omitted.push(OmittedColumn {
            field: name.to_string(),
            reason: "not among the default columns (id, names, dimensions, fields the call uses); name it in select".into(),
        });
    }
}

/// The filter transformation a page of records cites: the conditions and the search in
/// words, how many matched, which were returned and in what order.
fn cite_steps(
    provenance: &mut Provenance,
    def: &tally_semantic::DatasetDef,
    plan: &QueryPlan,
    total: usize,
    offset: usize,
    returned: usize,
) {
    let mut steps: Vec<String> = plan.filters.iter().map(|f| f.describe(def)).collect();
    if let Some(q) = &plan.q {
        let scope = if plan.search_fields.is_empty() {
            "any text field".to_string()
        } else {
            plan.search_fields
                .iter()
                .map(|i| def.fields[*i].name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        steps.push(format!("\"{q}\" appears in {scope} (case-insensitive)"));
    }
    let order = if plan.order_by.is_empty() {
        "in file order".to_string()
    } else {
        format!(
            "ordered by {} (nulls last, ties in file order)",
            plan.order_by
                .iter()
                .map(|s| format!(
                    "{}{}",
                    def.fields[s.field].name,
                    if s.descending { " descending" } else { "" }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    provenance.step(
        TransformationType::Filter,
        format!(
            "kept records where {}: {total} matched; returned records {}–{} {order}",
            if steps.is_empty() {
                "(no condition)".to_string()
            } else {
                steps.join(" and ")
            },
            if returned == 0 { offset } else { offset + 1 },
            offset + returned,
        ),
    );
}

impl HasConditions for QueryPlan {
    fn labels(&self, def: &tally_semantic::DatasetDef) -> Vec<String> {
        let mut out: Vec<String> = self
            .filters
            .iter()
            .map(|f| format!("`{}`", f.describe(def)))
            .collect();
        if let Some(q) = &self.q {
            out.push(format!("the search q=\"{q}\""));
        }
        out
    }
}
