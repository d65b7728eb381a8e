//! `notifications/progress` for a tool call that carries a `progressToken`: one at the start,
//! then one every [`EVERY`] while the call runs, saying what it is doing (reading and
//! preparing a dataset for its first use, with how many records so far; computing; a plugin
//! reading its source).
//!
//! The progress value is the time the call has used, in seconds, and the total is its time
//! budget: a quantity that only grows and a bar that is full when the call would be stopped.
//! A call whose dataset is being prepared is not stopped at its budget (it waits for the
//! preparation): its total is the preparation's estimated end, or none until that is known.
//! The message carries the detail a person can read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tally_engine::Engine;
use tally_semantic::Tool;
use tally_semantic::definition::{BackendKind, PluginRef};

use crate::view::{Caller, View};

/// How often a running call reports.
pub const EVERY: Duration = Duration::from_millis(500);

/// Sends progress for one call until finished (or dropped).
pub struct Reporter {
    task: Option<tokio::task::JoinHandle<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Reporter {
    /// Stops reporting and waits for a notification being sent, so that none follows the
    /// call's answer (the spec: no progress after completion).
    pub async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Starts reporting the call of `tool` with `arguments` to `peer` under `token`.
pub fn start(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    engine: Arc<Engine>,
    caller: Caller,
    tool: Tool,
    arguments: &Value,
) -> Reporter {
    let dataset = arguments
        .get("dataset_id")
        .and_then(Value::as_str)
        .map(|s| s.trim().to_string());
    let budget = engine.limits().call_timeout.as_secs_f64();
    let started = Instant::now();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut last = -1.0_f64;
        loop {
            let used = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
            // Strictly increasing, as the spec asks: a tick that rounds to the last value
            // is skipped.
            if used > last {
                last = used;
                let view = View::of(&engine, caller.clone());
                let (message, left) = doing(&view, tool, dataset.as_deref(), started.elapsed());
                let param =
                    ProgressNotificationParam::new(token.clone(), used).with_message(message);
                // A call waiting for its dataset's preparation is not stopped at its budget:
                // its bar runs to the preparation's estimated end, and has no total when that
                // is not yet known.
                let param = match left {
                    Some(left) => param.with_total(budget.max(used + left.as_secs_f64())),
                    None if used <= budget => param.with_total(budget),
                    None => param,
                };
                if peer.notify_progress(param).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                _ = &mut stopped => return,
                () = tokio::time::sleep(EVERY) => {}
            }
        }
    });
    Reporter {
        task: Some(task),
        stop: Some(stop),
    }
}

/// What a call of `tool` over `dataset` that began `elapsed` ago is doing now, in one line,
/// as its caller may be told: the status message of a call run as a task.
pub fn status(
    engine: &Engine,
    caller: &Caller,
    tool: Tool,
    dataset: Option<&str>,
    elapsed: Duration,
) -> String {
    doing(&View::of(engine, caller.clone()), tool, dataset, elapsed).0
}

/// What the call is doing now, in one line, and (while its dataset is being prepared) the
/// time the preparation is estimated to have left: of a dataset outside the caller's view it
/// says no more than of one that does not exist.
fn doing(
    view: &View,
    tool: Tool,
    dataset: Option<&str>,
    elapsed: Duration,
) -> (String, Option<Duration>) {
    let seconds = elapsed.as_secs_f64();
    let Some(ds) = dataset.and_then(|id| view.dataset(id)) else {
        return (format!("{}: working ({seconds:.1} s)", tool.name()), None);
    };
    if let Some((rows, preparing)) = ds.preparing() {
        let of = ds
            .record_count()
            .map(|n| format!(" of {n}"))
            .unwrap_or_default();
        let what = if preparing { "prepared" } else { "read" };
        let left = ds
            .weigh(tally_engine::storage::Work::default())
            .flatten()
            .map(|(_, left)| left);
        let about = left
            .map(|l| format!(", about {:.0} s left", l.as_secs_f64().ceil()))
            .unwrap_or_default();
        return (
            format!(
                "{}: `{}` is being read and prepared for its first use ({rows}{of} records {what} so far{about}, {seconds:.1} s)",
                tool.name(),
                ds.id()
            ),
            left,
        );
    }
    let line = match (&ds.def.backend.kind, &ds.def.backend.plugin) {
        (BackendKind::Parquet, _) | (_, None) => {
            format!(
                "{}: computing over `{}` ({seconds:.1} s)",
                tool.name(),
                ds.id()
            )
        }
        (kind, Some(plugin)) => format!(
            "{}: working on `{}`, whose records the {} plugin {} reads ({seconds:.1} s)",
            tool.name(),
            ds.id(),
            kind.as_str(),
            match plugin {
                PluginRef::Builtin(name) => name.as_str(),
                PluginRef::File(path) => path.as_str(),
            }
        ),
    };
    (line, None)
}
