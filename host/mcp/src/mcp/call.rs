//! A tool call in its request: the tool named, the chart and the choices so far taken from
//! the call, then handed to a task or run now within the call's budget; a name that fits
//! several fields is asked of the user and the call run again with the choice.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use tally_semantic::Tool;

use super::answer::{answer, cancelled_by_client, no_room, refused};
use super::record::{end_span, request_span};
use super::server::{TallyServer, era};
use super::task::{Asking, Form};
use crate::tools;
use crate::view::{Caller, View};

impl TallyServer {
    /// `tools/call`: the tool named, the chart and the choices so far taken from the
    /// arguments, then the call run as a task or now; a name that fits several fields is
    /// asked of the user (on the session, or as the answer itself in the stateless era) and
    /// the call run again with the choice.
    pub(super) async fn call(
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
                    // In the form of a choice the session's version knows (a 2025-06-18
                    // client shows the titled form as a free-text box).
                    crate::choose::question_in(
                        tool,
                        ambiguous,
                        crate::choose::ChoiceForm::of(
                            context.protocol_version().as_ref().map(|v| v.as_str()),
                        ),
                    ),
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
