//! The middleware in front of the server: a request's checks in their order (target, Host and
//! origin, declared size, authentication, session, rate, resumed stream, a slot in flight,
//! the body's size), and the responses counted for `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::authenticate::{authenticate, health_caller};
use super::refusal::{Refused, draining, malformed, refuse, too_many_in_flight};
use super::sessions::{bind_session, pass_stream, refuse_session, refuse_stream};
use super::state::{ANSWERS_BEYOND, Guard};
use crate::view::Caller;

/// The middleware in front of `/mcp` (and the Host check in front of everything).
///
/// A request refused before its body was read leaves that body unread on the connection, and
/// the connection cannot carry another request: the refusal says `Connection: close`, so a
/// client that keeps connections open (as the MCP SDKs' sign-in does after its first 401)
/// opens a new one instead of sending its next request into a closing one.
pub async fn check(
    State(guard): State<Arc<Guard>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let has_body = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.trim() != "0")
        && (request.headers().contains_key(header::CONTENT_LENGTH)
            || request.headers().contains_key(header::TRANSFER_ENCODING));
    let path = request.uri().path().to_string();
    let metrics = guard.metrics.clone();
    let mut response = admit(guard, peer, request, next).await;
    if has_body && response.extensions().get::<Refused>().is_some() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    match metrics {
        Some(metrics) => counted(&metrics, &path, response),
        None => response,
    }
}

/// A response counted for `/metrics`: its status, and its body's bytes as they are sent.
fn counted(metrics: &Arc<crate::metrics::Metrics>, path: &str, response: Response) -> Response {
    use axum::body::HttpBody;
    metrics.response(path, response.status().as_u16());
    if let Some(size) = response.body().size_hint().exact() {
        metrics.sent(size as usize);
        return response;
    }
    let metrics = Arc::clone(metrics);
    let (parts, body) = response.into_parts();
    let body = Body::from_stream(futures::StreamExt::map(
        body.into_data_stream(),
        move |chunk| {
            if let Ok(bytes) = &chunk {
                metrics.sent(bytes.len());
            }
            chunk
        },
    ));
    Response::from_parts(parts, body)
}

/// Whether a request only asks after a task (`tasks/get`, `tasks/result`, `tasks/list`): it
/// starts no work, and a client polling for a task's answer still gets it while the server
/// drains.
fn polls_a_task(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(str::to_string))
        .is_some_and(|m| matches!(m.as_str(), "tasks/get" | "tasks/result" | "tasks/list"))
}

async fn admit(
    guard: Arc<Guard>,
    peer: SocketAddr,
    mut request: Request<Body>,
    next: Next,
) -> Response {
    // The order of the checks is part of what the guard promises: the target and Host, the
    // origin, then (on `/mcp`) the declared size, authentication, the session's owner, the
    // rate, the resumed stream's owner, the slots and the body's size.
    if let Some(refusal) = refuse_target(&guard, &request) {
        return refusal;
    }
    if request.uri().path() == "/health" {
        let caller = health_caller(&guard, peer, request.headers()).await;
        request.extensions_mut().insert(caller);
        return next.run(request).await;
    }
    if request.uri().path() != "/mcp" {
        return next.run(request).await;
    }
    if let Some(refusal) = refuse_declared_size(&guard, request.headers()) {
        return refusal;
    }
    let caller = match authenticate(&guard, peer, request.uri(), request.headers()).await {
        Ok(caller) => caller,
        Err(refusal) => return refusal,
    };
    // A session belongs to the caller that created it: another token cannot read its
    // notifications, send on it, or end it. Unknown to this caller is answered as unknown.
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(refusal) = refuse_session(&guard, session.as_deref(), &caller) {
        return refusal;
    }
    if let Some(refusal) = refuse_rate(&guard, &caller) {
        return refusal;
    }
    if let Some(refusal) = refuse_stream(&guard, request.headers(), &caller) {
        return refusal;
    }
    // A GET is a long-lived stream of server notifications, not a call: only requests
    // (POST) take a slot.
    if request.method() != axum::http::Method::POST {
        if guard.is_draining() && request.method() == axum::http::Method::GET {
            return draining();
        }
        return pass_stream(&guard, request, next, caller, session.as_deref()).await;
    }
    let owner = caller.id.clone();
    let share = guard.share(&caller, session.as_deref());
    // When every place is held, a message that only answers the server (the answer the calls
    // holding the places wait for, a cancellation) still gets through; a request does not.
    let (permit, answers_only) = match guard.take_slot(&share) {
        Ok(slot) => (slot, None),
        Err(message) => match guard.take_slot_within(&share, ANSWERS_BEYOND) {
            Ok(slot) => (slot, Some(message)),
            Err(message) => return too_many_in_flight(&message),
        },
    };
    request.extensions_mut().insert(caller);
    let response = match pass_request(&guard, request, next, answers_only).await {
        Ok(response) => response,
        Err(answer) => return answer,
    };
    if session.is_none()
        && let Some(created) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        bind_session(&guard, created, &owner).await;
    }
    // A response may stream (server-sent events) long after its headers: the slot is held
    // until the body is done.
    let (parts, body) = response.into_parts();
    let body = Body::from_stream(futures::StreamExt::map(
        body.into_data_stream(),
        move |chunk| {
            let _held = &permit;
            chunk
        },
    ));
    Response::from_parts(parts, body)
}

/// Refuses a request whose target or Host header the server does not answer, or whose web
/// origin is not allowed.
fn refuse_target(guard: &Guard, request: &Request<Body>) -> Option<Response> {
    // An absolute-form target (`POST http://other/mcp`) is for proxies; a server that took
    // its host from there and its Host header from elsewhere could be confused about which
    // name was asked for.
    if request.uri().scheme().is_some() || request.uri().authority().is_some() {
        return Some(refuse(
            StatusCode::BAD_REQUEST,
            "the request target is in absolute form (a URL with a scheme and host)",
            "send the path only (`POST /mcp`) with the host in the Host header",
        ));
    }
    let headers = request.headers();
    if headers.get_all(header::HOST).iter().count() > 1 {
        return Some(refuse(
            StatusCode::BAD_REQUEST,
            "the request has more than one Host header",
            "send exactly one Host header",
        ));
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !guard.host_allowed(host) {
        return Some(refuse(
            StatusCode::FORBIDDEN,
            &format!("the Host `{host}` is not one this server answers to"),
            "call the server by an allowed name (--allow-host adds one)",
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !guard.origins.iter().any(|o| o == origin) {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                &format!("requests from the web origin `{origin}` are not allowed"),
                "a page may call this server only from an allowed origin (--allow-origin adds one)",
            ));
        }
    }
    None
}

/// Refuses a request whose declared Content-Length is over the limit, before reading it.
fn refuse_declared_size(guard: &Guard, headers: &axum::http::HeaderMap) -> Option<Response> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > guard.max_body) {
        return Some(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request body is larger than {} bytes", guard.max_body),
            "send a smaller request (tool arguments are small; --max-body-bytes sets the limit)",
        ));
    }
    None
}

/// Takes one request from the caller's rate bucket; a 429 with Retry-After when it is empty.
fn refuse_rate(guard: &Guard, caller: &Caller) -> Option<Response> {
    let Err(seconds) = guard.take(&caller.id) else {
        return None;
    };
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        &format!(
            "too many requests from `{}`: at most {} per second (bursts of {})",
            caller.id, guard.rate_per_second, guard.burst
        ),
        &format!("wait {seconds} s (Retry-After) and send fewer requests"),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    Some(r)
}

/// Whether a body is a JSON-RPC request (a method and an id: it asks for work), as opposed
/// to a response or a notification; anything else is taken as a request.
pub(super) fn asks(body: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(message)) => {
            message.contains_key("method") && message.contains_key("id")
        }
        _ => true,
    }
}

/// Reads the (bounded) body of a call and passes the call on; `Err` is the answer to send
/// as it is: a body too large, one the transport could not read as a JSON-RPC message, or a
/// request when only answers have a place (`answers_only` says which cap is full).
async fn pass_request(
    guard: &Guard,
    request: Request<Body>,
    next: Next,
    answers_only: Option<String>,
) -> Result<Response, Response> {
    // The body is kept (it is small and bounded) so that a body the transport cannot read
    // as a JSON-RPC message is answered as the transport spec says: 400 with a JSON-RPC
    // error without id, not the transport library's 415 with plain text.
    let (parts, body) = request.into_parts();
    let json_body = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
    let bytes = match axum::body::to_bytes(body, guard.max_body).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return Err(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the request body is larger than {} bytes, or could not be read",
                    guard.max_body
                ),
                "send a smaller request (tool arguments are small; --max-body-bytes sets the limit)",
            ));
        }
    };
    if let Some(full) = answers_only
        && asks(&bytes)
    {
        return Err(too_many_in_flight(&full));
    }
    // While draining, what answers the server (a cancellation, a reply to its question)
    // still reaches the calls in flight; a new request does not start.
    if guard.is_draining() && asks(&bytes) && !polls_a_task(&bytes) {
        return Err(draining());
    }
    let request = Request::from_parts(parts, Body::from(bytes.clone()));
    let response = next.run(request).await;
    if json_body && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return Err(malformed(&bytes));
    }
    Ok(response)
}
