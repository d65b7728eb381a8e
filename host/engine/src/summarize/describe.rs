//! What a summary's metrics mean, as its result describes them: each metric, its columns
//! when periods are compared, the ranks, and the period its measures are declared to be of.

use tally_semantic::resolve::{Metric, SummarizePlan};

use super::metrics::{AVG_DECIMALS, RATIO_DECIMALS, measures_of};
use crate::results::MetricMeta;

/// A metric's description as the columns `compare` makes of it: its value at each period,
/// its change and its percent change.
pub(super) fn compared(
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
pub(super) fn ranks_described(
    def: &tally_semantic::DatasetDef,
    plan: &SummarizePlan,
) -> Vec<MetricMeta> {
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

pub(super) fn metric_description(def: &tally_semantic::DatasetDef, m: &Metric) -> MetricMeta {
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
