//! What a checked token yields: the principal it speaks for (its subject, scopes and
//! claims), or why it is refused, as the challenge says it.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// Who a valid access token speaks for.
#[derive(Debug, Clone)]
pub struct Principal {
    pub subject: String,
    pub scopes: BTreeSet<String>,
    /// Every claim of the token (or of the introspection answer), for policies.
    pub claims: Map<String, Value>,
}

/// Why a token is not accepted, as the challenge says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// 401 `invalid_token`: what was wrong with it.
    Invalid(String),
    /// 403 `insufficient_scope`: the scopes it lacks.
    Scope(Vec<String>),
    /// 503: the issuer's keys (or its introspection endpoint) cannot be reached now: why (for
    /// the operator's log, not the caller), and in how many seconds to try again.
    Unavailable(String, u64),
}

/// Whether a scope a token holds is the one required: the same, or the required one's last
/// part when it is written as a URI (Microsoft Entra ID asks clients for
/// `api://tally/tally` and puts `tally` in the token's `scp`).
pub(super) fn scope_satisfies(held: &str, required: &str) -> bool {
    held == required
        || (required.contains("://")
            && required
                .strip_suffix(held)
                .is_some_and(|head| head.ends_with('/')))
}

/// The principal of claims that checked out: `sub` is required; scopes from `scope` (space
/// separated) or `scp` (a list or a string).
pub(super) fn principal(claims: Map<String, Value>) -> Result<Principal, Rejection> {
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Rejection::Invalid("the token names no subject (`sub`)".into()))?
        .to_string();
    let mut scopes = BTreeSet::new();
    for claim in ["scope", "scp"] {
        match claims.get(claim) {
            Some(Value::String(s)) => scopes.extend(s.split_whitespace().map(str::to_string)),
            Some(Value::Array(list)) => {
                scopes.extend(list.iter().filter_map(Value::as_str).map(str::to_string));
            }
            _ => {}
        }
    }
    Ok(Principal {
        subject,
        scopes,
        claims,
    })
}
