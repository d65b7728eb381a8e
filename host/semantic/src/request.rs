//! The arguments of the four tools, read from JSON as a language model sends them.
//!
//! LLM-shaped input is normal input: a list may arrive as a JSON string or as a single value,
//! an object as a JSON string, a number as a string. Those forms are accepted here, once, for
//! the CLI and the MCP tools alike. Everything is bounded, and an argument the tool does not
//! have is refused (a misspelt `where` silently ignored would give wrong numbers).
//!
//! Names are still as the caller typed them; [`crate::resolve`] maps them onto a dataset.
//!
//! The tools and their parameters ([`tools`]), the arguments as read ([`arguments`]), and
//! their reader ([`read`]), with the loose forms of values ([`values`]) and of conditions
//! ([`conditions`]); [`parse`] reads a call.

mod arguments;
mod conditions;
mod read;
mod tools;
mod values;

use serde_json::Value;

use crate::error::RequestError;
use read::Args;

pub use arguments::{
    Choice, CiteArgs, CompareArg, Condition, InspectArgs, ListArgs, Notice, OPERATORS, Op,
    QueryArgs, Request, Scalar, SummarizeArgs, VerifyArgs,
};
pub use tools::{
    ExampleNames, MAX_CONDITIONS, MAX_CURSOR_CHARS, MAX_NAME_CHARS, MAX_NAMES, MAX_TEXT_CHARS,
    MAX_VALUES, Parameter, QUERY_LIMIT, SUMMARIZE_LIMIT, Shape, TOOLS, Tool, ToolInfo,
};

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
