//! `logging/setLevel` and `notifications/message` for sessions of the 2025 protocol: what a
//! client should see — datasets added, changed, removed or refused, and the names a call
//! corrected — never tool data. (SEP-2577 deprecates this feature in later protocol versions,
//! whose clients learn of catalog changes through `subscriptions/listen`.)
#![allow(deprecated)]

use std::sync::Mutex;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tally_engine::storage::Changes;

use crate::view::View;

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

    /// Sends the messages of a catalog change the session asked for (its level), as its
    /// caller sees the change. Err when the session has gone.
    pub async fn changes(
        &self,
        peer: &Peer<RoleServer>,
        change: &Changes,
        view: &View,
    ) -> Result<(), ()> {
        for (level, data) in describe(change, view) {
            if self.wants(level) {
                let message = LoggingMessageNotificationParam::new(level, data).with_logger(LOGGER);
                peer.notify_logging_message(message).await.map_err(|_| ())?;
            }
        }
        Ok(())
    }
}

/// The messages a catalog change makes: one per dataset, refusals as warnings. `change` is
/// what the caller of `view` may see of it (see [`crate::view::Feed`]).
pub fn describe(change: &Changes, view: &View) -> Vec<(LoggingLevel, Value)> {
    let version = |id: &str| view.dataset(id).map(|d| d.version.clone());
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
        let broken = view.broken().find(|b| &b.folder == folder);
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
        if view.dataset(folder).is_some()
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
