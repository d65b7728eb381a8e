//! Resolving a call's names against one dataset: the step between what a caller typed and
//! what the engine plans.
//!
//! A plan holds field indices into the dataset's declared fields and names taken from the
//! dataset's own vocabulary, so nothing the caller typed reaches a query plan as an
//! identifier. Every name or code that was matched in a normalised form is reported in
//! `resolved_fields`.

use serde::Serialize;
use serde_json::json;

use crate::definition::{Aggregation, Codelist, DatasetDef, Field, Grain, Role};
use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names::{self, Match, normalize};
use crate::request::{CompareArg, Condition, Notice, Op, QueryArgs, Scalar, SummarizeArgs};

/// Index of a field in [`DatasetDef::fields`].
pub use crate::definition::{FieldId, MeasureId};

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

/// Resolves a dataset id against the ids served.
pub fn resolve_dataset<'a>(
    input: &str,
    ids: &[&'a str],
    titles: &dyn Fn(&str) -> Option<String>,
) -> Result<(&'a str, Option<Resolution>), RequestError> {
    resolve_dataset_choosing(input, ids, titles, &[])
}

/// [`resolve_dataset`], with the names the user chose for ambiguous ones: an id that fits
/// several datasets equally is refused with them (a client may ask its user to choose), unless
/// one of them was chosen.
pub fn resolve_dataset_choosing<'a>(
    input: &str,
    ids: &[&'a str],
    titles: &dyn Fn(&str) -> Option<String>,
    chosen: &[Choice],
) -> Result<(&'a str, Option<Resolution>), RequestError> {
    let fits = || names::ambiguous(input, ids.iter().copied());
    if let Some(choice) = chosen
        .iter()
        .find(|c| c.parameter == "dataset_id" && c.input == input)
        && let Some(id) = fits().into_iter().find(|id| *id == choice.name)
    {
        return Ok((
            id,
            Some(Resolution {
                parameter: "dataset_id".into(),
                input: input.to_string(),
                canonical: id.to_string(),
            }),
        ));
    }
    match names::resolve(input, ids.iter().copied()) {
        Ok(r) => Ok((r.canonical, resolution("dataset_id", input, r))),
        Err(ranked) => {
            let candidates = ranked
                .iter()
                .take(MAX_CANDIDATES)
                .map(|id| Candidate {
                    name: id.to_string(),
                    description: titles(id),
                })
                .collect();
            let fits = fits();
            let message = if fits.len() > 1 {
                format!(
                    "`{input}` is ambiguous: it fits {} datasets ({}); name one exactly",
                    fits.len(),
                    fits.iter()
                        .map(|id| format!("`{id}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                format!("no dataset `{input}` is served")
            };
            let mut err = RequestError::new(ErrorCode::UnknownDataset, message)
                .at("dataset_id")
                .candidates(candidates, ids.len())
                .sample(ids.iter().copied(), SAMPLE_SIZE)
                .hint("call list_datasets to see every dataset and its title");
            err = match ranked.first() {
                Some(best) => err.example("inspect_dataset", json!({ "dataset_id": best })),
                None => err.example("list_datasets", json!({})),
            };
            if fits.len() > 1 {
                err.ambiguous = Some(Box::new(crate::error::Ambiguous {
                    what: "dataset",
                    parameter: "dataset_id".into(),
                    input: input.to_string(),
                    choices: fits
                        .iter()
                        .map(|id| Candidate {
                            name: id.to_string(),
                            description: titles(id),
                        })
                        .collect(),
                }));
            }
            Err(err)
        }
    }
}

fn resolution(parameter: &str, input: &str, r: names::Resolved<'_>) -> Option<Resolution> {
    (r.how != Match::Exact).then(|| Resolution {
        parameter: parameter.to_string(),
        input: input.to_string(),
        canonical: r.canonical.to_string(),
    })
}

pub use crate::request::Choice;

/// Resolves names of one dataset, collecting corrections.
struct Resolver<'d> {
    def: &'d DatasetDef,
    tool: &'static str,
    resolved: Vec<Resolution>,
    notices: Vec<Notice>,
    /// Names the user chose for ambiguous ones.
    chosen: Vec<Choice>,
    /// The time field was asked for its latest period (`{"年度": "latest"}`), or the one
    /// before it (`"previous"`: true).
    latest: Option<(FieldId, bool)>,
}

/// A condition on the time field, as [`Resolver::period`] reads it.
enum Period {
    /// The latest period in the data (false), or the one before it (true).
    Latest(bool),
    /// From one period to another, both included.
    Range(Op, Op),
    /// Any other condition, as written (or one year written as text, as a number).
    Other(Condition),
}

impl<'d> Resolver<'d> {
    /// A name that is (exactly or under NFKC) a column of the data that the definition does
    /// not declare, or that is closer to one than the margin that a correction to `resolved`
    /// needs: refused, never corrected to a different, declared thing that merely looks alike.
    fn undeclared(
        &self,
        input: &str,
        parameter: &str,
        resolved: Option<names::Resolved<'_>>,
    ) -> Option<RequestError> {
        let def = self.def;
        if resolved.is_some_and(|r| r.how != Match::Fuzzy) || def.undeclared.is_empty() {
            return None;
        }
        let wanted = normalize(input);
        let column = def
            .undeclared
            .iter()
            .find(|c| normalize(c) == wanted)
            .or_else(|| {
                let r = resolved?;
                let to_resolved = names::similarity(&wanted, &normalize(r.canonical));
                def.undeclared.iter().find(|c| {
                    names::similarity(&wanted, &normalize(c)) + names::FUZZY_MARGIN >= to_resolved
                })
            })?;
        // What a caller can use instead: the served names closest to what it asked for (the
        // measures when it asked for a metric), then the column itself, said to be unserved.
        let metric = parameter == "metrics";
        let served: Vec<&str> = def
            .fields
            .iter()
            .filter(|f| !metric || f.role == Role::Measure)
            .map(|f| f.name.as_str())
            .collect();
        let closest: Vec<&str> = names::rank(input, served.iter().copied())
            .into_iter()
            .take(MAX_CANDIDATES)
            .collect();
        let mut candidates: Vec<Candidate> = closest
            .iter()
            .map(|name| {
                Candidate::described(*name, def.field(name).and_then(|f| f.desc.as_deref()))
            })
            .collect();
        candidates.push(Candidate::described(
            column.clone(),
            Some("undeclared column: present in the data, not served"),
        ));
        let kind = if metric { "measures" } else { "fields" };
        let err = RequestError::new(
            ErrorCode::UnknownField,
            format!(
                "`{input}` is a column present in the data of `{}` but not declared in its dataset.yaml, so it is not served{}; the served {kind} closest to it are {}",
                def.id,
                resolved.map_or(String::new(), |r| format!(
                    " (it is not `{}`, which only looks alike)",
                    r.canonical
                )),
                if closest.is_empty() {
                    "none".to_string()
                } else {
                    closest.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                }
            ),
        )
        .at(parameter.to_string())
        .candidates(candidates, served.len() + 1)
        .hint(format!(
            "use one of the served {kind} named above (inspect_dataset describes each); `{column}` can be served only by whoever maintains the dataset, by declaring it under `fields:` in its dataset.yaml"
        ));
        let best = closest.first().copied().unwrap_or("");
        let best = if metric && !best.is_empty() {
            format!("sum:{best}")
        } else {
            best.to_string()
        };
        Some(if best.is_empty() {
            err
        } else {
            self.example_with(err, parameter, &best)
        })
    }

    fn field(&mut self, input: &str, parameter: &str) -> Result<FieldId, RequestError> {
        if let Some(id) = self.chosen_field(input, parameter) {
            return Ok(id);
        }
        let names = self.def.fields.iter().map(|f| f.name.as_str());
        let outcome = names::resolve(input, names);
        if let Some(err) = self.undeclared(input, parameter, outcome.as_ref().ok().copied()) {
            return Err(err);
        }
        match outcome {
            Ok(r) => {
                if let Some(res) = resolution(parameter, input, r) {
                    self.resolved.push(res);
                }
                Ok(FieldId::at(r.index))
            }
            Err(ranked) => Err(self.unknown_field(input, parameter, &ranked)),
        }
    }

    /// The field the user chose for `input` typed in `parameter`, when it is one that `input`
    /// is ambiguous between (a choice of anything else is ignored, and the name refused as
    /// before).
    fn chosen_field(&mut self, input: &str, parameter: &str) -> Option<FieldId> {
        let choice = self
            .chosen
            .iter()
            .find(|c| c.input == input && c.parameter == parameter)?;
        let fits = names::ambiguous(input, self.def.fields.iter().map(|f| f.name.as_str()));
        if !fits.contains(&choice.name.as_str()) {
            return None;
        }
        let index = self.def.fields.iter().position(|f| f.name == choice.name)?;
        self.resolved.push(Resolution {
            parameter: parameter.to_string(),
            input: input.to_string(),
            canonical: choice.name.clone(),
        });
        Some(FieldId::at(index))
    }

    /// The measure (a measure field or a computed measure) the user chose for `target` named
    /// in `metrics`, when `target` is ambiguous between it and others; the choice is disclosed.
    fn chosen_measure(&mut self, target: &str, measures: &[&str]) -> Option<String> {
        let choice = self
            .chosen
            .iter()
            .find(|c| c.parameter == "metrics" && c.input == target)?;
        let pool = measures
            .iter()
            .copied()
            .chain(self.def.computed_measures.iter().map(|m| m.name.as_str()));
        if !names::ambiguous(target, pool).contains(&choice.name.as_str()) {
            return None;
        }
        self.resolved.push(Resolution {
            parameter: "metrics".into(),
            input: target.to_string(),
            canonical: choice.name.clone(),
        });
        Some(choice.name.clone())
    }

    /// What a measure field or a computed measure is, in the definition's words.
    fn measure_description(&self, name: &str) -> Option<&'d str> {
        let def = self.def;
        def.field(name).and_then(|f| f.desc.as_deref()).or_else(|| {
            def.computed_measures
                .iter()
                .find(|m| m.name == name)
                .and_then(|m| m.desc.as_deref())
        })
    }

    fn unknown_field(&self, input: &str, parameter: &str, ranked: &[&str]) -> RequestError {
        let def = self.def;
        let candidates = ranked
            .iter()
            .take(MAX_CANDIDATES)
            .map(|name| {
                Candidate::described(*name, def.field(name).and_then(|f| f.desc.as_deref()))
            })
            .collect();
        let fits = names::ambiguous(input, def.fields.iter().map(|f| f.name.as_str()));
        let message = if fits.len() > 1 {
            format!(
                "`{input}` is ambiguous in dataset `{}`: it fits {} fields ({}); name one exactly",
                def.id,
                fits.len(),
                fits.iter()
                    .take(MAX_CANDIDATES)
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!("dataset `{}` has no field `{input}`", def.id)
        };
        let mut err = RequestError::new(ErrorCode::UnknownField, message)
            .at(parameter.to_string())
            .candidates(candidates, def.fields.len())
            .sample(def.fields.iter().map(|f| f.name.as_str()), SAMPLE_SIZE);
        if fits.len() > 1 {
            err.ambiguous = Some(Box::new(crate::error::Ambiguous {
                what: "field",
                parameter: parameter.to_string(),
                input: input.to_string(),
                choices: fits
                    .iter()
                    .map(|name| {
                        Candidate::described(*name, def.field(name).and_then(|f| f.desc.as_deref()))
                    })
                    .collect(),
            }));
        }
        let ascii_guess = input.is_ascii() && def.fields.iter().all(|f| !f.name.is_ascii());
        err = if ascii_guess {
            err.hint(format!(
                "field names are in the dataset's language, not translated; call inspect_dataset(\"{}\") for the exact names",
                def.id
            ))
        } else {
            err.hint(format!(
                "call inspect_dataset(\"{}\") for every field and its meaning",
                def.id
            ))
        };
        let best = ranked.first().copied().unwrap_or("");
        self.example_with(err, parameter, best)
    }

    /// Adds a working example call that uses `name` in the parameter that failed.
    fn example_with(&self, err: RequestError, parameter: &str, name: &str) -> RequestError {
        let def = self.def;
        let id = def.id.as_str();
        let top = parameter.split(['.', '[']).next().unwrap_or(parameter);
        let groupable = def
            .fields
            .iter()
            .find(|f| f.groupable)
            .map(|f| f.name.as_str());
        let args = match top {
            "where" => {
                json!({ "dataset_id": id, "where": { name: { "$not_empty": true } }, "limit": 5 })
            }
            "group_by" | "explode" => {
                json!({ "dataset_id": id, "group_by": [name], "metrics": ["count"] })
            }
            "metrics" | "having" => match groupable {
                Some(g) => json!({ "dataset_id": id, "group_by": [g], "metrics": [name] }),
                None => json!({ "dataset_id": id, "metrics": [name] }),
            },
            "order_by" => json!({ "dataset_id": id, "order_by": [format!("-{name}")], "limit": 5 }),
            "search_fields" => {
                json!({ "dataset_id": id, "q": "…", "search_fields": [name], "limit": 5 })
            }
            _ => json!({ "dataset_id": id, "select": [name], "limit": 5 }),
        };
        err.example(self.tool, args)
    }

    fn fields(&mut self, inputs: &[String], parameter: &str) -> Result<Vec<FieldId>, RequestError> {
        let mut out = Vec::with_capacity(inputs.len());
        for input in inputs {
            let id = self.field(input, parameter)?;
            if !out.contains(&id) {
                out.push(id);
            }
        }
        Ok(out)
    }

    fn filters(&mut self, conditions: Vec<Condition>) -> Result<Vec<Filter>, RequestError> {
        let mut out = Vec::with_capacity(conditions.len());
        for cond in conditions {
            let field = self.field(&cond.target, &format!("where.{}", cond.target))?;
            let cond = match self.period(field, cond)? {
                Period::Latest(previous) => {
                    self.latest = Some((field, previous));
                    continue;
                }
                Period::Range(from, to) => {
                    out.push(Filter { field, op: from });
                    out.push(Filter { field, op: to });
                    continue;
                }
                Period::Other(cond) => cond,
            };
            let op = if cond.plain {
                self.plain_code(field, cond.op)
            } else {
                cond.op
            };
            let op = self.check_operand(field, op)?;
            // Two conditions of one kind on one field (a name written two ways) would be one
            // condition too many to write back as the call resolved (`provenance.query`), and
            // say something the caller may not mean: refused, with what to do.
            // Several `$ne` of one field are `$nin` (written back as such), never a conflict.
            if !matches!(op, Op::Ne(_))
                && out
                    .iter()
                    .any(|f: &Filter| f.field == field && f.op.name() == op.name())
            {
                return Err(RequestError::invalid(
                    format!("where.{}", cond.target),
                    format!(
                        "`where` names the field `{}` twice with `{}` (as `{}` and another spelling)",
                        self.def.fields[field].name,
                        op.name(),
                        cond.target
                    ),
                )
                .hint("write the field once, with every value of the condition in one list (`$in`) or one operator each"));
            }
            out.push(Filter { field, op });
        }
        Ok(out)
    }

    /// A condition on the time field written as a period: `"latest"` (or `最新`), `"previous"`
    /// (the period before the latest), a range `"2010..2020"` (also `2010〜2020`,
    /// `2010年から2020年まで`, a year grain also `2010-2020`), one period as people write it
    /// (`"2020年度"`, `"FY2020"`, `"令和2年度"`, `"平成元年"`, `"2020年4月"`: [`crate::period`]).
    /// Each reading is disclosed in `resolved_fields`; a form naming another kind of year than
    /// the field holds (a fiscal year on a calendar-year field) is said in `notices`.
    fn period(&mut self, field_id: FieldId, cond: Condition) -> Result<Period, RequestError> {
        let field = &self.def.fields[field_id];
        let Some(grain) = field.grain.filter(|_| field.role == Role::Time) else {
            return Ok(Period::Other(cond));
        };
        let text = match &cond.op {
            Op::Contains(t) if cond.plain => t.clone(),
            Op::Eq(Scalar::Str(t)) => t.clone(),
            _ => return Ok(Period::Other(cond)),
        };
        let parameter = format!("where.{}", field.name);
        let folded: String = crate::names::nfkc_value(&text).to_lowercase();
        let relative = match folded.as_str() {
            "latest" | "最新" | "最新年" | "最新年度" | "last" | "直近" => Some(false),
            "previous" | "prior" | "前年" | "前年度" | "前期" => Some(true),
            _ => None,
        };
        if let Some(previous) = relative {
            self.resolved.push(Resolution {
                parameter,
                input: text,
                canonical: if previous { "previous" } else { "latest" }.into(),
            });
            return Ok(Period::Latest(previous));
        }
        let name = field.name.clone();
        let integer = field.data_type == crate::definition::DataType::Integer;
        let mut other_kind = false;
        let mut value = |t: &str| -> Option<Scalar> {
            let t = t.trim();
            let read = crate::period::read(t, grain);
            if let Some(r) = &read {
                other_kind |= crate::period::other_kind(r.kind, grain);
            }
            if grain.is_year() {
                return read.and_then(|r| r.canonical.parse::<i64>().ok().map(Scalar::Int));
            }
            // A month or a day: written with 年/月/日 or an era, read as `2020-04`; as digits
            // and separators, kept as written (the data's own form).
            let t = match read {
                Some(r) if !t.is_ascii() => r.canonical,
                _ => t.to_string(),
            };
            if integer {
                t.replace('-', "").parse::<i64>().ok().map(Scalar::Int)
            } else {
                (!t.is_empty()).then_some(Scalar::Str(t))
            }
        };
        let separators: &[&str] = if grain.is_year() {
            &["..", "～", "~", "〜", "から", "–", "—", "-"]
        } else {
            &["..", "～", "~", "〜", "から"]
        };
        let ranged = folded.trim_end_matches("まで").trim();
        for sep in separators {
            if let Some((a, b)) = ranged.split_once(sep)
                && let (Some(from), Some(to)) = (value(a), value(b))
            {
                let canonical = format!("{}..{}", from.text(), to.text());
                if canonical != text {
                    self.resolved.push(Resolution {
                        parameter: parameter.clone(),
                        input: text.clone(),
                        canonical,
                    });
                }
                self.say_other_kind(other_kind, &parameter, &text, &name, grain);
                return Ok(Period::Range(Op::Gte(from), Op::Lte(to)));
            }
        }
        if let Some(one) = value(&folded) {
            if one.text() != text {
                self.resolved.push(Resolution {
                    parameter: parameter.clone(),
                    input: text.clone(),
                    canonical: one.text(),
                });
            }
            self.say_other_kind(other_kind, &parameter, &text, &name, grain);
            return Ok(Period::Other(Condition {
                target: cond.target,
                op: Op::Eq(one),
                plain: false,
            }));
        }
        Ok(Period::Other(cond))
    }

    /// Says that a period was written as another kind of year than the field holds.
    fn say_other_kind(
        &mut self,
        other: bool,
        parameter: &str,
        text: &str,
        name: &str,
        grain: Grain,
    ) {
        if !other {
            return;
        }
        let (written, held) = match grain {
            Grain::FiscalYear => (
                "a calendar year",
                "fiscal years (年度, named by the year they start in)",
            ),
            _ => ("a fiscal year", "calendar years"),
        };
        self.notices.push(Notice {
            parameter: parameter.to_string(),
            message: format!(
                "\"{text}\" names {written}, and `{name}` holds {held}: read as the period of the same number"
            ),
        });
    }

    /// Types and codelists: ordering comparisons on numeric fields need numbers; values
    /// compared exactly on a field with a static codelist must be codes.
    fn check_operand(&mut self, field_id: FieldId, op: Op) -> Result<Op, RequestError> {
        let field = &self.def.fields[field_id];
        let parameter = format!("where.{}", field.name);
        if field.data_type.is_numeric() && (op.is_ordering() || op.is_exact()) {
            // A number sent as text (`"1000000"`, `"１,０００"`) has one reading: it is read as
            // the number and the reading disclosed. Text that is no number is refused: a
            // substring search on the digits is written as a plain string.
            let op_name = op.name();
            let mut read = |value: Scalar| -> Result<Scalar, RequestError> {
                match value {
                    Scalar::Int(_) | Scalar::Float(_) => Ok(value),
                    Scalar::Str(t) => match loose_number(&t) {
                        Some(n) => {
                            self.resolved.push(Resolution {
                                parameter: format!("{parameter}.{op_name} value"),
                                input: t,
                                canonical: n.text(),
                            });
                            Ok(n)
                        }
                        None => Err(not_a_number(
                            self,
                            field,
                            &parameter,
                            op_name,
                            &format!("the string \"{t}\""),
                        )),
                    },
                    other => Err(not_a_number(
                        self,
                        field,
                        &parameter,
                        op_name,
                        &format!("`{}`", other.text()),
                    )),
                }
            };
            return Ok(match op {
                Op::Gt(v) => Op::Gt(read(v)?),
                Op::Gte(v) => Op::Gte(read(v)?),
                Op::Lt(v) => Op::Lt(read(v)?),
                Op::Lte(v) => Op::Lte(read(v)?),
                Op::Eq(v) => Op::Eq(read(v)?),
                Op::Ne(v) => Op::Ne(read(v)?),
                Op::In(vs) => Op::In(vs.into_iter().map(&mut read).collect::<Result<_, _>>()?),
                Op::Nin(vs) => Op::Nin(vs.into_iter().map(&mut read).collect::<Result<_, _>>()?),
                other => other,
            });
        }
        if field.locator == Some(crate::definition::LocatorKind::Law) {
            // A provision is looked up, never searched as a substring: `"第5条"` names the
            // article (and what is inside it), not every locator containing those characters.
            let op = match op {
                Op::Contains(t) => Op::Eq(Scalar::Str(t)),
                Op::NotContains(t) => Op::Ne(Scalar::Str(t)),
                other => other,
            };
            if op.is_exact() {
                return self.law_locators(field_id, op, &parameter);
            }
            return Ok(op);
        }
        if !op.is_exact() {
            return Ok(op);
        }
        let Some(Codelist::Static(_)) = &field.codelist else {
            return Ok(op);
        };
        Ok(match op {
            Op::In(values) => Op::In(
                values
                    .into_iter()
                    .map(|v| self.code(field_id, v, &parameter))
                    .collect::<Result<_, _>>()?,
            ),
            Op::Eq(v) => Op::Eq(self.code(field_id, v, &parameter)?),
            Op::Ne(v) => Op::Ne(self.code(field_id, v, &parameter)?),
            Op::Nin(values) => Op::Nin(
                values
                    .into_iter()
                    .map(|v| self.code(field_id, v, &parameter))
                    .collect::<Result<_, _>>()?,
            ),
            other => other,
        })
    }

    /// The provisions a list of law references names, each once, at most
    /// [`crate::request::MAX_VALUES`] in all (a reference may name several: `第1条から第3条まで`),
    /// so the condition planned from them stays one bounded set.
    fn provisions_of(
        values: &[Scalar],
        read: &mut impl FnMut(&Scalar) -> Result<Vec<Scalar>, RequestError>,
        parameter: &str,
        op: &str,
    ) -> Result<Vec<Scalar>, RequestError> {
        let mut all: Vec<Scalar> = Vec::new();
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        for v in values {
            for r in read(v)? {
                if seen.insert(r.text()) {
                    all.push(r);
                }
            }
            if all.len() > crate::request::MAX_VALUES {
                return Err(RequestError::invalid(
                    format!("{parameter}.{op}"),
                    format!(
                        "the references listed name more than {} provisions; `{op}` accepts at most {}",
                        crate::request::MAX_VALUES,
                        crate::request::MAX_VALUES
                    ),
                )
                .hint("name fewer provisions, or whole articles (an article holds its paragraphs and items)"));
            }
        }
        Ok(all)
    }

    /// Values of a `locator: law` field read as law references (`第5の2条第1項` →
    /// `第五条の二第一項`, lists → several provisions); each rewrite is disclosed.
    fn law_locators(
        &mut self,
        field_id: FieldId,
        op: Op,
        parameter: &str,
    ) -> Result<Op, RequestError> {
        let field = &self.def.fields[field_id];
        let mut read = |value: &Scalar| -> Result<Vec<Scalar>, RequestError> {
            let text = value.text();
            let refs = tally_plugin_api::locator::normalize_references(&text);
            if refs.is_empty() {
                return Err(RequestError::invalid(
                    format!("{parameter} value"),
                    format!(
                        "`{text}` names no article of a law, so it cannot be looked up in `{}`",
                        field.name
                    ),
                )
                .hint("write the provision with its article, e.g. 第5条第1項, 第五条の二 or 附則第3条; a paragraph alone (第2項) does not say which article")
                .example(self.tool, json!({ "dataset_id": self.def.id, "where": { field.name.clone(): "第5条第1項" } })));
            }
            if refs.len() != 1 || refs[0] != text {
                self.resolved.push(Resolution {
                    parameter: format!("{parameter} value"),
                    input: text,
                    canonical: refs.join(", "),
                });
            }
            Ok(refs.into_iter().map(Scalar::Str).collect())
        };
        Ok(match op {
            Op::Eq(v) => {
                let mut refs = read(&v)?;
                if refs.len() == 1 {
                    Op::Eq(refs.remove(0))
                } else {
                    Op::In(refs)
                }
            }
            Op::In(values) => Op::In(Self::provisions_of(&values, &mut read, parameter, "$in")?),
            Op::Nin(values) => Op::Nin(Self::provisions_of(&values, &mut read, parameter, "$nin")?),
            Op::Ne(v) => {
                let refs = read(&v)?;
                match <[Scalar; 1]>::try_from(refs) {
                    Ok([one]) => Op::Ne(one),
                    Err(refs) => {
                        return Err(RequestError::invalid(
                            format!("{parameter}.$ne"),
                            format!(
                                "`{}` names {} provisions; `$ne` takes one",
                                v.text(),
                                refs.len()
                            ),
                        )
                        .hint("exclude one provision at a time"));
                    }
                }
            }
            other => other,
        })
    }

    /// A plain string on a field with a static codelist that is one code (or one code's
    /// label: `実施済` for `1 実施済`) means that code, not every code containing it
    /// (`5 一部実施済` too); the reading is disclosed. Anything else stays a substring.
    fn plain_code(&mut self, field_id: FieldId, op: Op) -> Op {
        let Op::Contains(text) = &op else {
            return op;
        };
        let field = &self.def.fields[field_id];
        if !matches!(field.codelist, Some(Codelist::Static(_))) {
            return op;
        }
        let codes = field.static_codes().unwrap_or(&[]);
        match find_code(codes, text) {
            Some(code) => {
                // Disclosed even when typed exactly: the plain string was read as `[code]`,
                // not as the substring search it means elsewhere.
                self.resolved.push(Resolution {
                    parameter: format!("where.{} value", field.name),
                    input: text.clone(),
                    canonical: code.to_string(),
                });
                Op::Eq(Scalar::Str(code.to_string()))
            }
            None => op,
        }
    }

    /// A value of a static codelist: exact → NFKC → the code with or without its prefix
    /// (`実施済` ↔ `1 実施済`, or the bare number `1`); never a fuzzy guess.
    fn code(
        &mut self,
        field_id: FieldId,
        value: Scalar,
        parameter: &str,
    ) -> Result<Scalar, RequestError> {
        let field: &Field = &self.def.fields[field_id];
        let codes = field.static_codes().unwrap_or(&[]);
        let text = value.text();
        if codes.iter().any(|c| c.value == text) {
            return Ok(Scalar::Str(text));
        }
        let fits = || names::ambiguous(&text, codes.iter().map(|c| c.value.as_str()));
        if let Some(choice) = self
            .chosen
            .iter()
            .find(|c| c.parameter == parameter && c.input == text)
            && fits().contains(&choice.name.as_str())
        {
            let code = choice.name.clone();
            self.resolved.push(Resolution {
                parameter: parameter.to_string(),
                input: text,
                canonical: code.clone(),
            });
            return Ok(Scalar::Str(code));
        }
        let wanted = normalize(&text);
        match find_code(codes, &text) {
            Some(code) => {
                self.resolved.push(Resolution {
                    parameter: format!("{parameter} value"),
                    input: text,
                    canonical: code.to_string(),
                });
                Ok(Scalar::Str(code.to_string()))
            }
            None => {
                // Closest first: the input compared with each code and with its label.
                let mut ranked: Vec<(f64, usize)> = codes
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let by_value = names::similarity(&wanted, &normalize(&c.value));
                        let by_label = c
                            .label()
                            .map_or(0.0, |l| names::similarity(&wanted, &normalize(l)));
                        (by_value.max(by_label), i)
                    })
                    .collect();
                ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                let candidates: Vec<Candidate> = ranked
                    .iter()
                    .map(|(_, i)| {
                        Candidate::described(
                            codes[*i].value.clone(),
                            codes[*i].description.as_deref(),
                        )
                    })
                    .collect();
                let first = candidates
                    .first()
                    .map(|c| c.name.clone())
                    .unwrap_or_default();
                let fits = fits();
                let message = if fits.len() > 1 {
                    format!(
                        "`{text}` is ambiguous among the codes of `{}`: it fits {} ({}); name one exactly",
                        field.name,
                        fits.len(),
                        fits.iter()
                            .map(|c| format!("`{c}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!("`{text}` is not a code of `{}`", field.name)
                };
                let mut err = RequestError::new(ErrorCode::InvalidCode, message)
                    .at(parameter.to_string())
                    .candidates(candidates, codes.len())
                    .hint("exact comparisons (an array, $eq, $in, $ne) take codes as listed; for a substring search pass a plain string instead")
                    .example(
                        self.tool,
                        json!({ "dataset_id": self.def.id, "where": { field.name.clone(): [first] } }),
                    );
                if fits.len() > 1 {
                    err.ambiguous = Some(Box::new(crate::error::Ambiguous {
                        what: "code",
                        parameter: parameter.to_string(),
                        input: text.clone(),
                        choices: fits
                            .iter()
                            .filter_map(|v| codes.iter().find(|c| c.value == *v))
                            .map(|c| {
                                Candidate::described(c.value.clone(), c.description.as_deref())
                            })
                            .collect(),
                    }));
                }
                Err(err)
            }
        }
    }

    fn metric(&mut self, input: &str) -> Result<Metric, RequestError> {
        let def = self.def;
        let normalized = normalize(input).replace('：', ":");
        let (kind, target) = match normalized.split_once(':') {
            Some((k, _)) => (k.trim().to_string(), Some(input_target(input))),
            None => (normalized.trim().to_string(), None),
        };
        let measures: Vec<&str> = def
            .fields
            .iter()
            .filter(|f| f.role == Role::Measure)
            .map(|f| f.name.as_str())
            .collect();
        let example_metric = match (measures.first(), def.computed_measures.first()) {
            (_, Some(m)) => format!("avg:{}", m.name),
            (Some(f), None) => format!("sum:{f}"),
            (None, None) => "count".to_string(),
        };
        let kind = self.metric_kind(input, &kind, &example_metric)?;
        if kind == MetricKind::Count {
            if target.is_some() {
                let err = RequestError::new(
                    ErrorCode::UnknownMetric,
                    format!("`{input}`: count takes no field"),
                )
                .at("metrics")
                .candidates(
                    vec![Candidate::described("count", Some("rows in each group"))],
                    1,
                )
                .hint("write `count`; it counts the rows of each group");
                return Err(self.example_with(err, "metrics", "count"));
            }
            return Ok(Metric::Count);
        }
        let Some(target) = target.filter(|t| !t.is_empty()) else {
            let err = RequestError::invalid("metrics", format!("`{input}` names no field")).hint(
                format!(
                    "write `{kind}:<measure>`; measures: {}",
                    measures.join(", ")
                ),
            );
            return Err(self.example_with(err, "metrics", &example_metric));
        };
        let target = self.chosen_measure(&target, &measures).unwrap_or(target);
        if kind != MetricKind::Count
            && let Some(computed) = self.computed_metric(input, kind, &target)?
        {
            return Ok(computed);
        }
        let field = self.measure_field(input, kind, &target, &measures, &example_metric)?;
        self.check_measure_role(input, kind, field, &measures, &example_metric)?;
        Ok(match kind {
            MetricKind::Sum => Metric::Sum(field),
            MetricKind::Avg => Metric::Avg(field),
            MetricKind::Min => Metric::Min(field),
            MetricKind::Max => Metric::Max(field),
            MetricKind::Last => Metric::Last(field),
            // Answered above: `count` takes no field.
            MetricKind::Count => Metric::Count,
        })
    }

    /// The kind of a metric (`count`, `sum`, …) named by `kind`, the part before its `:`.
    fn metric_kind(
        &self,
        input: &str,
        kind: &str,
        example_metric: &str,
    ) -> Result<MetricKind, RequestError> {
        let kind = match names::resolve(kind, MetricKind::ALL.map(MetricKind::as_str)) {
            Ok(r) => Some(MetricKind::ALL[r.index]),
            Err(_) => MetricKind::synonym(kind),
        };
        let Some(kind) = kind else {
            let err = RequestError::new(ErrorCode::UnknownMetric, format!("unknown metric `{input}`"))
                .at("metrics")
                .candidates(
                    self.ranked_metric_candidates(input).into_iter().take(MAX_CANDIDATES).collect(),
                    self.metric_candidates().len(),
                )
                .hint(if self.def.time_field().is_some() {
                    "a metric is `count`, or `sum:F`, `avg:F`, `min:F`, `max:F`, `last:F` (at each group's latest period) with F a measure, or `avg:<computed measure>`"
                } else {
                    "a metric is `count`, or `sum:F`, `avg:F`, `min:F`, `max:F` with F a measure, or `avg:<computed measure>`"
                });
            return Err(self.example_with(err, "metrics", example_metric));
        };
        Ok(kind)
    }

    /// The computed measure `target` names, if any: only averaged; `None` when it names none.
    fn computed_metric(
        &self,
        input: &str,
        kind: MetricKind,
        target: &str,
    ) -> Result<Option<Metric>, RequestError> {
        let def = self.def;
        let computed = def.computed_measures.iter().map(|m| m.name.as_str());
        let outcome = names::resolve(target, computed);
        let declared = def.field(target).is_some();
        if !declared
            && let Some(err) = self.undeclared(target, "metrics", outcome.as_ref().ok().copied())
        {
            return Err(err);
        }
        if let Ok(r) = outcome {
            let index = r.index;
            if kind != MetricKind::Avg {
                let err = RequestError::new(
                    ErrorCode::RoleMismatch,
                    format!(
                        "`{input}`: `{}` is a computed measure (a ratio); it can only be averaged",
                        r.canonical
                    ),
                )
                .at("metrics")
                .candidates(vec![Candidate::new(format!("avg:{}", r.canonical))], 1)
                .hint(format!("use `avg:{}`", r.canonical));
                return Err(self.example_with(err, "metrics", &format!("avg:{}", r.canonical)));
            }
            return Ok(Some(Metric::AvgComputed(MeasureId::at(index))));
        }
        Ok(None)
    }

    /// The declared field `target` names, refused with the measures ranked when none fits.
    fn measure_field(
        &self,
        input: &str,
        kind: MetricKind,
        target: &str,
        measures: &[&str],
        example_metric: &str,
    ) -> Result<FieldId, RequestError> {
        let def = self.def;
        let field_names = def.fields.iter().map(|f| f.name.as_str());
        let outcome = names::resolve(target, field_names);
        if let Some(err) = self.undeclared(target, "metrics", outcome.as_ref().ok().copied()) {
            return Err(err);
        }
        match outcome {
            Ok(r) => Ok(FieldId::at(r.index)),
            Err(_) => {
                let pool: Vec<&str> = measures
                    .iter()
                    .copied()
                    .chain(def.computed_measures.iter().map(|m| m.name.as_str()))
                    .collect();
                let ranked = names::rank(target, pool.iter().copied());
                let candidates = ranked
                    .iter()
                    .take(MAX_CANDIDATES)
                    .map(|n| Candidate::new(format!("{kind}:{n}")))
                    .collect();
                let fits = names::ambiguous(target, pool.iter().copied());
                let message = if fits.len() > 1 {
                    format!(
                        "`{input}`: `{target}` is ambiguous in dataset `{}`: it fits {} measures ({}); name one exactly",
                        def.id,
                        fits.len(),
                        fits.iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!("`{input}`: dataset `{}` has no measure `{target}`", def.id)
                };
                let mut err = RequestError::new(ErrorCode::UnknownMetric, message)
                    .at("metrics")
                    .candidates(candidates, pool.len())
                    .hint(format!("measures: {}", pool.join(", ")));
                if fits.len() > 1 {
                    err.ambiguous = Some(Box::new(crate::error::Ambiguous {
                        what: "measure",
                        parameter: "metrics".into(),
                        input: target.to_string(),
                        choices: fits
                            .iter()
                            .map(|n| Candidate::described(*n, self.measure_description(n)))
                            .collect(),
                    }));
                }
                let best = ranked
                    .first()
                    .map(|b| format!("{kind}:{b}"))
                    .unwrap_or_else(|| example_metric.to_string());
                Err(self.example_with(err, "metrics", &best))
            }
        }
    }

    /// Refuses a field that is not a measure: only measures are aggregated.
    fn check_measure_role(
        &self,
        input: &str,
        kind: MetricKind,
        field: FieldId,
        measures: &[&str],
        example_metric: &str,
    ) -> Result<(), RequestError> {
        let f = &self.def.fields[field];
        if f.role != Role::Measure {
            let err = RequestError::new(
                ErrorCode::RoleMismatch,
                format!(
                    "`{input}`: `{}` has role `{}`; only measures can be aggregated",
                    f.name,
                    f.role.as_str()
                ),
            )
            .at("metrics")
            .candidates(
                measures.iter().map(|m| Candidate::new(format!("{kind}:{m}"))).collect(),
                measures.len(),
            )
            .hint(format!(
                "to count rows per value of `{}`, group by it: \"group_by\": [\"{}\"], \"metrics\": [\"count\"]",
                f.name, f.name
            ));
            return Err(self.example_with(err, "metrics", example_metric));
        }
        Ok(())
    }

    /// Every valid metric, closest to `input` first.
    fn ranked_metric_candidates(&self, input: &str) -> Vec<Candidate> {
        let all = self.metric_candidates();
        names::rank(input, all.iter().map(|c| c.name.as_str()))
            .iter()
            .filter_map(|n| all.iter().find(|c| c.name == *n).cloned())
            .collect()
    }

    fn metric_candidates(&self) -> Vec<Candidate> {
        let def = self.def;
        let mut out = vec![Candidate::described("count", Some("rows in each group"))];
        for f in def.fields.iter().filter(|f| f.role == Role::Measure) {
            // `last:` is of data with periods.
            let timed = def.time_field().is_some();
            for kind in MetricKind::ALL
                .iter()
                .filter(|k| k.takes_field() && (timed || **k != MetricKind::Last))
            {
                out.push(Candidate::new(format!("{kind}:{}", f.name)));
            }
        }
        for m in &def.computed_measures {
            out.push(Candidate::described(
                format!("avg:{}", m.name),
                m.desc.as_deref(),
            ));
        }
        out
    }
}

/// The one code of a static codelist that `text` names, by one rule for every form a value
/// comes in (a plain string, an array, `$eq`, `$in`, `$ne`): the code as listed → the same
/// under NFKC → its label alone (`実施済` for `1 実施済`) → its number alone (`2` for
/// `2 独立行政法人等`) → the code written with a prefix it does not have (`1 弁護士` for
/// `弁護士`). A text that fits several codes names none (never a guess).
pub fn find_code<'c>(codes: &'c [crate::definition::Code], text: &str) -> Option<&'c str> {
    if let Some(c) = codes.iter().find(|c| c.value == text) {
        return Some(c.value.as_str());
    }
    let wanted = normalize(text);
    let by = |f: &dyn Fn(&crate::definition::Code) -> bool| -> Option<&'c str> {
        let mut hits = codes.iter().filter(|c| f(c));
        match (hits.next(), hits.next()) {
            (Some(one), None) => Some(one.value.as_str()),
            _ => None,
        }
    };
    by(&|c| normalize(&c.value) == wanted)
        .or_else(|| by(&|c| c.label().is_some_and(|l| normalize(l) == wanted)))
        .or_else(|| {
            by(&|c| {
                c.label().is_some()
                    && c.value
                        .split_once([' ', '\u{3000}'])
                        .is_some_and(|(p, _)| normalize(p) == wanted)
            })
        })
        .or_else(|| {
            let (_, rest) = text.split_once([' ', '\u{3000}'])?;
            by(&|c| c.label().is_none() && normalize(&c.value) == normalize(rest))
        })
}

/// The part after the colon, as typed (names are resolved separately).
fn input_target(input: &str) -> String {
    input
        .split_once([':', '：'])
        .map(|(_, t)| t.trim().to_string())
        .unwrap_or_default()
}

/// A number written as text: NFKC (full-width digits), without thousands separators or
/// surrounding space; `None` unless the whole text is one finite number.
fn loose_number(text: &str) -> Option<Scalar> {
    let t = names::nfkc_value(text).replace([',', '_'], "");
    if t.is_empty() {
        return None;
    }
    if let Ok(i) = t.parse::<i64>() {
        return Some(Scalar::Int(i));
    }
    t.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && t.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)))
        .map(Scalar::Float)
}

fn not_a_number(
    r: &Resolver<'_>,
    field: &Field,
    parameter: &str,
    op: &str,
    found: &str,
) -> RequestError {
    RequestError::invalid(
        format!("{parameter}.{op}"),
        format!(
            "`{}` is a number field ({}); `{op}` needs a number, found {found}",
            field.name,
            field.data_type.as_str()
        ),
    )
    .hint("send a number (quotes are fine: \"1000\"); to search the digits as text use a plain string, e.g. {\"F\": \"100\"}")
    .example(
        r.tool,
        json!({ "dataset_id": r.def.id, "where": { field.name.clone(): { "$gte": 100 } } }),
    )
}

/// The columns a query returns when `select` is not given: enough to tell the records apart
/// and read them (the id field, name-like attributes such as `手続名`, the dimensions), plus
/// every field the call filters, orders or searches by, in declared order. The rest is named
/// in the result with how to ask for it: all 38 columns of 50 records is some 25,000
/// characters, more of a model's context than most questions need.
pub fn default_projection(
    def: &DatasetDef,
    filters: &[Filter],
    order_by: &[Sort],
    search_fields: &[FieldId],
) -> Vec<FieldId> {
    let name_like = |f: &Field| {
        let n = f.name.to_lowercase();
        f.role == Role::Attr
            && !f.is_multi_value()
            && (n.ends_with('名')
                || n.ends_with("名称")
                || n.contains("title")
                || n.ends_with("name"))
    };
    (0..def.column_fields().len())
        .map(FieldId::at)
        .filter(|&i| {
            let f = &def.fields[i];
            f.role == Role::Id
                || def.id_field.as_deref() == Some(f.name.as_str())
                || f.role == Role::Dim
                || f.role == Role::Time
                || name_like(f)
                || filters.iter().any(|x| x.field == i)
                || order_by.iter().any(|s| s.field == i)
                || search_fields.contains(&i)
        })
        .collect()
}

/// Resolves a `query_records` call against `def`.
pub fn resolve_query(def: &DatasetDef, args: QueryArgs) -> Result<QueryPlan, RequestError> {
    let mut r = Resolver {
        def,
        tool: "query_records",
        resolved: Vec::new(),
        notices: args.notices,
        chosen: args.chosen,
        latest: None,
    };
    let q = args.q.filter(|q| !q.trim().is_empty());
    let search_fields = r.fields(&args.search_fields, "search_fields")?;
    if q.is_none() && !search_fields.is_empty() {
        r.notices.push(Notice {
            parameter: "search_fields".into(),
            message: "search_fields has no effect without q".into(),
        });
    }
    let select = r.fields(&args.select, "select")?;
    r.columns_only(&select, "select")?;
    r.columns_only(&search_fields, "search_fields")?;
    let filters = r.filters(args.conditions)?;
    let mut order_by: Vec<Sort> = Vec::new();
    for key in &args.order_by {
        let (name, descending) = parse_order_key(key);
        let before = r.resolved.len();
        let field = r.field(name, "order_by")?;
        // Report the whole key as typed (`-総手続き件数` → `-総手続件数`).
        let sign = if descending { "-" } else { "" };
        if let Some(res) = r.resolved.get_mut(before) {
            res.input = key.clone();
            res.canonical = format!("{sign}{}", res.canonical);
        } else if *key != format!("{sign}{name}") {
            r.resolved.push(Resolution {
                parameter: "order_by".into(),
                input: key.clone(),
                canonical: format!("{sign}{name}"),
            });
        }
        if !order_by.iter().any(|s| s.field == field) {
            order_by.push(Sort { field, descending });
        }
    }
    r.columns_only(
        &order_by.iter().map(|s| s.field).collect::<Vec<_>>(),
        "order_by",
    )?;
    let select = if select.is_empty() {
        default_projection(def, &filters, &order_by, &search_fields)
    } else {
        select
    };
    let as_of = resolve_as_of(def, args.as_of.as_deref(), &filters)?;
    let latest = r.latest.map(|(field, previous)| Latest {
        field,
        defaulted: false,
        previous,
    });
    Ok(QueryPlan {
        dataset_id: def.id.clone(),
        q,
        search_fields,
        select,
        filters,
        order_by,
        limit: args.limit,
        cursor: args.cursor,
        as_of,
        latest,
        resolved_fields: r.resolved,
        notices: r.notices,
    })
}

/// The `as_of` date of a call: `YYYY-MM-DD` (full-width digits read too), on a dataset that
/// declares `revisions`, whose revision fields the call does not also filter on.
pub fn resolve_as_of(
    def: &DatasetDef,
    given: Option<&str>,
    filters: &[Filter],
) -> Result<Option<String>, RequestError> {
    let Some(given) = given.map(str::trim).filter(|g| !g.is_empty()) else {
        return Ok(None);
    };
    let Some(revisions) = &def.revisions else {
        return Err(RequestError::invalid(
            "as_of",
            format!(
                "dataset `{}` has no revisions: as_of reads the revision in force on a date, for datasets that declare `revisions` (law texts)",
                def.id
            ),
        )
        .hint("leave out as_of"));
    };
    let date: String = names::nfkc_value(given);
    let valid = date.len() == 10
        && date.as_bytes()[4] == b'-'
        && date.as_bytes()[7] == b'-'
        && date
            .char_indices()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && {
            let month: u32 = date[5..7].parse().unwrap_or(0);
            let day: u32 = date[8..10].parse().unwrap_or(0);
            (1..=12).contains(&month) && (1..=31).contains(&day)
        };
    if !valid {
        return Err(RequestError::invalid(
            "as_of",
            format!("as_of `{given}` is not a date written YYYY-MM-DD"),
        )
        .hint("write the date as YYYY-MM-DD, e.g. \"2020-04-01\""));
    }
    if let Some(f) = filters
        .iter()
        .find(|f| f.field == revisions.effective || revisions.id == Some(f.field))
    {
        return Err(RequestError::invalid(
            "as_of",
            format!(
                "as_of picks the revision in force on {date}, and `where` also names the revision by `{}`",
                def.fields[f.field].name
            ),
        )
        .hint(format!(
            "leave out as_of to read the revision `where` names, or leave the condition on `{}` out",
            def.fields[f.field].name
        )));
    }
    Ok(Some(date))
}

/// A resolved `cite_provisions` call: its conditions and groups on the dataset (as a summary
/// counting records), and the link it follows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CitePlan {
    pub records: SummarizePlan,
    pub link: crate::definition::Link,
    /// Checked against the linked dataset (its `revisions`) by whoever opens it.
    pub as_of: Option<String>,
    /// The page asked for: a `next_cursor` as returned, checked by the engine (signed, for
    /// this call and these datasets' versions).
    pub cursor: Option<String>,
}

impl CitePlan {
    /// The call as resolved, as arguments `cite_provisions` takes (see [`QueryPlan::to_call`]).
    pub fn to_call(&self, def: &DatasetDef) -> serde_json::Value {
        let mut call = json!({
            "dataset_id": self.records.dataset_id,
            "where": conditions(self.records.filters.iter().map(|f| (def.fields[f.field].name.as_str(), &f.op))),
            "group_by": names_of(def, &self.records.group_by),
            "link": self.link.to,
            "limit": self.records.limit,
        });
        if let Some(date) = &self.as_of {
            call["as_of"] = json!(date);
        }
        // A page is asked again with its cursor (`tally verify` re-runs that page).
        if let Some(cursor) = &self.cursor {
            call["cursor"] = json!(cursor);
        }
        call
    }
}

/// Resolves a `cite_provisions` call on `def`: which of its links (the only one when none is
/// named), and its conditions and groups as a count of records.
pub fn resolve_cite(
    def: &DatasetDef,
    args: crate::request::CiteArgs,
) -> Result<CitePlan, RequestError> {
    let link = match (&args.link, def.links.as_slice()) {
        (_, []) => {
            return Err(RequestError::invalid(
                "dataset_id",
                format!(
                    "dataset `{}` links to no other dataset, so its records rest on no provisions Tally can cite",
                    def.id
                ),
            )
            .hint("cite_provisions works on a dataset whose definition has `links` (e.g. procedures linked to a law dataset); use query_records on this one"));
        }
        (None, [only]) => only.clone(),
        (None, several) => {
            return Err(RequestError::invalid(
                "link",
                format!(
                    "dataset `{}` links to several datasets; name one in `link`",
                    def.id
                ),
            )
            .candidates(
                several
                    .iter()
                    .map(|l| Candidate::new(l.to.clone()))
                    .collect(),
                several.len(),
            ));
        }
        (Some(name), links) => {
            let folded = names::nfkc_value(name);
            match links
                .iter()
                .find(|l| l.to == *name || names::nfkc_value(&l.to) == folded)
            {
                Some(l) => l.clone(),
                None => {
                    return Err(RequestError::new(
                        ErrorCode::UnknownDataset,
                        format!("dataset `{}` has no link to `{name}`", def.id),
                    )
                    .at("link")
                    .candidates(
                        links.iter().map(|l| Candidate::new(l.to.clone())).collect(),
                        links.len(),
                    ));
                }
            }
        }
    };
    let records = resolve_summarize(
        def,
        crate::request::SummarizeArgs {
            dataset_id: args.dataset_id,
            metrics: Vec::new(),
            group_by: args.group_by,
            conditions: args.conditions,
            having: Vec::new(),
            explode: Vec::new(),
            order_by: Vec::new(),
            limit: args.limit,
            as_of: None,
            compare: None,
            rank: false,
            notices: args.notices,
            chosen: args.chosen,
        },
    )?;
    if let Some(g) = records
        .group_by
        .iter()
        .find(|g| !def.fields[**g].is_column())
    {
        let name = &def.fields[*g].name;
        return Err(RequestError::invalid(
            format!("group_by.{name}"),
            format!("`{name}` is looked up from another field (a roll-up or a related dataset's field); cite_provisions groups by the records' own fields"),
        )
        .hint("group_by a field of the records; summarize_records groups by roll-ups and related fields"));
    }
    let as_of = args
        .as_of
        .map(|d| names::nfkc_value(&d))
        .filter(|d| !d.is_empty());
    Ok(CitePlan {
        records,
        link,
        as_of,
        cursor: args.cursor,
    })
}

/// `F`, `-F`, `+F`, `F desc`, `F asc`.
fn parse_order_key(key: &str) -> (&str, bool) {
    let key = key.trim();
    if let Some(rest) = key.strip_prefix('-') {
        return (rest.trim(), true);
    }
    if let Some(rest) = key.strip_prefix('+') {
        return (rest.trim(), false);
    }
    let lower = key.to_ascii_lowercase();
    if lower.ends_with(" desc") {
        return (key[..key.len() - 5].trim(), true);
    }
    if lower.ends_with(" asc") {
        return (key[..key.len() - 4].trim(), false);
    }
    (key, false)
}

/// Resolves a `summarize_records` call against `def`.
pub fn resolve_summarize(
    def: &DatasetDef,
    args: SummarizeArgs,
) -> Result<SummarizePlan, RequestError> {
    let mut r = Resolver {
        def,
        tool: "summarize_records",
        resolved: Vec::new(),
        notices: args.notices,
        chosen: args.chosen,
        latest: None,
    };
    let metric_inputs = if args.metrics.is_empty() {
        vec!["count".to_string()]
    } else {
        args.metrics
    };
    let metrics = r.summary_metrics(&metric_inputs)?;

    let mut group_by = r.fields(&args.group_by, "group_by")?;
    r.check_groupable(&group_by)?;

    let explode = r.explode(&args.explode, &mut group_by)?;

    let mut filters = r.filters(args.conditions)?;
    let compare = match args.compare {
        Some(c) => Some(r.compare(c, &mut group_by, &mut filters, &explode)?),
        None => None,
    };

    let result = SummaryColumns::new(
        def,
        &metric_inputs,
        &metrics,
        &group_by,
        compare.as_ref(),
        args.rank,
    );
    let having = r.having(args.having, &result)?;
    let order_by = r.order_by(&args.order_by, &result)?;

    let as_of = resolve_as_of(def, args.as_of.as_deref(), &filters)?;
    // Over a dataset of several periods, a summary is of one period, or of several told
    // apart: with no condition on the time field and no grouping by it, the latest.
    let latest = match (r.latest, def.time_field()) {
        (Some((field, previous)), _) => Some(Latest {
            field,
            defaulted: false,
            previous,
        }),
        // `last:` reads each group at its own latest period, so the others are read too.
        (None, Some(time))
            if !group_by.contains(&time)
                && !filters.iter().any(|f| f.field == time)
                && !metrics.iter().any(|m| matches!(m, Metric::Last(_))) =>
        {
            Some(Latest {
                field: time,
                defaulted: true,
                previous: false,
            })
        }
        _ => None,
    };
    r.check_aggregations(&metrics, &group_by, &filters, latest)?;
    Ok(SummarizePlan {
        dataset_id: def.id.clone(),
        metrics,
        group_by,
        filters,
        having,
        explode,
        order_by,
        limit: args.limit,
        as_of,
        latest,
        compare,
        rank: args.rank,
        resolved_fields: r.resolved,
        notices: r.notices,
    })
}

impl Resolver<'_> {
    /// Refuses a derived field (a roll-up level, a related dataset's field) where the
    /// records' own columns are read: it is grouped and filtered by, not read record by record.
    fn columns_only(&self, fields: &[FieldId], parameter: &str) -> Result<(), RequestError> {
        let def = self.def;
        match fields.iter().find(|f| !def.fields[**f].is_column()) {
            Some(f) => {
                let name = &def.fields[*f].name;
                let key = def.fields[*f]
                    .derived
                    .as_ref()
                    .map(|d| def.fields[d.key].name.clone())
                    .unwrap_or_default();
                Err(RequestError::invalid(
                    format!("{parameter}.{name}"),
                    format!("`{name}` is looked up from `{key}` (a roll-up or a related dataset's field): it is grouped and filtered by, not read record by record"),
                )
                .hint(format!("{parameter} `{key}`; or summarize_records with group_by `{name}`")))
            }
            None => Ok(()),
        }
    }

    /// Resolves `compare` against the dataset's time field: two periods (each one period,
    /// read as a condition on the time field is) are kept and grouped by; `previous` groups
    /// by the time field. Refused on a dataset without a time field, with a condition or
    /// grouping that contradicts it, or with exploded fields.
    fn compare(
        &mut self,
        arg: CompareArg,
        group_by: &mut Vec<FieldId>,
        filters: &mut Vec<Filter>,
        explode: &[FieldId],
    ) -> Result<Compare, RequestError> {
        let def = self.def;
        let Some(time) = def.time_field() else {
            return Err(RequestError::invalid(
                "compare",
                format!(
                    "`compare` sets periods of a time field side by side, and dataset `{}` declares none (`role: time` in dataset.yaml)",
                    def.id
                ),
            )
            .hint("group_by the field that holds the periods and compare the rows; or declare it `role: time` with its `grain`"));
        };
        let t = def.fields[time].name.clone();
        if !explode.is_empty() {
            return Err(RequestError::invalid(
                "compare",
                "`compare` cannot be combined with exploded multi-value fields",
            )
            .hint(
                "compare whole records (leave explode out), or ask each period in its own call",
            ));
        }
        match arg {
            CompareArg::Previous => {
                let grouped = group_by.contains(&time);
                if !grouped {
                    group_by.push(time);
                }
                Ok(Compare::Previous {
                    field: time,
                    grouped,
                })
            }
            CompareArg::Periods { from, to } => {
                if group_by.contains(&time) {
                    return Err(RequestError::invalid(
                        format!("group_by.{t}"),
                        format!("`compare` sets the periods of `{t}` side by side as columns, so `{t}` is not also a group_by key"),
                    )
                    .hint(format!("leave `{t}` out of group_by; or send `\"compare\": \"previous\"` to keep one row per period with the change from the one before")));
                }
                if filters.iter().any(|f| f.field == time) {
                    return Err(RequestError::invalid(
                        format!("where.{t}"),
                        format!("`compare` names the periods of `{t}` read, so `where` holds no condition on `{t}`"),
                    )
                    .hint(format!("leave the condition on `{t}` out of where")));
                }
                let mut relative = Vec::new();
                let mut period = |end: &'static str,
                                  value: Scalar|
                 -> Result<Scalar, RequestError> {
                    let parameter = format!("compare.{end}");
                    let cond = Condition {
                        target: t.clone(),
                        op: Op::Eq(value.clone()),
                        plain: false,
                    };
                    let op = match self.period(time, cond)? {
                        Period::Other(c) => self.check_operand(time, c.op)?,
                        // Set by the engine, which reads the periods there are.
                        Period::Latest(previous) => {
                            relative.push(RelativeEnd {
                                end,
                                previous,
                                input: value.text(),
                            });
                            Op::Eq(Scalar::Str(
                                if previous { "previous" } else { "latest" }.into(),
                            ))
                        }
                        Period::Range(..) => {
                            return Err(RequestError::invalid(
                                parameter.clone(),
                                format!("`{parameter}` is one period of `{t}` (such as 2020); `{}` is not one", value.text()),
                            )
                            .hint("name each period; inspect_dataset lists the periods of the time field"));
                        }
                    };
                    self.said_of(&t, &parameter);
                    match op {
                        Op::Eq(v) => Ok(v),
                        _ => Err(RequestError::invalid(
                            parameter.clone(),
                            format!("`{parameter}` is one period of `{t}` (such as 2020)"),
                        )),
                    }
                };
                let from = period("from", from)?;
                let to = period("to", to)?;
                if from.text() == to.text() {
                    return Err(RequestError::invalid(
                        "compare",
                        format!(
                            "`compare` needs two different periods; both are {}",
                            from.text()
                        ),
                    ));
                }
                // With an end relative to the data, the engine adds the condition once it is set.
                if relative.is_empty() {
                    filters.push(Filter {
                        field: time,
                        op: Op::In(vec![from.clone(), to.clone()]),
                    });
                }
                group_by.push(time);
                Ok(Compare::Periods {
                    field: time,
                    from,
                    to,
                    relative,
                })
            }
        }
    }

    /// The readings and notices [`Resolver::period`] records are of a condition on the time
    /// field `t`; said of `parameter` (an end of `compare`) instead.
    fn said_of(&mut self, t: &str, parameter: &str) {
        for r in &mut self.resolved {
            if r.parameter == format!("where.{t}")
                || r.parameter.starts_with(&format!("where.{t}."))
            {
                r.parameter = parameter.to_string();
            }
        }
        for n in &mut self.notices {
            if n.parameter == format!("where.{t}") {
                n.parameter = parameter.to_string();
            }
        }
    }

    /// Refuses a metric a measure's `aggregation` forbids, with the reason and the forms that
    /// are allowed: a rate summed, a rate averaged with no declared weight, a stock summed
    /// over several periods.
    fn check_aggregations(
        &self,
        metrics: &[Metric],
        group_by: &[FieldId],
        filters: &[Filter],
        latest: Option<Latest>,
    ) -> Result<(), RequestError> {
        let def = self.def;
        let time = def.time_field();
        // Whether a group may hold records of several periods.
        let periods = time.filter(|t| {
            latest.is_none()
                && !group_by.contains(t)
                && !filters.iter().any(|f| {
                    f.field == *t
                        && match &f.op {
                            Op::Eq(_) => true,
                            Op::In(values) => values.len() == 1,
                            _ => false,
                        }
                })
        });
        for m in metrics {
            if let Metric::Last(f) = m {
                self.check_last(*f, time)?;
                continue;
            }
            let (field, summed) = match m {
                Metric::Sum(f) => (*f, true),
                Metric::Avg(f) => (*f, false),
                _ => continue,
            };
            let f = &def.fields[field];
            let name = &f.name;
            let refusal = match (f.aggregation, summed) {
                (Some(Aggregation::Rate), true) => Some((
                    format!(
                        "`{name}` is a rate: rates are not summed (the rates of two prefectures do not add up to the rate of both)"
                    ),
                    match f.weight {
                        Some(w) => format!(
                            "`avg:{name}` is its average weighted by `{}`; `min:{name}`/`max:{name}`, or query_records for each record's value",
                            def.fields[w].name
                        ),
                        None => format!(
                            "`min:{name}`/`max:{name}`, or query_records for each record's value"
                        ),
                    },
                )),
                (Some(Aggregation::Rate), false) if f.weight.is_none() => Some((
                    format!(
                        "`{name}` is a rate, and an unweighted average of rates is wrong (a small prefecture would count as much as a large one); dataset.yaml declares no `weight` to average it by"
                    ),
                    format!(
                        "`min:{name}`/`max:{name}`, or query_records for each record's value; or declare `weight: <the measure the rate is of>` on `{name}` in dataset.yaml"
                    ),
                )),
                (Some(Aggregation::Stock), true) if periods.is_some() => {
                    let t = &def.fields[periods.unwrap_or(field)].name;
                    Some((
                        format!(
                            "`{name}` is a stock (a level at a point in time): summed over several periods of `{t}` it would count the same things once a period"
                        ),
                        format!(
                            "group_by `{t}`, or a condition on one period (`{{\"{t}\": 2020}}` or `\"latest\"`); `avg:{name}` is its mean level over the periods, `last:{name}` its level at each group's latest period"
                        ),
                    ))
                }
                _ => None,
            };
            if let Some((message, hint)) = refusal {
                return Err(RequestError::new(ErrorCode::NotAdditive, message)
                    .at(format!("metrics.{}", m.column(def)))
                    .hint(hint));
            }
        }
        Ok(())
    }
}

impl Resolver<'_> {
    /// `last:F` needs a time field, and sums F over a group's records of one period: refused
    /// for a rate (which is never summed).
    fn check_last(&self, f: FieldId, time: Option<FieldId>) -> Result<(), RequestError> {
        let def = self.def;
        let name = &def.fields[f].name;
        if time.is_none() {
            return Err(RequestError::invalid(
                format!("metrics.last:{name}"),
                format!("`last:{name}` is the value at each group's latest period, and dataset `{}` declares no time field", def.id),
            )
            .hint(format!("`sum:{name}`, `max:{name}`; or declare the field holding the periods `role: time` with its `grain`")));
        }
        if def.fields[f].aggregation == Some(Aggregation::Rate) {
            return Err(RequestError::new(
                ErrorCode::NotAdditive,
                format!("`{name}` is a rate: `last:` sums a group's records of its latest period, and rates are not summed"),
            )
            .at(format!("metrics.last:{name}"))
            .hint(format!("a condition on one period (`\"latest\"`) with `min:{name}`/`max:{name}` or its weighted `avg:`, or query_records for each record's value")));
        }
        Ok(())
    }

    /// Resolves a summary's metrics, each once, recording those typed in another form.
    fn summary_metrics(&mut self, metric_inputs: &[String]) -> Result<Vec<Metric>, RequestError> {
        let def = self.def;
        let mut metrics: Vec<Metric> = Vec::new();
        for input in metric_inputs {
            let m = self.metric(input)?;
            let column = m.column(def);
            if column != *input {
                self.resolved.push(Resolution {
                    parameter: "metrics".into(),
                    input: input.clone(),
                    canonical: column,
                });
            }
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
        Ok(metrics)
    }

    /// Refuses a `group_by` field that cannot be grouped by, naming those that can.
    fn check_groupable(&self, group_by: &[FieldId]) -> Result<(), RequestError> {
        let def = self.def;
        for &g in group_by {
            let f = &def.fields[g];
            if !f.groupable {
                let groupable: Vec<Candidate> = def
                    .fields
                    .iter()
                    .filter(|f| f.groupable)
                    .map(|f| Candidate::described(f.name.clone(), f.desc.as_deref()))
                    .collect();
                let total = groupable.len();
                let names = names::rank(&f.name, groupable.iter().map(|c| c.name.as_str()));
                let best = names.first().map(|s| s.to_string()).unwrap_or_default();
                let ranked: Vec<Candidate> = names
                    .iter()
                    .take(MAX_CANDIDATES)
                    .filter_map(|n| groupable.iter().find(|c| c.name == *n).cloned())
                    .collect();
                let why = match f.role {
                    Role::Measure => {
                        "it is a measure: aggregate it with sum:/avg:/min:/max: instead".to_string()
                    }
                    Role::Id => "it identifies single records".to_string(),
                    _ => "its definition says `groupable: false`".to_string(),
                };
                let err = RequestError::new(
                    ErrorCode::RoleMismatch,
                    format!("`{}` cannot be grouped by: {why}", f.name),
                )
                .at("group_by")
                .candidates(ranked, total);
                return Err(self.example_with(err, "group_by", &best));
            }
        }
        Ok(())
    }

    /// Resolves the fields to explode, refusing single-value ones; adds each to `group_by`, and
    /// explodes every multi-value field grouped by, saying so in a notice.
    fn explode(
        &mut self,
        inputs: &[String],
        group_by: &mut Vec<FieldId>,
    ) -> Result<Vec<FieldId>, RequestError> {
        let def = self.def;
        let mut explode = self.fields(inputs, "explode")?;
        for &e in &explode {
            let f = &def.fields[e];
            if !f.is_multi_value() {
                let multi: Vec<Candidate> = def
                    .fields
                    .iter()
                    .filter(|f| f.is_multi_value())
                    .map(|f| Candidate::described(f.name.clone(), f.desc.as_deref()))
                    .collect();
                let total = multi.len();
                let best = multi.first().map(|c| c.name.clone()).unwrap_or_default();
                let err = RequestError::new(
                    ErrorCode::RoleMismatch,
                    format!(
                        "`{}` holds one value per record; only multi-value fields can be exploded",
                        f.name
                    ),
                )
                .at("explode")
                .candidates(multi.into_iter().take(SAMPLE_SIZE).collect(), total);
                return Err(self.example_with(err, "explode", &best));
            }
            if !group_by.contains(&e) {
                group_by.push(e);
                self.notices.push(Notice {
                    parameter: "explode".into(),
                    message: format!(
                        "`{}` was added to group_by: exploding splits its parts into groups",
                        f.name
                    ),
                });
            }
        }
        for &g in group_by.iter() {
            let f = &def.fields[g];
            if f.is_multi_value() && !explode.contains(&g) {
                explode.push(g);
                self.notices.push(Notice {
                    parameter: "explode".into(),
                    message: format!(
                        "`{}` holds several values per record; each part was counted in its own group (explode)",
                        f.name
                    ),
                });
            }
        }
        Ok(explode)
    }

    /// Resolves `having` conditions against the summary's result columns.
    fn having(
        &mut self,
        conditions: Vec<Condition>,
        result: &SummaryColumns<'_>,
    ) -> Result<Vec<HavingFilter>, RequestError> {
        let mut having = Vec::with_capacity(conditions.len());
        for cond in conditions {
            let canonical = result_column(
                self.def,
                &cond.target,
                &result.columns,
                &result.metric_columns,
            )
            .map_err(|ranked| result.unknown_column("having", &cond.target, ranked))?;
            if canonical != cond.target {
                self.resolved.push(Resolution {
                    parameter: "having".into(),
                    input: cond.target.clone(),
                    canonical: canonical.clone(),
                });
            }
            having.push(HavingFilter {
                column: canonical,
                op: cond.op,
            });
        }
        Ok(having)
    }

    /// Resolves `order_by` keys against the summary's result columns, each column once.
    fn order_by(
        &mut self,
        keys: &[String],
        result: &SummaryColumns<'_>,
    ) -> Result<Vec<ColumnSort>, RequestError> {
        let mut order_by = Vec::with_capacity(keys.len());
        for key in keys {
            let (name, descending) = parse_order_key(key);
            let canonical = result_column(self.def, name, &result.columns, &result.metric_columns)
                .map_err(|ranked| result.unknown_column("order_by", name, ranked))?;
            if canonical != name {
                self.resolved.push(Resolution {
                    parameter: "order_by".into(),
                    input: key.clone(),
                    canonical: format!("{}{canonical}", if descending { "-" } else { "" }),
                });
            }
            if !order_by.iter().any(|s: &ColumnSort| s.column == canonical) {
                order_by.push(ColumnSort {
                    column: canonical,
                    descending,
                });
            }
        }
        Ok(order_by)
    }
}

/// The columns of a summary's result, which `having` and `order_by` name.
struct SummaryColumns<'a> {
    def: &'a DatasetDef,
    /// The metrics as typed (or `count` when none), for the example of an error.
    metric_inputs: &'a [String],
    /// Every column of the result: metrics, the columns they exclude nulls on, group keys.
    columns: Vec<String>,
    metric_columns: Vec<String>,
    group_names: Vec<String>,
}

impl<'a> SummaryColumns<'a> {
    /// Lists the result's columns from the resolved metrics and groups.
    fn new(
        def: &'a DatasetDef,
        metric_inputs: &'a [String],
        metrics: &[Metric],
        group_by: &[FieldId],
        compare: Option<&Compare>,
        rank: bool,
    ) -> Self {
        let mut columns: Vec<String> = Vec::new();
        let mut metric_columns: Vec<String> = Vec::new();
        let mut push = |columns: &mut Vec<String>, name: String, main: bool| {
            let names = match compare {
                Some(c) => c.columns(&name, main),
                None => vec![name],
            };
            for n in names {
                if !columns.contains(&n) {
                    if main {
                        metric_columns.push(n.clone());
                    }
                    columns.push(n);
                }
            }
        };
        for m in metrics {
            push(&mut columns, m.column(def), true);
            if let Some(c) = m.null_excluded_column(def) {
                push(&mut columns, c, false);
            }
            if compare.is_none()
                && let Some(c) = m.period_column(def)
            {
                push(&mut columns, c, false);
            }
        }
        if rank {
            for r in Compare::rank_columns(compare) {
                metric_columns.push(r.clone());
                columns.push(r);
            }
        }
        // Two periods side by side are columns, not a key.
        let keys: Vec<FieldId> = group_by
            .iter()
            .copied()
            .filter(|g| !matches!(compare, Some(Compare::Periods { field, .. }) if field == g))
            .collect();
        columns.extend(keys.iter().map(|g| def.fields[*g].name.clone()));
        let group_names: Vec<String> = keys.iter().map(|g| def.fields[*g].name.clone()).collect();
        SummaryColumns {
            def,
            metric_inputs,
            columns,
            metric_columns,
            group_names,
        }
    }

    /// The error for a `having` or `order_by` name that is no column of the result.
    fn unknown_column(&self, parameter: &str, target: &str, ranked: Vec<&str>) -> RequestError {
        let def = self.def;
        let metric_columns = &self.metric_columns;
        let group_names = &self.group_names;
        let metric_inputs = self.metric_inputs;
        // A field that several metrics asked for carry (`sum:F` and `avg:F`): say so.
        let owners: Vec<&String> = metric_columns
            .iter()
            .filter(|c| {
                c.split_once(':')
                    .is_some_and(|(_, f)| normalize(f) == normalize(target))
            })
            .collect();
        let ranked: Vec<&str> = owners
            .iter()
            .map(|c| c.as_str())
            .chain(
                ranked
                    .into_iter()
                    .filter(|c| !owners.iter().any(|o| o == c)),
            )
            .collect();
        let candidates = ranked
            .iter()
            .take(MAX_CANDIDATES)
            .map(|c| Candidate::new(*c))
            .collect();
        let message = if owners.len() > 1 {
            format!(
                "`{parameter}` names `{target}`, which fits several metrics of this summary ({}); name one with its prefix",
                owners
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!("`{parameter}` names `{target}`, which is not a column of this summary")
        };
        let first = metric_columns
            .first()
            .cloned()
            .unwrap_or_else(|| "count".into());
        let example = if parameter == "having" {
            json!({ "dataset_id": def.id, "group_by": group_names, "metrics": metric_inputs, "having": { first: { "$gte": 10 } } })
        } else {
            json!({ "dataset_id": def.id, "group_by": group_names, "metrics": metric_inputs, "order_by": [format!("-{first}")], "limit": 5 })
        };
        RequestError::new(ErrorCode::UnknownColumn, message)
        .at(format!("{parameter}.{target}"))
        .candidates(candidates, self.columns.len())
        .hint(format!("{parameter} names a column of the result: a metric you asked for (e.g. `count`, or a metric's field without its `avg:`/`sum:` prefix when only one metric has it) or a group_by field"))
        .example("summarize_records", example)
    }
}

/// A column of a summary's result named in `having` or `order_by`: exact or NFKC; a metric
/// written as `kind:F` (resolved as in `metrics`, then required to be asked for); a metric's
/// field without its prefix when exactly one metric asked for has it (`オンライン率` for
/// `avg:オンライン率`); else a close match. `Err`: the columns ranked by closeness.
fn result_column<'c>(
    def: &DatasetDef,
    target: &str,
    columns: &'c [String],
    metric_columns: &[String],
) -> Result<String, Vec<&'c str>> {
    let ranked = || names::rank(target, columns.iter().map(String::as_str));
    let found = names::resolve(target, columns.iter().map(String::as_str));
    if let Ok(res) = &found
        && res.how != Match::Fuzzy
    {
        return Ok(res.canonical.to_string());
    }
    if target.contains([':', '：']) {
        // `kind:F` goes through metric resolution only, never a fuzzy column match.
        let mut probe = Resolver {
            def,
            tool: "summarize_records",
            resolved: Vec::new(),
            notices: Vec::new(),
            chosen: Vec::new(),
            latest: None,
        };
        return probe
            .metric(target)
            .ok()
            .map(|m| m.column(def))
            .filter(|c| columns.contains(c))
            .ok_or_else(ranked);
    }
    // The field part of each metric column asked for, once (`avg:F` → `F`).
    let fields: Vec<&str> = metric_columns
        .iter()
        .filter_map(|c| c.split_once(':').map(|(_, f)| f))
        .collect();
    if let Ok(res) = names::resolve(target, fields.iter().copied()) {
        let mut owners = metric_columns
            .iter()
            .filter(|c| c.split_once(':').is_some_and(|(_, f)| f == res.canonical));
        if let (Some(one), None) = (owners.next(), owners.next()) {
            return Ok(one.clone());
        }
    }
    found.map(|res| res.canonical.to_string()).map_err(|r| {
        let _ = r;
        ranked()
    })
}

fn op_text(op: &Op) -> String {
    let list = |v: &[Scalar]| {
        v.iter()
            .map(|s| match s {
                Scalar::Str(t) => format!("\"{t}\""),
                other => other.text(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let one = |s: &Scalar| match s {
        Scalar::Str(t) => format!("\"{t}\""),
        other => other.text(),
    };
    match op {
        Op::In(v) => format!("in [{}]", list(v)),
        Op::Eq(v) => format!("= {}", one(v)),
        Op::Ne(v) => format!("≠ {}", one(v)),
        Op::Nin(v) => format!("not in [{}]", list(v)),
        Op::Contains(t) => format!("contains \"{t}\" (ignoring case and full/half width)"),
        Op::NotContains(t) => {
            format!("does not contain \"{t}\" (ignoring case and full/half width)")
        }
        Op::Gt(v) => format!("> {}", one(v)),
        Op::Gte(v) => format!("≥ {}", one(v)),
        Op::Lt(v) => format!("< {}", one(v)),
        Op::Lte(v) => format!("≤ {}", one(v)),
        Op::NotEmpty(true) => "is not empty".to_string(),
        Op::NotEmpty(false) => "is empty".to_string(),
    }
}

impl Filter {
    /// The filter in words, for transformations and messages: `所管府省庁 in ["総務省"]`.
    pub fn describe(&self, def: &DatasetDef) -> String {
        let field = &def.fields[self.field];
        if field.locator == Some(crate::definition::LocatorKind::Law) {
            let list = |vs: &[Scalar]| vs.iter().map(|v| v.text()).collect::<Vec<_>>().join(" or ");
            match &self.op {
                Op::Eq(v) => return format!("{} is {} or inside it", field.name, v.text()),
                Op::In(vs) => {
                    return format!("{} is {} or inside one of them", field.name, list(vs));
                }
                Op::Ne(v) => {
                    return format!("{} is neither {} nor inside it", field.name, v.text());
                }
                Op::Nin(vs) => {
                    return format!(
                        "{} is none of {} nor inside one of them",
                        field.name,
                        list(vs)
                    );
                }
                _ => {}
            }
        }
        format!("{} {}", field.name, op_text(&self.op))
    }
}

impl HavingFilter {
    pub fn describe(&self) -> String {
        format!("{} {}", self.column, op_text(&self.op))
    }
}

/// Conditions as a `where` (or `having`) object the tools take: each column with its
/// operators spelled out (`{"所管府省庁": {"$in": ["総務省"]}, "総手続件数": {"$gte": 1000}}`),
/// in the order they were resolved.
fn conditions<'a>(items: impl Iterator<Item = (&'a str, &'a Op)>) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (column, op) in items {
        let (name, operand) = match serde_json::to_value(op) {
            Ok(serde_json::Value::Object(mut m)) => (
                m.remove("op")
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                m.remove("value").unwrap_or(serde_json::Value::Null),
            ),
            _ => continue,
        };
        let entry = out
            .entry(column.to_string())
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        if let serde_json::Value::Object(ops) = entry {
            // Several `$ne` of one column are written back as the `$nin` they came from.
            if name == "$ne" {
                if let Some(serde_json::Value::Array(listed)) = ops.get_mut("$nin") {
                    listed.push(operand);
                    continue;
                }
                if let Some(first) = ops.remove("$ne") {
                    ops.insert(
                        "$nin".into(),
                        serde_json::Value::Array(vec![first, operand]),
                    );
                    continue;
                }
            }
            ops.insert(name, operand);
        }
    }
    serde_json::Value::Object(out)
}

fn names_of(def: &DatasetDef, ids: &[FieldId]) -> Vec<String> {
    ids.iter().map(|i| def.fields[*i].name.clone()).collect()
}

impl QueryPlan {
    /// The plan with field names instead of indices (echoed parameters, golden tests).
    pub fn to_json(&self, def: &DatasetDef) -> serde_json::Value {
        let mut out = json!({
            "dataset_id": self.dataset_id,
            "q": self.q,
            "search_fields": names_of(def, &self.search_fields),
            "select": names_of(def, &self.select),
            "where": self.filters.iter().map(|f| f.describe(def)).collect::<Vec<_>>(),
            "order_by": self.order_by.iter().map(|s| format!("{}{}", if s.descending { "-" } else { "" }, def.fields[s.field].name)).collect::<Vec<_>>(),
            "limit": self.limit,
            "cursor": self.cursor,
            "resolved_fields": self.resolved_fields,
            "notices": self.notices,
        });
        if let Some(date) = &self.as_of {
            out["as_of"] = json!(date);
        }
        if let Some(latest) = &self.latest {
            out["latest"] = latest.to_json(def);
        }
        out
    }
}

impl QueryPlan {
    /// The call as resolved, as arguments `query_records` takes: canonical names, codes as
    /// the codelist writes them, every operator spelled out, the defaults filled in. Running
    /// it again asks the same question (what `tally verify` does).
    pub fn to_call(&self, def: &DatasetDef) -> serde_json::Value {
        let mut call = serde_json::Map::new();
        call.insert("dataset_id".into(), json!(self.dataset_id));
        if let Some(q) = &self.q {
            call.insert("q".into(), json!(q));
            call.insert(
                "search_fields".into(),
                json!(names_of(def, &self.search_fields)),
            );
        }
        call.insert("select".into(), json!(names_of(def, &self.select)));
        call.insert(
            "where".into(),
            conditions(
                self.filters
                    .iter()
                    .map(|f| (def.fields[f.field].name.as_str(), &f.op)),
            ),
        );
        call.insert(
            "order_by".into(),
            json!(
                self.order_by
                    .iter()
                    .map(|s| format!(
                        "{}{}",
                        if s.descending { "-" } else { "" },
                        def.fields[s.field].name
                    ))
                    .collect::<Vec<_>>()
            ),
        );
        call.insert("limit".into(), json!(self.limit));
        if let Some(cursor) = &self.cursor {
            call.insert("cursor".into(), json!(cursor));
        }
        if let Some(date) = &self.as_of {
            call.insert("as_of".into(), json!(date));
        }
        serde_json::Value::Object(call)
    }
}

impl SummarizePlan {
    /// The call as resolved, as arguments `summarize_records` takes (see
    /// [`QueryPlan::to_call`]).
    pub fn to_call(&self, def: &DatasetDef) -> serde_json::Value {
        let mut call = json!({
            "dataset_id": self.dataset_id,
            "metrics": self.metrics.iter().map(|m| m.column(def)).collect::<Vec<_>>(),
            "group_by": names_of(def, &self.group_by),
            "where": conditions(self.filters.iter().map(|f| (def.fields[f.field].name.as_str(), &f.op))),
            "having": conditions(self.having.iter().map(|h| (h.column.as_str(), &h.op))),
            "explode": names_of(def, &self.explode),
            "order_by": self.order_by.iter().map(|s| format!("{}{}", if s.descending { "-" } else { "" }, s.column)).collect::<Vec<_>>(),
            "limit": self.limit,
        });
        if let Some(date) = &self.as_of {
            call["as_of"] = json!(date);
        }
        if let Some(compare) = &self.compare {
            // What `compare` implies (the grouping by the time field, the two periods kept)
            // is written by `compare` alone: run again, the call implies it again.
            let (group_by, filters) = self.asked_grouping();
            call["group_by"] = json!(names_of(def, &group_by));
            call["where"] = conditions(
                filters
                    .iter()
                    .map(|f| (def.fields[f.field].name.as_str(), &f.op)),
            );
            call["compare"] = compare.to_json();
        }
        if self.rank {
            call["rank"] = json!(true);
        }
        call
    }

    /// The grouping and conditions as the caller asked them, without what `compare` adds.
    pub fn asked_grouping(&self) -> (Vec<FieldId>, Vec<Filter>) {
        match &self.compare {
            Some(Compare::Periods { field, .. }) => (
                self.group_by
                    .iter()
                    .copied()
                    .filter(|g| g != field)
                    .collect(),
                self.filters
                    .iter()
                    .filter(|f| f.field != *field)
                    .cloned()
                    .collect(),
            ),
            Some(Compare::Previous {
                field,
                grouped: false,
            }) => (
                self.group_by
                    .iter()
                    .copied()
                    .filter(|g| g != field)
                    .collect(),
                self.filters.clone(),
            ),
            _ => (self.group_by.clone(), self.filters.clone()),
        }
    }

    /// The plan with field names instead of indices (echoed parameters, golden tests).
    pub fn to_json(&self, def: &DatasetDef) -> serde_json::Value {
        let mut out = json!({
            "dataset_id": self.dataset_id,
            "metrics": self.metrics.iter().map(|m| m.column(def)).collect::<Vec<_>>(),
            "group_by": names_of(def, &self.group_by),
            "where": self.filters.iter().map(|f| f.describe(def)).collect::<Vec<_>>(),
            "having": self.having.iter().map(HavingFilter::describe).collect::<Vec<_>>(),
            "explode": names_of(def, &self.explode),
            "order_by": self.order_by.iter().map(|s| format!("{}{}", if s.descending { "-" } else { "" }, s.column)).collect::<Vec<_>>(),
            "limit": self.limit,
            "resolved_fields": self.resolved_fields,
            "notices": self.notices,
        });
        if let Some(date) = &self.as_of {
            out["as_of"] = json!(date);
        }
        if let Some(latest) = &self.latest {
            out["latest"] = latest.to_json(def);
        }
        if let Some(compare) = &self.compare {
            out["compare"] = compare.to_json();
        }
        if self.rank {
            out["rank"] = json!(true);
        }
        out
    }
}
