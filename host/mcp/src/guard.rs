//! What stands between the network and the MCP endpoint: Host and Origin allow-lists, bearer
//! tokens (with dataset scopes), a per-caller rate limit, and caps on requests in flight: per
//! caller (`--max-concurrent`) and in all (`--max-in-flight`). Without tokens every local
//! client is the same address, so requests in flight are counted per MCP session there (per
//! address only outside a session): one client's requests cannot take every other local
//! client's slots. Every refusal says why, which cap, and when it frees; secrets never reach
//! a log.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::json;
use sha2::{Digest, Sha256};
use tally_engine::Scope;

pub use crate::view::Caller;

#[derive(Debug)]
struct Token {
    id: String,
    digest: [u8; 32],
    scope: Scope,
}

/// The tokens a server accepts.
#[derive(Debug, Default)]
pub struct Tokens {
    tokens: Vec<Token>,
}

/// A token must be at least this long: shorter ones can be guessed.
const MIN_TOKEN_CHARS: usize = 16;

impl Tokens {
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Reads a token file: one token per line, `<id> <token> [<dataset>,<dataset>…|*]`; `#`
    /// starts a comment. No scope (or `*`) means every dataset.
    pub fn read_file(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let parts: Vec<&str> = line.split_whitespace().collect();
            let (id, secret, scope) = match parts.as_slice() {
                [id, secret] => (*id, *secret, None),
                [id, secret, scope] => (*id, *secret, Some(*scope)),
                _ => {
                    return Err(format!(
                        "{} line {}: expected `<id> <token> [<dataset>,<dataset>…]`, found {} words",
                        path.display(),
                        i + 1,
                        parts.len()
                    ));
                }
            };
            let scope = match scope {
                None | Some("*") => Scope::All,
                Some(list) => Scope::Only(Arc::new(
                    list.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect::<BTreeSet<_>>(),
                )),
            };
            self.add(id, secret, scope)
                .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?;
        }
        Ok(())
    }

    /// Adds one token (all datasets) from an environment variable.
    pub fn read_env(&mut self, var: &str) -> Result<(), String> {
        let secret = std::env::var(var).map_err(|_| {
            format!("--token-env {var}: the environment variable {var} is not set (or not UTF-8)")
        })?;
        self.add(&format!("env:{var}"), secret.trim(), Scope::All)
            .map_err(|e| format!("--token-env {var}: {e}"))
    }

    /// Gives the token `id` what `scope` shows instead of its dataset list; refused for an
    /// unknown id or a token whose line lists datasets (say them in the policy instead).
    pub fn grant(&mut self, id: &str, scope: Scope) -> Result<(), String> {
        let token = self.tokens.iter_mut().find(|t| t.id == id).ok_or_else(|| {
            format!(
                "grants.tokens names `{id}`, which is no token id of --token-file or --token-env"
            )
        })?;
        if token.scope != Scope::All {
            return Err(format!(
                "the token `{id}` lists datasets in the token file and is granted policies too; list its datasets in the policy and leave them out of the token file"
            ));
        }
        token.scope = scope;
        Ok(())
    }

    fn add(&mut self, id: &str, secret: &str, scope: Scope) -> Result<(), String> {
        if id.starts_with("oauth:") || id.starts_with("ip:") {
            return Err(format!(
                "the token id `{id}` starts with `{}`, which names callers who sign in with OAuth or by address; choose another id",
                if id.starts_with("oauth:") {
                    "oauth:"
                } else {
                    "ip:"
                }
            ));
        }
        if secret.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "the token of `{id}` has fewer than {MIN_TOKEN_CHARS} characters; use a long random one (e.g. `openssl rand -hex 32`)"
            ));
        }
        if self.tokens.iter().any(|t| t.id == id) {
            return Err(format!("the token id `{id}` is used twice"));
        }
        self.tokens.push(Token {
            id: id.to_string(),
            digest: Sha256::digest(secret.as_bytes()).into(),
            scope,
        });
        Ok(())
    }

    /// The token matching `presented`, compared in constant time (every token is compared,
    /// over digests of equal length, without early exit).
    fn find(&self, presented: &str) -> Option<&Token> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found: Option<&Token> = None;
        for t in &self.tokens {
            let mut diff = 0u8;
            for (a, b) in t.digest.iter().zip(digest.iter()) {
                diff |= a ^ b;
            }
            if diff == 0 {
                found = Some(t);
            }
        }
        found
    }
}

/// The bearer token of a request, if it presents one. The scheme is case-insensitive
/// (RFC 9110 §11.1): `Bearer`, `bearer`, `BEARER`.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let v = v.trim_start();
            let (scheme, rest) = v.split_at(v.find(char::is_whitespace)?);
            scheme.eq_ignore_ascii_case("bearer").then_some(rest)
        })
        .map(str::trim)
}

/// Who may sign in and what each sees: the static tokens (with the policies granted to them)
/// and the policies granted to OAuth callers. Read again on SIGHUP, swapped whole.
#[derive(Debug, Default)]
pub struct Auth {
    pub tokens: Tokens,
    /// What OAuth callers are granted (`--policy-file`); without it they see every dataset.
    pub policies: Option<Arc<crate::policies::Policies>>,
}

/// The settings of the guard.
#[derive(Debug)]
pub struct Guard {
    auth: std::sync::RwLock<Arc<Auth>>,
    /// Access tokens of an OAuth authorization server, when one is configured.
    pub oauth: Option<Arc<crate::oauth::OAuth>>,
    /// Set when the server was told to stop: requests that ask for work are answered 503
    /// while those in flight finish.
    pub draining: Arc<std::sync::atomic::AtomicBool>,
    /// Responses and bytes sent, for `/metrics`.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// `host` or `host:port` values the Host header may carry.
    pub hosts: Vec<String>,
    /// Origins a browser page may call from.
    pub origins: Vec<String>,
    /// Requests per second each caller may make (a token bucket of `burst`).
    pub rate_per_second: f64,
    pub burst: f64,
    /// Requests one caller may have in flight (one session, without tokens).
    pub concurrent: usize,
    /// Requests of all callers in flight at once.
    pub max_in_flight: usize,
    /// The largest request body, in bytes.
    pub max_body: usize,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
    in_flight: Arc<Mutex<InFlight>>,
    /// Failed authentications a peer address may make per minute (bursts of twice as many).
    pub auth_failures_per_minute: f64,
    failures: Mutex<HashMap<std::net::IpAddr, (f64, Instant)>>,
    /// Which caller created each MCP session: only that caller may use or end it.
    sessions: Mutex<Sessions>,
    /// Live sessions one caller, and all callers together, may hold.
    pub max_sessions_per_caller: usize,
    pub max_sessions: usize,
    /// The transport's sessions, to tell which are live and to close those past the bounds.
    pub live: Option<Arc<LocalSessionManager>>,
}

/// The live MCP sessions and the caller that created each, oldest first. Each session holds
/// memory on the server (its worker, channels and state, some 60 KiB) until its client ends it
/// or it has been idle for five minutes, so their number is bounded per caller and in all:
/// past a bound the oldest session is closed (its client is answered 404 and starts a new
/// one, as MCP says).
#[derive(Debug, Default)]
struct Sessions {
    owner: HashMap<String, String>,
    order: std::collections::VecDeque<String>,
}

/// Requests in flight, by who each is counted against, and in all.
#[derive(Debug, Default)]
struct InFlight {
    by_share: HashMap<String, usize>,
    all: usize,
}

/// A request's place in flight, given back when its response ends (its body, a stream of
/// server-sent events, included).
#[derive(Debug)]
struct Slot {
    in_flight: Arc<Mutex<InFlight>>,
    share: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        in_flight.all = in_flight.all.saturating_sub(1);
        if let Some(n) = in_flight.by_share.get_mut(&self.share) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                in_flight.by_share.remove(&self.share);
            }
        }
    }
}

/// Who a request's slot is counted against, as a refusal names it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Share {
    /// A token (all its sessions together).
    Caller(String),
    /// One MCP session of a server without tokens.
    Session(String),
    /// An address's requests outside a session, on a server without tokens.
    Address(String),
}

impl Share {
    fn key(&self) -> String {
        match self {
            Share::Caller(id) => format!("caller {id}"),
            Share::Session(id) => format!("session {id}"),
            Share::Address(id) => format!("address {id}"),
        }
    }

    fn who(&self) -> String {
        match self {
            Share::Caller(id) => format!("`{id}` already has"),
            Share::Session(_) => "this session already has".to_string(),
            Share::Address(id) => format!("`{id}` already has, outside a session,"),
        }
    }

    fn most(&self) -> &'static str {
        match self {
            Share::Caller(_) => "the most one caller may have",
            Share::Session(_) => "the most one session may have on a server without tokens",
            Share::Address(_) => {
                "the most one address may have outside a session on a server without tokens"
            }
        }
    }
}

/// Requests of all callers in flight at once (`--max-in-flight`).
pub const MAX_IN_FLIGHT: usize = 64;
/// Places past the caps for messages that only answer the server (responses to its
/// questions, notifications), per share: the calls waiting for those answers may hold every
/// place of their share, and of the server.
const ANSWERS_BEYOND: usize = 2;
/// Live sessions one caller may hold (`--max-sessions-per-caller`).
pub const MAX_SESSIONS_PER_CALLER: usize = 128;
/// Live sessions of all callers together (`--max-sessions`).
pub const MAX_SESSIONS: usize = 2_048;

impl Sessions {
    /// Binds a new session to its caller, forgets the sessions no longer `live`, and returns
    /// those past the bounds, oldest first, to be closed.
    fn bind(
        &mut self,
        session: &str,
        caller: &str,
        live: &std::collections::HashSet<String>,
        per_caller: usize,
        total: usize,
    ) -> Vec<String> {
        let owner = &mut self.owner;
        self.order.retain(|id| {
            let keep = id == session || live.contains(id);
            if !keep {
                owner.remove(id);
            }
            keep
        });
        if self
            .owner
            .insert(session.to_string(), caller.to_string())
            .is_none()
        {
            self.order.push_back(session.to_string());
        }
        let mut closed = Vec::new();
        let mut held = self
            .order
            .iter()
            .filter(|id| self.owner.get(*id).is_some_and(|c| c == caller))
            .count();
        while held > per_caller.max(1) {
            let Some(at) = self
                .order
                .iter()
                .position(|id| self.owner.get(id).is_some_and(|c| c == caller))
            else {
                break;
            };
            if let Some(id) = self.order.remove(at) {
                self.owner.remove(&id);
                closed.push(id);
            }
            held -= 1;
        }
        while self.order.len() > total.max(1) {
            if let Some(id) = self.order.pop_front() {
                self.owner.remove(&id);
                closed.push(id);
            }
        }
        closed
    }

    fn forget(&mut self, session: &str) {
        if self.owner.remove(session).is_some() {
            self.order.retain(|id| id != session);
        }
    }
}

impl Guard {
    pub fn new(
        tokens: Tokens,
        hosts: Vec<String>,
        origins: Vec<String>,
        rate_per_second: f64,
        burst: f64,
        concurrent: usize,
        max_body: usize,
    ) -> Guard {
        Guard {
            auth: std::sync::RwLock::new(Arc::new(Auth {
                tokens,
                policies: None,
            })),
            oauth: None,
            draining: Arc::default(),
            metrics: None,
            hosts,
            origins,
            rate_per_second: rate_per_second.max(0.001),
            burst: burst.max(1.0),
            concurrent: concurrent.max(1),
            max_in_flight: MAX_IN_FLIGHT.max(concurrent),
            max_body,
            buckets: Mutex::new(HashMap::new()),
            in_flight: Arc::default(),
            auth_failures_per_minute: 10.0,
            failures: Mutex::new(HashMap::new()),
            sessions: Mutex::new(Sessions::default()),
            max_sessions_per_caller: MAX_SESSIONS_PER_CALLER,
            max_sessions: MAX_SESSIONS,
            live: None,
        }
    }

    /// The tokens and policies now.
    pub fn auth(&self) -> Arc<Auth> {
        Arc::clone(&self.auth.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Swaps in tokens and policies read again (SIGHUP): every request from now on is
    /// checked against them; sessions keep their callers.
    pub fn set_auth(&self, auth: Auth) {
        *self.auth.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(auth);
    }

    /// Requests to `/mcp` being answered now.
    pub fn requests_in_flight(&self) -> usize {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).all
    }

    /// Live MCP sessions this guard has bound to their callers.
    pub fn session_count(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .order
            .len()
    }

    /// Closes every live MCP session: their event streams end (the last event sent whole),
    /// as a drain ends them once the calls in flight have finished.
    pub async fn close_sessions(&self) {
        let Some(manager) = &self.live else {
            return;
        };
        let ids: Vec<_> = manager.sessions.read().await.keys().cloned().collect();
        for id in ids {
            let _ = manager.close_session(&id).await;
        }
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether requests must authenticate (static tokens or OAuth).
    pub fn authenticates(&self) -> bool {
        !self.auth().tokens.is_empty() || self.oauth.is_some()
    }

    /// Whether `peer` may try to authenticate now: `Err(seconds)` while its failures are
    /// over the allowance.
    fn may_try(&self, peer: std::net::IpAddr) -> Result<(), u64> {
        // Every request of the peer is held back then, valid token or not: letting valid
        // ones through would tell a guesser which guess was right.
        let peer = network_of(peer);
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let rate = self.auth_failures_per_minute / 60.0;
        let burst = (self.auth_failures_per_minute * 2.0).max(1.0);
        let now = Instant::now();
        let Some((left, last)) = failures.get_mut(&peer) else {
            return Ok(());
        };
        *left = (*left + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *left >= 1.0 {
            Ok(())
        } else {
            Err(((1.0 - *left) / rate).ceil().max(1.0) as u64)
        }
    }

    /// Counts a failed authentication of `peer`.
    fn failed(&self, peer: std::net::IpAddr) {
        let peer = network_of(peer);
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let burst = (self.auth_failures_per_minute * 2.0).max(1.0);
        // Bounded: past this many addresses the record starts over (a flood from that many
        // addresses is not stopped by per-address limits anyway).
        if failures.len() >= 100_000 {
            failures.clear();
        }
        let (left, last) = failures.entry(peer).or_insert((burst, Instant::now()));
        *left = (*left - 1.0).max(0.0);
        *last = Instant::now();
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let bare = match host.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
            _ => host.as_str(),
        };
        let bare = bare.trim_start_matches('[').trim_end_matches(']');
        self.hosts.iter().any(|allowed| {
            let allowed = allowed.to_ascii_lowercase();
            allowed == host || allowed.trim_start_matches('[').trim_end_matches(']') == bare
        })
    }

    /// Takes one request from the caller's bucket; `Err(seconds)` until the next is allowed.
    fn take(&self, caller: &str) -> Result<(), u64> {
        self.take_at(caller, Instant::now())
    }

    /// [`Guard::take`] at the instant `now` (tests give the clock).
    fn take_at(&self, caller: &str, now: Instant) -> Result<(), u64> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = buckets
            .entry(caller.to_string())
            .or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.rate_per_second)
            .min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *tokens) / self.rate_per_second).ceil().max(1.0) as u64)
        }
    }

    /// Who a request is counted against: its token; without tokens (where every local
    /// client is one address) its session, or its address outside a session.
    fn share(&self, caller: &Caller, session: Option<&str>) -> Share {
        match session {
            _ if self.authenticates() => Share::Caller(caller.id.clone()),
            Some(session) => Share::Session(session.to_string()),
            None => Share::Address(caller.id.clone()),
        }
    }

    /// A place in flight for a request counted against `share`, or the refusal saying which
    /// cap is full and when a place frees.
    fn take_slot(&self, share: &Share) -> Result<Slot, String> {
        self.take_slot_within(share, 0)
    }

    /// [`Guard::take_slot`] with `beyond` more places than the caps: for a message that only
    /// answers the server (a response to its question, a notification such as
    /// `notifications/cancelled`), which must get through when the calls waiting for it hold
    /// every place.
    fn take_slot_within(&self, share: &Share, beyond: usize) -> Result<Slot, String> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let key = share.key();
        let frees = format!(
            "a place frees when one of them is answered (a tool call within its time budget, --call-timeout-ms; a question to the user within {} s)",
            crate::choose::WAIT.as_secs()
        );
        let mine = in_flight.by_share.get(&key).copied().unwrap_or(0);
        if mine >= self.concurrent + beyond {
            return Err(format!(
                "{} {mine} requests in flight, {} ({}, --max-concurrent); {frees}",
                share.who(),
                share.most(),
                self.concurrent
            ));
        }
        // Answers are bounded by their share's places alone: held back by the server's cap,
        // the answers the server itself waits for could never arrive.
        if beyond == 0 && in_flight.all >= self.max_in_flight {
            return Err(format!(
                "the server has {} requests in flight, the most it serves at once ({}, --max-in-flight); {frees}",
                in_flight.all, self.max_in_flight
            ));
        }
        in_flight.all += 1;
        *in_flight.by_share.entry(key.clone()).or_default() += 1;
        Ok(Slot {
            in_flight: Arc::clone(&self.in_flight),
            share: key,
        })
    }
}

/// The address failures are counted against: an IPv6 peer by its /64 network (one host is
/// usually given a whole /64 and could rotate through it).
fn network_of(peer: std::net::IpAddr) -> std::net::IpAddr {
    match peer {
        std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            std::net::IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        other => other,
    }
}

fn refuse(status: StatusCode, message: &str, fix: &str) -> Response {
    let body = json!({ "error": { "message": message, "fix": fix } }).to_string();
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    r.extensions_mut().insert(Refused);
    r
}

/// A JSON body that is not a JSON-RPC message the server takes: 400 with a JSON-RPC error
/// and no id (the transport spec's answer), -32700 when the body is not JSON at all, -32600
/// when it is JSON but not a request, notification or response.
pub fn malformed(body: &[u8]) -> Response {
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
struct Refused;

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

/// The answer to a request for work while the server drains.
fn draining() -> Response {
    let mut r = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        "the server is stopping: it finishes the calls in flight and takes no new ones",
        "send the request again shortly (Retry-After), to this server once it is back or to another one",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(5u64));
    r
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

/// The caller `/health` answers: whoever the token names, without counting failures.
async fn health_caller(guard: &Guard, peer: SocketAddr, headers: &axum::http::HeaderMap) -> Caller {
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

/// The caller of an `/mcp` request: its token's (a static one, or an OAuth access token),
/// or its address's when the server takes no tokens; a refusal when the peer has failed too
/// often or the token does not check out.
async fn authenticate(
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

/// Refuses a request on a session that another caller created (or that this guard does not
/// know).
fn refuse_session(guard: &Guard, session: Option<&str>, caller: &Caller) -> Option<Response> {
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

/// Refuses resuming a session's notification stream that is not the caller's own.
fn refuse_stream(
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
async fn pass_stream(
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

/// The 429 of a request past a cap on requests in flight.
fn too_many_in_flight(message: &str) -> Response {
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        message,
        "wait for a response before sending more (Retry-After)",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(1u64));
    r
}

/// Whether a body is a JSON-RPC request (a method and an id: it asks for work), as opposed
/// to a response or a notification; anything else is taken as a request.
fn asks(body: &[u8]) -> bool {
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

/// Binds a session just created to its caller and closes the oldest sessions past the
/// bounds on live sessions.
async fn bind_session(guard: &Guard, created: &str, owner: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_found_by_digest_and_checked() {
        let mut t = Tokens::default();
        t.add("a", "0123456789abcdef", Scope::All).expect("ok");
        assert!(
            t.add("b", "short", Scope::All)
                .unwrap_err()
                .contains("fewer than 16")
        );
        assert!(
            t.add("a", "0123456789abcdefX", Scope::All)
                .unwrap_err()
                .contains("twice")
        );
        assert_eq!(t.find("0123456789abcdef").map(|t| t.id.as_str()), Some("a"));
        assert!(t.find("0123456789abcdeF").is_none());
    }

    #[test]
    fn hosts_match_with_or_without_port() {
        let g = Guard::new(
            Tokens::default(),
            vec![
                "127.0.0.1".into(),
                "example.org:8443".into(),
                "[::1]".into(),
            ],
            vec![],
            1.0,
            1.0,
            1,
            1024,
        );
        assert!(g.host_allowed("127.0.0.1:8765"));
        assert!(g.host_allowed("EXAMPLE.org:8443"));
        assert!(g.host_allowed("[::1]:80"));
        assert!(!g.host_allowed("evil.example:8765"));
        assert!(!g.host_allowed(""));
    }

    #[test]
    fn the_bucket_refills() {
        use std::time::Duration;
        // A burst of 2 at 1,000 a second, on a clock the test gives.
        let g = Guard::new(Tokens::default(), vec![], vec![], 1000.0, 2.0, 1, 1024);
        let t0 = Instant::now();
        assert_eq!(g.take_at("x", t0), Ok(()));
        assert_eq!(g.take_at("x", t0), Ok(()));
        assert_eq!(g.take_at("x", t0), Err(1), "the burst is spent");
        assert_eq!(
            g.take_at("x", t0 + Duration::from_micros(500)),
            Err(1),
            "half a token is not one"
        );
        assert_eq!(
            g.take_at("x", t0 + Duration::from_millis(1)),
            Ok(()),
            "refilled"
        );
        // Never more than the burst, however long the caller was away.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(g.take_at("x", later), Ok(()));
        assert_eq!(g.take_at("x", later), Ok(()));
        assert_eq!(g.take_at("x", later), Err(1), "the burst caps the refill");
        let slow = Guard::new(Tokens::default(), vec![], vec![], 0.5, 1.0, 1, 1024);
        assert_eq!(slow.take_at("y", t0), Ok(()));
        assert_eq!(slow.take_at("y", t0), Err(2), "Retry-After rounds up");
        assert_eq!(
            slow.take_at("z", t0),
            Ok(()),
            "callers have their own buckets"
        );
    }

    /// Regression (issue 54, "first come holds the slots"): without tokens every local HTTP
    /// client was one caller, so all of them shared 8 requests in flight. Each session now has
    /// its own share, within a server-wide cap; with tokens, a token's sessions share one.
    #[test]
    fn requests_in_flight_are_counted_per_share_and_in_all() {
        let mut open = Guard::new(Tokens::default(), vec![], vec![], 1.0, 1.0, 2, 1024);
        open.max_in_flight = 5;
        let local = Caller {
            id: "ip:127.0.0.1".into(),
            scope: Scope::All,
        };
        let one = open.share(&local, Some("s1"));
        let two = open.share(&local, Some("s2"));
        assert_eq!(one, Share::Session("s1".into()));
        let held: Vec<Slot> = (0..2).map(|_| open.take_slot(&one).unwrap()).collect();
        let refused = open.take_slot(&one).unwrap_err();
        assert!(
            refused.contains("this session already has 2 requests in flight")
                && refused.contains("--max-concurrent")
                && refused.contains("a place frees when one of them is answered"),
            "{refused}"
        );
        // Another local session is not held back by the first.
        let mut more: Vec<Slot> = (0..2).map(|_| open.take_slot(&two).unwrap()).collect();
        let outside = open.share(&local, None);
        more.push(open.take_slot(&outside).unwrap());
        let full = open.take_slot(&open.share(&local, Some("s3"))).unwrap_err();
        assert!(
            full.contains("the server has 5 requests in flight")
                && full.contains("--max-in-flight"),
            "{full}"
        );
        // Past the caps, a message that only answers the server still has a place or two.
        let answers: Vec<Slot> = (0..ANSWERS_BEYOND)
            .map(|_| open.take_slot_within(&one, ANSWERS_BEYOND).unwrap())
            .collect();
        assert!(open.take_slot_within(&one, ANSWERS_BEYOND).is_err());
        drop(answers);
        assert!(asks(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#));
        assert!(asks(b"[]") && asks(b"not json"));
        assert!(!asks(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        assert!(!asks(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#
        ));
        // A response that ends gives its place back.
        drop(held);
        open.take_slot(&one).expect("room again");
        drop(more);
        assert!(open.in_flight.lock().unwrap().by_share.len() <= 1);

        // With tokens a token's sessions share its slots.
        let mut tokens = Tokens::default();
        tokens.add("a", "0123456789abcdef", Scope::All).unwrap();
        let secured = Guard::new(tokens, vec![], vec![], 1.0, 1.0, 1, 1024);
        let a = Caller {
            id: "a".into(),
            scope: Scope::All,
        };
        let _first = secured.take_slot(&secured.share(&a, Some("s1"))).unwrap();
        let refused = secured
            .take_slot(&secured.share(&a, Some("s2")))
            .unwrap_err();
        assert!(
            refused.contains("`a` already has 1 requests in flight, the most one caller may have"),
            "{refused}"
        );
    }
}
