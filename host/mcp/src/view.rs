//! The one caller view (docs/security.md, "One caller view"). Everything that leaves the
//! server for a caller — tool results and their errors, progress, `notifications/message`,
//! list-changed and resource-updated notifications, completions, prompts, resources, the
//! tools' descriptions and examples, `/health` — is built from that caller's [`View`] of the
//! catalog, made here and nowhere else.
//!
//! The engine enforces it by its types: every entry point that reads the catalog for
//! someone takes a [`Caller`] (`Engine::answer`, `Engine::estimate`, `Engine::values_to_complete`,
//! `Engine::view`), and the catalog itself is not public. A new surface therefore has no way
//! to reach a dataset but as some caller, and a view holds only what its caller's token may
//! see: a hidden dataset and one that does not exist are the same absence to it. (Catalog
//! changes, `Engine::subscribe`, carry only dataset ids; they reach a caller through its
//! [`Feed`], and clippy's `disallowed-methods` keeps `subscribe` in this file.)
//!
//! A request reaches a view through [`crate::bounds::Bounded`]: [`View::enter`] checks the
//! request's inputs against their bounds before any work starts, so scope and size are one
//! gate.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::service::{NotificationContext, RequestContext};
use serde_json::{Value, json};
use tally_engine::storage::Changes;

/// The interactive view of a tool's answer as a page of its own (what `--chart FILE.html`
/// writes): it loads nothing from the network.
pub use crate::ui::standalone_html;
use tally_engine::{Ask, Engine, EngineError};
use tally_semantic::Tool;

/// Who is calling, as the tools see it (never the token itself): the engine's caller, which
/// every entry point into the engine takes.
pub use tally_engine::Caller;

/// The caller of an MCP request or notification: set by the HTTP guard; stdio has one caller
/// with every dataset.
pub fn caller_of_extensions(extensions: &rmcp::model::Extensions) -> Caller {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .unwrap_or_else(Caller::stdio)
}

pub fn caller_of_request(context: &RequestContext<RoleServer>) -> Caller {
    caller_of_extensions(&context.extensions)
}

pub fn caller_of_notification(context: &NotificationContext<RoleServer>) -> Caller {
    caller_of_extensions(&context.extensions)
}

/// One caller's view of one catalog snapshot (the engine's [`tally_engine::View`]), with
/// what the MCP surfaces ask of it.
#[derive(Debug, Clone)]
pub struct View(tally_engine::View);

impl std::ops::Deref for View {
    type Target = tally_engine::View;
    fn deref(&self) -> &tally_engine::View {
        &self.0
    }
}

impl View {
    /// The view of `caller` on the catalog as it is now.
    pub fn of(engine: &Engine, caller: Caller) -> View {
        View(engine.view(caller))
    }

    /// The gate every MCP request passes: its inputs checked against their bounds (before
    /// any work), then the view of its caller.
    pub fn enter(
        engine: &Engine,
        context: &RequestContext<RoleServer>,
        params: &impl crate::bounds::Bounded,
    ) -> Result<View, ErrorData> {
        params.check().map_err(|refusal| refusal.into_error())?;
        Ok(View::of(engine, caller_of_request(context)))
    }

    /// Runs a tool for this caller through the engine's one door: its scope limits what the
    /// call may read, name and suggest, its calls in flight share one memory allowance, and
    /// a heavy call waits for its fair share of the slots.
    pub async fn call(
        &self,
        engine: &Arc<Engine>,
        tool: Tool,
        arguments: Value,
    ) -> Result<Value, EngineError> {
        let budget = engine.limits().call_timeout;
        self.call_within(engine, tool, arguments, budget, Vec::new())
            .await
    }

    /// [`View::call`] with a time budget of its own (a call run as a task has the task's)
    /// and the names its user chose for ambiguous ones.
    pub async fn call_within(
        &self,
        engine: &Arc<Engine>,
        tool: Tool,
        arguments: Value,
        budget: std::time::Duration,
        chosen: Vec<tally_semantic::resolve::Choice>,
    ) -> Result<Value, EngineError> {
        let ask = Ask::parse(tool, arguments)?;
        engine.answer(self.caller(), ask, budget, chosen).await
    }

    /// How long a call is estimated to take, judged from the datasets this caller may see
    /// only (of another, nothing: it is answered as a dataset that does not exist).
    pub fn estimate(
        &self,
        engine: &Engine,
        tool: Tool,
        arguments: &Value,
        chosen: &[tally_semantic::resolve::Choice],
    ) -> Option<tally_engine::estimate::Estimate> {
        let ask = Ask::parse(tool, arguments.clone()).ok()?;
        engine.estimate(self.caller(), &ask, chosen)
    }

    /// The values a completion may offer for `field` of a dataset the caller may see, or why
    /// there are none now (see [`Engine::values_to_complete`]); nothing for any other dataset.
    pub async fn values_to_complete(
        &self,
        engine: &Arc<Engine>,
        dataset: &str,
        field: &str,
    ) -> tally_engine::KnownValues {
        engine
            .values_to_complete(self.caller(), dataset, field)
            .await
    }

    /// What `/health` tells this caller: counts only to a caller that may see everything
    /// (the count of datasets is itself something a scoped token must not learn). A dataset
    /// served whose data cannot be read (its last whole read failed: a plugin failing past
    /// the row its registration read) is counted broken too, and named.
    pub fn health(&self) -> Value {
        let mut health = json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") });
        if self.sees_all() {
            let unreadable: Vec<&str> = self
                .datasets()
                .filter(|ds| ds.backend.read_failure().is_some())
                .map(|ds| ds.id())
                .collect();
            let served = self.datasets().count();
            health["datasets"] = json!(served);
            health["broken_datasets"] = json!(self.broken().count() + unreadable.len());
            if !unreadable.is_empty() {
                health["unreadable_datasets"] = json!(unreadable);
            }
        }
        health
    }
}

/// What a caller has seen of the catalog: the version of each dataset and the problems of
/// each refused folder it may see.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    datasets: BTreeMap<String, String>,
    broken: BTreeMap<String, String>,
}

impl Seen {
    fn of(view: &View) -> Seen {
        Seen {
            datasets: view
                .datasets()
                .map(|ds| (ds.id().to_string(), ds.version.clone()))
                .collect(),
            broken: view
                .broken()
                .map(|b| {
                    let problems = serde_json::to_string(&(&b.problems, &b.serving_version))
                        .unwrap_or_default();
                    (b.folder.clone(), problems)
                })
                .collect(),
        }
    }

    /// The change from `self` to `now`, in the engine's terms.
    fn diff(&self, now: &Seen) -> Changes {
        let mut change = Changes::default();
        for (id, version) in &now.datasets {
            match self.datasets.get(id) {
                None => change.added.push(id.clone()),
                Some(v) if v != version => change.updated.push(id.clone()),
                Some(_) => {}
            }
        }
        change.removed = self
            .datasets
            .keys()
            .filter(|id| !now.datasets.contains_key(*id))
            .cloned()
            .collect();
        change.broken = now
            .broken
            .iter()
            .filter(|(folder, problems)| self.broken.get(*folder) != Some(*problems))
            .map(|(folder, _)| folder.clone())
            .collect();
        change.cleared = self
            .broken
            .keys()
            .filter(|folder| !now.broken.contains_key(*folder))
            .cloned()
            .collect();
        change
    }
}

/// The catalog's changes as one caller may see them. Each [`Feed::next`] is the difference
/// between what the caller saw before and its view now, so a change to a dataset outside its
/// scope is no change at all to it (not even a list-changed notification), and a burst of
/// changes the broadcast dropped is still seen whole.
#[derive(Debug)]
pub struct Feed {
    engine: Arc<Engine>,
    caller: Caller,
    changes: tokio::sync::broadcast::Receiver<Changes>,
    seen: Seen,
}

impl Feed {
    #[allow(clippy::disallowed_methods)] // changes reach a caller only through its feed
    pub fn new(engine: &Arc<Engine>, caller: Caller) -> Feed {
        let changes = engine.subscribe();
        let seen = Seen::of(&View::of(engine, caller.clone()));
        Feed {
            engine: Arc::clone(engine),
            caller,
            changes,
            seen,
        }
    }

    /// The next change this caller may see, with its view after it; `None` once the engine
    /// has gone.
    pub async fn next(&mut self) -> Option<(Changes, View)> {
        loop {
            match self.changes.recv().await {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
            let view = View::of(&self.engine, self.caller.clone());
            let now = Seen::of(&view);
            let change = self.seen.diff(&now);
            self.seen = now;
            if !change.is_empty() {
                return Some((change, view));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(datasets: &[(&str, &str)], broken: &[(&str, &str)]) -> Seen {
        Seen {
            datasets: datasets
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            broken: broken
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_change_is_the_difference_of_two_views() {
        let before = seen(&[("a", "1"), ("b", "1"), ("c", "1")], &[("x", "p")]);
        let after = seen(&[("a", "1"), ("b", "2"), ("d", "1")], &[("y", "q")]);
        let change = before.diff(&after);
        assert_eq!(change.added, vec!["d"]);
        assert_eq!(change.updated, vec!["b"]);
        assert_eq!(change.removed, vec!["c"]);
        assert_eq!(change.broken, vec!["y"]);
        assert_eq!(change.cleared, vec!["x"]);
        assert!(after.diff(&after).is_empty());
    }
}
