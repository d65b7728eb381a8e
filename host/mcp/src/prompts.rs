//! What a client can offer a person before any tool is called: resource templates for a
//! dataset and one of its fields, prompts that teach the flow with the served data, and
//! completions of their arguments (dataset ids, field names, metric forms, codes), ranked as
//! names are resolved: prefix, then substring, then close spellings, all after NFKC and case
//! folding. Everything is limited to what the caller's token may see.

use rmcp::model::{
    CompletionInfo, GetPromptResult, Prompt, PromptArgument, PromptMessage, ResourceTemplate, Role,
};
use serde_json::{Value, json};
use tally_engine::storage::Dataset;

use crate::view::View;
use tally_semantic::definition::{Codelist, LocatorKind, Role as FieldRole};
use tally_semantic::names::fold;

/// The resource of one field of a dataset.
pub const FIELD_TEMPLATE: &str = "tally://datasets/{id}/fields/{name}";
pub const DATASET_TEMPLATE: &str = "tally://datasets/{id}";

pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(DATASET_TEMPLATE, "dataset")
            .with_title("A dataset: what it is, its fields, the version served")
            .with_mime_type("application/json"),
        ResourceTemplate::new(FIELD_TEMPLATE, "field")
            .with_title("One field of a dataset: role, meaning, notes, codes")
            .with_mime_type("application/json"),
    ]
}

/// `tally://datasets/<id>/fields/<name>` → (id, name), names percent-decoded.
pub fn field_uri(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix("tally://datasets/")?;
    let (id, name) = rest.split_once("/fields/")?;
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|c| c.into_owned())
    };
    Some((decode(id)?, decode(name)?))
}

/// A field described as a resource.
pub fn describe_field(ds: &Dataset, name: &str) -> Option<Value> {
    let f = ds.def.fields.iter().find(|f| f.name == name)?;
    let codes = match &f.codelist {
        Some(Codelist::Static(codes)) => json!(codes),
        Some(Codelist::Auto) => {
            json!("the values present in the data (inspect_dataset lists the most frequent)")
        }
        Some(Codelist::AutoSplit) => {
            json!("the parts of the multi-value cells present in the data")
        }
        None => Value::Null,
    };
    Some(json!({
        "dataset_id": ds.id(),
        "name": f.name,
        "role": f.role.as_str(),
        "data_type": f.data_type.as_str(),
        "description": f.desc,
        "groupable": f.groupable,
        "multi_value_separator": f.multi_value,
        "notes": f.notes,
        "codes": codes,
        "version": ds.version,
    }))
}

/// The prompts: the flow, with the served data's own names. `find_legal_basis` is offered
/// when the caller may see a law dataset.
pub fn prompts(view: &View) -> Vec<Prompt> {
    let mut prompts = vec![
        Prompt::new(
            "explore_dataset",
            Some("Look at a dataset before asking about it: its fields, codes, caveats, and a first breakdown."),
            Some(vec![argument("dataset_id", "The dataset (list_datasets names them)", true)]),
        )
        .with_title("Explore a dataset"),
        Prompt::new(
            "compare_groups",
            Some("Compare groups of records on a measure, with the numbers computed by Tally and their caveats."),
            Some(vec![
                argument("dataset_id", "The dataset", true),
                argument("group_by", "The field whose values are the groups", true),
                argument("metric", "count, sum:F, avg:F, min:F, max:F, last:F or avg:<computed measure> (default count)", false),
                argument("where_field", "Optionally, a field to narrow the records by", false),
                argument("where_value", "The value of where_field the records must have (its codes are completed)", false),
                argument("explode", "Optionally, a multi-value field (such as group_by) whose parts are counted one by one", false),
            ]),
        )
        .with_title("Compare groups on a measure"),
        Prompt::new(
            "find_records",
            Some("Find the records that mention some words, showing the fields that matter, in an order."),
            Some(vec![
                argument("dataset_id", "The dataset", true),
                argument("q", "The words to look for", true),
                argument("search_fields", "Optionally, the text field to look in (default: every text field)", false),
                argument("select", "Optionally, a field to show besides the identifying ones", false),
                argument("order_by", "Optionally, a field to order by (-field for descending)", false),
            ]),
        )
        .with_title("Find records"),
    ];
    if !law_datasets(view).is_empty() {
        prompts.push(
            Prompt::new(
                "find_legal_basis",
                Some("Find the provisions of law that records (e.g. procedures) rest on, and quote them from a law dataset with their source."),
                Some(vec![
                    argument("dataset_id", "The dataset whose records name a law and a provision", true),
                    argument("where_field", "A field to pick the records by", true),
                    argument("where_value", "The value of where_field the records must have (its codes are completed)", true),
                    argument("laws", "The law dataset to quote from (default: the only one served)", false),
                ]),
            )
            .with_title("Find the legal basis of records"),
        );
    }
    prompts
}

/// The datasets holding law texts: those with a field of provisions (`locator: law`) read
/// by a plugin (a table that only cites provisions is not one).
fn law_datasets(view: &View) -> Vec<&Dataset> {
    view.datasets()
        .filter(|ds| ds.def.backend.plugin.is_some())
        .filter(|ds| {
            ds.def
                .fields
                .iter()
                .any(|f| f.locator == Some(LocatorKind::Law))
        })
        .map(|ds| ds.as_ref())
        .collect()
}

fn argument(name: &str, description: &str, required: bool) -> PromptArgument {
    PromptArgument::new(name)
        .with_description(description)
        .with_required(required)
}

/// A prompt with its arguments filled in, or what was wrong with them.
pub fn get(
    name: &str,
    arguments: &serde_json::Map<String, Value>,
    view: &View,
) -> Result<GetPromptResult, String> {
    let args = Arguments { arguments, view };
    match name {
        "explore_dataset" => explore_dataset(&args),
        "compare_groups" => compare_groups(&args),
        "find_records" => find_records(&args),
        "find_legal_basis" => find_legal_basis(&args),
        other => Err(format!(
            "no prompt `{other}`; the prompts are explore_dataset, compare_groups, find_records and, when a law dataset is served, find_legal_basis"
        )),
    }
}

/// The arguments of a prompt and the caller's view they are read against.
struct Arguments<'a> {
    arguments: &'a serde_json::Map<String, Value>,
    view: &'a View,
}

impl<'a> Arguments<'a> {
    /// The argument `k` as trimmed text, if it is given and not blank.
    fn text(&self, k: &str) -> Option<&'a str> {
        self.arguments
            .get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }

    /// The dataset `id` names, if the caller may see it.
    fn dataset(&self, id: Option<&str>) -> Result<&'a Dataset, String> {
        let id = id.ok_or("dataset_id is required (list_datasets names the datasets)")?;
        self.view.dataset(id).map(|ds| ds.as_ref()).ok_or_else(|| {
            let known = self.view.ids();
            format!("no dataset `{id}`; the datasets are {}", known.join(", "))
        })
    }
}

/// The prompt `explore_dataset`: inspect a dataset, then a first breakdown.
fn explore_dataset(args: &Arguments) -> Result<GetPromptResult, String> {
    let ds = args.dataset(args.text("dataset_id"))?;
    let group = first_groupable(ds).unwrap_or_default();
    let body = format!(
        "I want to understand the dataset `{id}` ({title}) before asking questions about it.\n\
         1. Call inspect_dataset with {{\"dataset_id\": \"{id}\"}}: read every field's role, meaning, codes and notes (what null means), and the computed measures.\n\
         2. Call summarize_records with {{\"dataset_id\": \"{id}\", \"group_by\": [\"{group}\"]}} for a first breakdown.\n\
         3. Tell me in a few lines what the dataset covers, which fields matter for questions, and the caveats I must keep in mind, \
         quoting the numbers exactly as Tally computed them and naming the source and its retrieval date from the provenance.",
        id = ds.id(),
        title = ds.def.title,
    );
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, body)])
            .with_description(format!("Explore {}", ds.def.title)),
    )
}

/// The prompt `compare_groups`: one summarize_records call over a groupable field.
fn compare_groups(args: &Arguments) -> Result<GetPromptResult, String> {
    let text = |k: &str| args.text(k);
    let ds = args.dataset(text("dataset_id"))?;
    let group = text("group_by").ok_or("group_by is required: a groupable field of the dataset")?;
    if !ds.def.fields.iter().any(|f| f.name == group && f.groupable) {
        return Err(format!(
            "`{group}` is not a groupable field of `{}`; they are {}",
            ds.id(),
            field_names(ds, true).join(", ")
        ));
    }
    let metric = text("metric").unwrap_or("count");
    let mut metrics = vec![metric.to_string()];
    if metric != "count" {
        metrics.push("count".into());
    }
    let mut call = json!({ "dataset_id": ds.id(), "group_by": [group], "metrics": metrics });
    if let Some(parts) = text("explode") {
        if !ds
            .def
            .fields
            .iter()
            .any(|f| f.name == parts && f.is_multi_value())
        {
            return Err(format!(
                "`{parts}` is not a multi-value field of `{}`; they are {}",
                ds.id(),
                or_none(multi_value_names(ds))
            ));
        }
        call["explode"] = json!([parts]);
    }
    let narrowed = match condition(ds, text("where_field"), text("where_value"), false)? {
        Some((field, value)) => {
            call["where"] = json!({ field.clone(): [value.clone()] });
            format!(", among the records whose `{field}` is `{value}`")
        }
        None => String::new(),
    };
    let body = format!(
        "Compare the groups of `{group}` in `{id}` ({title}) on {metric}{narrowed}.\n\
         Call summarize_records with {call} (Tally computes every number; do not compute any yourself). \
         Then name the highest and lowest groups with their values as given, say how many records each rests on (count), \
         and pass on every note in data.notes and every warning in provenance.warnings, with the source and retrieval date.",
        id = ds.id(),
        title = ds.def.title,
    );
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, body)])
            .with_description(format!("{} by {group}", ds.def.title)),
    )
}

/// The prompt `find_records`: one query_records call for some words.
fn find_records(args: &Arguments) -> Result<GetPromptResult, String> {
    let text = |k: &str| args.text(k);
    let ds = args.dataset(text("dataset_id"))?;
    let q = text("q").ok_or("q is required: the words to look for")?;
    let mut call = json!({ "dataset_id": ds.id(), "q": q, "limit": 20 });
    for (key, allowed) in [
        ("search_fields", text_field_names(ds)),
        ("select", field_names(ds, false)),
    ] {
        if let Some(name) = text(key) {
            if !allowed.iter().any(|a| a == name) {
                return Err(format!(
                    "`{name}` cannot be given as {key} of `{}`; it takes {}",
                    ds.id(),
                    or_none(allowed)
                ));
            }
            call[key] = json!([name]);
        }
    }
    if let Some(order) = text("order_by") {
        let name = order.strip_prefix('-').unwrap_or(order);
        if !ds.def.fields.iter().any(|f| f.name == name) {
            return Err(format!(
                "`{name}` is not a field of `{}`; they are {}",
                ds.id(),
                field_names(ds, false).join(", ")
            ));
        }
        call["order_by"] = json!([order]);
    }
    let body = format!(
        "Find the records of `{id}` ({title}) that mention “{q}”.\n\
         Call query_records with {call} (page on with the cursor it returns if I ask for more). \
         List the records as returned, say how many matched in all (data.total), and pass on every note and warning, with the source and its retrieval date. \
         Do not count or compute anything yourself: for counts per group, call summarize_records with the same q.",
        id = ds.id(),
        title = ds.def.title,
    );
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, body)])
            .with_description(format!("Records of {} mentioning {q}", ds.def.title)),
    )
}

/// The prompt `find_legal_basis`: the records' provisions, quoted from a law dataset.
fn find_legal_basis(args: &Arguments) -> Result<GetPromptResult, String> {
    let text = |k: &str| args.text(k);
    let ds = args.dataset(text("dataset_id"))?;
    let (field, value) = condition(ds, text("where_field"), text("where_value"), true)?
        .ok_or("where_field and where_value are required: they pick the records whose legal basis is sought")?;
    let law = law_dataset(args.view, text("laws"))?;
    let locator = law
        .def
        .fields
        .iter()
        .find(|f| f.locator == Some(LocatorKind::Law))
        .map(|f| f.name.clone())
        .unwrap_or_default();
    let dims: Vec<String> = law
        .def
        .fields
        .iter()
        .filter(|f| f.role == FieldRole::Dim)
        .map(|f| match f.desc.as_deref().map(str::trim) {
            Some(desc) if !desc.is_empty() => format!("`{}` ({desc})", f.name),
            _ => format!("`{}`", f.name),
        })
        .collect();
    let call =
        json!({ "dataset_id": ds.id(), "where": { field.clone(): [value.clone()] }, "limit": 20 });
    let body = format!(
        "Find the legal basis of the records of `{id}` ({title}) whose `{field}` is `{value}`, and quote it.\n\
         1. Call inspect_dataset with {{\"dataset_id\": \"{id}\"}} and find the fields that name the law and the provision (article, paragraph, item) of each record.\n\
         2. Call query_records with {call}, selecting those fields (page with the cursor if there are more).\n\
         3. For each law and provision, call query_records on `{laws}` ({law_title}) with a condition on the law's name and on `{locator}` (it reads any common form of a provision, e.g. 第5条第1項 or 第五条第一項), \
         selecting the text. Its other conditions: {dims}.\n\
         4. Answer with each provision's text exactly as returned, its citation (the source link of the provenance), and say which records rest on it. \
         Say plainly when a provision was not found, and pass on every warning.",
        id = ds.id(),
        title = ds.def.title,
        laws = law.id(),
        law_title = law.def.title,
        dims = dims.join(", "),
    );
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, body)]).with_description(
            format!(
                "The legal basis of {} where {field} = {value}",
                ds.def.title
            ),
        ),
    )
}

/// The law dataset `laws` names, or the only one served when it names none.
fn law_dataset<'a>(view: &'a View, laws_arg: Option<&str>) -> Result<&'a Dataset, String> {
    let laws = law_datasets(view);
    Ok(match laws_arg {
        Some(id) => laws.iter().find(|l| l.id() == id).copied().ok_or_else(|| {
            format!(
                "`{id}` is not a law dataset served here; the law datasets are {}",
                laws.iter().map(|l| l.id()).collect::<Vec<_>>().join(", ")
            )
        })?,
        None => match laws.as_slice() {
            [only] => *only,
            [] => return Err("no law dataset is served (a dataset with a `locator: law` field read by a plugin, e.g. the built-in law plugin)".into()),
            many => {
                return Err(format!(
                    "several law datasets are served; name one in `laws`: {}",
                    many.iter().map(|l| l.id()).collect::<Vec<_>>().join(", ")
                ));
            }
        },
    })
}

/// The condition `where_field` = `where_value` of a prompt, checked against the dataset:
/// both or neither (unless `required`), the field one of the dataset's, the value one of its
/// codes when the field has a static codelist.
fn condition(
    ds: &Dataset,
    field: Option<&str>,
    value: Option<&str>,
    required: bool,
) -> Result<Option<(String, String)>, String> {
    let (field, value) = match (field, value) {
        (None, None) if !required => return Ok(None),
        (Some(f), Some(v)) => (f, v),
        _ => {
            return Err(
                "where_field and where_value go together: a field of the dataset and the value its records must have"
                    .into(),
            );
        }
    };
    let Some(f) = ds.def.fields.iter().find(|f| f.name == field) else {
        return Err(format!(
            "`{field}` is not a field of `{}`; they are {}",
            ds.id(),
            field_names(ds, false).join(", ")
        ));
    };
    if let Some(Codelist::Static(codes)) = &f.codelist
        && !codes.iter().any(|c| c.value == value)
    {
        return Err(format!(
            "`{value}` is not a code of `{field}`; its codes are {}",
            codes
                .iter()
                .map(|c| c.value.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(Some((field.to_string(), value.to_string())))
}

fn first_groupable(ds: &Dataset) -> Option<String> {
    ds.def
        .fields
        .iter()
        .find(|f| f.groupable && f.role == FieldRole::Dim)
        .or_else(|| ds.def.fields.iter().find(|f| f.groupable))
        .map(|f| f.name.clone())
}

// ---- completions ----------------------------------------------------------------------------

/// Candidates ranked against what was typed: prefix, substring, then close spellings (all
/// folded: NFKC and case), each group in the candidates' own order. At most 100 (MCP's cap),
/// with the total said.
///
/// Bounded in time by its input: what is typed is at most
/// [`crate::bounds::MAX_COMPLETION_CHARS`] (checked at the gate), prefix and substring tests
/// are linear, and an edit distance (whose cost is the product of the two lengths) is
/// computed only for typed text of 2 to [`crate::bounds::MAX_FUZZY_CHARS`] characters against
/// candidates whose length could reach the similarity asked for at all.
pub fn rank(typed: &str, candidates: impl IntoIterator<Item = String>) -> CompletionInfo {
    use crate::bounds::{MAX_FUZZY_CANDIDATE_CHARS, MAX_FUZZY_CHARS};
    let typed = fold(typed.trim()).into_owned();
    let typed_chars = typed.chars().count();
    let fuzzy = (2..=MAX_FUZZY_CHARS).contains(&typed_chars);
    let mut prefix = Vec::new();
    let mut inside = Vec::new();
    let mut close = Vec::new();
    for c in candidates {
        let folded = fold(&c).into_owned();
        if folded.starts_with(&typed) {
            prefix.push(c);
        } else if folded.contains(&typed) {
            inside.push(c);
        } else if fuzzy {
            // A similarity of 0.5 (1 − distance / longer length) needs the lengths within a
            // factor of two: the distance is at least their difference.
            let n = folded.chars().count();
            if n > MAX_FUZZY_CANDIDATE_CHARS || n > 2 * typed_chars || 2 * n < typed_chars {
                continue;
            }
            let similarity = strsim::normalized_levenshtein(&typed, &folded);
            if similarity >= 0.5 {
                close.push((similarity, c));
            }
        }
    }
    close.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut values: Vec<String> = prefix
        .into_iter()
        .chain(inside)
        .chain(close.into_iter().map(|(_, c)| c))
        .collect();
    let total = values.len();
    values.truncate(CompletionInfo::MAX_VALUES);
    let has_more = total > values.len();
    CompletionInfo::with_pagination(values, Some(total as u32), has_more).unwrap_or_default()
}

fn field_names(ds: &Dataset, groupable_only: bool) -> Vec<String> {
    ds.def
        .fields
        .iter()
        .filter(|f| !groupable_only || f.groupable)
        .map(|f| f.name.clone())
        .collect()
}

fn text_field_names(ds: &Dataset) -> Vec<String> {
    ds.def
        .fields
        .iter()
        .filter(|f| !f.data_type.is_numeric())
        .map(|f| f.name.clone())
        .collect()
}

fn multi_value_names(ds: &Dataset) -> Vec<String> {
    ds.def
        .fields
        .iter()
        .filter(|f| f.is_multi_value())
        .map(|f| f.name.clone())
        .collect()
}

fn or_none(names: Vec<String>) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

fn metric_forms(ds: &Dataset) -> Vec<String> {
    let mut forms = vec!["count".to_string()];
    for f in ds
        .def
        .fields
        .iter()
        .filter(|f| f.role == FieldRole::Measure)
    {
        for kind in ["sum", "avg", "min", "max"] {
            forms.push(format!("{kind}:{}", f.name));
        }
    }
    forms.extend(
        ds.def
            .computed_measures
            .iter()
            .map(|m| format!("avg:{}", m.name)),
    );
    forms
}

/// Completes an argument of a prompt or a resource template. `context` holds the arguments
/// already chosen (the dataset, for its fields).
pub fn complete(
    argument: &str,
    typed: &str,
    context: &std::collections::HashMap<String, String>,
    view: &View,
) -> CompletionInfo {
    let chosen = context
        .get("dataset_id")
        .or_else(|| context.get("id"))
        .and_then(|id| view.dataset(id));
    let candidates: Vec<String> = match argument {
        "dataset_id" | "id" => view.ids(),
        "laws" => law_datasets(view)
            .iter()
            .map(|ds| ds.id().to_string())
            .collect(),
        "group_by" => chosen.map(|ds| field_names(ds, true)).unwrap_or_default(),
        "name" | "where_field" | "select" => {
            chosen.map(|ds| field_names(ds, false)).unwrap_or_default()
        }
        "search_fields" => chosen.map(|ds| text_field_names(ds)).unwrap_or_default(),
        "explode" => chosen.map(|ds| multi_value_names(ds)).unwrap_or_default(),
        // `-field` orders descending: the sign is kept on every candidate.
        "order_by" => {
            let sign = if typed.trim_start().starts_with('-') {
                "-"
            } else {
                ""
            };
            chosen
                .map(|ds| {
                    field_names(ds, false)
                        .into_iter()
                        .map(|n| format!("{sign}{n}"))
                        .collect()
                })
                .unwrap_or_default()
        }
        "metric" => chosen.map(|ds| metric_forms(ds)).unwrap_or_default(),
        _ => Vec::new(),
    };
    rank(typed, candidates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn prefix_before_substring_before_close_spellings_after_folding() {
        let got = rank(
            "ｏｎ",
            names(&["avg:オンライン率", "online_rate", "region", "phone", "one"]),
        );
        assert_eq!(
            got.values,
            names(&["online_rate", "one", "region", "phone"])
        );
        let got = rank(
            "オンライン",
            names(&["count", "avg:オンライン率", "オンライン化の実施状況"]),
        );
        assert_eq!(
            got.values,
            names(&["オンライン化の実施状況", "avg:オンライン率"])
        );
        let got = rank("regoin", names(&["region", "year"]));
        assert_eq!(got.values, names(&["region"]));
        let got = rank("", names(&["b", "a"]));
        assert_eq!(got.values, names(&["b", "a"]));
        assert_eq!(got.total, Some(2));
        assert_eq!(got.has_more, Some(false));
    }

    #[test]
    fn at_most_a_hundred_with_the_total_said() {
        let got = rank("f", (0..250).map(|i| format!("f{i}")));
        assert_eq!(got.values.len(), 100);
        assert_eq!(got.total, Some(250));
        assert_eq!(got.has_more, Some(true));
    }

    #[test]
    fn field_uris_are_read_back_decoded() {
        assert_eq!(
            field_uri(
                "tally://datasets/procedures/fields/%E6%89%80%E7%AE%A1%E5%BA%9C%E7%9C%81%E5%BA%81"
            ),
            Some(("procedures".into(), "所管府省庁".into()))
        );
        assert_eq!(
            field_uri("tally://datasets/procedures/fields/所管府省庁"),
            Some(("procedures".into(), "所管府省庁".into()))
        );
        assert_eq!(field_uri("tally://datasets/procedures"), None);
    }
}
