//! Who a request speaks for: its static token's caller, an OAuth access token's (with what
//! the policies grant it), or its address's on a server without tokens; a refusal with the
//! bearer challenge when it does not check out, and failures counted by address.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use tally_engine::Scope;

use super::refusal::refuse;
use super::state::Guard;
use super::tokens::bearer;
use crate::view::Caller;

/// The caller `/health` answers: whoever the token names, without counting failures.
pub(super) async fn health_caller(
    guard: &Guard,
    peer: SocketAddr,
    headers: &axum::http::HeaderMap,
) -> Caller {
    // Open to anyone, but what it tells is the caller's view: counts of datasets only to
    // a caller that may see them all (no tokens on a loopback server, or a token without
    // a scope). A token that does not check out is answered as none: nothing but the
    // status (and no failure counted, since nothing is learned from it).
    if !guard.authenticates() {
        return Caller {
            id: format!("ip:{}", peer.ip()),
            scope: Scope::All,
        };
    }
    let anonymous = || Caller {
        id: "anonymous".into(),
        scope: Scope::Only(Arc::default()),
    };
    let Some(presented) = bearer(headers) else {
        return anonymous();
    };
    if let Some(token) = guard.auth().tokens.find(presented) {
        return Caller {
            id: token.id.clone(),
            scope: token.scope.clone(),
        };
    }
    match &guard.oauth {
        Some(oauth) => match oauth.check_locally(presented).await {
            Ok(principal) => oauth_caller(guard, &principal),
            Err(_) => anonymous(),
        },
        None => anonymous(),
    }
}

/// The caller an OAuth access token speaks for, with what the policies grant it (every
/// dataset without a policy file).
fn oauth_caller(guard: &Guard, principal: &crate::oauth::Principal) -> Caller {
    Caller {
        id: format!("oauth:{}", principal.subject),
        scope: guard
            .auth()
            .policies
            .as_ref()
            .map_or(Scope::All, |p| p.scope_of_principal(principal)),
    }
}

/// The caller of an `/mcp` request: its token's (a static one, or an OAuth access token),
/// or its address's when the server takes no tokens; a refusal when the peer has failed too
/// often or the token does not check out.
pub(super) async fn authenticate(
    guard: &Guard,
    peer: SocketAddr,
    uri: &axum::http::Uri,
    headers: &axum::http::HeaderMap,
) -> Result<Caller, Response> {
    if !guard.authenticates() {
        return Ok(Caller {
            id: format!("ip:{}", peer.ip()),
            scope: Scope::All,
        });
    }
    // RFC 6750 §2.3 allows a token in the query; OAuth 2.1 and MCP forbid it (URLs end up in
    // logs and histories). Refused whether or not the token is good.
    if token_in_query(uri) {
        return Err(challenge(
            guard,
            StatusCode::BAD_REQUEST,
            Some((
                "invalid_request",
                "access tokens are not accepted in the query string",
            )),
            "the request carries an access token in its URL (`access_token=`), which this server never accepts",
            "send the token in the Authorization header: `Authorization: Bearer <token>`, and revoke the one sent in the URL",
        ));
    }
    if let Err(seconds) = guard.may_try(peer.ip()) {
        let mut r = refuse(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "too many failed authentications from {}: at most {} a minute",
                peer.ip(),
                guard.auth_failures_per_minute
            ),
            &format!("wait {seconds} s (Retry-After) and send a valid bearer token"),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        return Err(r);
    }
    let Some(presented) = bearer(headers) else {
        // With OAuth, a request without a token is how a client finds where to sign in (the
        // challenge names the metadata): it guesses nothing, and is not counted as a failure.
        if guard.oauth.is_none() {
            guard.failed(peer.ip());
        }
        return Err(challenge(
            guard,
            StatusCode::UNAUTHORIZED,
            None,
            "this server needs a bearer token",
            &sign_in_hint(guard),
        ));
    };
    if let Some(token) = guard.auth().tokens.find(presented) {
        return Ok(Caller {
            id: token.id.clone(),
            scope: token.scope.clone(),
        });
    }
    let Some(oauth) = &guard.oauth else {
        guard.failed(peer.ip());
        return Err(challenge(
            guard,
            StatusCode::UNAUTHORIZED,
            Some(("invalid_token", "the bearer token is not valid")),
            "the bearer token is not valid",
            &sign_in_hint(guard),
        ));
    };
    match oauth.check(presented).await {
        Ok(principal) => Ok(oauth_caller(guard, &principal)),
        Err(crate::oauth::Rejection::Invalid(why)) => {
            guard.failed(peer.ip());
            tracing::info!(
                peer = %peer.ip(),
                "an access token was refused: {}",
                tally_engine::storage::escape_controls(&why, tally_engine::storage::Lines::Escaped)
            );
            Err(challenge(
                guard,
                StatusCode::UNAUTHORIZED,
                Some(("invalid_token", &why)),
                &format!("the access token is not valid: {why}"),
                &sign_in_hint(guard),
            ))
        }
        Err(crate::oauth::Rejection::Scope(missing)) => Err(challenge(
            guard,
            StatusCode::FORBIDDEN,
            Some((
                "insufficient_scope",
                "the access token lacks a scope this server requires",
            )),
            &format!(
                "the access token lacks the scope{} {} this server requires",
                if missing.len() == 1 { "" } else { "s" },
                missing
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            &format!(
                "sign in again asking for scope=\"{}\" (the client reads it from WWW-Authenticate)",
                oauth.scopes().join(" ")
            ),
        )),
        Err(crate::oauth::Rejection::Unavailable(why, retry)) => {
            // What failed at the issuer is for the operator, not for whoever asks.
            tracing::warn!(
                "an access token could not be checked: {}",
                tally_engine::storage::escape_controls(&why, tally_engine::storage::Lines::Escaped)
            );
            let mut r = refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "access tokens cannot be checked now: the authorization server's keys (or its introspection endpoint) cannot be reached",
                &format!(
                    "try again in {retry} s (Retry-After); the server's operator can see why in its log"
                ),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry));
            Err(r)
        }
    }
}

/// Whether a request's URL carries `access_token=` in its query.
fn token_in_query(uri: &axum::http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&').any(|pair| {
            let name = pair.split('=').next().unwrap_or("");
            percent_encoding::percent_decode_str(name)
                .decode_utf8_lossy()
                .eq_ignore_ascii_case("access_token")
        })
    })
}

/// What a client refused at the door should do.
fn sign_in_hint(guard: &Guard) -> String {
    match &guard.oauth {
        Some(oauth) => format!(
            "sign in with the authorization server {} (its protected resource metadata is at {}), or send `Authorization: Bearer <token>` with a token the server was given",
            oauth.issuer(),
            oauth.metadata_url()
        ),
        None => "send `Authorization: Bearer <token>` with a token the server was given (--token-file or --token-env)".to_string(),
    }
}

/// A refusal with the bearer challenge (RFC 6750 §3, RFC 9728 §5.1): the resource metadata's
/// address and the scopes needed when OAuth is configured, the error (and its description)
/// when a token was presented.
fn challenge(
    guard: &Guard,
    status: StatusCode,
    error: Option<(&str, &str)>,
    message: &str,
    fix: &str,
) -> Response {
    let mut r = refuse(status, message, fix);
    let quoted = |s: &str| {
        s.replace(['"', '\\'], "'")
            .replace(|c: char| c.is_control(), " ")
    };
    let mut params = vec!["realm=\"tally\"".to_string()];
    if let Some(oauth) = &guard.oauth {
        params.push(format!(
            "resource_metadata=\"{}\"",
            quoted(&oauth.metadata_url())
        ));
        params.push(format!("scope=\"{}\"", quoted(&oauth.scopes().join(" "))));
    }
    if let Some((code, description)) = error {
        params.push(format!("error=\"{code}\""));
        params.push(format!("error_description=\"{}\"", quoted(description)));
    }
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {}", params.join(", "))) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}
