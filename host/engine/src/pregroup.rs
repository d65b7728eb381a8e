//! A summary grouped before it explodes.
//!
//! Exploding a multi-value field record by record makes every record pay for its parts: a
//! prepared table looks up each record's parts on the codes of its index; data read from its
//! files was split cell by cell into parts numbered as the call read them (`StreamCodes`, in
//! this server's memory), and on a cluster's executors, which cannot carry those, into lists
//! of text parts unnested and grouped as text. A summary that only counts records needs less:
//! the records are grouped by the whole cells of the exploded fields (and the other keys),
//! each group with how many records it stands for (one job on a cluster); those groups (as
//! many as the distinct cells, far fewer than the records) are exploded on the server and
//! their records added by part. The count before exploding (records, records without a part,
//! what exploding adds) is read from the same groups, so a call through a cluster is one job
//! instead of two.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, lit};
use datafusion::prelude::DataFrame;
use tally_semantic::resolve::{Metric, SummarizePlan};

use crate::call::Call;
use crate::error::EngineError;

/// The column of a grouped table that holds how many records each of its rows stands for.
pub const WEIGHT: &str = "__tally_records";

/// Whether `plan` is summarized from groups made before exploding: `wanted` (data read from
/// its files, with no filter on parts), a summary that explodes, only counts, groups by no
/// looked-up field, and reads no plugin's row sources.
fn applies(
    call: &Call<'_>,
    plan: &SummarizePlan,
    lookups: &crate::lookup::Lookups,
    wanted: bool,
) -> bool {
    wanted
        && !plan.explode.is_empty()
        && plan.metrics.iter().all(|m| matches!(m, Metric::Count))
        && !plan.group_by.iter().any(|g| lookups.contains_key(g))
        && call.prepared.row_sources.is_none()
}

/// The records of `df` grouped by the whole cells of the exploded fields and the summary's
/// other keys (as [`crate::summarize`] keys them), with how many records each group stands
/// for ([`WEIGHT`]): one job on a cluster, its answer a table of this server's. `None` when
/// it does not apply ([`applies`]) or the groups pass the cap on a summary's groups: cells
/// nearly unique to their records gain nothing from being grouped first (and would all come
/// to the server), and are exploded record by record.
pub async fn grouped(
    call: &Call<'_>,
    plan: &SummarizePlan,
    df: &DataFrame,
    lookups: &crate::lookup::Lookups,
    wanted: bool,
) -> Result<Option<DataFrame>, EngineError> {
    if !applies(call, plan, lookups, wanted) {
        return Ok(None);
    }
    let def = call.def();
    let mut keys: Vec<Expr> = Vec::new();
    let mut seen = BTreeSet::new();
    for &g in plan.group_by.iter().chain(&plan.explode) {
        if !seen.insert(g) {
            continue;
        }
        let f = &def.fields[g];
        let column = call.planner.column(g);
        // A missing value (null or blank) of a key that is not exploded is the key null, as
        // the summary keys it; an exploded cell is split later, blanks and all.
        let key = if plan.explode.contains(&g)
            || f.data_type.is_numeric()
            || !call.prepared.has_missing(g).unwrap_or(true)
        {
            column
        } else {
            datafusion::functions::expr_fn::nullif(column, lit(""))
        };
        keys.push(key.alias(&f.name));
    }
    let cap = call.engine.limits().max_groups;
    let caps = crate::groups::Caps {
        groups: cap,
        rows: u64::MAX,
    };
    let records = crate::groups::capped_count(caps)
        .call(vec![lit(1i64)])
        .alias(WEIGHT);
    let grouped = df.clone().aggregate(keys, vec![records])?;
    let schema = Arc::new(grouped.schema().as_arrow().clone());
    let batches = match grouped.collect().await {
        Ok(batches) => batches,
        Err(e) if stopped(&e) => return Ok(None),
        Err(e) => return Err(EngineError::computing(&def.id, e)),
    };
    // Each task of a cluster holds the cap on its own groups: the whole answer is checked.
    let groups: usize = batches.iter().map(|b| b.num_rows()).sum();
    if groups > cap {
        return Ok(None);
    }
    let schema = batches.first().map_or(schema, |b| b.schema());
    let table = MemTable::try_new(schema, vec![batches])?;
    Ok(Some(call.ctx.read_table(Arc::new(table))?))
}

/// Whether a plan was stopped at the cap on groups (in this process, or on an executor,
/// whose errors arrive as text).
fn stopped(e: &datafusion::error::DataFusionError) -> bool {
    crate::groups::stopped(e).is_some()
        || crate::groups::Stopped::from_message(&e.to_string()).is_some()
}
