//! The resources a caller reads: each dataset it may see (described without reading its
//! data), each field of one, and the views of the tools.

use rmcp::ErrorData;
use rmcp::model::{ReadResourceResult, Resource, ResourceContents};
use serde_json::{Value, json};
use tally_semantic::Tool;

use super::answer::text;
use crate::view::View;

/// The tools that have a view, as the tool table declares (`ToolInfo::view`): today every
/// tool, a check of an answer and the provisions cited included.
fn tools_with_views() -> impl Iterator<Item = Tool> {
    Tool::ALL.into_iter().filter(|t| crate::ui::has_view(*t))
}

/// The resource URI of a dataset.
fn dataset_uri(id: &str) -> String {
    format!("tally://datasets/{id}")
}

/// A dataset described as a resource: what it is, which fields it has, which version is
/// served. Reading it needs no data.
fn describe(ds: &tally_engine::storage::Dataset) -> Value {
    let def = &ds.def;
    json!({
        "dataset_id": def.id,
        "title": def.title,
        "description": def.description,
        "publisher": def.publisher,
        "record_count": ds.record_count(),
        "version": ds.version,
        "source_url": def.source.url,
        "fields": def.fields.iter().map(|f| json!({
            "name": f.name,
            "role": f.role.as_str(),
            "description": f.desc,
        })).collect::<Vec<_>>(),
        "computed_measures": def.computed_measures.iter().map(|m| m.name.clone()).collect::<Vec<_>>(),
        "tools": "inspect_dataset for codes, fill rates and statistics; query_records and summarize_records to compute",
    })
}

/// The resources listed to a caller: the datasets its view holds, with their number of
/// records, and the views of the tools to clients that render them (`views`).
pub(super) fn listed(view: &View, views: bool) -> Vec<Resource> {
    let mut items: Vec<Resource> = view
        .datasets()
        .map(|ds| {
            let mut description = match ds.record_count() {
                Some(n) => format!("{n} records"),
                None => "records being counted (read on first use)".to_string(),
            };
            if let Some(p) = &ds.def.publisher {
                description.push_str(&format!("; {p}"));
            }
            Resource::new(dataset_uri(ds.id()), ds.id())
                .with_title(ds.def.title.clone())
                .with_description(description)
                .with_mime_type("application/json")
        })
        .collect();
    // Views are listed to clients that render them (the spec lets servers leave them
    // out of the list); any client may read one.
    if views {
        items.extend(tools_with_views().map(|tool| {
            Resource::new(crate::ui::uri(tool), format!("{} view", tool.name()))
                .with_title(crate::ui::title(tool))
                .with_mime_type(crate::ui::MIME)
                .with_meta(crate::ui::resource_meta())
        }));
    }
    items
}

/// The resource `uri` as the caller's view shows it: a tool's view, a field of a dataset, or
/// a dataset; not found when the view holds no such thing.
pub(super) fn read(view: &View, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    if let Some(tool) = crate::ui::tool_of(uri) {
        let contents = ResourceContents::text(crate::ui::view_html(tool), uri)
            .with_mime_type(crate::ui::MIME)
            .with_meta(crate::ui::resource_meta());
        return Ok(ReadResourceResult::new(vec![contents]));
    }
    if let Some((id, name)) = crate::prompts::field_uri(uri) {
        let described = view
            .dataset(&id)
            .and_then(|ds| crate::prompts::describe_field(ds, &name));
        return match described {
            Some(field) => Ok(ReadResourceResult::new(vec![
                ResourceContents::text(text(&field), uri).with_mime_type("application/json"),
            ])),
            None => Err(ErrorData::resource_not_found(
                format!(
                    "no field `{name}` in a dataset `{id}`; tally://datasets/{id} lists the fields (completion/complete offers them)"
                ),
                Some(json!({ "uri": uri })),
            )),
        };
    }
    let found = uri
        .strip_prefix("tally://datasets/")
        .and_then(|id| view.dataset(id));
    let Some(ds) = found else {
        return Err(ErrorData::resource_not_found(
            format!(
                "no resource `{uri}`; list_resources names every dataset (tally://datasets/<id>), and the views are ui://tally/<tool>"
            ),
            Some(json!({ "uri": uri })),
        ));
    };
    let text = serde_json::to_string(&describe(ds)).unwrap_or_default();
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type("application/json"),
    ]))
}
