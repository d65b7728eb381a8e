//! The one door into the engine: [`Engine::answer`].
//!
//! A call comes in once, typed: its caller ([`Caller`]: who, which datasets), its request
//! parsed once at the edge ([`Ask`]), its time budget and the names its user chose. The door
//! resolves the dataset it names once, judges whether it is heavy (see
//! [`crate::governor`]), waits for a slot if it is, and runs it with an explicit context,
//! [`CallCtx`]: the caller, the deadline, the stop, the caller's memory allowance and the
//! chosen names, handed down to every phase (no task-local state), and carried into
//! DataFusion's session of the call so that its operators, scans and loops read the same
//! stop. When the caller stops waiting (its deadline, a cancellation) the door sets the stop
//! and aborts the call's task; a heavy call's slot frees when that task has ended.
//!
//! Nothing reaches a dataset without a caller: the entry points that read the catalog for
//! a caller ([`Engine::answer`], [`Engine::estimate`], [`Engine::values_to_complete`],
//! [`Engine::view`]) all take one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tally_semantic::request::{Request, Tool};
use tally_semantic::resolve::{
    Choice, Resolution, resolve_dataset_choosing, resolve_query, resolve_summarize,
};
use tally_storage::stop::Stop;
use tally_storage::{Dataset, StorageError};
use tracing::Instrument;

use crate::context::{Ask, CallCtx, Caller, Cx};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::policy::Scope;
use crate::{envelope, lookup, provisions, query, schema, summarize};

/// How long a half-written file may settle when a call finds its dataset replaced.
const STALE_SETTLE: Duration = Duration::from_secs(2);
/// Before the second retry of a call whose files changed under it.
const STALE_PAUSE: Duration = Duration::from_millis(250);

impl Engine {
    /// Answers a call of `caller`: the one door every surface (MCP tools, tasks, the command
    /// line, `tally check`) goes through. `budget` is the call's time (a call run as a task
    /// has the task's), `chosen` the names its user chose for ambiguous ones.
    ///
    /// The call runs on a task of its own (a panic is answered as an internal error); a heavy
    /// one waits for a slot and runs on the heavy runtime ([`crate::governor`]). The answer
    /// comes by the deadline whatever the work does: past it (a little later while the call
    /// waits for its dataset's preparation) the call is refused, its stop set and its task
    /// aborted.
    pub async fn answer(
        self: &Arc<Self>,
        caller: &Caller,
        ask: Ask,
        budget: Duration,
        chosen: Vec<Choice>,
    ) -> Result<Value, EngineError> {
        let named = self.dataset_named(ask.dataset_id(), &caller.scope, &chosen);
        // What the call was estimated to take, to calibrate later estimates by its time.
        let estimated = self.plain_estimate(caller, &ask, &chosen);
        let started = Instant::now();
        let ctx = CallCtx::new(self, caller.clone(), budget, chosen);
        let name = ask.tool().name();
        // A backstop a little past the call's own deadline, kept by this (waiting) future: if
        // the call's task were stuck in work that does not yield, the caller is answered
        // anyway, and its stop is set.
        let backstop = budget + Duration::from_secs(2);
        let heavy = self.heavy(&ask, named.as_ref());
        let engine = Arc::clone(self);
        let stop = ctx.stop.clone();
        let resolved = named.clone();
        // Traced within the caller's span, on whichever runtime it runs.
        let call = tracing::Instrument::in_current_span(async move {
            engine.call_in(&ctx, &ask, resolved).await
        });
        let (runtime, slot) = if heavy {
            let deadline = tokio::time::Instant::now() + budget;
            let slot = self.governor.admit(&caller.id, deadline).await?;
            (self.governor.runtime()?, Some(slot))
        } else {
            (tokio::runtime::Handle::current(), None)
        };
        // The slot goes with the task: it frees when the work has ended, not when the caller
        // stops waiting.
        let run = guard_on(&runtime, stop, async move {
            let _slot = slot;
            call.await
        });
        tokio::pin!(run);
        // While the call's dataset is being prepared the call waits for it (see
        // [`Engine::call_in`]): the backstop is a full one past the last moment the
        // preparation was seen running.
        let mut deadline = tokio::time::Instant::now() + backstop;
        loop {
            let tick = (deadline - tokio::time::Instant::now()).min(Duration::from_secs(1));
            tokio::select! {
                result = &mut run => {
                    if let (Ok(_), Some(estimate)) = (&result, &estimated) {
                        self.calibration
                            .observe(estimate.kind, estimate.time, started.elapsed());
                    }
                    return result;
                }
                () = tokio::time::sleep(tick) => {
                    let now = tokio::time::Instant::now();
                    if named.as_ref().is_some_and(|ds| ds.preparing().is_some()) {
                        deadline = deadline.max(now + backstop);
                    } else if now >= deadline {
                        return Err(past_deadline_named(name, budget));
                    }
                }
            }
        }
    }

    /// Whether a call is heavy: it reads many records (see [`crate::governor`]).
    fn heavy(&self, ask: &Ask, named: Option<&Arc<Dataset>>) -> bool {
        match ask.tool() {
            Tool::ListDatasets => false,
            // A check runs a recorded call again, and provisions read a linked dataset.
            Tool::VerifyAnswer | Tool::CiteProvisions => true,
            Tool::InspectDataset => named.is_some_and(|ds| !self.descriptions.ready(ds)),
            // A dataset with relations may read a related table of up to 100,000 records.
            Tool::QueryRecords | Tool::SummarizeRecords => named.is_some_and(|ds| {
                ds.read_from_files(self)
                    || ds.ready().is_none()
                    // A table large enough to be scanned on every core at once
                    // ([`crate::limits::Limits::partition_rows`]) would take the serving threads.
                    || ds
                        .record_count()
                        .is_none_or(|n| n >= self.limits.partition_rows as u64)
                    || ds.def.fields.iter().any(|f| {
                        matches!(
                            f.derived.as_ref().map(|d| &d.source),
                            Some(tally_semantic::definition::DerivedSource::Relation { .. })
                        )
                    })
            }),
        }
    }

    /// Runs a tool for a caller who may see every dataset, with the call's default budget, on
    /// this task: for tests and benchmarks (servers go through [`Engine::answer`]).
    pub async fn call(&self, tool: Tool, arguments: &Value) -> Result<Value, EngineError> {
        let ask = Ask::parse(tool, arguments.clone())?;
        let ctx = CallCtx::new(
            self,
            Caller::everyone(""),
            self.limits.call_timeout,
            Vec::new(),
        );
        let named = self.dataset_named(ask.dataset_id(), &ctx.caller.scope, &ctx.chosen);
        self.call_in(&ctx, &ask, named).await
    }

    /// Runs a call within its time budget and checks the envelope against the tool's output
    /// schema before it is returned.
    pub(crate) async fn call_in(
        &self,
        ctx: &CallCtx,
        ask: &Ask,
        named: Option<Arc<Dataset>>,
    ) -> Result<Value, EngineError> {
        let tool = ask.tool();
        let timeout = ctx.budget;
        // A dataset whose table is being prepared when the call comes: the call is not
        // refused at its deadline (see below).
        let was_preparing = named.as_ref().is_some_and(|ds| ds.preparing().is_some());
        let mut attempt = Box::pin(self.attempt(ctx, ask));
        let envelope = match tokio::time::timeout(timeout, &mut attempt).await {
            Ok(result) => result?,
            Err(_)
                if was_preparing || named.as_ref().is_some_and(|ds| ds.preparing().is_some()) =>
            {
                // Past its deadline while its dataset's table is (or was, at the call's
                // start) being prepared: not refused. The call goes on until the preparation
                // ends (bounded by the memory budget and its own time), then has a time budget
                // of its own from there: a call waiting for the prepared table answers from
                // it; one still reading the files races the same call run again on the
                // prepared table, and the first to finish answers.
                let ended = named.and_then(|ds| ds.running_preparation());
                let ended = async move {
                    if let Some(ended) = ended {
                        ended.await;
                    }
                };
                tokio::select! {
                    biased;
                    result = &mut attempt => result?,
                    () = ended => {
                        let again_ctx = ctx.again();
                        let again = self.attempt(&again_ctx, ask);
                        let first = async {
                            tokio::select! {
                                biased;
                                result = &mut attempt => result,
                                result = again => result,
                            }
                        };
                        match tokio::time::timeout(timeout, first).await {
                            Ok(result) => result?,
                            Err(_) => return Err(past_deadline_named(tool.name(), timeout)),
                        }
                    }
                }
            }
            Err(_) => return Err(self.too_slow(ask, named.as_deref(), timeout)),
        };
        let mut envelope = envelope;
        if ask.prov() {
            envelope["prov"] = envelope::prov_jsonld(&envelope);
        }
        if let Err(problems) = schema::validate(tool, &envelope) {
            tracing::error!(
                tool = tool.name(),
                ?problems,
                "a result failed its output schema; it was not sent"
            );
            return Err(EngineError::Internal(format!(
                "the result of {} failed its own output schema, so it was not sent (a bug in Tally): {}",
                tool.name(),
                problems.join("; ")
            )));
        }
        Ok(envelope)
    }

    /// One run of a call. Files replaced under a live version: take the new catalog and try
    /// again. A folder caught half-removed (its definition still there, its data gone) keeps
    /// its version for a moment; the second retry comes after a short pause, when such writes
    /// are over.
    async fn attempt(&self, ctx: &CallCtx, ask: &Ask) -> Result<Value, EngineError> {
        let mut tries = 0;
        let cx = Cx {
            engine: self,
            call: ctx,
        };
        loop {
            match cx.run(ask).await {
                Err(EngineError::Storage(StorageError::Stale { dataset, message })) => {
                    tries += 1;
                    if tries > 2 {
                        return Err(self.gone_or_stale(dataset, message));
                    }
                    if tries == 2 {
                        tokio::time::sleep(STALE_PAUSE).await;
                    }
                    self.rescan_for(&dataset);
                    // A changed folder is read once its files have stayed as they are for a
                    // moment (`catalog::QUIET`): the call waits for that, not for the
                    // watcher's next scan.
                    let until = Instant::now() + tally_storage::catalog::QUIET + STALE_SETTLE;
                    while Instant::now() < until && self.catalog.load().pending.contains(&dataset) {
                        tokio::time::sleep(STALE_PAUSE).await;
                        self.rescan_for(&dataset);
                    }
                }
                other => return other,
            }
        }
    }

    /// Rescans after a call found `dataset`'s files (or objects) changed under it. An object
    /// removed or rewritten is seen only by listing it again. The scan blocks (on files, or
    /// on the store): off the async worker.
    fn rescan_for(&self, dataset: &str) {
        let objects = self
            .catalog
            .load()
            .datasets
            .get(dataset)
            .is_some_and(|d| d.def.data_url.is_some());
        let rescan = || {
            if objects {
                self.reload_objects(STALE_SETTLE)
            } else {
                self.reload(STALE_SETTLE)
            }
        };
        match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::CurrentThread => rescan(),
            _ => tokio::task::block_in_place(rescan),
        };
    }

    /// The error of a call whose data kept changing under it through its retries: a
    /// deletion when the source no longer holds the data (the catalog found nothing where
    /// `data:` points, and keeps the version served before), else a replacement to retry.
    fn gone_or_stale(&self, dataset: String, message: String) -> EngineError {
        let refused = self
            .catalog
            .load()
            .datasets
            .get(&dataset)
            .and_then(|ds| ds.refused_change());
        match refused {
            Some(r) if r.data_gone => EngineError::Dataset {
                message: format!(
                    "its data was deleted at its source or moved ({}; seen at {}), and this call must read it ({message}); put the data back, or point the definition at where it is now",
                    r.reason, r.since
                ),
                dataset,
                diagnostics: Vec::new(),
            },
            _ => StorageError::Stale { dataset, message }.into(),
        }
    }

    /// The error of a call stopped at its deadline, with what would make it fit: a text
    /// search over data read from its files (over the memory budget, or served so) reads
    /// every text value at every call, so it is told to name its fields or narrow first.
    fn too_slow(&self, ask: &Ask, ds: Option<&Dataset>, timeout: Duration) -> EngineError {
        let tool = ask.tool();
        match ds {
            Some(ds) if ask.searches() && ds.read_from_files(self) => EngineError::Limit {
                message: format!(
                    "{} took longer than its time budget of {} ms and was stopped: dataset `{}` is read from its files at every call (its prepared table would not fit the memory budget, or the server reads files at every call), so a text search folds and scans every text value of its {} records",
                    tool.name(),
                    timeout.as_millis(),
                    ds.def.id,
                    ds.record_count()
                        .map_or_else(|| "many".to_string(), |n| n.to_string())
                ),
                hint: "search fewer fields (`search_fields` names the fields `q` searches; `$contains` one field), or add conditions on coded fields or numbers first, which rule out row groups before any text is read".into(),
            },
            _ => past_deadline_named(tool.name(), timeout),
        }
    }

    /// The dataset a call names (`dataset_id`) as the call resolves it (a spelling corrected,
    /// or the one its user `chosen`), if the catalog serves it within the caller's `scope`
    /// (what a call waits for and says is of datasets the caller sees).
    pub(crate) fn dataset_named(
        &self,
        id: Option<&str>,
        scope: &Scope,
        chosen: &[Choice],
    ) -> Option<Arc<Dataset>> {
        self.dataset_choosing(id?, scope, chosen)
            .ok()
            .map(|(ds, _)| ds)
    }

    /// The dataset `input` names for a caller of `scope`, with the names its user `chosen`.
    pub(crate) fn dataset_choosing(
        &self,
        input: &str,
        scope: &Scope,
        chosen: &[Choice],
    ) -> Result<(Arc<Dataset>, Option<Resolution>), EngineError> {
        let catalog = self.catalog.load_full();
        // Names outside the caller's scope are never matched, suggested or described.
        let ids: Vec<&str> = catalog
            .ids()
            .into_iter()
            .filter(|id| scope.allows(id))
            .collect();
        let titles = |id: &str| {
            catalog
                .datasets
                .get(id)
                .filter(|_| scope.allows(id))
                .map(|d| d.def.title.clone())
        };
        let (id, resolution) =
            resolve_dataset_choosing(input, &ids, &titles, chosen).map_err(|mut e| {
                if let Some(b) = catalog
                    .broken
                    .iter()
                    .find(|b| b.folder == input && scope.allows(&b.folder))
                {
                    // Why, in the message itself: a store refusing credentials is not a typo.
                    let reasons = b
                        .problems
                        .iter()
                        .map(|p| p.reason.clone())
                        .collect::<Vec<_>>()
                        .join("; ");
                    let fixes = b
                        .problems
                        .iter()
                        .map(|p| p.fix.clone())
                        .filter(|f| !f.is_empty())
                        .collect::<Vec<_>>()
                        .join("; ");
                    e.message = format!("dataset `{input}` is not served: {reasons}");
                    e.hint = Some(if fixes.is_empty() {
                        format!("{}: {reasons}", b.file)
                    } else {
                        format!("{}: {fixes}", b.file)
                    });
                }
                e
            })?;
        let ds = self
            .seen(&catalog, id, scope)
            .ok_or_else(|| EngineError::internal("resolved dataset vanished"))?;
        Ok((ds, resolution))
    }
}

impl Cx<'_> {
    /// The dataset `input` names for this call's caller.
    fn dataset(&self, input: &str) -> Result<(Arc<Dataset>, Option<Resolution>), EngineError> {
        self.engine
            .dataset_choosing(input, self.scope(), &self.call.chosen)
    }

    /// Dispatches the request to its tool.
    async fn run(&self, ask: &Ask) -> Result<Value, EngineError> {
        let tool = ask.tool();
        let mut request = ask.request().clone();
        let chosen = self.call.chosen.to_vec();
        match &mut request {
            Request::QueryRecords(args) => args.chosen = chosen,
            Request::SummarizeRecords(args) => args.chosen = chosen,
            Request::CiteProvisions(args) => args.chosen = chosen,
            _ => {}
        }
        match request {
            Request::ListDatasets(args) => {
                let mut call = serde_json::Map::new();
                if let Some(q) = &args.q {
                    call.insert("q".into(), Value::from(q.as_str()));
                }
                if let Some(p) = &args.publisher {
                    call.insert("publisher".into(), Value::from(p.as_str()));
                }
                let (data, mut provenance) = self.engine.list(args, self.scope());
                provenance.query = Some(normalized(tool, Value::Object(call)));
                seal(data, provenance)
            }
            Request::InspectDataset(args) => {
                let (ds, resolution) = self.dataset(&args.dataset_id)?;
                let call = serde_json::json!({
                    "dataset_id": ds.def.id,
                    "detail": if args.full { "full" } else { "compact" },
                });
                let (data, mut provenance) =
                    crate::inspect::answer(self, &ds, resolution, args.full).await?;
                provenance.query = Some(normalized(tool, call));
                seal(data, provenance)
            }
            Request::QueryRecords(args) => {
                let select_given = !args.select.is_empty();
                let (ds, mut plan) = traced("resolve", || {
                    let (ds, resolution) = self.dataset(&args.dataset_id)?;
                    let mut plan = resolve_query(&ds.def, args)?;
                    plan.resolved_fields.splice(0..0, resolution);
                    Ok::<_, EngineError>((ds, plan))
                })?;
                let mut call = plan.to_call(&ds.def);
                if !select_given && let Some(m) = call.as_object_mut() {
                    // The default columns stay the default: asked again, the call is the same.
                    m.remove("select");
                }
                let used: Vec<tally_semantic::definition::FieldId> =
                    plan.filters.iter().map(|f| f.field).collect();
                let lookups = lookup::read(self, &ds.def, used)
                    .instrument(tracing::info_span!("plan"))
                    .await?;
                lookup::rewrite(&ds.def, &mut plan.filters, &lookups)?;
                let (data, mut provenance) = query::run(self, &ds, plan, select_given, &mut call)
                    .instrument(tracing::info_span!("scan"))
                    .await?;
                lookup::cite(&mut provenance, &lookups);
                provenance.query = Some(normalized(tool, call));
                traced("envelope", || seal(data, provenance))
            }
            Request::SummarizeRecords(args) => {
                let (ds, plan) = traced("resolve", || {
                    let (ds, resolution) = self.dataset(&args.dataset_id)?;
                    let mut plan = resolve_summarize(&ds.def, args)?;
                    plan.resolved_fields.splice(0..0, resolution);
                    Ok::<_, EngineError>((ds, plan))
                })?;
                let mut call = plan.to_call(&ds.def);
                let used: Vec<tally_semantic::definition::FieldId> = plan
                    .group_by
                    .iter()
                    .copied()
                    .chain(plan.filters.iter().map(|f| f.field))
                    .collect();
                let lookups = lookup::read(self, &ds.def, used)
                    .instrument(tracing::info_span!("plan"))
                    .await?;
                let (data, mut provenance) = summarize::run(self, &ds, plan, &mut call, &lookups)
                    .instrument(tracing::info_span!("scan"))
                    .await?;
                provenance.query = Some(normalized(tool, call));
                traced("envelope", || seal(data, provenance))
            }
            Request::CiteProvisions(args) => self.cite(tool, args).await,
            Request::VerifyAnswer(args) => {
                let (data, mut provenance) = Box::pin(self.verify(&args.envelope)).await?;
                provenance.query = Some(normalized(
                    tool,
                    serde_json::json!({ "envelope": "(the answer checked)" }),
                ));
                seal(data, provenance)
            }
        }
    }

    /// `cite_provisions`: the provisions the records rest on, read from the linked dataset as
    /// the caller sees it.
    async fn cite(
        &self,
        tool: Tool,
        args: tally_semantic::request::CiteArgs,
    ) -> Result<Value, EngineError> {
        let (ds, plan) = traced("resolve", || {
            let (ds, resolution) = self.dataset(&args.dataset_id)?;
            let mut plan = tally_semantic::resolve::resolve_cite(&ds.def, args)?;
            plan.records.resolved_fields.splice(0..0, resolution);
            Ok::<_, EngineError>((ds, plan))
        })?;
        let target = self
                .seen(&self.catalog.load(), &plan.link.to, self.scope())
                .ok_or_else(|| {
                    EngineError::Request(
                        tally_semantic::error::RequestError::new(
                            tally_semantic::error::ErrorCode::UnknownDataset,
                            format!(
                                "dataset `{}` links to `{}`, which is not served",
                                ds.def.id, plan.link.to
                            ),
                        )
                        .at("link")
                        .hint(format!(
                            "serve the dataset `{}` (a folder of that name in the datasets directory), or check `tally check` for why it is refused",
                            plan.link.to
                        )),
                    )
                })?;
        let call = plan.to_call(&ds.def);
        let (data, mut provenance) = provisions::run(self, &ds, &target, plan)
            .instrument(tracing::info_span!("scan"))
            .await?;
        provenance.query = Some(normalized(tool, call));
        traced("envelope", || seal(data, provenance))
    }
}

/// Runs a phase of a call within a span of its name (sent as a trace, see `tally_mcp::otlp`).
fn traced<T>(name: &'static str, phase: impl FnOnce() -> T) -> T {
    match name {
        "resolve" => tracing::info_span!("resolve").in_scope(phase),
        "envelope" => tracing::info_span!("envelope").in_scope(phase),
        _ => tracing::info_span!("phase").in_scope(phase),
    }
}

/// The call as resolved, for the envelope (`provenance.query`).
fn normalized(tool: Tool, arguments: Value) -> envelope::NormalizedCall {
    envelope::NormalizedCall {
        tool: tool.name().to_string(),
        arguments: match arguments {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        },
        tool_version: envelope::tool_version(),
    }
}

/// A tool's result and provenance as the envelope sent.
fn seal<T: serde::Serialize>(
    data: T,
    provenance: envelope::Provenance,
) -> Result<Value, EngineError> {
    envelope::Envelope::seal_value(data, provenance)
        .map_err(|e| EngineError::Internal(format!("a result could not be written as JSON: {e}")))
}

/// Runs a call on a task of its own on `runtime` and turns a panic into an error, so one
/// broken call never takes the server down or leaves its client waiting. When the caller
/// stops waiting (this future is dropped), `stop` is set and the task aborted: the abort
/// takes effect at the task's next `.await`, the stop ends work that runs long between two.
async fn guard_on<F>(
    runtime: &tokio::runtime::Handle,
    stop: Stop,
    future: F,
) -> Result<Value, EngineError>
where
    F: std::future::Future<Output = Result<Value, EngineError>> + Send + 'static,
{
    struct AbortOnDrop(tokio::task::AbortHandle, Stop);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.1.set();
            self.0.abort();
        }
    }
    let task = runtime.spawn(future);
    let _abort = AbortOnDrop(task.abort_handle(), stop);
    match task.await {
        Ok(result) => result,
        Err(e) if e.is_panic() => {
            let message = e
                .into_panic()
                .downcast::<String>()
                .map(|s| *s)
                .or_else(|p| p.downcast::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|_| "unknown panic".to_string());
            tracing::error!("a call panicked: {message}");
            Err(EngineError::Internal(format!(
                "the call failed unexpectedly ({message}); the server keeps serving, and the next call is unaffected"
            )))
        }
        Err(e) => Err(EngineError::Internal(format!(
            "the call was cancelled: {e}"
        ))),
    }
}

/// [`guard_on`] on the current runtime, with a stop of its own.
pub async fn guard<F>(future: F) -> Result<Value, EngineError>
where
    F: std::future::Future<Output = Result<Value, EngineError>> + Send + 'static,
{
    guard_on(&tokio::runtime::Handle::current(), Stop::new(), future).await
}

/// The error of a call stopped at its time budget.
pub(crate) fn past_deadline_named(name: &str, timeout: Duration) -> EngineError {
    EngineError::Limit {
        message: format!(
            "{name} took longer than its time budget of {} ms and was stopped",
            timeout.as_millis()
        ),
        hint: "narrow the call (filters, fewer groups, a smaller limit) or try again".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_panic_becomes_an_error_and_the_next_call_works() {
        let panicked = guard(async { panic!("boom") }).await;
        assert!(
            matches!(&panicked, Err(EngineError::Internal(m)) if m.contains("boom")),
            "{panicked:?}"
        );
        let next = guard(async { Ok(json!({"ok": true})) }).await;
        assert_eq!(next.ok(), Some(json!({"ok": true})));
    }
}
