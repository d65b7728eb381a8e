//! One session's handler: the state all sessions share and what this session asked for, the
//! gate every request passes (its inputs bounded, then its caller's view), and the protocol
//! era a request speaks.

use std::sync::Arc;

use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use tally_engine::Engine;

use super::shared::Shared;
use crate::session::Session;
use crate::view::View;

/// One handler per session (HTTP) or per process (stdio); the engine is shared.
#[derive(Debug, Clone)]
pub struct TallyServer {
    pub(super) shared: Arc<Shared>,
    /// What this session asked to be told (`logging/setLevel`) and subscribed to
    /// (`resources/subscribe`).
    pub(super) session: Arc<Session>,
}

impl TallyServer {
    pub fn new(shared: Arc<Shared>) -> TallyServer {
        let session = Arc::new(Session::new(Arc::clone(&shared.subscriptions)));
        TallyServer { shared, session }
    }

    pub(super) fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// The gate of every request: its inputs within their bounds, then its caller's view.
    pub(super) fn enter(
        &self,
        context: &RequestContext<RoleServer>,
        params: &impl crate::bounds::Bounded,
    ) -> Result<View, ErrorData> {
        View::enter(self.engine(), context, params)
    }
}

/// The protocol era of a request.
pub(super) fn era(context: &RequestContext<RoleServer>) -> &'static str {
    if context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= crate::methods::ERA_2026)
    {
        crate::methods::ERA_2026
    } else {
        crate::methods::ERA_2025
    }
}
