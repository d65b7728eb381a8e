//! Cite: the result of a summary with what its keys and metrics mean, its warnings (a page
//! cut, totals past 64 bits, nulls, periods), and the steps taken, in words.

use datafusion::logical_expr::Expr;
use serde_json::Value;
use tally_semantic::definition::FieldId;
use tally_semantic::resolve::{HavingFilter, Metric, SummarizePlan};

use super::describe::{compared, metric_description, ranks_described};
use super::metrics::measures_of;
use super::page::GroupPage;
use crate::call::{Asked, Call, HasConditions};
use crate::envelope::{Provenance, TransformationType};
use crate::error::EngineError;
use crate::meta::{self, echo, field_meta};
use crate::results::{CountsByName, MetricMeta, SummaryResult};

impl HasConditions for SummarizePlan {
    fn labels(&self, def: &tally_semantic::DatasetDef) -> Vec<String> {
        self.filters
            .iter()
            .filter(|f| !self.explode.contains(&f.field))
            .map(|f| format!("`{}`", f.describe(def)))
            .collect()
    }
}

/// What was counted on the way: records matched (before exploding), records without a part
/// per exploded field, and whether any condition applied to records.
pub(super) struct Counted {
    pub(super) matched: usize,
    pub(super) without_value: Vec<(String, u64)>,
    pub(super) row_filters: bool,
    /// The row sources of the records matched, when the backend reports them (a plugin).
    pub(super) documents: Option<std::collections::BTreeSet<u32>>,
}

/// Cite: the warnings of this result, what the keys and metrics mean, the caveats of the
/// fields used, the hints, the call as resolved and the source, and the steps taken.
pub(super) async fn cite(
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
