//! What a finished call leaves behind: its line in the log, its record in the audit log and
//! the metrics, and its trace span (a child of the client's when it sends a `traceparent`).

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::Value;
use tally_semantic::Tool;

use super::server::TallyServer;
use crate::view::Caller;

impl TallyServer {
    /// Writes a finished call to the log and, when there is one, to the audit log.
    pub(super) fn record(
        &self,
        caller: &Caller,
        request: &str,
        tool: Tool,
        audited: Option<Value>,
        result: &Result<Value, tally_engine::EngineError>,
        elapsed: std::time::Duration,
    ) {
        tracing::info!(
            tool = tool.name(),
            caller = %caller.id,
            request,
            ok = result.is_ok(),
            ms = elapsed.as_millis() as u64,
            "tool call"
        );
        if let (Some(audit), Some(arguments)) = (&self.shared.audit, audited) {
            audit.record(&caller.id, request, tool, &arguments, result, elapsed);
        }
        self.shared.metrics.call(tool, result, elapsed);
    }
}

/// The span of a tool call (see [`crate::otlp`]): its parent is the client's span when the
/// request carries a W3C `traceparent`, in its `_meta` or its HTTP headers.
pub(super) fn request_span(tool: Tool, context: &RequestContext<RoleServer>) -> tracing::Span {
    let from_meta = context
        .meta
        .get("traceparent")
        .and_then(Value::as_str)
        .map(str::to_string);
    let from_header = || {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("traceparent"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let traceparent = from_meta.or_else(from_header).unwrap_or_default();
    tracing::info_span!(
        "mcp.request",
        otel.name = %format!("tools/call {}", tool.name()),
        mcp.method.name = "tools/call",
        gen_ai.tool.name = tool.name(),
        gen_ai.operation.name = "execute_tool",
        traceparent = %traceparent,
        tally.outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// Records how a call ended on its span.
pub(super) fn end_span(span: &tracing::Span, result: &Result<Value, tally_engine::EngineError>) {
    match result {
        Ok(_) => {
            span.record("tally.outcome", "answered");
        }
        Err(e) => {
            let code = e.to_json()["error"]["code"]
                .as_str()
                .unwrap_or("error")
                .to_string();
            span.record("tally.outcome", "refused");
            span.record("error.type", code.as_str());
        }
    }
}
