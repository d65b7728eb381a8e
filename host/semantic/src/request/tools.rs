//! The tools: what each is (the one table [`TOOLS`]), its example call, the parameters it
//! takes and how each is written, and the bounds every argument is held to.

use serde::Serialize;
use serde_json::{Map, Value};

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
