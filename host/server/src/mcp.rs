//! The MCP server: the four tools over any rmcp transport (stdio, streamable HTTP), in both
//! protocol eras rmcp serves (2025-11-25 with the initialize handshake, 2026-07-28 stateless
//! with `server/discover`).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool as McpTool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tally_engine::Engine;

use crate::tools;

/// One handler per session (HTTP) or per process (stdio); the engine is shared.
#[derive(Debug, Clone)]
pub struct TallyServer {
    engine: Arc<Engine>,
}

impl TallyServer {
    pub fn new(engine: Arc<Engine>) -> TallyServer {
        TallyServer { engine }
    }
}

/// Compact JSON with non-ASCII characters as they are (serde_json never escapes them).
fn text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

impl ServerHandler for TallyServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tally", env!("CARGO_PKG_VERSION")))
            .with_instructions(tools::INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::all()))
    }

    fn get_tool(&self, name: &str) -> Option<McpTool> {
        tools::by_name(name).map(tools::mcp_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is a malformed request (JSON-RPC error); everything about the
        // arguments is answered as a tool result the model can read and correct.
        let Some(tool) = tools::by_name(&request.name) else {
            let names: Vec<&str> = tools::all_names();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{}`; the tools are {}",
                    request.name,
                    names.join(", ")
                ),
                Some(serde_json::json!({ "tools": names })),
            ));
        };
        let arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let started = std::time::Instant::now();
        let result = self.engine.call_guarded(tool, arguments).await;
        tracing::info!(
            tool = tool.name(),
            ok = result.is_ok(),
            ms = started.elapsed().as_millis() as u64,
            "tool call"
        );
        Ok(match result {
            Ok(envelope) => {
                let mut r = CallToolResult::default();
                r.content = vec![ContentBlock::text(text(&envelope))];
                r.structured_content = Some(envelope);
                r.is_error = Some(false);
                r
            }
            Err(e) => {
                let mut r = CallToolResult::default();
                r.content = vec![ContentBlock::text(text(&e.to_json()))];
                r.is_error = Some(true);
                r
            }
        }
        .into())
    }
}
