//! The MCP server: the four tools over any rmcp transport (stdio, streamable HTTP), in both
//! protocol eras rmcp serves (2025-11-25 with the initialize handshake, 2026-07-28 stateless
//! with `server/discover`).

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, SubscriptionFilter, Tool as McpTool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tally_engine::Engine;
use tally_semantic::Tool;

use crate::tools;

/// What all sessions share: the engine and the 2025-era peers to tell of catalog changes.
#[derive(Debug)]
pub struct Shared {
    pub engine: Arc<Engine>,
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// One JSON line per tool call, when asked for.
    pub audit: Option<crate::audit::Audit>,
}

/// The caller of a request: set by the HTTP guard; stdio has one caller with every dataset.
fn caller(context: &RequestContext<RoleServer>) -> crate::guard::Caller {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::guard::Caller>())
        .cloned()
        .unwrap_or_else(|| crate::guard::Caller {
            id: "stdio".to_string(),
            scope: tally_engine::Scope::All,
        })
}

impl Shared {
    /// Starts telling 2025-era sessions about catalog changes
    /// (`notifications/resources/list_changed`); 2026-era clients ask with
    /// `subscriptions/listen` instead (see [`TallyServer::listen`]). Tool calls are written to
    /// the audit log when there is one.
    pub fn with_audit(engine: Arc<Engine>, audit: Option<crate::audit::Audit>) -> Arc<Shared> {
        let shared = Arc::new(Shared {
            engine,
            peers: Mutex::new(Vec::new()),
            audit,
        });
        let mut changes = shared.engine.subscribe();
        let weak = Arc::downgrade(&shared);
        count_records(&shared.engine, None);
        tokio::spawn(async move {
            let mut prompts_changed;
            loop {
                match changes.recv().await {
                    Ok(change) => {
                        if let Some(shared) = weak.upgrade()
                            && !(change.added.is_empty() && change.updated.is_empty())
                        {
                            // Only what changed: a dataset whose reading failed is not read
                            // again at every other dataset's reload.
                            let changed: Vec<String> = change
                                .added
                                .iter()
                                .chain(&change.updated)
                                .cloned()
                                .collect();
                            count_records(&shared.engine, Some(&changed));
                        }
                        prompts_changed = prompts_may_change(&change);
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        prompts_changed = true;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
                let Some(shared) = weak.upgrade() else { return };
                let peers: Vec<Peer<RoleServer>> = match shared.peers.lock() {
                    Ok(mut peers) => {
                        peers.retain(|p| !p.is_transport_closed());
                        peers.clone()
                    }
                    Err(_) => Vec::new(),
                };
                for peer in peers {
                    if let Err(e) = peer.notify_resource_list_changed().await {
                        tracing::debug!("could not notify a session of the change: {e}");
                    }
                    if prompts_changed && let Err(e) = peer.notify_prompt_list_changed().await {
                        tracing::debug!("could not notify a session of the change: {e}");
                    }
                }
            }
        });
        shared
    }
}

/// Whether a change of the catalog may change the prompts (a law dataset coming or going
/// offers or withdraws `find_legal_basis`).
fn prompts_may_change(change: &tally_engine::catalog::Changes) -> bool {
    !(change.added.is_empty() && change.removed.is_empty() && change.updated.is_empty())
}

/// Reads, in the background and one at a time, the datasets whose number of records is not
/// known before their data is read (plugin datasets: a Parquet footer says it, a plugin does
/// not), so that lists and resources give it; their first call is then answered from the
/// prepared data. Bounded like any preparation by the memory budget.
fn count_records(engine: &Arc<Engine>, only: Option<&[String]>) {
    let catalog = engine.catalog();
    let unknown: Vec<String> = catalog
        .datasets
        .values()
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
            engine.prepare(&id).await;
            tracing::debug!(dataset = %id, records = ?engine.catalog().datasets.get(&id).and_then(|ds| ds.record_count()), "counted the records of a dataset");
        }
    });
}

/// One handler per session (HTTP) or per process (stdio); the engine is shared.
#[derive(Debug, Clone)]
pub struct TallyServer {
    shared: Arc<Shared>,
    /// What this session asked to be told (`logging/setLevel`).
    log: Arc<crate::logging::SessionLog>,
    /// What this session subscribed to (`resources/subscribe`).
    subscriptions: Arc<crate::subscriptions::SessionSubscriptions>,
}

impl TallyServer {
    pub fn new(shared: Arc<Shared>) -> TallyServer {
        TallyServer {
            shared,
            log: Arc::default(),
            subscriptions: Arc::default(),
        }
    }

    fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }
}

/// The tools that have a view: those that answer with records, groups or fields (a check of
/// an answer is read as text).
fn tools_with_views() -> impl Iterator<Item = Tool> {
    Tool::ALL.into_iter().filter(|t| crate::ui::has_view(*t))
}

/// The resource URI of a dataset.
pub fn dataset_uri(id: &str) -> String {
    format!("tally://datasets/{id}")
}

/// A dataset described as a resource: what it is, which fields it has, which version is
/// served. Reading it needs no data.
fn describe(ds: &tally_engine::Dataset) -> Value {
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
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("tally", env!("CARGO_PKG_VERSION"))
                    .with_title("Tally")
                    .with_icons(vec![tools::server_icon()]),
            )
            .with_instructions(tools::INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(mut peers) = self.shared.peers.lock() {
            peers.push(context.peer);
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let scope = caller(&context).scope;
        let catalog = self.engine().catalog();
        let mut items: Vec<Resource> = catalog
            .datasets
            .values()
            .filter(|ds| scope.allows(ds.id()))
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
        if let Some(tool) = crate::ui::tool_of(&request.uri) {
            let contents = ResourceContents::text(crate::ui::view_html(tool), &request.uri)
                .with_mime_type(crate::ui::MIME)
                .with_meta(crate::ui::resource_meta());
            return Ok(ReadResourceResult::new(vec![contents]).into());
        }
        let scope = caller(&context).scope;
        let catalog = self.engine().catalog();
        if let Some((id, name)) = crate::prompts::field_uri(&request.uri) {
            let described = catalog
                .datasets
                .get(&id)
                .filter(|_| scope.allows(&id))
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
            .filter(|id| scope.allows(id))
            .and_then(|id| catalog.datasets.get(id));
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
        // Any URI is taken, as MCP lets a client subscribe to any resource: one that never
        // changes while the server runs (a view, or a URI no dataset has) is never notified.
        if !crate::subscriptions::changes_with_datasets(&request.uri) {
            tracing::debug!(uri = %request.uri, "subscribed to a URI no reload changes");
        }
        self.subscriptions
            .add(request.uri.clone())
            .map_err(|message| {
                ErrorData::invalid_params(message, Some(json!({ "uri": request.uri })))
            })?;
        self.subscriptions
            .listen(context.peer.clone(), self.engine());
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.remove(&request.uri);
        Ok(())
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log.set(request.level);
        self.log.listen(context.peer.clone(), self.engine());
        Ok(())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            crate::prompts::templates(),
        ))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let scope = caller(&context).scope;
        Ok(ListPromptsResult::with_all_items(crate::prompts::prompts(
            &self.engine().catalog(),
            &scope,
        )))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let scope = caller(&context).scope;
        let catalog = self.engine().catalog();
        let arguments = request.arguments.clone().unwrap_or_default();
        crate::prompts::get(&request.name, &arguments, &catalog, &scope)
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
        let scope = caller(&context).scope;
        let catalog = self.engine().catalog();
        let chosen = request
            .context
            .as_ref()
            .and_then(|c| c.arguments.clone())
            .unwrap_or_default();
        let completion = if request.argument.name == "where_value" {
            // The codes of the chosen field: its codelist, or the values of its prepared data.
            let dataset = chosen
                .get("dataset_id")
                .filter(|id| scope.allows(id) && catalog.datasets.contains_key(id.as_str()));
            let values = match (dataset, chosen.get("where_field")) {
                (Some(id), Some(field)) => self
                    .engine()
                    .known_values(id, field)
                    .await
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            crate::prompts::rank(&request.argument.value, values)
        } else {
            crate::prompts::complete(
                &request.argument.name,
                &request.argument.value,
                &chosen,
                &catalog,
                &scope,
            )
        };
        Ok(CompleteResult::new(completion))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    /// 2026-07-28 clients ask for change notifications on a stream of their own.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut changes = self.engine().subscribe();
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(change) => {
                        if context.accepted().resources_list_changed == Some(true)
                            && context.sink().notify_resource_list_changed().await.is_err()
                        {
                            return Ok(());
                        }
                        if context.accepted().prompts_list_changed == Some(true)
                            && prompts_may_change(&change)
                            && context.sink().notify_prompt_list_changed().await.is_err()
                        {
                            return Ok(());
                        }
                        let subscribed = context.accepted().resource_subscriptions.clone().unwrap_or_default();
                        for uri in crate::subscriptions::touched(&change, subscribed.iter()) {
                            if context.sink().notify_resource_updated(uri).await.is_err() {
                                return Ok(());
                            }
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if context.accepted().resources_list_changed == Some(true)
                            && context.sink().notify_resource_list_changed().await.is_err()
                        {
                            return Ok(());
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let examples = tools::Examples::from_catalog(&self.engine().catalog());
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

    fn get_tool(&self, name: &str) -> Option<McpTool> {
        let examples = tools::Examples::from_catalog(&self.engine().catalog());
        tools::by_name(name).map(|t| tools::mcp_tool(t, &examples))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller(&context);
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
        let mut arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        // `chart` is the server's: a picture of the answer for clients without views.
        let chart = match crate::chart::take_argument(tool, &mut arguments) {
            Ok(chart) => chart,
            Err(refusal) => {
                let mut r = CallToolResult::default();
                r.content = vec![ContentBlock::text(text(&refusal))];
                r.is_error = Some(true);
                return Ok(r.into());
            }
        };
        let started = std::time::Instant::now();
        let audited = self.shared.audit.as_ref().map(|_| arguments.clone());
        // Progress when the caller asked for it (a `progressToken`), until the call ends.
        let reporter = context.meta.get_progress_token().map(|token| {
            crate::progress::start(
                context.peer.clone(),
                token,
                Arc::clone(self.engine()),
                tool,
                &arguments,
            )
        });
        let call =
            self.engine()
                .call_guarded_for(tool, arguments, caller.scope.clone(), &caller.id);
        // `notifications/cancelled` stops the call: dropping it aborts its task and the
        // query work under it (a dataset's shared first preparation goes on for the next
        // call). rmcp sends no answer to a cancelled request.
        let result = tokio::select! {
            result = call => result,
            () = context.ct.cancelled() => {
                drop(reporter);
                let elapsed = started.elapsed();
                tracing::info!(
                    tool = tool.name(),
                    ms = elapsed.as_millis() as u64,
                    "tool call cancelled by the client; its work was stopped"
                );
                if let (Some(audit), Some(arguments)) = (&self.shared.audit, audited) {
                    audit.record_cancelled(&caller.id, tool, &arguments, elapsed);
                }
                return Err(ErrorData::new(
                    rmcp::model::ErrorCode(-32800),
                    "the request was cancelled by the client",
                    None,
                ));
            }
        };
        if let Some(reporter) = reporter {
            reporter.finish().await;
        }
        let elapsed = started.elapsed();
        tracing::info!(
            tool = tool.name(),
            ok = result.is_ok(),
            ms = elapsed.as_millis() as u64,
            "tool call"
        );
        if let (Some(audit), Some(arguments)) = (&self.shared.audit, audited) {
            audit.record(&caller.id, tool, &arguments, &result, elapsed);
        }
        let views = crate::ui::supported_by(context.client_capabilities().as_ref());
        if let Ok(envelope) = &result {
            self.log
                .corrections(&context.peer, tool.name(), envelope)
                .await;
        }
        Ok(match result {
            Ok(envelope) => {
                let mut r = CallToolResult::default();
                r.content = vec![ContentBlock::text(text(&envelope))];
                r.structured_content = Some(envelope);
                r.is_error = Some(false);
                if views && crate::ui::has_view(tool) {
                    r.meta = Some(crate::ui::result_meta(tool));
                }
                if let (Some(format), Some(envelope)) = (chart, r.structured_content.clone()) {
                    // Drawing is CPU work of tens of milliseconds: off the async threads.
                    let block = tokio::task::spawn_blocking(move || {
                        crate::chart::image_block(format, &envelope)
                    })
                    .await
                    .unwrap_or_else(|e| Err(format!("the chart could not be drawn: {e}")));
                    r.content.push(block.unwrap_or_else(|reason| {
                        ContentBlock::text(format!("No chart: {reason}"))
                    }));
                }
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
