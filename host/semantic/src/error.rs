//! Errors of the semantic layer, named by who must act.

use serde::Serialize;

use crate::definition::DefinitionError;

/// Everything the semantic layer refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The caller's arguments: fix the call.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The dataset definition: fix `dataset.yaml`.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
}

/// What kind of mistake a call made; stable strings for clients that branch on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// An argument has the wrong shape or is out of bounds.
    InvalidArgument,
    /// A parameter name the tool does not have.
    UnknownParameter,
    UnknownDataset,
    UnknownField,
    UnknownMetric,
    UnknownColumn,
    UnknownOperator,
    /// A value compared exactly that is not a code of the field's codelist.
    InvalidCode,
    /// A field used in a way its role does not allow (grouping a measure, summing a dim).
    RoleMismatch,
    InvalidCursor,
    /// A metric a measure's `aggregation` forbids: a rate summed or averaged without its
    /// weight, a stock summed over several periods.
    NotAdditive,
}

/// One name the caller could have meant, with what it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Candidate {
    pub fn new(name: impl Into<String>) -> Candidate {
        Candidate {
            name: name.into(),
            description: None,
        }
    }

    pub fn described(name: impl Into<String>, description: Option<&str>) -> Candidate {
        Candidate {
            name: name.into(),
            description: description.map(str::to_string),
        }
    }
}

/// A refused call: what was wrong, what the caller may have meant, and a call that works.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub code: ErrorCode,
    pub message: String,
    /// The argument at fault, as a path (`where.所管府省庁.$in`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
    /// Ranked, best first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
    /// How many valid names there are in all (the candidates are only the closest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_total: Option<usize>,
    /// Some valid names, in the dataset's order, beside the ranked candidates.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sample: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// A call that works, as `{"tool": …, "arguments": …}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<serde_json::Value>,
    /// When the name typed fits several equally: what a client may ask its user to choose
    /// among (the refusal says the same in `message` and `candidates`).
    #[serde(skip)]
    pub ambiguous: Option<Box<Ambiguous>>,
}

/// A name that fits several names equally: where it was typed, as typed, and the names it
/// fits, described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguous {
    /// What kind of name it is: `field`, `measure`, `dataset` or `code`.
    pub what: &'static str,
    pub parameter: String,
    pub input: String,
    pub choices: Vec<Candidate>,
}

impl RequestError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> RequestError {
        RequestError {
            code,
            message: message.into(),
            parameter: None,
            candidates: Vec::new(),
            candidate_total: None,
            sample: Vec::new(),
            hint: None,
            example: None,
            ambiguous: None,
        }
    }

    pub fn invalid(parameter: impl Into<String>, message: impl Into<String>) -> RequestError {
        RequestError::new(ErrorCode::InvalidArgument, message).at(parameter)
    }

    pub fn at(mut self, parameter: impl Into<String>) -> RequestError {
        self.parameter = Some(parameter.into());
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> RequestError {
        self.hint = Some(hint.into());
        self
    }

    pub fn candidates(mut self, candidates: Vec<Candidate>, total: usize) -> RequestError {
        self.candidates = candidates;
        self.candidate_total = Some(total);
        self
    }

    pub fn sample<'a>(
        mut self,
        names: impl IntoIterator<Item = &'a str>,
        size: usize,
    ) -> RequestError {
        self.sample = names.into_iter().take(size).map(str::to_string).collect();
        self
    }

    pub fn example(mut self, tool: &str, arguments: serde_json::Value) -> RequestError {
        self.example = Some(serde_json::json!({ "tool": tool, "arguments": arguments }));
        self
    }
}
