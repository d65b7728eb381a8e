//! `resources/subscribe`: a client subscribed to a dataset (or one of its fields) is told
//! `notifications/resources/updated` when the dataset is reloaded, added or removed. 2025-era
//! sessions subscribe with `resources/subscribe`; 2026-era clients name the URIs in
//! `subscriptions/listen` (see `TallyServer::listen`).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tally_engine::storage::Changes;

use crate::bounds::{
    MAX_SUBSCRIPTION_BYTES, MAX_SUBSCRIPTION_BYTES_PER_CALLER, MAX_SUBSCRIPTION_BYTES_TOTAL,
    MAX_SUBSCRIPTIONS, Refusal,
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
/// to gigabytes. Each caller (a token, or an address without tokens) holds at most
/// [`MAX_SUBSCRIPTION_BYTES_PER_CALLER`] of it, whatever its number of sessions: one token
/// with 66 sessions filled the whole 16 MiB in 1.1 s and locked every other caller out.
/// A caller's live sessions are bounded too (`--max-sessions-per-caller`, closing the oldest),
/// and a session gives its share back when it ends.
#[derive(Debug, Default)]
pub struct Total(Mutex<Taken>);

#[derive(Debug, Default)]
struct Taken {
    all: usize,
    by_caller: HashMap<String, usize>,
}

/// How an idle session's subscriptions come back (rmcp closes a session idle this long).
const GIVEN_BACK: &str = "subscriptions are given back as sessions unsubscribe or end (an idle session ends after 5 minutes)";

impl Total {
    /// Subscriptions of all sessions now.
    pub fn count(&self) -> usize {
        self.taken().all
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, Taken> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `bytes` for `caller`, or says which bound refuses them.
    fn take(&self, caller: &str, bytes: usize) -> Result<(), Refusal> {
        let mut taken = self.taken();
        let mine = taken.by_caller.get(caller).copied().unwrap_or(0);
        if mine + bytes > MAX_SUBSCRIPTION_BYTES_PER_CALLER {
            return Err(Refusal {
                message: format!(
                    "the sessions of `{caller}` hold {mine} bytes of subscriptions; one caller may hold at most {MAX_SUBSCRIPTION_BYTES_PER_CALLER}, its share of the server's {MAX_SUBSCRIPTION_BYTES_TOTAL}, so that other callers always have room"
                ),
                fix: format!(
                    "unsubscribe in this caller's sessions or end those it no longer uses: {GIVEN_BACK}"
                ),
                bound: "MAX_SUBSCRIPTION_BYTES_PER_CALLER",
                limit: MAX_SUBSCRIPTION_BYTES_PER_CALLER,
            });
        }
        if taken.all + bytes > MAX_SUBSCRIPTION_BYTES_TOTAL {
            return Err(Refusal {
                message: format!(
                    "the server holds {} bytes of subscriptions, the most it keeps for all sessions together ({MAX_SUBSCRIPTION_BYTES_TOTAL})",
                    taken.all
                ),
                fix: format!(
                    "try again later, or unsubscribe from what this session no longer needs: {GIVEN_BACK}"
                ),
                bound: "MAX_SUBSCRIPTION_BYTES_TOTAL",
                limit: MAX_SUBSCRIPTION_BYTES_TOTAL,
            });
        }
        taken.all += bytes;
        *taken.by_caller.entry(caller.to_string()).or_default() += bytes;
        Ok(())
    }

    fn give_back(&self, caller: &str, bytes: usize) {
        let mut taken = self.taken();
        taken.all = taken.all.saturating_sub(bytes);
        if let Some(mine) = taken.by_caller.get_mut(caller) {
            *mine = mine.saturating_sub(bytes);
            if *mine == 0 {
                taken.by_caller.remove(caller);
            }
        }
    }

    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.taken().all
    }

    #[cfg(test)]
    fn held_by(&self, caller: &str) -> usize {
        self.taken().by_caller.get(caller).copied().unwrap_or(0)
    }
}

#[derive(Debug, Default)]
struct Held {
    uris: BTreeSet<String>,
    bytes: usize,
    /// The caller the session's bytes are counted against (a session is one caller's).
    caller: Option<String>,
}

/// One 2025-era session's subscriptions: at most [`MAX_SUBSCRIPTIONS`] URIs and
/// [`MAX_SUBSCRIPTION_BYTES`] of them, drawn from its caller's share of the server-wide
/// [`Total`] and given back when unsubscribed or when the session ends.
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

    /// Adds a subscription of `caller`'s session, or says which bound refuses it and what
    /// to do.
    pub fn add(&self, caller: &str, uri: String) -> Result<(), Refusal> {
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
        let owner = held
            .caller
            .get_or_insert_with(|| caller.to_string())
            .clone();
        self.total.take(&owner, uri.len())?;
        held.bytes += uri.len();
        held.uris.insert(uri);
        Ok(())
    }

    pub fn remove(&self, uri: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.uris.remove(uri) {
            held.bytes -= uri.len();
            if let Some(caller) = &held.caller {
                self.total.give_back(caller, uri.len());
            }
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
        if let Some(caller) = &held.caller {
            self.total.give_back(caller, held.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_holds_a_bounded_number_of_subscriptions() {
        let subs = SessionSubscriptions::new(Arc::default());
        for i in 0..MAX_SUBSCRIPTIONS {
            subs.add("a", format!("tally://datasets/d{i}"))
                .expect("within the bound");
        }
        // The same URI again is not a new subscription.
        subs.add("a", "tally://datasets/d0".into())
            .expect("already held");
        let refused = subs
            .add("a", "tally://datasets/one-more".into())
            .unwrap_err();
        assert!(
            refused.message.contains("1000 subscriptions") && refused.fix.contains("unsubscribe")
        );
        subs.remove("tally://datasets/d1");
        subs.add("a", "tally://datasets/one-more".into())
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
            match subs.add("a", uri(taken)) {
                Ok(()) => taken += 1,
                Err(refusal) => break refusal,
            }
        };
        assert_eq!(refused.bound, "MAX_SUBSCRIPTION_BYTES");
        assert!(
            taken * 4017 <= MAX_SUBSCRIPTION_BYTES && taken > 60,
            "{taken}"
        );
        // Sessions of many callers (each within its share) fill the server's total.
        let sessions: Vec<SessionSubscriptions> = (0..200)
            .map(|_| SessionSubscriptions::new(Arc::clone(&total)))
            .collect();
        let mut refused_in_all = None;
        'fill: for (n, s) in sessions.iter().enumerate() {
            for i in 0..64 {
                if let Err(r) = s.add(&format!("caller {n}"), uri(i)) {
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

    /// Regression (issue 54, "first come holds the slots"): one token opened 66 sessions and
    /// filled the server's 16 MiB of subscriptions in 1.1 s, and no other caller could
    /// subscribe. One caller holds at most its share, whatever its number of sessions.
    #[test]
    fn one_caller_holds_at_most_its_share_and_others_still_subscribe() {
        let total = Arc::new(Total::default());
        let uri = |i: usize| format!("tally://datasets/{i:0>4000}");
        let greedy: Vec<SessionSubscriptions> = (0..66)
            .map(|_| SessionSubscriptions::new(Arc::clone(&total)))
            .collect();
        let mut refused = None;
        'fill: for s in &greedy {
            for i in 0..64 {
                if let Err(r) = s.add("greedy", uri(i)) {
                    refused = Some(r);
                    break 'fill;
                }
            }
        }
        let refused = refused.expect("refused at its share");
        assert_eq!(refused.bound, "MAX_SUBSCRIPTION_BYTES_PER_CALLER");
        assert!(
            refused.message.contains("share") && refused.fix.contains("5 minutes"),
            "{refused:?}"
        );
        assert!(total.held_by("greedy") <= MAX_SUBSCRIPTION_BYTES_PER_CALLER);
        let other = SessionSubscriptions::new(Arc::clone(&total));
        other
            .add("other", uri(0))
            .expect("another caller still has room");
        // A session of the greedy caller that ends gives its bytes back to its share.
        let before = total.held_by("greedy");
        drop(greedy);
        assert!(before > 0 && total.held_by("greedy") == 0);
        assert_eq!(total.held(), uri(0).len());
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
