//! Values as a model sends them: JSON held in a string read as JSON, text bounded, one value
//! or a list of them typed as sent, and a value's kind named for an error.

use serde_json::Value;

use super::arguments::Scalar;
use super::tools::{MAX_TEXT_CHARS, MAX_VALUES};
use crate::error::RequestError;

pub(super) fn kind(v: &Value) -> &'static str {
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
pub(super) fn unwrap_json_string(v: &Value, want_object: bool) -> Option<Value> {
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

pub(super) fn bounded(s: &str, max: usize, parameter: &str) -> Result<String, RequestError> {
    let n = s.chars().count();
    if n > max {
        return Err(RequestError::invalid(
            parameter,
            format!("`{parameter}` is {n} characters long; at most {max} are accepted"),
        ));
    }
    Ok(s.to_string())
}

pub(super) fn scalar(v: &Value, path: &str) -> Result<Scalar, RequestError> {
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

pub(super) fn values(v: &Value, path: &str) -> Result<Vec<Scalar>, RequestError> {
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

pub(super) fn text_operand(v: &Value, path: &str) -> Result<String, RequestError> {
    match scalar(v, path)? {
        Scalar::Bool(_) => Err(RequestError::invalid(
            path,
            "expected text to search for, found a boolean",
        )),
        s => Ok(s.text()),
    }
}

pub(super) fn ordering_operand(v: &Value, path: &str) -> Result<Scalar, RequestError> {
    match scalar(v, path)? {
        Scalar::Bool(_) => Err(RequestError::invalid(
            path,
            "a comparison needs a number (or text for text fields), found a boolean",
        )),
        s => Ok(s),
    }
}
