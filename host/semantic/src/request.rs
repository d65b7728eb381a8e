//! The arguments of the four tools, read from JSON as a language model sends them.
//!
//! LLM-shaped input is normal input: a list may arrive as a JSON string or as a single value,
//! an object as a JSON string, a number as a string. Those forms are accepted here, once, for
//! the CLI and the MCP tools alike. Everything is bounded, and an argument the tool does not
//! have is refused (a misspelt `where` silently ignored would give wrong numbers).
//!
//! Names are still as the caller typed them; [`crate::resolve`] maps them onto a dataset.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names::suggest;

/// Bounds of `limit` of `query_records`.
pub const QUERY_LIMIT: Shape = Shape::Count {
    min: 1,
    max: 5000,
    default: 50,
};
/// Bounds of `limit` of `summarize_records`.
pub const SUMMARIZE_LIMIT: Shape = Shape::Count {
    min: 1,
    max: 10_000,
    default: 200,
};
/// Longest free text (`q`, a value to compare).
pub const MAX_TEXT_CHARS: usize = 1000;
/// Longest name (dataset id, field, metric).
pub const MAX_NAME_CHARS: usize = 256;
/// Most names in one list argument (`select`, `group_by`, `metrics`, …).
pub const MAX_NAMES: usize = 100;
/// Most values in one `$in` list.
pub const MAX_VALUES: usize = 1000;
/// Most conditions in `where` or `having`.
pub const MAX_CONDITIONS: usize = 64;
pub const MAX_CURSOR_CHARS: usize = 4096;

/// The four tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    ListDatasets,
    InspectDataset,
    QueryRecords,
    SummarizeRecords,
    /// The provisions (of a linked law dataset) the matching records rest on.
    CiteProvisions,
    /// Checks an answer of the others again: runs its recorded call on the data of now.
    VerifyAnswer,
}

impl Tool {
    pub const ALL: [Tool; 6] = [
        Tool::ListDatasets,
        Tool::InspectDataset,
        Tool::QueryRecords,
        Tool::SummarizeRecords,
        Tool::CiteProvisions,
        Tool::VerifyAnswer,
    ];

    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether its answers are computed from datasets (and so can be checked again by
    /// [`Tool::VerifyAnswer`]).
    pub fn answers_from_data(self) -> bool {
        self.info().verifiable
    }

    /// Everything else the tool is, from the one table [`TOOLS`].
    pub fn info(self) -> &'static ToolInfo {
        // `TOOLS` is in the order of `Tool::ALL` (a test holds it to that).
        &TOOLS[self as usize]
    }

    /// A call of the tool written with `names`, as its description shows it and as the tests
    /// run it on real data (`None` for [`Tool::VerifyAnswer`], which takes a whole answer).
    /// Every tool named: a new one is a compile error here until it has an example.
    pub fn example(self, names: &ExampleNames<'_>) -> Option<Value> {
        let ExampleNames {
            dataset,
            field,
            metric,
            linked,
        } = *names;
        let present = |field: &str| {
            let mut condition = Map::new();
            condition.insert(field.to_owned(), serde_json::json!({ "$not_empty": true }));
            Value::Object(condition)
        };
        Some(match self {
            Tool::ListDatasets => serde_json::json!({}),
            Tool::InspectDataset => serde_json::json!({ "dataset_id": dataset }),
            Tool::QueryRecords => {
                serde_json::json!({ "dataset_id": dataset, "where": present(field), "limit": 10 })
            }
            Tool::SummarizeRecords => {
                let metrics: Vec<&str> = if metric == "count" {
                    vec!["count"]
                } else {
                    vec!["count", metric]
                };
                serde_json::json!({
                    "dataset_id": dataset,
                    "group_by": [field],
                    "metrics": metrics,
                    "limit": 10,
                })
            }
            Tool::CiteProvisions => {
                let (dataset, field) = linked.unwrap_or((dataset, field));
                serde_json::json!({ "dataset_id": dataset, "where": present(field), "limit": 20 })
            }
            Tool::VerifyAnswer => return None,
        })
    }

    /// The parameters the tool takes: one table, read by the parser (names, bounds, choices)
    /// and by the server, which generates the tools' input schemas from it.
    pub fn spec(self) -> &'static [Parameter] {
        use Shape::*;
        const DATASET_ID: Parameter = Parameter::required("dataset_id", Text);
        const FORMAT: Parameter = Parameter::new("provenance_format", Choice(&["json", "prov"]));
        const LIST: &[Parameter] = &[
            Parameter::new("q", Text),
            Parameter::new("publisher", Text),
            FORMAT,
        ];
        const INSPECT: &[Parameter] = &[
            DATASET_ID,
            Parameter::new("detail", Choice(&["compact", "full"])),
            FORMAT,
        ];
        const QUERY: &[Parameter] = &[
            DATASET_ID,
            Parameter::new("q", Text),
            Parameter::new("search_fields", Names),
            Parameter::new("select", Names),
            Parameter::new("where", Conditions),
            Parameter::new("order_by", Names),
            Parameter::new("limit", QUERY_LIMIT),
            Parameter::new("cursor", Text),
            Parameter::new("as_of", Text),
            FORMAT,
        ];
        const SUMMARIZE: &[Parameter] = &[
            DATASET_ID,
            Parameter::new("metrics", Names),
            Parameter::new("group_by", Names),
            Parameter::new("where", Conditions),
            Parameter::new("having", Conditions),
            Parameter::new("explode", Names),
            Parameter::new("compare", Compare),
            Parameter::new("rank", Flag),
            Parameter::new("order_by", Names),
            Parameter::new("limit", SUMMARIZE_LIMIT),
            Parameter::new("as_of", Text),
            FORMAT,
        ];
        const CITE: &[Parameter] = &[
            DATASET_ID,
            Parameter::new("where", Conditions),
            Parameter::new("group_by", Names),
            Parameter::new("link", Text),
            Parameter::new("as_of", Text),
            Parameter::new("limit", SUMMARIZE_LIMIT),
            Parameter::new("cursor", Text),
            FORMAT,
        ];
        const VERIFY: &[Parameter] = &[Parameter::required("envelope", Answer)];
        match self {
            Tool::ListDatasets => LIST,
            Tool::InspectDataset => INSPECT,
            Tool::QueryRecords => QUERY,
            Tool::SummarizeRecords => SUMMARIZE,
            Tool::CiteProvisions => CITE,
            Tool::VerifyAnswer => VERIFY,
        }
    }

    /// The names of the tool's parameters.
    pub fn parameters(self) -> impl Iterator<Item = &'static str> + Clone {
        self.spec().iter().map(|p| p.name)
    }

    /// The parameter called `name`.
    pub fn parameter(self, name: &str) -> Option<&'static Parameter> {
        self.spec().iter().find(|p| p.name == name)
    }
}

/// What a tool is, beyond its parameters ([`Tool::spec`]) and its example
/// ([`Tool::example`]): the one place a tool is listed. The MCP layer takes its name, title
/// and view from here, `verify_answer` what it can check and how rows are keyed, the CLI its
/// command; a test in each of those fails when a tool listed here has no part there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolInfo {
    pub tool: Tool,
    pub name: &'static str,
    /// For people (MCP `title`).
    pub title: &'static str,
    /// The CLI's command for it (`tally summarize`).
    pub command: &'static str,
    /// What its MCP Apps view (`ui://tally/<name>`, drawn by host/mcp/ui/view.js) shows;
    /// `None` when its answer is read as text.
    pub view: Option<&'static str>,
    /// Its answers are computed from datasets, so `verify_answer` can run them again.
    pub verifiable: bool,
    /// How `verify_answer` keys a row of its answers: `None` when rows are compared in their
    /// order, `Some(n)` when the leading `group_by` columns and `n` more are the key.
    pub row_key: Option<usize>,
}

impl ToolInfo {
    /// How many leading columns of a row are its key, given the call's `group_by` count.
    pub fn key_columns(&self, group_by: usize) -> usize {
        self.row_key.map_or(0, |more| group_by + more)
    }
}

/// Every tool, in the order of [`Tool::ALL`].
pub const TOOLS: [ToolInfo; 6] = [
    ToolInfo {
        tool: Tool::ListDatasets,
        name: "list_datasets",
        title: "List datasets",
        command: "list",
        view: Some("dataset cards"),
        verifiable: true,
        row_key: None,
    },
    ToolInfo {
        tool: Tool::InspectDataset,
        name: "inspect_dataset",
        title: "Inspect a dataset",
        command: "inspect",
        view: Some("fields by role with fill rates and codes"),
        verifiable: true,
        row_key: None,
    },
    ToolInfo {
        tool: Tool::QueryRecords,
        name: "query_records",
        title: "Query records",
        command: "query",
        view: Some("a table of records, paged"),
        verifiable: true,
        row_key: None,
    },
    ToolInfo {
        tool: Tool::SummarizeRecords,
        name: "summarize_records",
        title: "Summarize records",
        command: "summarize",
        view: Some("a chart chosen by the result's shape, or its table"),
        verifiable: true,
        row_key: Some(0),
    },
    ToolInfo {
        tool: Tool::CiteProvisions,
        name: "cite_provisions",
        title: "Cite the provisions records rest on",
        command: "cite",
        view: Some("provisions with their text, revision, e-Gov link and records"),
        verifiable: true,
        // The groups, then the law and the provision.
        row_key: Some(2),
    },
    ToolInfo {
        tool: Tool::VerifyAnswer,
        name: "verify_answer",
        title: "Verify an answer",
        command: "verify",
        view: Some("the status, and each changed value beside its value now"),
        verifiable: false,
        row_key: None,
    },
];

/// The names an example call is written with.
#[derive(Debug, Clone, Copy)]
pub struct ExampleNames<'a> {
    pub dataset: &'a str,
    /// A field to group by and to test (`$not_empty`).
    pub field: &'a str,
    /// A metric besides `count` (`avg:<computed measure>`, `sum:F` or `count`).
    pub metric: &'a str,
    /// A dataset with `links` and a field of it (the first linking field), for
    /// `cite_provisions`; `dataset` and `field` when none is known.
    pub linked: Option<(&'a str, &'a str)>,
}

/// One parameter of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parameter {
    pub name: &'static str,
    pub shape: Shape,
    pub required: bool,
}

impl Parameter {
    const fn new(name: &'static str, shape: Shape) -> Parameter {
        Parameter {
            name,
            shape,
            required: false,
        }
    }

    const fn required(name: &'static str, shape: Shape) -> Parameter {
        Parameter {
            name,
            shape,
            required: true,
        }
    }
}

/// How a parameter is written (every shape also accepts the loose forms models send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One string (at most [`MAX_TEXT_CHARS`] characters).
    Text,
    /// One of these words (compared normalised).
    Choice(&'static [&'static str]),
    /// Names: a list of strings, one string, or a JSON array as a string.
    Names,
    /// An object of name → condition, or that object as a JSON string.
    Conditions,
    /// A row count: an integer or a number as text, clamped to `min..=max` (the clamp is
    /// reported), `default` when absent.
    Count {
        min: usize,
        max: usize,
        default: usize,
    },
    /// A whole answer of a tool (its `data` and `provenance`), or that object as JSON text.
    Answer,
    /// Periods of the time field compared: `{"from": 2010, "to": 2020}` or `"previous"`.
    Compare,
    /// Yes or no: a boolean (or `"true"`/`"false"`).
    Flag,
}

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
const PREVIOUS_WORDS: &[&str] = &[
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

/// Reads the arguments of `tool`.
pub fn parse(tool: Tool, arguments: &Value) -> Result<Request, RequestError> {
    let mut args = Args::new(tool, arguments)?;
    // A blank `q` is read as no `q`; said, so a caller knows no search was made.
    if tool == Tool::QueryRecords
        && let Some(Value::String(q)) = args.map.get("q")
        && !q.is_empty()
        && q.trim().is_empty()
    {
        args.notices.push(Notice {
            parameter: "q".into(),
            message: "q holds only whitespace, so no text search was made; every record matching the other conditions is returned".into(),
        });
    }
    let request = match tool {
        Tool::ListDatasets => Request::ListDatasets(ListArgs {
            q: args.text("q")?,
            publisher: args.text("publisher")?,
        }),
        Tool::InspectDataset => Request::InspectDataset(InspectArgs {
            dataset_id: args.dataset_id()?,
            full: args.choice("detail")?.is_some_and(|d| d == "full"),
        }),
        Tool::QueryRecords => Request::QueryRecords(QueryArgs {
            dataset_id: args.dataset_id()?,
            q: args.text("q")?,
            search_fields: args.names("search_fields")?,
            select: args.names("select")?,
            conditions: args.conditions("where")?,
            order_by: args.names("order_by")?,
            limit: args.limit()?,
            cursor: args.cursor()?,
            as_of: args.text("as_of")?,
            notices: std::mem::take(&mut args.notices),
            chosen: Vec::new(),
        }),
        Tool::SummarizeRecords => Request::SummarizeRecords(SummarizeArgs {
            dataset_id: args.dataset_id()?,
            metrics: args.names("metrics")?,
            group_by: args.names("group_by")?,
            conditions: args.conditions("where")?,
            having: args.conditions("having")?,
            explode: args.names("explode")?,
            order_by: args.names("order_by")?,
            limit: args.limit()?,
            as_of: args.text("as_of")?,
            compare: args.compare("compare")?,
            rank: args.flag("rank")?,
            notices: std::mem::take(&mut args.notices),
            chosen: Vec::new(),
        }),
        Tool::CiteProvisions => Request::CiteProvisions(CiteArgs {
            dataset_id: args.dataset_id()?,
            conditions: args.conditions("where")?,
            group_by: args.names("group_by")?,
            link: args.text("link")?,
            as_of: args.text("as_of")?,
            limit: args.limit()?,
            cursor: args.cursor()?,
            notices: std::mem::take(&mut args.notices),
            chosen: Vec::new(),
        }),
        Tool::VerifyAnswer => Request::VerifyAnswer(VerifyArgs {
            envelope: args.answer("envelope")?,
        }),
    };
    // The form of the provenance is the engine's to add after the answer; its word is checked
    // here with the rest.
    if tool.parameter("provenance_format").is_some() {
        args.choice("provenance_format")?;
    }
    Ok(request)
}

struct Args {
    tool: Tool,
    map: Map<String, Value>,
    notices: Vec<Notice>,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A string holding JSON of the expected shape (`"[\"a\"]"`, `"{\"k\":1}"`) is read as that JSON.
fn unwrap_json_string(v: &Value, want_object: bool) -> Option<Value> {
    let s = v.as_str()?.trim();
    let (open, close) = if want_object { ('{', '}') } else { ('[', ']') };
    if s.starts_with(open) && s.ends_with(close) {
        serde_json::from_str::<Value>(s).ok().filter(|parsed| {
            parsed.is_object() == want_object && (want_object || parsed.is_array())
        })
    } else {
        None
    }
}

impl Args {
    fn new(tool: Tool, arguments: &Value) -> Result<Args, RequestError> {
        let map = match arguments {
            Value::Null => Map::new(),
            Value::Object(m) => m.clone(),
            other => match unwrap_json_string(other, true) {
                Some(Value::Object(m)) => m,
                _ => {
                    return Err(RequestError::invalid(
                        "arguments",
                        format!(
                            "the arguments of {} must be an object, found {}",
                            tool.name(),
                            kind(other)
                        ),
                    ));
                }
            },
        };
        let known: Vec<&str> = tool.parameters().collect();
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                let near = synonym(key)
                    .filter(|s| known.contains(s))
                    .or_else(|| suggest(key, known.iter().copied()));
                let mut ranked = crate::names::rank(key, known.iter().copied());
                if let Some(n) = near {
                    ranked.retain(|k| *k != n);
                    ranked.insert(0, n);
                }
                let mut err = RequestError::new(
                    ErrorCode::UnknownParameter,
                    format!("{} has no parameter `{key}`", tool.name()),
                )
                .at(key.clone())
                .candidates(
                    ranked.iter().map(|k| Candidate::new(*k)).collect(),
                    known.len(),
                );
                if let Some(near) = near {
                    err = err.hint(format!("did you mean `{near}`?"));
                }
                return Err(err);
            }
        }
        Ok(Args {
            tool,
            map,
            notices: Vec::new(),
        })
    }

    /// The value of a parameter; null and blank strings count as absent.
    fn get(&self, key: &str) -> Option<&Value> {
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(v) => Some(v),
        }
    }

    fn dataset_id(&self) -> Result<String, RequestError> {
        match self.get("dataset_id") {
            None => Err(RequestError::invalid(
                "dataset_id",
                format!("{} needs `dataset_id`", self.tool.name()),
            )
            .hint("call list_datasets to see the dataset ids")
            .example("list_datasets", serde_json::json!({}))),
            Some(Value::String(s)) => bounded(s, MAX_NAME_CHARS, "dataset_id"),
            Some(other) => Err(RequestError::invalid(
                "dataset_id",
                format!("`dataset_id` must be a string, found {}", kind(other)),
            )),
        }
    }

    fn text(&self, key: &str) -> Result<Option<String>, RequestError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => bounded(s, MAX_TEXT_CHARS, key).map(Some),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(RequestError::invalid(
                key,
                format!("`{key}` must be a string, found {}", kind(other)),
            )),
        }
    }

    fn cursor(&self) -> Result<Option<String>, RequestError> {
        match self.get("cursor") {
            None => Ok(None),
            Some(Value::String(s)) => bounded(s.trim(), MAX_CURSOR_CHARS, "cursor").map(Some),
            Some(other) => Err(RequestError::new(
                ErrorCode::InvalidCursor,
                format!(
                    "`cursor` must be the string returned as next_cursor, found {}",
                    kind(other)
                ),
            )
            .at("cursor")),
        }
    }

    /// A list of names: an array, a JSON string of an array, or one name.
    fn names(&self, key: &str) -> Result<Vec<String>, RequestError> {
        let Some(value) = self.get(key) else {
            return Ok(Vec::new());
        };
        let parsed;
        let value = match unwrap_json_string(value, false) {
            Some(v) => {
                parsed = v;
                &parsed
            }
            None => value,
        };
        let items: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            single => vec![single],
        };
        if items.len() > MAX_NAMES {
            return Err(RequestError::invalid(
                key,
                format!(
                    "`{key}` has {} entries; at most {MAX_NAMES} are accepted",
                    items.len()
                ),
            ));
        }
        let mut out: Vec<String> = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let name = match item {
                // Kept as typed: trimming is part of name resolution, which reports it.
                Value::String(s) => bounded(s, MAX_NAME_CHARS, &format!("{key}[{i}]"))?,
                Value::Number(n) => n.to_string(),
                other => {
                    return Err(RequestError::invalid(
                        format!("{key}[{i}]"),
                        format!(
                            "each entry of `{key}` must be a string (a name), found {}",
                            kind(other)
                        ),
                    ));
                }
            };
            if name.trim().is_empty() {
                continue;
            }
            // A repeated name changes nothing in the result: keep the first.
            if out.contains(&name) {
                continue;
            }
            out.push(name);
        }
        Ok(out)
    }

    /// A whole answer: an object with `data` and `provenance`, or its JSON text.
    fn answer(&self, key: &str) -> Result<Value, RequestError> {
        let value = match self.get(key) {
            None => {
                return Err(RequestError::invalid(
                    key,
                    format!(
                        "{} needs `{key}`: a whole answer of another tool",
                        self.tool.name()
                    ),
                ));
            }
            Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_err(|e| {
                RequestError::invalid(key, format!("`{key}` is text that is not JSON ({e})"))
            })?,
            Some(v) => v.clone(),
        };
        if !(value.get("data").is_some() && value.get("provenance").is_some()) {
            return Err(RequestError::invalid(
                key,
                format!(
                    "`{key}` must be a whole answer of another tool, an object with `data` and `provenance`; found {}",
                    kind(&value)
                ),
            ));
        }
        Ok(value)
    }

    /// Periods compared: `{"from": P, "to": P}` (or that object as JSON text), or one of the
    /// words for "the period before each" (`"previous"`, `"yoy"`, `"前年"`).
    fn compare(&self, key: &str) -> Result<Option<CompareArg>, RequestError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let forms = "`{\"from\": 2010, \"to\": 2020}` (each metric at both periods, the difference and the percent change) or `\"previous\"` (each period against the one before it, year over year)";
        let parsed;
        let value = match unwrap_json_string(value, true) {
            Some(v) => {
                parsed = v;
                &parsed
            }
            None => value,
        };
        match value {
            Value::String(word) => {
                let folded = crate::names::nfkc_value(word).to_lowercase();
                if PREVIOUS_WORDS.contains(&folded.trim()) {
                    return Ok(Some(CompareArg::Previous));
                }
                Err(RequestError::invalid(
                    key,
                    format!(
                        "`{key}` is {forms}; \"{}\" is neither",
                        bounded(word, MAX_NAME_CHARS, key)?
                    ),
                ))
            }
            Value::Object(map) => {
                if let Some(other) = map.keys().find(|k| !["from", "to"].contains(&k.as_str())) {
                    return Err(RequestError::invalid(
                        format!("{key}.{other}"),
                        format!("`{key}` takes `from` and `to` (two periods of the time field), not `{other}`"),
                    )
                    .hint(format!("send {forms}")));
                }
                let period = |end: &str| -> Result<Scalar, RequestError> {
                    match map.get(end) {
                        Some(Value::Number(n)) => Ok(match n.as_i64() {
                            Some(i) => Scalar::Int(i),
                            None => Scalar::Float(n.as_f64().unwrap_or(f64::NAN)),
                        }),
                        Some(Value::String(s)) if !s.trim().is_empty() => {
                            bounded(s, MAX_NAME_CHARS, &format!("{key}.{end}")).map(Scalar::Str)
                        }
                        Some(other) => Err(RequestError::invalid(
                            format!("{key}.{end}"),
                            format!(
                                "`{key}.{end}` must be one period (a number or text such as 2020 or \"2020年度\"), found {}",
                                kind(other)
                            ),
                        )),
                        None => Err(RequestError::invalid(
                            format!("{key}.{end}"),
                            format!("`{key}` needs both `from` and `to`; `{end}` is missing"),
                        )
                        .hint(format!("send {forms}"))),
                    }
                };
                Ok(Some(CompareArg::Periods {
                    from: period("from")?,
                    to: period("to")?,
                }))
            }
            other => Err(RequestError::invalid(
                key,
                format!("`{key}` is {forms}; found {}", kind(other)),
            )),
        }
    }

    /// Yes or no: `true`/`false`, or those words as text.
    fn flag(&self, key: &str) -> Result<bool, RequestError> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s))
                if matches!(s.trim().to_ascii_lowercase().as_str(), "true" | "yes" | "1") =>
            {
                Ok(true)
            }
            Some(Value::String(s))
                if matches!(s.trim().to_ascii_lowercase().as_str(), "false" | "no" | "0") =>
            {
                Ok(false)
            }
            Some(other) => Err(RequestError::invalid(
                key,
                format!("`{key}` is true or false, found {}", kind(other)),
            )),
        }
    }

    /// One of the words the parameter's [`Shape::Choice`] lists, normalised.
    fn choice(&self, key: &str) -> Result<Option<&'static str>, RequestError> {
        let Some(Shape::Choice(words)) = self.tool.parameter(key).map(|p| p.shape) else {
            return Err(RequestError::new(
                ErrorCode::InvalidArgument,
                format!("internal: `{key}` is not a choice of {}", self.tool.name()),
            ));
        };
        let Some(text) = self.text(key)? else {
            return Ok(None);
        };
        let word = crate::names::normalize(&text);
        match words.iter().find(|w| **w == word) {
            Some(w) => Ok(Some(w)),
            None => Err(RequestError::invalid(
                key,
                format!(
                    "`{key}` is {}, not \"{word}\"",
                    words
                        .iter()
                        .enumerate()
                        .map(|(i, w)| if i == 0 {
                            format!("\"{w}\" (the default)")
                        } else {
                            format!("\"{w}\"")
                        })
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            )
            .hint(match key {
                "detail" => "leave detail out for the compact description; send \"full\" for every code's description, all top values and statistics",
                "provenance_format" => "leave it out for the JSON provenance; send \"prov\" to have it also as W3C PROV-O in JSON-LD (`prov` beside `provenance`)",
                _ => "send one of the words listed",
            })),
        }
    }

    fn limit(&mut self) -> Result<usize, RequestError> {
        let Some(Shape::Count { min, max, default }) =
            self.tool.parameter("limit").map(|p| p.shape)
        else {
            return Err(RequestError::new(
                ErrorCode::InvalidArgument,
                format!("internal: {} has no limit", self.tool.name()),
            ));
        };
        let Some(value) = self.get("limit") else {
            return Ok(default);
        };
        let requested: f64 = match value {
            Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
            Value::String(s) => s.trim().parse::<f64>().map_err(|_| {
                RequestError::invalid(
                    "limit",
                    format!("`limit` must be a number, found the string `{s}`"),
                )
            })?,
            other => {
                return Err(RequestError::invalid(
                    "limit",
                    format!("`limit` must be a number, found {}", kind(other)),
                ));
            }
        };
        if !requested.is_finite() || requested.fract() != 0.0 {
            return Err(RequestError::invalid(
                "limit",
                format!(
                    "`limit` must be a whole number between {min} and {max}, found {requested}"
                ),
            ));
        }
        let clamped = requested.clamp(min as f64, max as f64) as usize;
        if clamped as f64 != requested {
            self.notices.push(Notice {
                parameter: "limit".into(),
                message: format!("limit {requested} is outside {min}–{max}; {clamped} was used"),
            });
        }
        Ok(clamped)
    }

    /// `where` or `having`: an object (or a JSON string of one) of name → condition.
    fn conditions(&self, key: &str) -> Result<Vec<Condition>, RequestError> {
        let Some(value) = self.get(key) else {
            return Ok(Vec::new());
        };
        let parsed;
        let value = match unwrap_json_string(value, true) {
            Some(v) => {
                parsed = v;
                &parsed
            }
            None => value,
        };
        let Value::Object(map) = value else {
            let hint = match value.as_str().and_then(sql_to_json) {
                Some(json) => {
                    format!("this looks like SQL; write it as a JSON object: \"{key}\": {json}")
                }
                None => format!(
                    "e.g. \"{key}\": {{\"<field>\": [\"exact value\"], \"<other field>\": {{\"$gte\": 10}}}}"
                ),
            };
            return Err(RequestError::invalid(
                key,
                format!(
                    "`{key}` must be an object mapping names to conditions (or that object as a JSON string), found {}",
                    match value {
                        Value::String(_) => "a string that is not a JSON object".to_string(),
                        other => kind(other).to_string(),
                    }
                ),
            )
            .hint(hint));
        };
        if map.len() > MAX_CONDITIONS {
            return Err(RequestError::invalid(
                key,
                format!(
                    "`{key}` has {} conditions; at most {MAX_CONDITIONS} are accepted",
                    map.len()
                ),
            ));
        }
        let mut out = Vec::new();
        for (target, cond) in map {
            let path = format!("{key}.{target}");
            let target = bounded(target, MAX_NAME_CHARS, &path)?;
            let plain = is_plain_string(cond);
            for op in parse_condition(cond, &path)? {
                out.push(Condition {
                    target: target.clone(),
                    op,
                    plain,
                });
            }
        }
        Ok(out)
    }
}

/// The JSON form of a simple SQL condition (`A = 'x' AND B >= 10 AND C LIKE '%y%'`), to show
/// a caller how to write it; never executed.
fn sql_to_json(sql: &str) -> Option<String> {
    let mut out = Map::new();
    // ASCII lower case keeps every byte offset: the keywords are ASCII, and a full Unicode
    // lower-casing changes lengths (the Kelvin sign U+212A becomes a one-byte `k`).
    let lower = sql.to_ascii_lowercase();
    let mut clauses = Vec::new();
    let mut rest = sql;
    let mut lower_rest = lower.as_str();
    while let Some(i) = lower_rest.find(" and ") {
        clauses.push(&rest[..i]);
        rest = &rest[i + 5..];
        lower_rest = &lower_rest[i + 5..];
    }
    clauses.push(rest);
    let unquote = |v: &str| -> Value {
        let v = v.trim();
        if let Some(inner) = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
            return Value::String(inner.to_string());
        }
        if let Some(inner) = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            return Value::String(inner.to_string());
        }
        if let Ok(i) = v.parse::<i64>() {
            return Value::from(i);
        }
        match v.parse::<f64>() {
            Ok(n) => {
                serde_json::Number::from_f64(n).map_or(Value::String(v.to_string()), Value::Number)
            }
            Err(_) => Value::String(v.to_string()),
        }
    };
    let field = |f: &str| f.trim().trim_matches('"').trim_matches('`').to_string();
    for clause in clauses {
        let c = clause.trim();
        let cl = c.to_ascii_lowercase();
        if let Some(i) = cl.find(" like ") {
            let pattern = unquote(&c[i + 6..]);
            let text = pattern.as_str()?.trim_matches('%').to_string();
            out.insert(field(&c[..i]), Value::String(text));
            continue;
        }
        if let Some(i) = cl.find(" in (") {
            let inner = c[i + 5..].trim_end().strip_suffix(')')?;
            let values: Vec<Value> = inner.split(',').map(unquote).collect();
            out.insert(field(&c[..i]), Value::Array(values));
            continue;
        }
        let ops = [
            (">=", "$gte"),
            ("<=", "$lte"),
            ("!=", "$ne"),
            ("<>", "$ne"),
            (">", "$gt"),
            ("<", "$lt"),
            ("=", ""),
        ];
        let (i, sym, op) = ops
            .iter()
            .find_map(|(sym, op)| c.find(sym).map(|i| (i, *sym, *op)))?;
        let value = unquote(&c[i + sym.len()..]);
        let name = field(&c[..i]);
        if name.is_empty() {
            return None;
        }
        let condition = match (op, &value) {
            ("", Value::String(_)) => Value::Array(vec![value]),
            ("", _) => value,
            (op, _) => serde_json::json!({ op: value }),
        };
        out.insert(name, condition);
    }
    (!out.is_empty()).then(|| Value::Object(out).to_string())
}

/// An operator as typed, with the `$` it may lack, for ranking candidates.
fn probe_for_rank(op: &str) -> String {
    if op.starts_with('$') {
        op.to_string()
    } else {
        format!("${op}")
    }
}

/// Names other APIs use for our parameters; a caller used to them is pointed to ours.
fn synonym(key: &str) -> Option<&'static str> {
    let k = key.to_ascii_lowercase().replace(['-', ' '], "_");
    Some(match k.as_str() {
        "filter" | "filters" | "conditions" | "query_filter" => "where",
        "fields" | "columns" | "projection" => "select",
        "sort" | "sort_by" | "orderby" | "order" => "order_by",
        "group" | "groupby" | "group_by_fields" | "dimensions" => "group_by",
        "metric" | "aggregations" | "aggregates" | "measures" => "metrics",
        "dataset" | "datasetid" | "id" | "table" => "dataset_id",
        "query" | "search" | "text" | "keyword" => "q",
        "offset" | "page" | "page_token" | "next_cursor" => "cursor",
        "max" | "top" | "size" | "page_size" => "limit",
        _ => return None,
    })
}

fn bounded(s: &str, max: usize, parameter: &str) -> Result<String, RequestError> {
    let n = s.chars().count();
    if n > max {
        return Err(RequestError::invalid(
            parameter,
            format!("`{parameter}` is {n} characters long; at most {max} are accepted"),
        ));
    }
    Ok(s.to_string())
}

fn scalar(v: &Value, path: &str) -> Result<Scalar, RequestError> {
    match v {
        Value::String(s) => bounded(s, MAX_TEXT_CHARS, path).map(Scalar::Str),
        Value::Bool(b) => Ok(Scalar::Bool(*b)),
        Value::Number(n) => Ok(match n.as_i64() {
            Some(i) => Scalar::Int(i),
            None => Scalar::Float(n.as_f64().unwrap_or(f64::NAN)),
        }),
        Value::Null => Err(
            RequestError::invalid(path, "null is not a value to compare with")
                .hint("to find empty values use {\"$not_empty\": false}"),
        ),
        other => Err(RequestError::invalid(
            path,
            format!(
                "expected a single value (string, number or boolean), found {}",
                kind(other)
            ),
        )),
    }
}

fn values(v: &Value, path: &str) -> Result<Vec<Scalar>, RequestError> {
    let parsed;
    let v = match unwrap_json_string(v, false) {
        Some(p) => {
            parsed = p;
            &parsed
        }
        None => v,
    };
    let items: Vec<&Value> = match v {
        Value::Array(items) => items.iter().collect(),
        single => vec![single],
    };
    if items.is_empty() {
        return Err(RequestError::invalid(path, "an empty list matches nothing")
            .hint("list at least one value, or remove the condition"));
    }
    if items.len() > MAX_VALUES {
        return Err(RequestError::invalid(
            path,
            format!(
                "{} values listed; at most {MAX_VALUES} are accepted",
                items.len()
            ),
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| scalar(item, &format!("{path}[{i}]")))
        .collect()
}

fn text_operand(v: &Value, path: &str) -> Result<String, RequestError> {
    match scalar(v, path)? {
        Scalar::Bool(_) => Err(RequestError::invalid(
            path,
            "expected text to search for, found a boolean",
        )),
        s => Ok(s.text()),
    }
}

fn ordering_operand(v: &Value, path: &str) -> Result<Scalar, RequestError> {
    match scalar(v, path)? {
        Scalar::Bool(_) => Err(RequestError::invalid(
            path,
            "a comparison needs a number (or text for text fields), found a boolean",
        )),
        s => Ok(s),
    }
}

/// Whether a condition is a plain string (after the loose forms are unwrapped).
fn is_plain_string(cond: &Value) -> bool {
    match unwrap_json_string(cond, true).or_else(|| unwrap_json_string(cond, false)) {
        Some(parsed) => is_plain_string(&parsed),
        None => cond.is_string(),
    }
}

/// One condition value: array → `$in`, string → substring, number/boolean → equality,
/// object → operators (ANDed).
fn parse_condition(cond: &Value, path: &str) -> Result<Vec<Op>, RequestError> {
    if let Some(parsed) = unwrap_json_string(cond, true).or_else(|| unwrap_json_string(cond, false))
    {
        return parse_condition(&parsed, path);
    }
    Ok(match cond {
        Value::Array(_) => vec![Op::In(values(cond, path)?)],
        Value::String(s) => vec![Op::Contains(bounded(s, MAX_TEXT_CHARS, path)?)],
        Value::Number(_) | Value::Bool(_) => vec![Op::Eq(scalar(cond, path)?)],
        Value::Null => {
            return Err(RequestError::invalid(path, "null is not a condition")
                .hint("to find empty values use {\"$not_empty\": false}; to drop the condition, leave the key out"));
        }
        Value::Object(ops) => {
            if ops.is_empty() {
                return Err(
                    RequestError::invalid(path, "an empty object is not a condition")
                        .hint("write e.g. {\"$gte\": 10}, or leave the key out"),
                );
            }
            let mut out = Vec::with_capacity(ops.len());
            for (name, operand) in ops {
                let op_path = format!("{path}.{name}");
                let op = match name.as_str() {
                    "$eq" => Op::Eq(scalar(operand, &op_path)?),
                    "$ne" => Op::Ne(scalar(operand, &op_path)?),
                    "$in" => Op::In(values(operand, &op_path)?),
                    "$nin" => Op::Nin(values(operand, &op_path)?),
                    "$contains" => Op::Contains(text_operand(operand, &op_path)?),
                    "$not_contains" => Op::NotContains(text_operand(operand, &op_path)?),
                    "$gt" => Op::Gt(ordering_operand(operand, &op_path)?),
                    "$gte" => Op::Gte(ordering_operand(operand, &op_path)?),
                    "$lt" => Op::Lt(ordering_operand(operand, &op_path)?),
                    "$lte" => Op::Lte(ordering_operand(operand, &op_path)?),
                    "$not_empty" => Op::NotEmpty(match operand {
                        Value::Bool(b) => *b,
                        Value::String(s) if s == "true" => true,
                        Value::String(s) if s == "false" => false,
                        other => {
                            return Err(RequestError::invalid(
                                op_path,
                                format!("`$not_empty` takes true or false, found {}", kind(other)),
                            ));
                        }
                    }),
                    other => {
                        let valid = &OPERATORS[..];
                        let probe = if other.starts_with('$') {
                            other.to_string()
                        } else {
                            format!("${other}")
                        };
                        let mut err = RequestError::new(
                            ErrorCode::UnknownOperator,
                            format!("unknown operator `{other}`"),
                        )
                        .at(op_path)
                        .candidates(
                            crate::names::rank(&probe_for_rank(other), OPERATORS.iter().copied())
                                .into_iter()
                                .map(Candidate::new)
                                .collect(),
                            OPERATORS.len(),
                        );
                        err = match valid.iter().find(|v| **v == probe).copied().or_else(|| suggest(&probe, valid.iter().copied())) {
                            Some(near) => err.hint(format!("did you mean `{near}`?")),
                            None => err.hint("operators start with `$`; a bare array means $in and a bare string means $contains"),
                        };
                        return Err(err);
                    }
                };
                out.push(op);
            }
            out
        }
    })
}
