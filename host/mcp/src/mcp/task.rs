//! A call run as an MCP task: whether it becomes one (asked, or estimated past half its
//! budget), its run with the task's budget and a status message that says what it does, and
//! its questions to the user while the task waits for the answers.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::task_manager::TaskExit;
use serde_json::Value;
use tally_semantic::Tool;

use super::answer::{answer, no_room};
use super::record::end_span;
use super::server::TallyServer;
use crate::view::View;

/// How a call's answer is given: with its view's metadata, and with the chart asked for.
pub(super) struct Form {
    pub(super) views: bool,
    pub(super) chart: Option<crate::chart::Image>,
    /// The call's trace span, for a call run as a task (see [`crate::otlp`]).
    pub(super) span: Option<tracing::Span>,
}

/// What a call run as a task may ask its user: the choices already made, and whether the
/// client can be asked more.
pub(super) struct Asking {
    pub(super) chosen: Vec<tally_semantic::resolve::Choice>,
    pub(super) can_ask: bool,
}

impl TallyServer {
    /// Whether a call runs as a task, and its first status message: only for a client that
    /// declared the tasks extension on this request, when it asked for one
    /// (`_meta: {"tally/task": true}`) or the call is estimated to take more than half its
    /// time budget.
    pub(super) fn as_task(
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
    pub(super) fn start_task(
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
}
