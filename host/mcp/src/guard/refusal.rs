//! The answers the guard gives instead of passing a request on: a JSON refusal saying why
//! and what to do, a malformed JSON-RPC body, a server that drains, a cap on requests in
//! flight reached.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub(super) fn refuse(status: StatusCode, message: &str, fix: &str) -> Response {
    let body = json!({ "error": { "message": message, "fix": fix } }).to_string();
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    r.extensions_mut().insert(Refused);
    r
}

/// A JSON body that is not a JSON-RPC message the server takes: 400 with a JSON-RPC error
/// and no id (the transport spec's answer), -32700 when the body is not JSON at all, -32600
/// when it is JSON but not a request, notification or response.
pub(super) fn malformed(body: &[u8]) -> Response {
    let (code, message) = match serde_json::from_slice::<serde_json::Value>(body) {
        Err(e) => (
            -32700,
            format!(
                "Parse error: the request body is not JSON ({e}); send one JSON-RPC message as a JSON object"
            ),
        ),
        Ok(value) => match value.get("method").and_then(|m| m.as_str()) {
            Some(method) if value.get("jsonrpc").and_then(|v| v.as_str()) == Some("2.0") => (
                -32602,
                format!(
                    "Invalid params: the params (or id) of `{method}` do not have the form the method takes; the MCP schema of `{method}` gives it"
                ),
            ),
            _ => (
                -32600,
                format!(
                    "Invalid Request: the body is JSON but not a JSON-RPC message ({}); send one object with \"jsonrpc\": \"2.0\", a \"method\", an \"id\" for a request, and \"params\" as an object",
                    what_is_wrong(&value)
                ),
            ),
        },
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": code, "message": message },
    })
    .to_string();
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn what_is_wrong(value: &serde_json::Value) -> String {
    let Some(object) = value.as_object() else {
        return match value {
            serde_json::Value::Array(_) => {
                "a batch (JSON array): send one message per request".to_string()
            }
            _ => "not an object".to_string(),
        };
    };
    if object.get("jsonrpc").and_then(|v| v.as_str()) != Some("2.0") {
        return "`jsonrpc` is not \"2.0\"".to_string();
    }
    match object.get("method") {
        Some(_) => "`method` is not a string".to_string(),
        None if object.contains_key("result") || object.contains_key("error") => {
            "a response that answers no request of this server".to_string()
        }
        None => "it has no `method`".to_string(),
    }
}

/// Marks a response the guard gave instead of passing the request on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Refused;

/// The answer to a request for work while the server drains.
pub(super) fn draining() -> Response {
    let mut r = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "the server is stopping: it finishes the calls in flight and takes no new ones",
        "send the request again shortly (Retry-After), to this server once it is back or to another one",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(5u64));
    r
}

/// The 429 of a request past a cap on requests in flight.
pub(super) fn too_many_in_flight(message: &str) -> Response {
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        message,
        "wait for a response before sending more (Retry-After)",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(1u64));
    r
}
