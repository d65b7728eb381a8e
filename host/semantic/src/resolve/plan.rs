//! What resolving produces: the plans the engine runs (a query, a summary and their
//! parts), each holding field ids and the dataset's own names, never what a caller typed.

use crate::definition::{DatasetDef, FieldId, MeasureId};
use crate::names::{self, Match};
use crate::request::{Notice, Op, Scalar};
use serde::Serialize;
use serde_json::json;

/// How many candidates an error lists at most.
pub const MAX_CANDIDATES: usize = 5;
/// How many valid names an error samples beside the ranked candidates.
pub const SAMPLE_SIZE: usize = 12;

/// A name or code the server matched in a form other than the one typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolution {
    /// Where it was typed (`where`, `group_by`, `metrics`, `dataset_id`, `where.F value`…).
    pub parameter: String,
    pub input: String,
    pub canonical: String,
}

/// A filter on one field; conditions are ANDed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Filter {
    pub field: FieldId,
    pub op: Op,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sort {
    pub field: FieldId,
    pub descending: bool,
}

/// A metric of `summarize_records`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "field", rename_all = "snake_case")]
pub enum Metric {
    Count,
    Sum(FieldId),
    Avg(FieldId),
    Min(FieldId),
    Max(FieldId),
    /// `last:F`: the sum of F over each group's records of the latest period the group has
    /// (a stock's level at the end of the periods read).
    Last(FieldId),
    /// `avg:<computed measure>`.
    AvgComputed(MeasureId),
}

impl Metric {
    /// The result column: `count`, `sum:総手続件数`, `avg:オンライン率`.
    pub fn column(&self, def: &DatasetDef) -> String {
        let field = |i: &FieldId| def.fields[*i].name.as_str();
        match self {
            Metric::Count => "count".to_string(),
            Metric::Sum(f) => format!("sum:{}", field(f)),
            Metric::Avg(f) => format!("avg:{}", field(f)),
            Metric::Min(f) => format!("min:{}", field(f)),
            Metric::Max(f) => format!("max:{}", field(f)),
            Metric::Last(f) => format!("last:{}", field(f)),
            Metric::AvgComputed(m) => format!("avg:{}", def.computed_measures[*m].name),
        }
    }

    /// The column counting rows whose value was null and so left out (`F:null_excluded`).
    pub fn null_excluded_column(&self, def: &DatasetDef) -> Option<String> {
        match self {
            Metric::Sum(f) | Metric::Avg(f) | Metric::Min(f) | Metric::Max(f) | Metric::Last(f) => {
                Some(format!("{}:null_excluded", def.fields[*f].name))
            }
            Metric::Count | Metric::AvgComputed(_) => None,
        }
    }

    /// For `last:`, the column saying the period each group's value is of (`last:F period`):
    /// a group's latest period with a value of `F`, which may be before its latest period.
    pub fn period_column(&self, def: &DatasetDef) -> Option<String> {
        match self {
            Metric::Last(_) => Some(format!("{} period", self.column(def))),
            _ => None,
        }
    }

    pub fn field(&self) -> Option<FieldId> {
        match self {
            Metric::Sum(f) | Metric::Avg(f) | Metric::Min(f) | Metric::Max(f) | Metric::Last(f) => {
                Some(*f)
            }
            Metric::Count | Metric::AvgComputed(_) => None,
        }
    }

    /// What a value of the metric is, for whoever shows it.
    pub fn value_kind(&self, def: &DatasetDef) -> ValueKind {
        match self {
            Metric::Count => ValueKind::Count,
            Metric::Sum(_) | Metric::Last(_) => ValueKind::Sum,
            Metric::Avg(_) => ValueKind::Average,
            Metric::Min(_) => ValueKind::Min,
            Metric::Max(_) => ValueKind::Max,
            Metric::AvgComputed(m) if def.computed_measures[*m].mode().is_share() => {
                ValueKind::Share
            }
            Metric::AvgComputed(_) => ValueKind::Ratio,
        }
    }

    /// The unit a value of the metric is counted in, as the definition declares it for the
    /// field or computed measure (none for `count` and for a share).
    pub fn unit<'d>(&self, def: &'d DatasetDef) -> Option<&'d str> {
        match self {
            Metric::Sum(f) | Metric::Avg(f) | Metric::Min(f) | Metric::Max(f) | Metric::Last(f) => {
                def.fields[*f].unit.as_deref()
            }
            Metric::AvgComputed(m) => def.computed_measures[*m].unit.as_deref(),
            Metric::Count => None,
        }
    }
}

/// What a metric's value is, as a summary's `metrics[].kind` says it: the one statement
/// charts (Rust) and views (JS) read instead of guessing from a column's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueKind {
    /// A number of records: adds up across groups.
    Count,
    /// A sum of a measure: adds up across groups.
    Sum,
    /// A mean of a measure over its non-null values.
    Average,
    Min,
    Max,
    /// A ratio of sums (a `sum_ratio` computed measure): the number it is.
    Ratio,
    /// A share of records between 0 and 1 (a `count_where` computed measure): shown as a
    /// percentage.
    Share,
    /// A metric's difference between two periods (`compare`), in the metric's unit.
    Change,
    /// A metric's change between two periods as a percentage of the earlier value.
    #[serde(rename = "percent_change")]
    PercentChange,
    /// A group's place by the first metric within its period (1 = largest).
    Rank,
}

impl ValueKind {
    pub const ALL: [ValueKind; 10] = [
        ValueKind::Count,
        ValueKind::Sum,
        ValueKind::Average,
        ValueKind::Min,
        ValueKind::Max,
        ValueKind::Ratio,
        ValueKind::Share,
        ValueKind::Change,
        ValueKind::PercentChange,
        ValueKind::Rank,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ValueKind::Count => "count",
            ValueKind::Sum => "sum",
            ValueKind::Average => "average",
            ValueKind::Min => "min",
            ValueKind::Max => "max",
            ValueKind::Ratio => "ratio",
            ValueKind::Share => "share",
            ValueKind::Change => "change",
            ValueKind::PercentChange => "percent_change",
            ValueKind::Rank => "rank",
        }
    }

    /// The kind named exactly `name`.
    pub fn parse(name: &str) -> Option<ValueKind> {
        ValueKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether the values of groups add up to the value of their union (parts of a whole).
    pub fn additive(self) -> bool {
        matches!(self, ValueKind::Count | ValueKind::Sum)
    }
}

impl std::fmt::Display for ValueKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The metric kinds, as written before the colon: one table, with the words other tools
/// use for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    Last,
}

impl MetricKind {
    pub const ALL: [MetricKind; 6] = [
        MetricKind::Count,
        MetricKind::Sum,
        MetricKind::Avg,
        MetricKind::Min,
        MetricKind::Max,
        MetricKind::Last,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Count => "count",
            MetricKind::Sum => "sum",
            MetricKind::Avg => "avg",
            MetricKind::Min => "min",
            MetricKind::Max => "max",
            MetricKind::Last => "last",
        }
    }

    /// Whether the kind aggregates a field (`sum:F`), unlike `count`.
    pub fn takes_field(self) -> bool {
        self != MetricKind::Count
    }

    /// Words other tools use for our kinds (`mean`, `total`…).
    pub fn synonym(word: &str) -> Option<MetricKind> {
        Some(match word {
            "mean" | "average" | "ave" => MetricKind::Avg,
            "total" => MetricKind::Sum,
            "minimum" => MetricKind::Min,
            "maximum" => MetricKind::Max,
            "latest" | "final" | "end" => MetricKind::Last,
            "cnt" | "number" => MetricKind::Count,
            _ => return None,
        })
    }
}

impl std::fmt::Display for MetricKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition on a result column of `summarize_records`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HavingFilter {
    /// A column of the result (a metric or a group key), canonical.
    pub column: String,
    pub op: Op,
}

/// A resolved `query_records` call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryPlan {
    pub dataset_id: String,
    pub q: Option<String>,
    /// Fields `q` searches; empty means every text field.
    pub search_fields: Vec<FieldId>,
    /// Fields returned, in order (a compact default when none were named:
    /// [`default_projection`]).
    pub select: Vec<FieldId>,
    pub filters: Vec<Filter>,
    pub order_by: Vec<Sort>,
    pub limit: usize,
    pub cursor: Option<String>,
    /// Read the revisions in force on this date (`YYYY-MM-DD`), where the dataset declares
    /// `revisions`; `None`: the latest.
    pub as_of: Option<String>,
    /// Records of the latest period of the time field only (`{"年度": "latest"}`).
    pub latest: Option<Latest>,
    pub resolved_fields: Vec<Resolution>,
    pub notices: Vec<Notice>,
}

/// A call read at the latest period of the dataset's time field: the engine finds the period
/// in the data and adds the condition on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Latest {
    pub field: FieldId,
    /// Not asked for: a summary with no condition on the time field and no grouping by it
    /// is of the latest period, said in a warning (never a silent sum over periods).
    pub defaulted: bool,
    /// The period before the latest (`{"年度": "previous"}`), not the latest.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub previous: bool,
}

impl Latest {
    /// The latest period asked for, as a plan's `to_json` shows it.
    pub fn to_json(&self, def: &DatasetDef) -> serde_json::Value {
        let mut out = json!({ "field": def.fields[self.field].name, "defaulted": self.defaulted });
        if self.previous {
            out["previous"] = json!(true);
        }
        out
    }
}

/// An ordering of summary rows by one result column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ColumnSort {
    /// A metric column or a group key, canonical.
    pub column: String,
    pub descending: bool,
}

/// A resolved `summarize_records` call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummarizePlan {
    pub dataset_id: String,
    pub metrics: Vec<Metric>,
    pub group_by: Vec<FieldId>,
    pub filters: Vec<Filter>,
    pub having: Vec<HavingFilter>,
    /// Multi-value fields split into their parts before grouping.
    pub explode: Vec<FieldId>,
    /// The order of the rows (empty: the first metric descending); ties by group key.
    pub order_by: Vec<ColumnSort>,
    pub limit: usize,
    /// As in [`QueryPlan::as_of`].
    pub as_of: Option<String>,
    /// As in [`QueryPlan::latest`]; set by default on a dataset with a time field when the
    /// summary neither filters nor groups by it.
    pub latest: Option<Latest>,
    /// Periods of the time field compared side by side; the plan groups by the time field
    /// (and, for two periods, keeps only those) so the engine can set them beside each other.
    pub compare: Option<Compare>,
    /// Each group's rank by the first metric, within its period.
    pub rank: bool,
    pub resolved_fields: Vec<Resolution>,
    pub notices: Vec<Notice>,
}

/// Periods compared by a summary (`compare`), resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Compare {
    /// Two periods side by side: each metric at both, the difference (`to − from`) and the
    /// percent change. The plan groups by `field` and keeps the records of the two periods.
    Periods {
        field: FieldId,
        from: Scalar,
        to: Scalar,
        /// Ends named relative to the data (`"latest"`, `"previous"`), their period not yet
        /// known: `from`/`to` hold the word until the engine reads the periods and sets them
        /// ([`Compare::settle`]).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        relative: Vec<RelativeEnd>,
    },
    /// Each period against the one before it in the data, within each group (year over year).
    /// `grouped`: the caller grouped by the time field (else the plan adds it).
    Previous { field: FieldId, grouped: bool },
}

/// An end of `compare` named relative to the data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelativeEnd {
    /// `from` or `to`.
    pub end: &'static str,
    /// The period before the latest (`"previous"`), else the latest.
    pub previous: bool,
    /// As written.
    pub input: String,
}

impl Compare {
    /// Sets the ends named relative to the data, given its periods oldest first: the latest,
    /// or the one before it. Returns each end's word (`latest`) and the period it named, for
    /// the caller to disclose and to rename result columns by; an error names an end the
    /// data has no period for.
    pub fn settle(
        &mut self,
        periods: &[Scalar],
    ) -> Result<Vec<(RelativeEnd, Scalar)>, RelativeEnd> {
        let Compare::Periods {
            from, to, relative, ..
        } = self
        else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for r in std::mem::take(relative) {
            let back = usize::from(r.previous) + 1;
            let Some(period) = periods.len().checked_sub(back).map(|i| periods[i].clone()) else {
                return Err(r);
            };
            let slot = if r.end == "from" {
                &mut *from
            } else {
                &mut *to
            };
            *slot = period.clone();
            out.push((r, period));
        }
        Ok(out)
    }

    /// The time field compared over.
    pub fn field(&self) -> FieldId {
        match self {
            Compare::Periods { field, .. } | Compare::Previous { field, .. } => *field,
        }
    }

    /// The columns of the result a metric's column becomes: for two periods its value at each
    /// (`m (2010)`, `m (2020)`), else itself; then, for a metric (not a column of excluded
    /// nulls), its change and percent change (`m change`, `m change %`).
    pub fn columns(&self, metric: &str, main: bool) -> Vec<String> {
        let mut out = match self {
            Compare::Periods { from, to, .. } => vec![
                format!("{metric} ({})", from.text()),
                format!("{metric} ({})", to.text()),
            ],
            Compare::Previous { .. } => vec![metric.to_string()],
        };
        if main {
            out.push(format!("{metric} change"));
            out.push(format!("{metric} change %"));
        }
        out
    }

    /// The rank columns: one per period compared side by side, else one.
    pub fn rank_columns(compare: Option<&Compare>) -> Vec<String> {
        match compare {
            Some(Compare::Periods { from, to, .. }) => vec![
                format!("rank ({})", from.text()),
                format!("rank ({})", to.text()),
            ],
            _ => vec!["rank".to_string()],
        }
    }

    /// As a call writes it.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Compare::Periods { from, to, .. } => json!({ "from": from, "to": to }),
            Compare::Previous { .. } => json!("previous"),
        }
    }
}

pub(super) fn resolution(
    parameter: &str,
    input: &str,
    r: names::Resolved<'_>,
) -> Option<Resolution> {
    (r.how != Match::Exact).then(|| Resolution {
        parameter: parameter.to_string(),
        input: input.to_string(),
        canonical: r.canonical.to_string(),
    })
}
