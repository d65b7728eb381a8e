//! The reader of a call's arguments: an argument the tool does not have refused (with the
//! name meant, when one is near), then each parameter read in its loose forms and bounded.

use serde_json::{Map, Value};

use super::arguments::{CompareArg, Condition, Notice, PREVIOUS_WORDS, Scalar};
use super::conditions::{is_plain_string, parse_condition, sql_to_json};
use super::tools::{
    MAX_CONDITIONS, MAX_CURSOR_CHARS, MAX_NAME_CHARS, MAX_NAMES, MAX_TEXT_CHARS, Shape, Tool,
};
use super::values::{bounded, kind, unwrap_json_string};
use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names::suggest;

pub(super) struct Args {
    tool: Tool,
    pub(super) map: Map<String, Value>,
    pub(super) notices: Vec<Notice>,
}

impl Args {
    pub(super) fn new(tool: Tool, arguments: &Value) -> Result<Args, RequestError> {
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

    pub(super) fn dataset_id(&self) -> Result<String, RequestError> {
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

    pub(super) fn text(&self, key: &str) -> Result<Option<String>, RequestError> {
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

    pub(super) fn cursor(&self) -> Result<Option<String>, RequestError> {
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
    pub(super) fn names(&self, key: &str) -> Result<Vec<String>, RequestError> {
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
    pub(super) fn answer(&self, key: &str) -> Result<Value, RequestError> {
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
    pub(super) fn compare(&self, key: &str) -> Result<Option<CompareArg>, RequestError> {
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
    pub(super) fn flag(&self, key: &str) -> Result<bool, RequestError> {
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
    pub(super) fn choice(&self, key: &str) -> Result<Option<&'static str>, RequestError> {
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

    pub(super) fn limit(&mut self) -> Result<usize, RequestError> {
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
    pub(super) fn conditions(&self, key: &str) -> Result<Vec<Condition>, RequestError> {
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
