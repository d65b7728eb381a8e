//! The guard itself: its settings, and what it counts between requests: each caller's rate
//! bucket, failed authentications by address, requests in flight by share and in all, and
//! which caller owns each live session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::tokens::{Auth, Tokens};
use crate::view::Caller;

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
    pub(super) in_flight: Arc<Mutex<InFlight>>,
    /// Failed authentications a peer address may make per minute (bursts of twice as many).
    pub auth_failures_per_minute: f64,
    failures: Mutex<HashMap<std::net::IpAddr, (f64, Instant)>>,
    /// Which caller created each MCP session: only that caller may use or end it.
    pub(super) sessions: Mutex<Sessions>,
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
pub(super) struct Sessions {
    pub(super) owner: HashMap<String, String>,
    order: std::collections::VecDeque<String>,
}

/// Requests in flight, by who each is counted against, and in all.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    pub(super) by_share: HashMap<String, usize>,
    all: usize,
}

/// A request's place in flight, given back when its response ends (its body, a stream of
/// server-sent events, included).
#[derive(Debug)]
pub(super) struct Slot {
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
pub(super) enum Share {
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
pub(super) const ANSWERS_BEYOND: usize = 2;
/// Live sessions one caller may hold (`--max-sessions-per-caller`).
pub const MAX_SESSIONS_PER_CALLER: usize = 128;
/// Live sessions of all callers together (`--max-sessions`).
pub const MAX_SESSIONS: usize = 2_048;

impl Sessions {
    /// Binds a new session to its caller, forgets the sessions no longer `live`, and returns
    /// those past the bounds, oldest first, to be closed.
    pub(super) fn bind(
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

    pub(super) fn forget(&mut self, session: &str) {
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
    pub(super) fn may_try(&self, peer: std::net::IpAddr) -> Result<(), u64> {
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
    pub(super) fn failed(&self, peer: std::net::IpAddr) {
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

    pub(super) fn host_allowed(&self, host: &str) -> bool {
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
    pub(super) fn take(&self, caller: &str) -> Result<(), u64> {
        self.take_at(caller, Instant::now())
    }

    /// [`Guard::take`] at the instant `now` (tests give the clock).
    pub(super) fn take_at(&self, caller: &str, now: Instant) -> Result<(), u64> {
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
    pub(super) fn share(&self, caller: &Caller, session: Option<&str>) -> Share {
        match session {
            _ if self.authenticates() => Share::Caller(caller.id.clone()),
            Some(session) => Share::Session(session.to_string()),
            None => Share::Address(caller.id.clone()),
        }
    }

    /// A place in flight for a request counted against `share`, or the refusal saying which
    /// cap is full and when a place frees.
    pub(super) fn take_slot(&self, share: &Share) -> Result<Slot, String> {
        self.take_slot_within(share, 0)
    }

    /// [`Guard::take_slot`] with `beyond` more places than the caps: for a message that only
    /// answers the server (a response to its question, a notification such as
    /// `notifications/cancelled`), which must get through when the calls waiting for it hold
    /// every place.
    pub(super) fn take_slot_within(&self, share: &Share, beyond: usize) -> Result<Slot, String> {
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
