//! `resources/subscribe`: a client subscribed to a dataset (or one of its fields) is told
//! `notifications/resources/updated` when the dataset is reloaded, added or removed. 2025-era
//! sessions subscribe with `resources/subscribe`; 2026-era clients name the URIs in
//! `subscriptions/listen` (see `TallyServer::listen`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rmcp::{Peer, RoleServer};
use tally_engine::Engine;
use tally_engine::catalog::Changes;

/// The most URIs one session may subscribe to.
pub const MAX_PER_SESSION: usize = 1_000;

/// Whether `uri` names something a reload changes: a dataset or one of its fields.
pub fn changes_with_datasets(uri: &str) -> bool {
    uri.strip_prefix("tally://datasets/")
        .is_some_and(|rest| !rest.is_empty())
}

/// The dataset a subscribed URI belongs to.
fn dataset_of(uri: &str) -> Option<&str> {
    let rest = uri.strip_prefix("tally://datasets/")?;
    Some(rest.split_once("/fields/").map_or(rest, |(id, _)| id))
}

/// The subscribed URIs a catalog change touches.
pub fn touched<'a>(
    change: &Changes,
    subscribed: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    let changed: BTreeSet<&str> = change
        .added
        .iter()
        .chain(&change.updated)
        .chain(&change.removed)
        .map(String::as_str)
        .collect();
    subscribed
        .into_iter()
        .filter(|uri| {
            dataset_of(uri).is_some_and(|id| {
                changed.contains(id)
                    || percent_encoding::percent_decode_str(id)
                        .decode_utf8()
                        .is_ok_and(|decoded| changed.contains(decoded.as_ref()))
            })
        })
        .cloned()
        .collect()
}

/// One 2025-era session's subscriptions.
#[derive(Debug, Default)]
pub struct SessionSubscriptions {
    uris: Mutex<BTreeSet<String>>,
    listening: AtomicBool,
}

impl SessionSubscriptions {
    /// Adds a subscription; a session holds at most [`MAX_PER_SESSION`] (a client cannot
    /// make the server keep an unbounded set).
    pub fn add(&self, uri: String) -> Result<(), String> {
        let mut uris = self.uris.lock().unwrap_or_else(|p| p.into_inner());
        if uris.len() >= MAX_PER_SESSION && !uris.contains(&uri) {
            return Err(format!(
                "this session already holds {MAX_PER_SESSION} subscriptions, the most it may; unsubscribe from some first (or subscribe to the dataset rather than to each field)"
            ));
        }
        uris.insert(uri);
        Ok(())
    }

    pub fn remove(&self, uri: &str) {
        self.uris
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uri);
    }

    /// Starts telling `peer` of updates to what it subscribed to (once per session).
    pub fn listen(self: &Arc<Self>, peer: Peer<RoleServer>, engine: &Arc<Engine>) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let subscriptions: Weak<SessionSubscriptions> = Arc::downgrade(self);
        let mut changes = engine.subscribe();
        tokio::spawn(async move {
            loop {
                let change = match changes.recv().await {
                    Ok(change) => change,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(subscriptions) = subscriptions.upgrade() else {
                    return;
                };
                if peer.is_transport_closed() {
                    return;
                }
                let uris = {
                    let subscribed = subscriptions.uris.lock().unwrap_or_else(|p| p.into_inner());
                    touched(&change, subscribed.iter())
                };
                for uri in uris {
                    if peer
                        .notify_resource_updated(
                            rmcp::model::ResourceUpdatedNotificationParam::new(uri),
                        )
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_holds_a_bounded_number_of_subscriptions() {
        let subs = SessionSubscriptions::default();
        for i in 0..MAX_PER_SESSION {
            subs.add(format!("tally://datasets/d{i}"))
                .expect("within the bound");
        }
        // The same URI again is not a new subscription.
        subs.add("tally://datasets/d0".into())
            .expect("already held");
        let refused = subs.add("tally://datasets/one-more".into()).unwrap_err();
        assert!(refused.contains("1000 subscriptions") && refused.contains("unsubscribe"));
        subs.remove("tally://datasets/d1");
        subs.add("tally://datasets/one-more".into())
            .expect("room again");
    }

    #[test]
    fn a_change_touches_the_dataset_and_its_fields() {
        let change = Changes {
            updated: vec!["procedures".into()],
            ..Changes::default()
        };
        let subscribed: Vec<String> = vec![
            "tally://datasets/procedures".into(),
            "tally://datasets/procedures/fields/所管府省庁".into(),
            "tally://datasets/guide".into(),
        ];
        assert_eq!(
            touched(&change, subscribed.iter()),
            vec![
                "tally://datasets/procedures".to_string(),
                "tally://datasets/procedures/fields/所管府省庁".to_string(),
            ]
        );
        assert!(changes_with_datasets("tally://datasets/x"));
        assert!(!changes_with_datasets("tally://datasets/"));
        assert!(!changes_with_datasets("ui://tally/query_records"));
    }
}
