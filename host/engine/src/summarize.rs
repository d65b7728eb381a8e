//! `summarize_records`: counts, sums, averages, extremes and computed measures per group.
//!
//! Order of operations: filters on ordinary fields → explode multi-value fields into their
//! parts (a record without parts joins the "" group) → filters on exploded fields, applied to
//! each part → group (null key shown as "") → metrics → `having` → order (first metric
//! descending, nulls last, ties by key) → `total_group_count` → limit.
//!
//! In phases, each in its own module: the group keys read ([`keys`]), exploding
//! ([`explode`]), the groups and metrics computed ([`aggregate`], over [`metrics`]), the
//! page shaped ([`page`]), and the result cited ([`cite`], with [`describe`] and
//! [`notices`]); [`run`] calls them in order.

mod aggregate;
mod cite;
mod describe;
mod explode;
mod keys;
mod metrics;
mod notices;
mod page;

use serde_json::Value;
use tally_semantic::definition::FieldId;
use tally_semantic::request::Notice;
use tally_semantic::resolve::{Filter, Metric, SummarizePlan};
use tally_storage::dataset::Dataset;
use tally_storage::udf::StreamCodes;

use crate::call::Call;
use crate::context::Cx;
use crate::envelope::Provenance;
use crate::error::EngineError;
use crate::meta;
use crate::plan::conjunction;
use crate::results::SummaryResult;
use aggregate::aggregate;
use cite::{Counted, cite};
use explode::{count_before_exploding, explode};
use keys::{Split, on_cluster};
use metrics::{measures_of, plan_def_weight};
use notices::{say_left_out, say_pooled};
use page::{order_and_page, records_in};

pub use metrics::{AVG_DECIMALS, RATIO_DECIMALS};

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
