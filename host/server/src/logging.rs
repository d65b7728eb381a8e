//! `logging/setLevel` and `notifications/message` for sessions of the 2025 protocol: what a
//! client should see — datasets added, changed, removed or refused, and the names a call
//! corrected — never tool data. (SEP-2577 deprecates this feature in later protocol versions,
//! whose clients learn of catalog changes through `subscriptions/listen`.)
#![allow(deprecated)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tally_engine::Engine;
use tally_engine::catalog::{Catalog, Changes};

const LOGGER: &str = "tally";

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// One session's logging: the level it asked for (none: nothing is sent).
#[derive(Debug, Default)]
pub struct SessionLog {
    level: Mutex<Option<LoggingLevel>>,
    listening: AtomicBool,
}

impl SessionLog {
    pub fn set(&self, level: LoggingLevel) {
        *self.level.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    }

    pub fn wants(&self, level: LoggingLevel) -> bool {
        self.level
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|asked| severity(level) >= severity(asked))
    }

    /// Starts telling `peer` of catalog changes (once per session), until it goes away.
    pub fn listen(self: &Arc<Self>, peer: Peer<RoleServer>, engine: &Arc<Engine>) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let log: Weak<SessionLog> = Arc::downgrade(self);
        let engine = Arc::clone(engine);
        let mut changes = engine.subscribe();
        tokio::spawn(async move {
            loop {
                let change = match changes.recv().await {
                    Ok(change) => change,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(log) = log.upgrade() else { return };
                if peer.is_transport_closed() {
                    return;
                }
                for (level, data) in describe(&change, &engine.catalog()) {
                    if log.wants(level) {
                        let message =
                            LoggingMessageNotificationParam::new(level, data).with_logger(LOGGER);
                        if peer.notify_logging_message(message).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }

    /// Tells the session which names of a call were read as others (the result says so too).
    pub async fn corrections(&self, peer: &Peer<RoleServer>, tool: &str, envelope: &Value) {
        if !self.wants(LoggingLevel::Info) {
            return;
        }
        if let Some(data) = corrections(tool, envelope) {
            let message =
                LoggingMessageNotificationParam::new(LoggingLevel::Info, data).with_logger(LOGGER);
            let _ = peer.notify_logging_message(message).await;
        }
    }
}

/// The messages a catalog change makes: one per dataset, refusals as warnings.
pub fn describe(change: &Changes, catalog: &Catalog) -> Vec<(LoggingLevel, Value)> {
    let version = |id: &str| catalog.datasets.get(id).map(|d| d.version.clone());
    let mut out = Vec::new();
    for id in &change.added {
        out.push((
            LoggingLevel::Info,
            json!({ "event": "dataset_added", "dataset_id": id, "version": version(id),
                    "message": format!("dataset `{id}` is now served") }),
        ));
    }
    for id in &change.updated {
        out.push((
            LoggingLevel::Info,
            json!({ "event": "dataset_changed", "dataset_id": id, "version": version(id),
                    "message": format!("dataset `{id}` was reloaded: answers now come from its new version") }),
        ));
    }
    for id in &change.removed {
        out.push((
            LoggingLevel::Info,
            json!({ "event": "dataset_removed", "dataset_id": id,
                    "message": format!("dataset `{id}` is no longer served") }),
        ));
    }
    for folder in &change.broken {
        let broken = catalog.broken.iter().find(|b| &b.folder == folder);
        let first = broken
            .and_then(|b| b.problems.first())
            .and_then(|p| serde_json::to_value(p).ok());
        let serving = broken.and_then(|b| b.serving_version.clone());
        out.push((
            LoggingLevel::Warning,
            json!({ "event": "dataset_refused", "dataset_id": folder,
                    "file": broken.map(|b| b.file.clone()),
                    "problem": first,
                    "serving_version": serving,
                    "message": match &serving {
                        Some(v) => format!("dataset folder `{folder}` has a problem; its last good version {v} keeps serving (list_datasets says what is wrong)"),
                        None => format!("dataset folder `{folder}` cannot be served (list_datasets says what is wrong)"),
                    } }),
        ));
    }
    for folder in &change.cleared {
        if catalog.datasets.contains_key(folder)
            && !change.added.contains(folder)
            && !change.updated.contains(folder)
        {
            out.push((
                LoggingLevel::Info,
                json!({ "event": "dataset_fixed", "dataset_id": folder,
                        "message": format!("dataset folder `{folder}` is served again") }),
            ));
        }
    }
    out
}

/// The names a call's result says were read as others, as one message.
pub fn corrections(tool: &str, envelope: &Value) -> Option<Value> {
    let read: Vec<Value> = envelope
        .pointer("/data/resolved_fields")?
        .as_array()?
        .iter()
        .filter(|r| r.get("input") != r.get("canonical"))
        .cloned()
        .collect();
    if read.is_empty() {
        return None;
    }
    let words: Vec<String> = read
        .iter()
        .map(|r| {
            format!(
                "`{}` as `{}`",
                r["input"].as_str().unwrap_or_default(),
                r["canonical"].as_str().unwrap_or_default()
            )
        })
        .collect();
    Some(json!({
        "event": "names_corrected",
        "tool": tool,
        "corrections": read,
        "message": format!("{tool} read {}", words.join(", ")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_at_or_above_the_one_asked() {
        let log = SessionLog::default();
        assert!(
            !log.wants(LoggingLevel::Emergency),
            "nothing before a level is set"
        );
        log.set(LoggingLevel::Warning);
        assert!(log.wants(LoggingLevel::Warning) && log.wants(LoggingLevel::Error));
        assert!(!log.wants(LoggingLevel::Info));
        log.set(LoggingLevel::Debug);
        assert!(log.wants(LoggingLevel::Info));
    }

    #[test]
    fn corrections_name_what_was_read_as_what() {
        let envelope = json!({ "data": { "resolved_fields": [
            { "parameter": "group_by", "input": "所管府省", "canonical": "所管府省庁" },
            { "parameter": "dataset_id", "input": "procedures", "canonical": "procedures" },
        ] } });
        let message = corrections("summarize_records", &envelope).expect("one correction");
        assert_eq!(
            message["message"],
            "summarize_records read `所管府省` as `所管府省庁`"
        );
        assert_eq!(message["corrections"].as_array().map(Vec::len), Some(1));
        assert!(
            corrections(
                "summarize_records",
                &json!({ "data": { "resolved_fields": [] } })
            )
            .is_none()
        );
    }
}
