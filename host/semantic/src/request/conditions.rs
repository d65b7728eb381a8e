//! One condition of `where` or `having` read as operators (a bare array is `$in`, a bare
//! string `$contains`, a bare number or boolean `$eq`), and SQL a caller wrote shown as JSON.

use serde_json::{Map, Value};

use super::arguments::{OPERATORS, Op};
use super::tools::MAX_TEXT_CHARS;
use super::values::{
    bounded, kind, ordering_operand, scalar, text_operand, unwrap_json_string, values,
};
use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names::suggest;

/// The JSON form of a simple SQL condition (`A = 'x' AND B >= 10 AND C LIKE '%y%'`), to show
/// a caller how to write it; never executed.
pub(super) fn sql_to_json(sql: &str) -> Option<String> {
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

/// Whether a condition is a plain string (after the loose forms are unwrapped).
pub(super) fn is_plain_string(cond: &Value) -> bool {
    match unwrap_json_string(cond, true).or_else(|| unwrap_json_string(cond, false)) {
        Some(parsed) => is_plain_string(&parsed),
        None => cond.is_string(),
    }
}

/// One condition value: array → `$in`, string → substring, number/boolean → equality,
/// object → operators (ANDed).
pub(super) fn parse_condition(cond: &Value, path: &str) -> Result<Vec<Op>, RequestError> {
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
