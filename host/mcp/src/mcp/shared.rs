//! What the sessions of one server share: the engine, the audit log, the bytes of all
//! subscriptions, the tasks, the questions waited on and the metrics; and the records of
//! plugin datasets counted in the background.

use std::sync::Arc;

use tally_engine::Engine;

use crate::view::{Caller, Feed, View};

/// What all sessions share: the engine, the audit log and the bytes of all subscriptions.
#[derive(Debug)]
pub struct Shared {
    pub engine: Arc<Engine>,
    /// One JSON line per tool call, when asked for.
    pub audit: Option<crate::audit::Audit>,
    /// The bytes of subscribed URIs of all sessions together (bounded).
    pub(super) subscriptions: Arc<crate::subscriptions::Total>,
    /// Calls run as MCP tasks, of all sessions, each seen by its caller only (bounded).
    pub(super) tasks: crate::tasks::Tasks,
    /// Questions to users the server waits on (bounded per caller and in all).
    pub(super) waiting: Arc<crate::choose::Waiting>,
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
