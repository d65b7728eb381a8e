//! The arguments of each tool as read: the conditions of `where` and `having` with their
//! operators and values, periods compared, and the notices of what the server changed.

use serde::Serialize;
use serde_json::Value;

/// How a summary compares periods of the dataset's time field (`compare`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum CompareArg {
    /// `{"from": 2010, "to": 2020}`: each metric at both periods side by side, the difference
    /// and the percent change.
    Periods { from: Scalar, to: Scalar },
    /// `"previous"`: each period beside the one before it (year over year).
    #[serde(serialize_with = "previous_word")]
    Previous,
}

fn previous_word<S: serde::Serializer>(s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str("previous")
}

/// The words `compare` takes for "each period against the one before it".
pub(super) const PREVIOUS_WORDS: &[&str] = &[
    "previous",
    "prior",
    "yoy",
    "year_over_year",
    "year-over-year",
    "前年",
    "前年度",
    "前期",
    "前年比",
    "前年度比",
    "前期比",
];

/// Something the server changed about a call and says so (a clamped limit, an implied
/// explode). Shown to the caller as a warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notice {
    pub parameter: String,
    pub message: String,
}

/// A value to compare with, typed as the caller sent it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Scalar {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    /// The value as text (what a substring or codelist comparison sees).
    pub fn text(&self) -> String {
        match self {
            Scalar::Str(s) => s.clone(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }

    /// The value as a number, if it is one or is a string holding one.
    pub fn number(&self) -> Option<f64> {
        match self {
            Scalar::Int(i) => Some(*i as f64),
            Scalar::Float(f) => Some(*f),
            Scalar::Str(s) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
            Scalar::Bool(_) => None,
        }
    }
}

/// A comparison operator with its operand.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", content = "value")]
pub enum Op {
    /// Exact match against any of the values (an array, or `$in`).
    #[serde(rename = "$in")]
    In(Vec<Scalar>),
    /// Exact equality (a number, a boolean, or `$eq`).
    #[serde(rename = "$eq")]
    Eq(Scalar),
    #[serde(rename = "$ne")]
    Ne(Scalar),
    /// None of the values (`$nin`): each as `$ne` has it (records without a value are kept),
    /// tested as one set, never as a chain of conditions.
    #[serde(rename = "$nin")]
    Nin(Vec<Scalar>),
    /// Case-insensitive substring (a plain string, or `$contains`); null counts as "".
    #[serde(rename = "$contains")]
    Contains(String),
    #[serde(rename = "$not_contains")]
    NotContains(String),
    #[serde(rename = "$gt")]
    Gt(Scalar),
    #[serde(rename = "$gte")]
    Gte(Scalar),
    #[serde(rename = "$lt")]
    Lt(Scalar),
    #[serde(rename = "$lte")]
    Lte(Scalar),
    /// `true`: the value is present and not blank; `false`: null or blank.
    #[serde(rename = "$not_empty")]
    NotEmpty(bool),
}

/// Every operator, as written in `where` and `having`. (A bare array is short for `$in`, a
/// bare string for `$contains`, a bare number or boolean for `$eq`.)
pub const OPERATORS: [&str; 11] = [
    "$eq",
    "$in",
    "$ne",
    "$nin",
    "$contains",
    "$not_contains",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$not_empty",
];

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::In(_) => "$in",
            Op::Eq(_) => "$eq",
            Op::Ne(_) => "$ne",
            Op::Nin(_) => "$nin",
            Op::Contains(_) => "$contains",
            Op::NotContains(_) => "$not_contains",
            Op::Gt(_) => "$gt",
            Op::Gte(_) => "$gte",
            Op::Lt(_) => "$lt",
            Op::Lte(_) => "$lte",
            Op::NotEmpty(_) => "$not_empty",
        }
    }

    /// Whether the operator compares whole values exactly (and so is checked against a
    /// codelist and, on multi-value fields, matches any part).
    pub fn is_exact(&self) -> bool {
        matches!(self, Op::In(_) | Op::Eq(_) | Op::Ne(_) | Op::Nin(_))
    }

    pub fn is_ordering(&self) -> bool {
        matches!(self, Op::Gt(_) | Op::Gte(_) | Op::Lt(_) | Op::Lte(_))
    }
}

/// One condition of `where` or `having`: a name as typed and an operator. Conditions are ANDed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Condition {
    pub target: String,
    #[serde(flatten)]
    pub op: Op,
    /// Written as a plain string (`{"F": "text"}`), not as `$contains`: on a coded field, a
    /// plain string that is one code's label means that code.
    #[serde(skip)]
    pub plain: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListArgs {
    pub q: Option<String>,
    pub publisher: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InspectArgs {
    pub dataset_id: String,
    /// Everything (`full`), or what a model needs to write a call (`compact`, the default).
    pub full: bool,
}

/// A name its user chose for an ambiguous one: where it was typed, as typed, and the name
/// chosen (one of those the ambiguity offered).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Choice {
    pub parameter: String,
    pub input: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryArgs {
    pub dataset_id: String,
    pub q: Option<String>,
    pub search_fields: Vec<String>,
    pub select: Vec<String>,
    #[serde(rename = "where")]
    pub conditions: Vec<Condition>,
    pub order_by: Vec<String>,
    pub limit: usize,
    pub cursor: Option<String>,
    /// The date whose revisions are read (datasets that declare `revisions`).
    pub as_of: Option<String>,
    pub notices: Vec<Notice>,
    /// Names the user chose for ambiguous ones (set by the server, never by the caller).
    #[serde(skip)]
    pub chosen: Vec<Choice>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummarizeArgs {
    pub dataset_id: String,
    pub metrics: Vec<String>,
    pub group_by: Vec<String>,
    #[serde(rename = "where")]
    pub conditions: Vec<Condition>,
    pub having: Vec<Condition>,
    pub explode: Vec<String>,
    /// Result columns (metrics or group keys) to order by, `-` first for descending.
    pub order_by: Vec<String>,
    pub limit: usize,
    /// The date whose revisions are read (datasets that declare `revisions`).
    pub as_of: Option<String>,
    /// Periods of the time field compared side by side (`compare`).
    pub compare: Option<CompareArg>,
    /// Each group's rank by the first metric (within its period).
    pub rank: bool,
    pub notices: Vec<Notice>,
    /// Names the user chose for ambiguous ones (set by the server, never by the caller).
    #[serde(skip)]
    pub chosen: Vec<Choice>,
}

/// Parsed arguments of any tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "tool", rename_all = "snake_case")]
pub enum Request {
    ListDatasets(ListArgs),
    InspectDataset(InspectArgs),
    QueryRecords(QueryArgs),
    SummarizeRecords(SummarizeArgs),
    CiteProvisions(CiteArgs),
    VerifyAnswer(VerifyArgs),
}

/// The arguments of `cite_provisions`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CiteArgs {
    pub dataset_id: String,
    #[serde(rename = "where")]
    pub conditions: Vec<Condition>,
    pub group_by: Vec<String>,
    /// The dataset linked to (one of the dataset's `links`); the only one when absent.
    pub link: Option<String>,
    /// Read the provisions in force on this date (`YYYY-MM-DD`).
    pub as_of: Option<String>,
    pub limit: usize,
    /// The `next_cursor` of the page before: the provisions after it.
    pub cursor: Option<String>,
    pub notices: Vec<Notice>,
    /// Names the user chose for ambiguous ones (set by the server, never by the caller).
    #[serde(skip)]
    pub chosen: Vec<Choice>,
}

/// The answer `verify_answer` checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyArgs {
    pub envelope: Value,
}
