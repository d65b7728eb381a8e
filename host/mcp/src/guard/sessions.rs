//! A session belongs to the caller that created it: a request on another's session, or a
//! resumed stream of another's, is answered as unknown; a session ended is forgotten, and
//! one created is bound to its caller, closing the oldest past the bounds.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use rmcp::transport::streamable_http_server::session::SessionManager;

use super::refusal::refuse;
use super::state::Guard;
use crate::view::Caller;

/// Refuses a request on a session that another caller created (or that this guard does not
/// know).
pub(super) fn refuse_session(
    guard: &Guard,
    session: Option<&str>,
    caller: &Caller,
) -> Option<Response> {
    let id = session?;
    let sessions = guard.sessions.lock().unwrap_or_else(|p| p.into_inner());
    // Fails closed: a session this guard did not see created (or has forgotten) belongs
    // to nobody here; the client starts a new one, as MCP says it must on a 404.
    if sessions.owner.get(id) != Some(&caller.id) {
        return Some(refuse(
            StatusCode::NOT_FOUND,
            "no such session for this caller",
            "start a session of your own (initialize) with your own token",
        ));
    }
    None
}

/// Refuses resuming a session's notification stream that is not the caller's own.
pub(super) fn refuse_stream(
    guard: &Guard,
    headers: &axum::http::HeaderMap,
    caller: &Caller,
) -> Option<Response> {
    // A session's notification stream (`<session id>:common`) is resumed only by the
    // session's owner; a request's stream has a random id sent only to its caller.
    if let Some(stream) = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|id| id.rsplit_once('/'))
        .map(|(stream, _)| stream)
        && let Some(owner_session) = stream.strip_suffix(":common")
    {
        let sessions = guard.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.owner.get(owner_session) != Some(&caller.id) {
            return Some(refuse(
                StatusCode::NOT_FOUND,
                "no such stream for this caller",
                "resume only the streams of your own session (Last-Event-ID as this server sent it to you)",
            ));
        }
    }
    None
}

/// Passes on a request that is not a call (a GET stream, a DELETE of a session), which takes
/// no slot; a session ended is forgotten.
pub(super) async fn pass_stream(
    guard: &Guard,
    mut request: Request<Body>,
    next: Next,
    caller: Caller,
    session: Option<&str>,
) -> Response {
    let deleting = request.method() == axum::http::Method::DELETE;
    request.extensions_mut().insert(caller);
    let mut response = next.run(request).await;
    // A session ended is answered 204 No Content: clients (the Python SDK among them)
    // take the 202 the transport library sends for a failure to end it.
    if deleting && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        if let Some(id) = session {
            guard
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .forget(id);
        }
    }
    response
}

/// Binds a session just created to its caller and closes the oldest sessions past the
/// bounds on live sessions.
pub(super) async fn bind_session(guard: &Guard, created: &str, owner: &str) {
    let live: std::collections::HashSet<String> = match &guard.live {
        Some(manager) => manager
            .sessions
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect(),
        None => std::collections::HashSet::new(),
    };
    let closed = guard
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .bind(
            created,
            owner,
            &live,
            guard.max_sessions_per_caller,
            guard.max_sessions,
        );
    if let (Some(manager), false) = (&guard.live, closed.is_empty()) {
        tracing::info!(
            sessions = closed.len(),
            caller = %owner,
            "closed the oldest MCP sessions past the bound on live sessions"
        );
        let manager = Arc::clone(manager);
        tokio::spawn(async move {
            for id in closed {
                let id: rmcp::transport::streamable_http_server::session::SessionId = id.into();
                let _ = manager.close_session(&id).await;
            }
        });
    }
}
