//! `query_records`: matching records, a page at a time, in a deterministic order.

use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, SortExpr};
use datafusion::prelude::ident;
use serde_json::Value;
use tally_semantic::definition::FieldId;
use tally_semantic::resolve::QueryPlan;

use crate::Engine;
use crate::call::{Asked, Call, HasConditions};
use crate::cursor;
use crate::dataset::{Dataset, ROW_COL};
use crate::envelope::{Provenance, TransformationType};
use crate::error::EngineError;
use crate::meta::{self, echo, field_meta, is_uninformative};
use crate::plan::conjunction;
use crate::results::{OmittedColumn, QueryResult};

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
    engine: &Engine,
    ds: &Dataset,
    mut plan: QueryPlan,
    select_given: bool,
) -> Result<(QueryResult, Provenance), EngineError> {
    let call = Call::open(engine, ds, &mut plan.filters, &mut plan.resolved_fields).await?;
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

/// Execute: the filter runs once; matching records (only the columns needed) are collected,
/// counted, then sorted and paged. Without conditions the table itself is paged.
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
    let (source, total) = match conjunction(conditions.to_vec()) {
        None => (call.base.clone(), call.prepared.rows),
        Some(e) => {
            let mut needed: Vec<String> = names.clone();
            for s in &plan.order_by {
                let n = &def.fields[s.field].name;
                if !needed.contains(n) {
                    needed.push(n.clone());
                }
            }
            needed.push(ROW_COL.to_string());
            let filtered = call
                .base
                .clone()
                .filter(e)?
                .select(needed.iter().map(ident).collect::<Vec<_>>())?;
            let schema = std::sync::Arc::new(filtered.schema().as_arrow().clone());
            let batches = filtered.collect().await.map_err(computing)?;
            let total = batches.iter().map(|b| b.num_rows()).sum();
            let table = MemTable::try_new(schema, vec![batches]).map_err(computing)?;
            (call.ctx.read_table(std::sync::Arc::new(table))?, total)
        }
    };

    let fingerprint = cursor::fingerprint(&identity(plan, def));
    let offset = match &plan.cursor {
        Some(c) => cursor::decode(c, &call.ds.version, &fingerprint, total)?,
        None => 0,
    };
    let mut sorts: Vec<SortExpr> = plan
        .order_by
        .iter()
        .map(|s| call.planner.column(s.field).sort(!s.descending, false))
        .collect();
    sorts.push(ident(ROW_COL).sort(true, false));
    let page = source
        .sort(sorts)?
        .limit(offset, Some(plan.limit))?
        .select(
            names
                .iter()
                .map(ident)
                .chain(call.prepared.row_sources.is_some().then(|| ident(ROW_COL)))
                .collect::<Vec<_>>(),
        )?
        .collect()
        .await
        .map_err(computing)?;
    let limits = call.engine.limits();
    let mut rows = crate::json::rows(&page, &names);
    let cut = meta::cap_rows_within(&mut rows, limits.max_result_bytes, limits.max_result_tokens);
    let mut row_numbers: Vec<u64> = crate::json::rows(&page, &[ROW_COL.to_string()])
        .into_iter()
        .filter_map(|r| r.first().and_then(Value::as_u64))
        .collect();
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
