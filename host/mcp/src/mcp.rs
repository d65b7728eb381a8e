//! The MCP server: the four tools over any rmcp transport (stdio, streamable HTTP), in both
//! protocol eras rmcp serves (2025-11-25 with the initialize handshake, 2026-07-28 stateless
//! with `server/discover`).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, ContentBlock, CreateTaskResult, GetPromptRequestParams,
    GetPromptResponse, GetTaskParams, GetTaskResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, SubscriptionFilter, TASKS_EXTENSION_ID,
    Tool as McpTool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::task_manager::TaskExit;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tally_engine::Engine;
use tally_semantic::Tool;

use crate::session::Session;
use crate::tools;
use crate::view::{Caller, Feed, View};

/// What all sessions share: the engine, the audit log and the bytes of all subscriptions.
#[derive(Debug)]
pub struct Shared {
    pub engine: Arc<Engine>,
    /// One JSON line per tool call, when asked for.
    pub audit: Option<crate::audit::Audit>,
    /// The bytes of subscribed URIs of all sessions together (bounded).
    subscriptions: Arc<crate::subscriptions::Total>,
    /// Calls run as MCP tasks, of all sessions, each seen by its caller only (bounded).
    tasks: crate::tasks::Tasks,
    /// Questions to users the server waits on (bounded per caller and in all).
    waiting: Arc<crate::choose::Waiting>,
    /// What `/metrics` tells of the calls.
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl Shared {
    /// The MCP tasks kept now, by state.
    pub fn tasks_by_state(&self) -> std::collections::BTreeMap<String, usize> {
        self.tasks.by_state()
    }

    /// What `/metrics` reads of the sessions' shared state now.
    pub fn scrape_into(&self, scrape: &mut crate::metrics::Scrape) {
        scrape.tasks = self.tasks.by_state();
        scrape.subscriptions = self.subscriptions.count();
    }

    /// What the sessions of one server share. Plugin datasets whose number of records is not
    /// known are counted in the background, now and as they are added or changed. Tool calls
    /// are written to the audit log when there is one.
    pub fn with_audit(engine: Arc<Engine>, audit: Option<crate::audit::Audit>) -> Arc<Shared> {
        let tasks = crate::tasks::Tasks::new(
            Arc::clone(engine.budget()),
            engine.limits().max_result_bytes,
        );
        let shared = Arc::new(Shared {
            engine,
            audit,
            subscriptions: Arc::default(),
            tasks,
            waiting: Arc::default(),
            metrics: Arc::default(),
        });
        count_records(&shared.engine, None);
        // The server's own work, never sent to a caller: the whole catalog's changes.
        let mut feed = Feed::new(&shared.engine, Caller::operator());
        let engine = Arc::downgrade(&shared.engine);
        tokio::spawn(async move {
            while let Some((change, _)) = feed.next().await {
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                if !(change.added.is_empty() && change.updated.is_empty()) {
                    // Only what changed: a dataset whose reading failed is not read again at
                    // every other dataset's reload.
                    let changed: Vec<String> = change
                        .added
                        .iter()
                        .chain(&change.updated)
                        .cloned()
                        .collect();
                    count_records(&engine, Some(&changed));
                }
            }
        });
        shared
    }
}

/// Reads, in the background and one at a time, the datasets whose number of records is not
/// known before their data is read (plugin datasets: a Parquet footer says it, a plugin does
/// not), so that lists and resources give it; their first call is then answered from the
/// prepared data. Bounded like any preparation by the memory budget.
fn count_records(engine: &Arc<Engine>, only: Option<&[String]>) {
    let view = View::of(engine, Caller::operator());
    let unknown: Vec<String> = view
        .datasets()
        .filter(|ds| only.is_none_or(|ids| ids.iter().any(|id| id == ds.id())))
        .filter(|ds| ds.record_count().is_none() && ds.preparing().is_none())
        .map(|ds| ds.id().to_string())
        .collect();
    if unknown.is_empty() {
        return;
    }
    let engine = Arc::clone(engine);
    tokio::spawn(async move {
        for id in unknown {
            engine.prepare(&Caller::operator(), &id).await;
            let view = View::of(&engine, Caller::operator());
            tracing::debug!(dataset = %id, records = ?view.dataset(&id).and_then(|ds| ds.record_count()), "counted the records of a dataset");
        }
    });
}

/// One handler per session (HTTP) or per process (stdio); the engine is shared.
#[derive(Debug, Clone)]
pub struct TallyServer {
    shared: Arc<Shared>,
    /// What this session asked to be told (`logging/setLevel`) and subscribed to
    /// (`resources/subscribe`).
    session: Arc<Session>,
}

impl TallyServer {
    pub fn new(shared: Arc<Shared>) -> TallyServer {
        let session = Arc::new(Session::new(Arc::clone(&shared.subscriptions)));
        TallyServer { shared, session }
    }

    fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// The gate of every request: its inputs within their bounds, then its caller's view.
    fn enter(
        &self,
        context: &RequestContext<RoleServer>,
        params: &impl crate::bounds::Bounded,
    ) -> Result<View, ErrorData> {
        View::enter(self.engine(), context, params)
    }
}

/// The tools that have a view, as the tool table declares (`ToolInfo::view`): today every
/// tool, a check of an answer and the provisions cited included.
fn tools_with_views() -> impl Iterator<Item = Tool> {
    Tool::ALL.into_iter().filter(|t| crate::ui::has_view(*t))
}

/// The resource URI of a dataset.
pub fn dataset_uri(id: &str) -> String {
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

/// Compact JSON with non-ASCII characters as they are (serde_json never escapes them).
fn text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

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
        if crate::ui::supported_by(context.client_capabilities().as_ref()) {
            items.extend(tools_with_views().map(|tool| {
                Resource::new(crate::ui::uri(tool), format!("{} view", tool.name()))
                    .with_title(crate::ui::title(tool))
                    .with_mime_type(crate::ui::MIME)
                    .with_meta(crate::ui::resource_meta())
            }));
        }
        Ok(ListResourcesResult::with_all_items(items))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let view = self.enter(&context, &request)?;
        if let Some(tool) = crate::ui::tool_of(&request.uri) {
            let contents = ResourceContents::text(crate::ui::view_html(tool), &request.uri)
                .with_mime_type(crate::ui::MIME)
                .with_meta(crate::ui::resource_meta());
            return Ok(ReadResourceResult::new(vec![contents]).into());
        }
        if let Some((id, name)) = crate::prompts::field_uri(&request.uri) {
            let described = view
                .dataset(&id)
                .and_then(|ds| crate::prompts::describe_field(ds, &name));
            return match described {
                Some(field) => Ok(ReadResourceResult::new(vec![
                    ResourceContents::text(text(&field), &request.uri)
                        .with_mime_type("application/json"),
                ])
                .into()),
                None => Err(ErrorData::resource_not_found(
                    format!(
                        "no field `{name}` in a dataset `{id}`; tally://datasets/{id} lists the fields (completion/complete offers them)"
                    ),
                    Some(json!({ "uri": request.uri })),
                )),
            };
        }
        let found = request
            .uri
            .strip_prefix("tally://datasets/")
            .and_then(|id| view.dataset(id));
        let Some(ds) = found else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no resource `{}`; list_resources names every dataset (tally://datasets/<id>), and the views are ui://tally/<tool>",
                    request.uri
                ),
                Some(json!({ "uri": request.uri })),
            ));
        };
        let text = serde_json::to_string(&describe(ds)).unwrap_or_default();
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, &request.uri).with_mime_type("application/json"),
        ])
        .into())
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
            let values = match (chosen.get("dataset_id"), chosen.get("where_field")) {
                (Some(id), Some(field)) => view
                    .known_values(self.engine(), id, field)
                    .await
                    .into_iter()
                    .filter(|v| crate::bounds::at_most_chars(v, crate::bounds::MAX_TEXT_CHARS))
                    .collect(),
                _ => Vec::new(),
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
        let view = self.enter(&context, &request)?;
        let caller = view.caller().clone();
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
        let asked = [request.meta.as_deref(), Some(&*context.meta)]
            .into_iter()
            .flatten()
            .any(|meta| meta.get(crate::tasks::ASK) == Some(&Value::Bool(true)));
        let mut arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        // `chart` is the server's: a picture of the answer for clients without views.
        let chart = match crate::chart::take_argument(tool, &mut arguments) {
            Ok(chart) => chart,
            Err(refusal) => return Ok(refused(&refusal).into()),
        };
        let views = crate::ui::supported_by(context.client_capabilities().as_ref());
        let can_ask = crate::choose::can_ask(context.client_capabilities().as_ref());
        // A 2026-07-28 call made again with the answer to a question asked: the choices so far.
        let (mut chosen, declined) = resumed(
            &request.request_state,
            &request.input_responses,
            &caller,
            tool,
            &arguments,
        )?;
        if let Some(status) = self.as_task(&context, &view, tool, &arguments, &chosen, asked) {
            match self.shared.tasks.room(&caller.id) {
                Ok(()) => {
                    let asking = Asking {
                        chosen,
                        can_ask: can_ask && !declined,
                    };
                    let form = Form {
                        views,
                        chart,
                        span: Some(request_span(tool, &context)),
                    };
                    return Ok(self.start_task(view, tool, arguments, form, status, asking));
                }
                Err(full) if asked => return Ok(no_room(full).into()),
                // A task only by its estimate: answered within the call's budget instead.
                Err(full) => {
                    tracing::info!(reason = %full.message, "no room for a task; the call runs within its own budget")
                }
            }
        }
        let stateless = era(&context) == crate::methods::ERA_2026;
        loop {
            let result = self
                .call_now(&context, &view, tool, arguments.clone(), chosen.clone())
                .await?;
            let ambiguous = crate::choose::ambiguity(&result);
            // Questions of one call, counted across a 2026 call's rounds by the choices made.
            let Some(ambiguous) = ambiguous
                .filter(|_| can_ask && !declined && chosen.len() < crate::choose::MAX_QUESTIONS)
            else {
                if let Ok(envelope) = &result {
                    self.session
                        .log
                        .corrections(&context.peer, tool.name(), envelope)
                        .await;
                }
                return Ok(answer(tool, result, views, chart).await.into());
            };
            if stateless {
                // No request to the client in this era: the question is the answer, and the
                // client calls again with its user's choice.
                let state =
                    crate::choose::State::new(&caller.id, tool, &arguments, chosen, ambiguous)
                        .seal();
                if !crate::bounds::at_most_chars(&state, crate::bounds::MAX_REQUEST_STATE_CHARS) {
                    // A state the client could not send back within its bound: refused as
                    // before rather than asked.
                    return Ok(answer(tool, result, views, chart).await.into());
                }
                let question = rmcp::model::InputRequest::Elicitation(
                    rmcp::model::ElicitRequest::new(crate::choose::question(tool, ambiguous)),
                );
                let requests = [(crate::choose::KEY.to_string(), question)]
                    .into_iter()
                    .collect();
                return Ok(CallToolResponse::InputRequired(
                    rmcp::model::InputRequiredResult::new(Some(requests), Some(state)),
                ));
            }
            // A place among the questions waited on, or the refusal saying which bound.
            let wait = match self.shared.waiting.ask(&caller.id) {
                Ok(wait) => wait,
                Err(why) => {
                    let result = crate::choose::not_asked(result, &why);
                    return Ok(answer(tool, result, views, chart).await.into());
                }
            };
            // The wait for the answer ends with the call when the client cancels it.
            let asked = tokio::select! {
                asked = context.peer.create_elicitation_with_timeout(
                    crate::choose::question(tool, ambiguous),
                    Some(crate::choose::WAIT),
                ) => asked,
                () = context.ct.cancelled() => {
                    return Err(cancelled_by_client());
                }
            };
            drop(wait);
            let choice = asked
                .ok()
                .and_then(|r| serde_json::to_value(r).ok())
                .and_then(|r| crate::choose::answer(ambiguous, &r).ok().flatten());
            match choice {
                Some(choice) => chosen.push(choice),
                // Declined, dismissed, or not answered: refused as before.
                None => return Ok(answer(tool, result, views, chart).await.into()),
            }
        }
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

/// The choices of a 2026-07-28 call made again with the answer to the question its
/// `requestState` says was asked, and whether the user declined to choose (then the call is
/// refused as before, and not asked again). A call without state has chosen nothing; an
/// answer missing from `inputResponses` leaves the question open (it is asked again).
fn resumed(
    state: &Option<String>,
    responses: &Option<rmcp::model::InputResponses>,
    caller: &Caller,
    tool: Tool,
    arguments: &Value,
) -> Result<(Vec<tally_semantic::resolve::Choice>, bool), ErrorData> {
    let Some(sealed) = state else {
        return Ok((Vec::new(), false));
    };
    let state = crate::choose::State::open(sealed, &caller.id, tool, arguments)?;
    let answered = responses.as_ref().and_then(|r| r.get(crate::choose::KEY));
    let mut chosen = state.chosen.clone();
    match answered {
        None => Ok((chosen, false)),
        Some(answer) => match crate::choose::answer(&state.asked(), answer)? {
            Some(choice) => {
                chosen.push(choice);
                Ok((chosen, false))
            }
            None => Ok((chosen, true)),
        },
    }
}

/// The protocol era of a request.
fn era(context: &RequestContext<RoleServer>) -> &'static str {
    if context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= crate::methods::ERA_2026)
    {
        crate::methods::ERA_2026
    } else {
        crate::methods::ERA_2025
    }
}

/// How a call's answer is given: with its view's metadata, and with the chart asked for.
pub(crate) struct Form {
    pub views: bool,
    pub chart: Option<crate::chart::Image>,
    /// The call's trace span, for a call run as a task (see [`crate::otlp`]).
    pub span: Option<tracing::Span>,
}

/// What a call run as a task may ask its user: the choices already made, and whether the
/// client can be asked more.
pub(crate) struct Asking {
    pub chosen: Vec<tally_semantic::resolve::Choice>,
    pub can_ask: bool,
}

impl TallyServer {
    /// Runs a call now, within the call's budget: progress when the caller asked for it, and
    /// `notifications/cancelled` stops it (dropping it aborts its task and the query work
    /// under it; a dataset's shared first preparation goes on for the next call), answered
    /// with an error rmcp does not send.
    async fn call_now(
        &self,
        context: &RequestContext<RoleServer>,
        view: &View,
        tool: Tool,
        arguments: Value,
        chosen: Vec<tally_semantic::resolve::Choice>,
    ) -> Result<Result<Value, tally_engine::EngineError>, ErrorData> {
        let caller = view.caller().clone();
        let started = std::time::Instant::now();
        let request = crate::audit::Audit::request_id();
        let audited = self.shared.audit.as_ref().map(|_| arguments.clone());
        let reporter = context.meta.get_progress_token().map(|token| {
            crate::progress::start(
                context.peer.clone(),
                token,
                Arc::clone(self.engine()),
                caller.clone(),
                tool,
                &arguments,
            )
        });
        let budget = self.engine().limits().call_timeout;
        let span = request_span(tool, context);
        let call = tracing::Instrument::instrument(
            view.call_within(self.engine(), tool, arguments, budget, chosen),
            span.clone(),
        );
        let result = tokio::select! {
            result = call => result,
            () = context.ct.cancelled() => {
                drop(reporter);
                let elapsed = started.elapsed();
                tracing::info!(
                    tool = tool.name(),
                    caller = %caller.id,
                    request = %request,
                    ms = elapsed.as_millis() as u64,
                    "tool call cancelled by the client; its work was stopped"
                );
                if let (Some(audit), Some(arguments)) = (&self.shared.audit, audited) {
                    audit.record_cancelled(&caller.id, &request, tool, &arguments, elapsed);
                }
                self.shared.metrics.cancelled(tool, elapsed);
                return Err(cancelled_by_client());
            }
        };
        if let Some(reporter) = reporter {
            reporter.finish().await;
        }
        end_span(&span, &result);
        self.record(&caller, &request, tool, audited, &result, started.elapsed());
        Ok(result)
    }

    /// Whether a call runs as a task, and its first status message: only for a client that
    /// declared the tasks extension on this request, when it asked for one
    /// (`_meta: {"tally/task": true}`) or the call is estimated to take more than half its
    /// time budget.
    fn as_task(
        &self,
        context: &RequestContext<RoleServer>,
        view: &View,
        tool: Tool,
        arguments: &Value,
        chosen: &[tally_semantic::resolve::Choice],
        asked: bool,
    ) -> Option<String> {
        let declared = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if !declared {
            return None;
        }
        if asked {
            return Some(format!("{}: started as a task, as asked", tool.name()));
        }
        let estimate = view.estimate(self.engine(), tool, arguments, chosen)?;
        let budget = self.engine().limits().call_timeout;
        (estimate.time * 2 > budget).then(|| {
            format!(
                "{}: started as a task, estimated at {:.1} s against a call's budget of {:.1} s: {}",
                tool.name(),
                estimate.time.as_secs_f64(),
                budget.as_secs_f64(),
                estimate.why
            )
        })
    }

    /// Runs a call as a task of its caller with the task's time budget: its handle now, its
    /// status while it runs (what the call is doing), its result when it ends; `tasks/cancel`
    /// drops the call and the work under it.
    fn start_task(
        &self,
        view: View,
        tool: Tool,
        arguments: Value,
        form: Form,
        status: String,
        asking: Asking,
    ) -> CallToolResponse {
        let budget = self.engine().limits().task_timeout;
        let owner = view.caller().id.clone();
        let server = self.clone();
        let asker = owner.clone();
        // Its work stops within its budget and the time its user may take to answer its
        // questions.
        let limit = budget + crate::choose::WAIT * crate::choose::MAX_QUESTIONS as u32;
        let spawned = self.shared.tasks.spawn(&owner, limit, status, move |task| {
            Box::pin(async move {
                let Asking {
                    mut chosen,
                    can_ask,
                } = asking;
                let mut round = 0;
                let span = form.span.clone().unwrap_or_else(tracing::Span::none);
                let result = loop {
                    let result = tracing::Instrument::instrument(
                        server.call_in_task(&task, &view, tool, arguments.clone(), chosen.clone()),
                        span.clone(),
                    )
                    .await?;
                    let Some(ambiguous) = crate::choose::ambiguity(&result)
                        .filter(|_| can_ask && round < crate::choose::MAX_QUESTIONS)
                    else {
                        break result;
                    };
                    // The task waits for its user's choice (`input_required`), which the
                    // client sends with `tasks/update`, when there is a place for one more
                    // question waited on; refused as before, saying why, when there is not.
                    let _wait = match server.shared.waiting.ask(&asker) {
                        Ok(wait) => wait,
                        Err(why) => break crate::choose::not_asked(result, &why),
                    };
                    round += 1;
                    task.set_status_message(format!(
                        "{}: waiting for the user to choose what `{}` means",
                        tool.name(),
                        ambiguous.input
                    ));
                    let question = rmcp::model::InputRequest::Elicitation(
                        rmcp::model::ElicitRequest::new(crate::choose::question(tool, ambiguous)),
                    );
                    let key = format!("{}-{round}", crate::choose::KEY);
                    let Ok(answered) = tokio::time::timeout(
                        crate::choose::WAIT,
                        task.request_input(key, question),
                    )
                    .await
                    else {
                        // Not answered in time: refused as before.
                        break result;
                    };
                    match crate::choose::answer(ambiguous, &answered?) {
                        Ok(Some(choice)) => chosen.push(choice),
                        // Declined, dismissed, or not an answer: refused as before.
                        _ => break result,
                    }
                };
                end_span(&span, &result);
                drop(span);
                Ok(answer(tool, result, form.views, form.chart).await)
            })
        });
        match spawned {
            Ok(task) => CallToolResponse::Task(CreateTaskResult::new(task)),
            Err(full) => no_room(full).into(),
        }
    }

    /// One run of a call inside a task, with the task's budget: its status message says what
    /// it is doing every half second, and `tasks/cancel` drops it (and the work under it).
    async fn call_in_task(
        &self,
        task: &crate::tasks::Context,
        view: &View,
        tool: Tool,
        arguments: Value,
        chosen: Vec<tally_semantic::resolve::Choice>,
    ) -> Result<Result<Value, tally_engine::EngineError>, TaskExit> {
        let engine = Arc::clone(self.engine());
        let budget = engine.limits().task_timeout;
        let caller = view.caller().clone();
        let started = std::time::Instant::now();
        let dataset = arguments
            .get("dataset_id")
            .and_then(Value::as_str)
            .map(|s| s.trim().to_string());
        let request = crate::audit::Audit::request_id();
        let audited = self.shared.audit.as_ref().map(|_| arguments.clone());
        let call = view.call_within(&engine, tool, arguments, budget, chosen);
        tokio::pin!(call);
        let result = loop {
            tokio::select! {
                result = &mut call => break result,
                () = task.cancelled() => {
                    let elapsed = started.elapsed();
                    tracing::info!(tool = tool.name(), caller = %caller.id, request = %request, ms = elapsed.as_millis() as u64, "task cancelled by its client; its work was stopped");
                    if let (Some(audit), Some(arguments)) = (&self.shared.audit, &audited) {
                        audit.record_cancelled(&caller.id, &request, tool, arguments, elapsed);
                    }
                    self.shared.metrics.cancelled(tool, elapsed);
                    return Err(TaskExit::Cancelled);
                }
                () = tokio::time::sleep(crate::progress::EVERY) => {
                    task.set_status_message(crate::progress::status(
                        &engine, &caller, tool, dataset.as_deref(), started.elapsed(),
                    ));
                }
            }
        };
        let elapsed = started.elapsed();
        self.record(&caller, &request, tool, audited, &result, elapsed);
        task.set_status_message(format!(
            "{}: {} in {:.1} s",
            tool.name(),
            if result.is_ok() {
                "answered"
            } else {
                "refused"
            },
            elapsed.as_secs_f64()
        ));
        Ok(result)
    }

    /// Writes a finished call to the log and, when there is one, to the audit log.
    fn record(
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
fn request_span(tool: Tool, context: &RequestContext<RoleServer>) -> tracing::Span {
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
fn end_span(span: &tracing::Span, result: &Result<Value, tally_engine::EngineError>) {
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

/// The error of a request the client cancelled (rmcp sends no answer to it).
fn cancelled_by_client() -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(-32800),
        "the request was cancelled by the client",
        None,
    )
}

/// The refusal of a task there is no room for.
fn no_room(full: crate::tasks::Full) -> CallToolResult {
    let refusal = tally_engine::EngineError::Limit {
        message: full.message,
        hint: full.hint,
    };
    refused(&refusal.to_json())
}

/// A tool result refusing the call: the refusal's JSON, marked as an error.
fn refused(refusal: &Value) -> CallToolResult {
    let mut r = CallToolResult::default();
    r.content = vec![ContentBlock::text(text(refusal))];
    r.is_error = Some(true);
    r
}

/// The tool result of a call: its envelope as structured content and as text (with the view
/// for clients that render views, and the chart asked for), or its refusal.
async fn answer(
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
        let block =
            tokio::task::spawn_blocking(move || crate::chart::image_block(format, &envelope))
                .await
                .unwrap_or_else(|e| Err(format!("the chart could not be drawn: {e}")));
        r.content
            .push(block.unwrap_or_else(|reason| ContentBlock::text(format!("No chart: {reason}"))));
    }
    r
}
