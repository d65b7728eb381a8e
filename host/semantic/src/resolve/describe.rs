//! A plan said back in words and as JSON: its conditions for messages and transformations,
//! and the call as resolved for the provenance.

use super::plan::{Compare, Filter, HavingFilter, QueryPlan, SummarizePlan};
use crate::definition::{DatasetDef, FieldId};
use crate::request::{Op, Scalar};
use serde_json::json;

pub(super) fn op_text(op: &Op) -> String {
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
pub(super) fn conditions<'a>(items: impl Iterator<Item = (&'a str, &'a Op)>) -> serde_json::Value {
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

pub(super) fn names_of(def: &DatasetDef, ids: &[FieldId]) -> Vec<String> {
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
