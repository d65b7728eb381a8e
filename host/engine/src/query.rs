//! `query_records`: matching records, a page at a time, in a deterministic order.

use datafusion::datasource::MemTable;
use datafusion::logical_expr::SortExpr;
use datafusion::prelude::{DataFrame, ident};
use serde_json::{Value, json};
use tally_semantic::definition::FieldId;
use tally_semantic::resolve::QueryPlan;

use crate::Engine;
use crate::cursor;
use crate::dataset::{Dataset, ROW_COL};
use crate::envelope::{Output, Transformation, TransformationType};
use crate::error::EngineError;
use crate::meta::{self, attach_common, echo, field_meta, is_uninformative, unknown_value_hints};
use crate::plan::{Planner, conjunction};

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
) -> Result<Output, EngineError> {
    let def = &ds.def;
    let prepared = ds.prepared_for(engine, &ds.pushdown(&plan.filters)).await?;
    let value_warnings =
        crate::values::match_data(&prepared, def, &mut plan.filters, &mut plan.resolved_fields);
    let planner = Planner {
        def,
        functions: engine.functions(),
    };

    let mut conditions = Vec::new();
    for f in &plan.filters {
        conditions.push(planner.filter(f)?);
    }
    if let Some(q) = &plan.q {
        conditions.push(planner.search(q, &plan.search_fields));
    }
    let ctx = engine.call_context()?;
    let base = ctx.read_table(prepared.table.clone())?;
    let names: Vec<String> = plan
        .select
        .iter()
        .map(|i| def.fields[*i].name.clone())
        .collect();
    // The filter runs once: matching records (only the columns needed) are collected, counted,
    // then sorted and paged; without conditions the table itself is paged.
    let (source, total) = match conjunction(conditions.clone()) {
        None => (base.clone(), prepared.rows),
        Some(e) => {
            let mut needed: Vec<String> = names.clone();
            for s in &plan.order_by {
                let n = &def.fields[s.field].name;
                if !needed.contains(n) {
                    needed.push(n.clone());
                }
            }
            needed.push(ROW_COL.to_string());
            let filtered = base
                .clone()
                .filter(e)?
                .select(needed.iter().map(ident).collect::<Vec<_>>())?;
            let schema = std::sync::Arc::new(filtered.schema().as_arrow().clone());
            let batches = filtered
                .collect()
                .await
                .map_err(|e| EngineError::computing(&def.id, e))?;
            let total = batches.iter().map(|b| b.num_rows()).sum();
            let table = MemTable::try_new(schema, vec![batches])
                .map_err(|e| EngineError::computing(&def.id, e))?;
            (ctx.read_table(std::sync::Arc::new(table))?, total)
        }
    };

    let fingerprint = cursor::fingerprint(&identity(&plan, def));
    let offset = match &plan.cursor {
        Some(c) => cursor::decode(c, &ds.version, &fingerprint, total)?,
        None => 0,
    };

    let mut sorts: Vec<SortExpr> = plan
        .order_by
        .iter()
        .map(|s| planner.column(s.field).sort(!s.descending, false))
        .collect();
    sorts.push(ident(ROW_COL).sort(true, false));
    let page = source
        .sort(sorts)?
        .limit(offset, Some(plan.limit))?
        .select(
            names
                .iter()
                .map(ident)
                .chain(prepared.row_sources.is_some().then(|| ident(ROW_COL)))
                .collect::<Vec<_>>(),
        )?
        .collect()
        .await
        .map_err(|e| EngineError::computing(&def.id, e))?;
    let mut rows = crate::json::rows(&page, &names);
    let cut = meta::cap_rows_within(
        &mut rows,
        engine.limits().max_result_bytes,
        engine.limits().max_result_tokens,
    );
    let returned = rows.len();
    let mut page_rows: Vec<u64> = crate::json::rows(&page, &[ROW_COL.to_string()])
        .into_iter()
        .filter_map(|r| r.first().and_then(Value::as_u64))
        .collect();
    page_rows.truncate(returned);
    let next_offset = offset + returned;
    let next_cursor =
        (next_offset < total).then(|| cursor::encode(&ds.version, &fingerprint, next_offset));

    // Columns that say nothing on this page are left out when the caller did not choose the
    // columns, so a model is not fed 30 empty fields; the omission is reported.
    let mut columns = names.clone();
    let mut omitted: Vec<Value> = Vec::new();
    // Left out because empty on this page (said in a warning of their own).
    let mut empty: Vec<String> = Vec::new();
    if !select_given && !rows.is_empty() {
        let keep: Vec<bool> = (0..columns.len())
            .map(|c| {
                Some(columns[c].as_str()) == def.id_field.as_deref()
                    || !rows
                        .iter()
                        .all(|r| is_uninformative(&r[c], &def.generic_values))
            })
            .collect();
        for (c, k) in keep.iter().enumerate() {
            if !k {
                omitted.push(json!({ "field": columns[c], "reason": "every value on this page is empty or a generic value" }));
                empty.push(columns[c].clone());
            }
        }
        columns = columns
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(n, _)| n.clone())
            .collect();
        rows = rows
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .zip(&keep)
                    .filter(|(_, k)| **k)
                    .map(|(v, _)| v)
                    .collect()
            })
            .collect();
    }

    let (mut out, source_id) = meta::dataset_output(ds, &prepared);
    out.set("columns", &columns);
    out.set("rows", &rows);
    out.set("total", total);
    out.set("offset", offset);
    out.set("returned", returned);
    out.set("next_cursor", &next_cursor);
    if let Some(cut) = cut {
        out.set("truncated", true);
        out.warn(match cut {
            meta::Cut::Tokens => format!(
                "the page was cut to {returned} rows to fit the result's context budget (about {} tokens); pass next_cursor for the rest, or select fewer columns",
                engine.limits().max_result_tokens
            ),
            meta::Cut::Bytes => format!(
                "the page was cut to {returned} rows to stay within the result size budget ({} bytes); pass next_cursor for the rest",
                engine.limits().max_result_bytes
            ),
        });
    }
    let meta: Vec<_> = columns
        .iter()
        .filter_map(|n| def.field(n))
        .map(field_meta)
        .collect();
    out.set("field_metadata", &meta);
    if !select_given {
        // The default projection leaves columns out: named, with how to get them.
        let hidden: Vec<&str> = def
            .fields
            .iter()
            .enumerate()
            .filter(|(i, _)| !plan.select.contains(&FieldId::at(*i)))
            .map(|(_, f)| f.name.as_str())
            .collect();
        if !hidden.is_empty() {
            out.warn(format!(
                "{} of {} columns are not shown by default: {}; name them in select to get them",
                hidden.len(),
                def.fields.len(),
                hidden.join(", ")
            ));
            for name in hidden {
                omitted.push(json!({ "field": name, "reason": "not among the default columns (id, names, dimensions, fields the call uses); name it in select" }));
            }
        }
    }
    if !omitted.is_empty() {
        if !empty.is_empty() {
            out.warn(format!(
                "{} column(s) left out because every value on this page is empty or generic: {}",
                empty.len(),
                empty.join(", ")
            ));
        }
        out.set("omitted_columns", &omitted);
    }
    let mut used: Vec<FieldId> = plan.select.clone();
    used.extend(plan.filters.iter().map(|f| f.field));
    used.extend(plan.order_by.iter().map(|s| s.field));
    used.extend(plan.search_fields.iter().copied());
    attach_common(&mut out, def, &used, &plan.resolved_fields, &plan.notices);
    if next_cursor.is_some() {
        out.warn(format!(
            "{returned} of {total} matching records returned; pass next_cursor for the next page"
        ));
    }
    let conditions_made = !plan.filters.is_empty() || plan.q.is_some();
    let hints = Hints {
        engine,
        ds,
        prepared: &prepared,
        planner: &planner,
        ctx: &ctx,
        base: &base,
    };
    hints
        .attach(
            &mut out,
            &plan,
            &plan.filters,
            &conditions,
            total == 0 && conditions_made,
            total == 0,
        )
        .await?;
    let mut echoed = echo(plan.to_json(def));
    if let (false, Some(m)) = (select_given, echoed.as_object_mut()) {
        m.remove("select");
    }
    out.set("parameters", echoed);
    for w in value_warnings {
        out.warn(w);
    }
    out.set("sourceRefs", [&source_id]);
    if let Some(per_row) = meta::row_source_refs(&mut out, &prepared, &source_id, &page_rows) {
        out.set("rowSourceRefs", per_row);
    }

    meta::read_and_normalized(&mut out, def, &prepared, &plan.resolved_fields);
    cite_steps(&mut out, def, &plan, total, offset, returned);
    Ok(out)
}

/// The filter transformation a page of records cites: the conditions and the search in
/// words, how many matched, which were returned and in what order.
fn cite_steps(
    out: &mut Output,
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
    out.transformations.push(Transformation::new(
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
    ));
}

/// What a call that found nothing (or named values the data lacks) is told: the nearest
/// values of a field for a value it does not hold, and which condition excludes everything.
/// Shared by query_records and summarize_records.
pub struct Hints<'a> {
    pub engine: &'a Engine,
    pub ds: &'a Dataset,
    pub prepared: &'a crate::dataset::Prepared,
    pub planner: &'a Planner<'a>,
    pub ctx: &'a datafusion::prelude::SessionContext,
    /// The call's table before its conditions.
    pub base: &'a DataFrame,
}

impl std::fmt::Debug for Hints<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hints")
            .field("dataset", &self.ds.def.id)
            .finish_non_exhaustive()
    }
}

impl Hints<'_> {
    /// Warns and sets `hints`: value hints (`nothing_matched` says whether the call found
    /// nothing) and, when `ask_conditions`, which single condition excludes everything.
    pub async fn attach(
        &self,
        out: &mut Output,
        plan: &impl HasConditions,
        filters: &[tally_semantic::resolve::Filter],
        conditions: &[datafusion::logical_expr::Expr],
        ask_conditions: bool,
        nothing_matched: bool,
    ) -> Result<(), EngineError> {
        let def = &self.ds.def;
        let mut hints = unknown_value_hints(self.prepared, def, filters, nothing_matched);
        if ask_conditions {
            // Conditions the backend applied itself shaped the table searched; which
            // condition excludes everything is asked of all the data.
            let all = if self.prepared.pushed.is_empty() {
                self.base.clone()
            } else {
                self.ctx
                    .read_table(self.ds.prepared(self.engine).await?.table.clone())?
            };
            hints.extend(zero_hit_hints(self.planner, plan, &all, conditions).await?);
        }
        if !hints.is_empty() {
            for h in &hints {
                out.warn(h.clone());
            }
            out.set("hints", &hints);
        }
        Ok(())
    }
}

/// When nothing matched: which single condition, if dropped, would let records through.
pub async fn zero_hit_hints(
    planner: &Planner<'_>,
    plan_filters: &impl HasConditions,
    base: &DataFrame,
    conditions: &[datafusion::logical_expr::Expr],
) -> Result<Vec<String>, EngineError> {
    let labels = plan_filters.labels(planner.def);
    let mut hints = Vec::new();
    if conditions.len() == 1 {
        hints.push(format!(
            "no record matches {}; loosen or remove it",
            labels[0]
        ));
        return Ok(hints);
    }
    for (i, label) in labels.iter().enumerate() {
        let others: Vec<_> = conditions
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, e)| e.clone())
            .collect();
        let df = match conjunction(others) {
            Some(e) => base.clone().filter(e)?,
            None => base.clone(),
        };
        let n = df.count().await?;
        if n > 0 {
            hints.push(format!(
                "without {label} the other conditions match {n} records"
            ));
        }
    }
    if hints.is_empty() {
        hints.push("no single condition explains the empty result; several conditions exclude every record".to_string());
    }
    Ok(hints)
}

/// Labels of a plan's conditions, in the order their expressions were built.
pub trait HasConditions {
    fn labels(&self, def: &tally_semantic::DatasetDef) -> Vec<String>;
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
