//! The MCP methods a session answers (rmcp's `ServerHandler`): each request enters through
//! the caller's view, then is answered from the tool table, the resources, the prompts and
//! completions, the subscriptions and the tasks; `tools/call` runs as [`super::call`] says.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscriptionFilter, TASKS_EXTENSION_ID, Tool as McpTool,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tally_semantic::Tool;

use super::resources;
use super::server::{TallyServer, era};
use crate::tools;
use crate::view::Feed;

impl ServerHandler for TallyServer {
    // Logging is deprecated by SEP-2577 for later protocol versions; 2025-era clients use it.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_completions()
            .enable_logging()
            .enable_tools()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .build();
        // Every tool has an MCP Apps view (SEP-1865); clients that announce the extension
        // get them.
        capabilities
            .extensions
            .get_or_insert_default()
            .insert(crate::ui::EXTENSION.to_string(), Default::default());
        // Long calls may run as tasks for clients that declare the extension on the call.
        capabilities
            .extensions
            .get_or_insert_default()
            .insert(TASKS_EXTENSION_ID.to_string(), Default::default());
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("tally", env!("CARGO_PKG_VERSION"))
                    .with_title("Tally")
                    .with_icons(vec![tools::server_icon()]),
            )
            .with_instructions(tools::INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A 2025-era session is told of the changes its caller may see on the session itself.
        let caller = crate::view::caller_of_notification(&context);
        self.session.start(context.peer, self.engine(), caller);
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let view = self.enter(&context, &request)?;
        let views = crate::ui::supported_by(context.client_capabilities().as_ref());
        Ok(ListResourcesResult::with_all_items(resources::listed(
            &view, views,
        )))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let view = self.enter(&context, &request)?;
        resources::read(&view, &request.uri).map(Into::into)
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Any URI within its bound is taken, as MCP lets a client subscribe to any resource:
        // one that never changes while the server runs (a view, a URI no dataset has, a
        // dataset outside the caller's scope) is never notified, and taking it says nothing
        // of whether such a dataset exists.
        let view = self.enter(&context, &request)?;
        if !crate::subscriptions::changes_with_datasets(&request.uri) {
            tracing::debug!(uri = %request.uri, "subscribed to a URI no reload changes");
        }
        self.session
            .subscriptions
            .add(&view.caller().id, request.uri)
            .map_err(|refusal| refusal.into_error())?;
        self.session
            .start(context.peer.clone(), self.engine(), view.caller().clone());
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.enter(&context, &request)?;
        self.session.subscriptions.remove(&request.uri);
        Ok(())
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let view = self.enter(&context, &request)?;
        self.session.log.set(request.level);
        self.session
            .start(context.peer.clone(), self.engine(), view.caller().clone());
        Ok(())
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.enter(&context, &request)?;
        Ok(ListResourceTemplatesResult::with_all_items(
            crate::prompts::templates(),
        ))
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let view = self.enter(&context, &request)?;
        Ok(ListPromptsResult::with_all_items(crate::prompts::prompts(
            &view,
        )))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let view = self.enter(&context, &request)?;
        let arguments = request.arguments.clone().unwrap_or_default();
        crate::prompts::get(&request.name, &arguments, &view)
            .map(Into::into)
            .map_err(|message| {
                ErrorData::invalid_params(message, Some(json!({ "prompt": request.name })))
            })
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let view = self.enter(&context, &request)?;
        let chosen = request
            .context
            .as_ref()
            .and_then(|c| c.arguments.clone())
            .unwrap_or_default();
        let completion = if request.argument.name == "where_value" {
            // The codes of the chosen field: its codelist, or the values of its prepared data
            // (only those a condition can name: longer texts cannot be sent as one).
            let known = match (chosen.get("dataset_id"), chosen.get("where_field")) {
                (Some(id), Some(field)) => view.values_to_complete(self.engine(), id, field).await,
                _ => tally_engine::KnownValues::None,
            };
            let values = match known {
                tally_engine::KnownValues::Values(values) => values
                    .into_iter()
                    .filter(|v| crate::bounds::at_most_chars(v, crate::bounds::MAX_TEXT_CHARS))
                    .collect(),
                tally_engine::KnownValues::NotReady { message, about } => {
                    // No values yet, and said so: `hasMore` (there are values, not yet at
                    // hand) and, for clients that read it, what is happening and when to ask
                    // again.
                    let info = rmcp::model::CompletionInfo::with_pagination(Vec::new(), None, true)
                        .unwrap_or_default();
                    let mut result = CompleteResult::new(info);
                    result.meta = Some(rmcp::model::MetaObject(
                        [(
                            "tally/values".to_string(),
                            json!({
                                "ready": false,
                                "message": message,
                                "retryAfterMs": about.map(|t| t.as_millis() as u64),
                            }),
                        )]
                        .into_iter()
                        .collect(),
                    ));
                    return Ok(result);
                }
                tally_engine::KnownValues::None => Vec::new(),
            };
            crate::prompts::rank(&request.argument.value, values)
        } else {
            crate::prompts::complete(
                &request.argument.name,
                &request.argument.value,
                &chosen,
                &view,
            )
        };
        Ok(CompleteResult::new(completion))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // The URIs honoured are bounded; the acknowledgement tells the client which.
        Some(crate::bounds::honoured(requested).supported_by(&self.get_info().capabilities))
    }

    /// 2026-07-28 clients ask for change notifications on a stream of their own: the changes
    /// their caller may see, as a 2025-era session is told them.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let caller = crate::view::caller_of_request(context.request_context());
        let mut feed = Feed::new(self.engine(), caller);
        let accepted = context.accepted().clone();
        let subscribed = accepted.resource_subscriptions.clone().unwrap_or_default();
        loop {
            let next = tokio::select! {
                _ = context.cancelled() => return Ok(()),
                next = feed.next() => next,
            };
            let Some((change, _view)) = next else {
                return Ok(());
            };
            if accepted.resources_list_changed == Some(true)
                && context.sink().notify_resource_list_changed().await.is_err()
            {
                return Ok(());
            }
            if accepted.prompts_list_changed == Some(true)
                && crate::session::prompts_may_change(&change)
                && context.sink().notify_prompt_list_changed().await.is_err()
            {
                return Ok(());
            }
            for uri in crate::subscriptions::touched(&change, subscribed.iter()) {
                if context.sink().notify_resource_updated(uri).await.is_err() {
                    return Ok(());
                }
            }
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let view = self.enter(&context, &request)?;
        // The examples in the descriptions name only what this caller may see.
        let examples = tools::Examples::from_view(&view);
        let views = crate::ui::supported_by(context.client_capabilities().as_ref());
        let listed = Tool::ALL
            .into_iter()
            .map(|tool| {
                let t = tools::mcp_tool(tool, &examples);
                if views && crate::ui::has_view(tool) {
                    t.with_meta(crate::ui::tool_meta(tool))
                } else {
                    t
                }
            })
            .collect();
        Ok(ListToolsResult::with_all_items(listed))
    }

    /// A method this server does not answer: "method not found", naming those it does in the
    /// caller's protocol revision (the table the scoped walk of the tests goes through).
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        let era = era(&context);
        let answered: Vec<&str> = crate::methods::METHODS
            .iter()
            .filter(|m| m.eras.contains(&era))
            .map(|m| m.name)
            .collect();
        let mut method = request.method;
        if !crate::bounds::at_most_chars(&method, crate::bounds::MAX_KEY_CHARS) {
            method = "(a method name too long to repeat)".into();
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!(
                "this server does not answer `{method}`; in protocol {era} it answers {}",
                answered.join(", ")
            ),
            Some(json!({ "methods": answered })),
        ))
    }

    /// The HTTP transport checks a call's headers against the tool's input schema; no caller
    /// reads what this returns, so its examples are placeholders, never a dataset's names.
    fn get_tool(&self, name: &str) -> Option<McpTool> {
        tools::by_name(name).map(|t| tools::mcp_tool(t, &tools::Examples::placeholders()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let view = self.enter(&context, &request)?;
        let task = self.shared.tasks.get(&view.caller().id, &request.task_id)?;
        Ok(GetTaskResult::new(task))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let view = self.enter(&context, &request)?;
        self.shared
            .tasks
            .cancel(&view.caller().id, &request.task_id)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let view = self.enter(&context, &request)?;
        self.shared
            .tasks
            .update(&view.caller().id, &request.task_id, request.input_responses)
    }
}
