//! `query_records` and `cite_provisions` calls resolved: the columns a query returns and the
//! link a citation follows.

use super::conditions::{parse_order_key, resolve_as_of};
use super::describe::{conditions, names_of};
use super::plan::{Filter, Latest, QueryPlan, Resolution, Sort, SummarizePlan};
use super::resolver::Resolver;
use super::summarize::resolve_summarize;
use crate::definition::{DatasetDef, Field, FieldId, Role};
use crate::error::{Candidate, ErrorCode, RequestError};
use crate::names;
use crate::request::{Notice, QueryArgs};
use serde::Serialize;
use serde_json::json;

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
