//! What one session holds and is told as the catalog changes (2025-era sessions, which learn
//! of changes by notifications on their session; 2026-era clients ask with
//! `subscriptions/listen`, see `TallyServer::listen`): list-changed notifications, updates of
//! the resources it subscribed to, and the log messages of the level it asked for. All of it
//! comes from one [`Feed`] of its caller's view, so a change outside the caller's scope is no
//! change to the session at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::{Peer, RoleServer};
use tally_engine::Engine;
use tally_engine::storage::Changes;

use crate::logging::SessionLog;
use crate::subscriptions::SessionSubscriptions;
use crate::view::{Caller, Feed, View};

/// One session's state: its log level and subscriptions.
#[derive(Debug)]
pub struct Session {
    pub log: SessionLog,
    pub subscriptions: SessionSubscriptions,
    started: AtomicBool,
    /// Dropped with the session: its notifier stops at once, not at the next change.
    ended: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Session {
    pub fn new(subscription_total: Arc<crate::subscriptions::Total>) -> Session {
        Session {
            log: SessionLog::default(),
            subscriptions: SessionSubscriptions::new(subscription_total),
            started: AtomicBool::new(false),
            ended: Mutex::new(None),
        }
    }

    /// Starts telling `peer` of the changes `caller` may see (once per session), until the
    /// session ends.
    pub fn start(self: &Arc<Self>, peer: Peer<RoleServer>, engine: &Arc<Engine>, caller: Caller) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (ended, mut on_end) = tokio::sync::oneshot::channel::<()>();
        *self.ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(ended);
        let session: Weak<Session> = Arc::downgrade(self);
        let mut feed = Feed::new(engine, caller);
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    next = feed.next() => next,
                    _ = &mut on_end => return,
                };
                let Some((change, view)) = next else { return };
                let Some(session) = session.upgrade() else {
                    return;
                };
                if peer.is_transport_closed() || session.tell(&peer, &change, &view).await.is_err()
                {
                    return;
                }
            }
        });
    }

    /// Sends what one change means to this session; Err when it has gone.
    async fn tell(&self, peer: &Peer<RoleServer>, change: &Changes, view: &View) -> Result<(), ()> {
        peer.notify_resource_list_changed().await.map_err(|_| ())?;
        if prompts_may_change(change) {
            peer.notify_prompt_list_changed().await.map_err(|_| ())?;
        }
        for uri in self.subscriptions.touched(change) {
            peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await
                .map_err(|_| ())?;
        }
        self.log.changes(peer, change, view).await
    }
}

/// Whether a change may change the prompts (a law dataset coming or going offers or
/// withdraws `find_legal_basis`).
pub fn prompts_may_change(change: &Changes) -> bool {
    !(change.added.is_empty() && change.removed.is_empty() && change.updated.is_empty())
}
