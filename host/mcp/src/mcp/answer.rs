//! A call's outcome as MCP gives it: the tool result (the envelope with its view's metadata
//! and the chart asked for, or the refusal), and the errors of a call its client cancelled
//! or of a task there is no room for.

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;
use tally_semantic::Tool;

/// Compact JSON with non-ASCII characters as they are (serde_json never escapes them).
pub(super) fn text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// The error of a request the client cancelled (rmcp sends no answer to it).
pub(super) fn cancelled_by_client() -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(-32800),
        "the request was cancelled by the client",
        None,
    )
}

/// The refusal of a task there is no room for.
pub(super) fn no_room(full: crate::tasks::Full) -> CallToolResult {
    let refusal = tally_engine::EngineError::Limit {
        message: full.message,
        hint: full.hint,
    };
    refused(&refusal.to_json())
}

/// A tool result refusing the call: the refusal's JSON, marked as an error.
pub(super) fn refused(refusal: &Value) -> CallToolResult {
    let mut r = CallToolResult::default();
    r.content = vec![ContentBlock::text(text(refusal))];
    r.is_error = Some(true);
    r
}

/// The tool result of a call: its envelope as structured content and as text (with the view
/// for clients that render views, and the chart asked for), or its refusal.
pub(super) async fn answer(
    tool: Tool,
    result: Result<Value, tally_engine::EngineError>,
    views: bool,
    chart: Option<crate::chart::Image>,
) -> CallToolResult {
    let envelope = match result {
        Ok(envelope) => envelope,
        Err(e) => return refused(&e.to_json()),
    };
    let mut r = CallToolResult::default();
    r.content = vec![ContentBlock::text(text(&envelope))];
    r.structured_content = Some(envelope);
    r.is_error = Some(false);
    if views && crate::ui::has_view(tool) {
        r.meta = Some(crate::ui::result_meta(tool));
    }
    if let (Some(format), Some(envelope)) = (chart, r.structured_content.clone()) {
        // Drawing is CPU work of tens of milliseconds: off the async threads.
        let drawn =
            tokio::task::spawn_blocking(move || crate::chart::image_block(format, &envelope)).await;
        r.content.push(match drawn {
            Ok(Ok(block)) => block,
            Ok(Err(reason)) => ContentBlock::text(format!("No chart: {reason}")),
            Err(e) => ContentBlock::text(format!("No chart: the chart could not be drawn: {e}")),
        });
    }
    r
}
