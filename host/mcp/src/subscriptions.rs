//! `resources/subscribe`: a client subscribed to a dataset (or one of its fields) is told
//! `notifications/resources/updated` when the dataset is reloaded, added or removed. 2025-era
//! sessions subscribe with `resources/subscribe`; 2026-era clients name the URIs in
//! `subscriptions/listen` (see `TallyServer::listen`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tally_storage::catalog::Changes;

use crate::bounds::{
    MAX_SUBSCRIPTION_BYTES, MAX_SUBSCRIPTION_BYTES_TOTAL, MAX_SUBSCRIPTIONS, Refusal,
};

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

/// The subscribed URIs a catalog change touches. `change` is what the subscriber's caller may
/// see of it, so a URI of a dataset outside its scope is never touched: subscribing to one
/// is taken as subscribing to a dataset that does not exist is, and tells nothing.
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

/// The bytes of subscribed URIs all sessions hold together, bounded by
/// [`MAX_SUBSCRIPTION_BYTES_TOTAL`]: many sessions each within their own bound cannot add up
/// to gigabytes.
#[derive(Debug, Default)]
pub struct Total(AtomicUsize);

impl Total {
    fn take(&self, bytes: usize) -> bool {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                held.checked_add(bytes)
                    .filter(|&n| n <= MAX_SUBSCRIPTION_BYTES_TOTAL)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                Some(held.saturating_sub(bytes))
            });
    }

    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Default)]
struct Held {
    uris: BTreeSet<String>,
    bytes: usize,
}

/// One 2025-era session's subscriptions: at most [`MAX_SUBSCRIPTIONS`] URIs and
/// [`MAX_SUBSCRIPTION_BYTES`] of them, drawn from the server-wide [`Total`] and given back
/// when unsubscribed or when the session ends.
#[derive(Debug)]
pub struct SessionSubscriptions {
    held: Mutex<Held>,
    total: Arc<Total>,
}

impl SessionSubscriptions {
    pub fn new(total: Arc<Total>) -> SessionSubscriptions {
        SessionSubscriptions {
            held: Mutex::default(),
            total,
        }
    }

    /// Adds a subscription, or says which bound refuses it and what to do.
    pub fn add(&self, uri: String) -> Result<(), Refusal> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.uris.contains(&uri) {
            return Ok(());
        }
        if held.uris.len() >= MAX_SUBSCRIPTIONS {
            return Err(Refusal {
                message: format!(
                    "this session already holds {MAX_SUBSCRIPTIONS} subscriptions, the most it may"
                ),
                fix: "unsubscribe from some first (or subscribe to the dataset rather than to each field)".into(),
                bound: "MAX_SUBSCRIPTIONS",
                limit: MAX_SUBSCRIPTIONS,
            });
        }
        if held.bytes + uri.len() > MAX_SUBSCRIPTION_BYTES {
            return Err(Refusal {
                message: format!(
                    "this session's subscriptions already hold {} bytes of URIs; at most {MAX_SUBSCRIPTION_BYTES} are kept a session",
                    held.bytes
                ),
                fix: "unsubscribe from some first (or subscribe to the dataset rather than to each field)".into(),
                bound: "MAX_SUBSCRIPTION_BYTES",
                limit: MAX_SUBSCRIPTION_BYTES,
            });
        }
        if !self.total.take(uri.len()) {
            return Err(Refusal {
                message: format!(
                    "the server holds {MAX_SUBSCRIPTION_BYTES_TOTAL} bytes of subscriptions, the most it keeps for all sessions together"
                ),
                fix: "try again later, or unsubscribe from what this session no longer needs"
                    .into(),
                bound: "MAX_SUBSCRIPTION_BYTES_TOTAL",
                limit: MAX_SUBSCRIPTION_BYTES_TOTAL,
            });
        }
        held.bytes += uri.len();
        held.uris.insert(uri);
        Ok(())
    }

    pub fn remove(&self, uri: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.uris.remove(uri) {
            held.bytes -= uri.len();
            self.total.give_back(uri.len());
        }
    }

    /// The subscribed URIs a change touches.
    pub fn touched(&self, change: &Changes) -> Vec<String> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        touched(change, held.uris.iter())
    }
}

impl Drop for SessionSubscriptions {
    fn drop(&mut self) {
        let held = self.held.get_mut().unwrap_or_else(|p| p.into_inner());
        self.total.give_back(held.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_holds_a_bounded_number_of_subscriptions() {
        let subs = SessionSubscriptions::new(Arc::default());
        for i in 0..MAX_SUBSCRIPTIONS {
            subs.add(format!("tally://datasets/d{i}"))
                .expect("within the bound");
        }
        // The same URI again is not a new subscription.
        subs.add("tally://datasets/d0".into())
            .expect("already held");
        let refused = subs.add("tally://datasets/one-more".into()).unwrap_err();
        assert!(
            refused.message.contains("1000 subscriptions") && refused.fix.contains("unsubscribe")
        );
        subs.remove("tally://datasets/d1");
        subs.add("tally://datasets/one-more".into())
            .expect("room again");
    }

    /// Regression (issue 36, "subscriptions bounded by count, not bytes"): 1,000 URIs of
    /// 500 KB a session took four sessions to 2.1 GB. Each session holds at most 256 KiB of
    /// URIs, all sessions together 16 MiB, and a session's share is given back when it ends.
    #[test]
    fn subscriptions_are_bounded_in_bytes_per_session_and_in_all() {
        let total = Arc::new(Total::default());
        let uri = |i: usize| format!("tally://datasets/{i:0>4000}");
        let subs = SessionSubscriptions::new(Arc::clone(&total));
        let mut taken = 0;
        let refused = loop {
            match subs.add(uri(taken)) {
                Ok(()) => taken += 1,
                Err(refusal) => break refusal,
            }
        };
        assert_eq!(refused.bound, "MAX_SUBSCRIPTION_BYTES");
        assert!(
            taken * 4017 <= MAX_SUBSCRIPTION_BYTES && taken > 60,
            "{taken}"
        );
        let sessions: Vec<SessionSubscriptions> = (0..200)
            .map(|_| SessionSubscriptions::new(Arc::clone(&total)))
            .collect();
        let mut refused_in_all = None;
        'fill: for s in &sessions {
            for i in 0..64 {
                if let Err(r) = s.add(uri(i)) {
                    refused_in_all = Some(r);
                    break 'fill;
                }
            }
        }
        assert_eq!(
            refused_in_all.map(|r| r.bound),
            Some("MAX_SUBSCRIPTION_BYTES_TOTAL")
        );
        assert!(total.held() <= MAX_SUBSCRIPTION_BYTES_TOTAL);
        drop(sessions);
        drop(subs);
        assert_eq!(total.held(), 0, "every session gave its share back");
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
