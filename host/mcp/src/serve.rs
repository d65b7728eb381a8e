//! `tally serve`: MCP over stdio (default) or streamable HTTP (`--http ADDR`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::routing::get;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tally_engine::Engine;

use crate::mcp::{Shared, TallyServer};

pub use crate::oauth::OAuthOptions;

/// Why serving could not start or stopped; the binary says it and turns it into its exit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServeError {
    /// The setup cannot be used: the tokens, the policies, the address, the authorization
    /// server, the metrics token. Nothing was served.
    #[error("{0}")]
    Setup(String),
    /// Serving failed while it ran.
    #[error("{0}")]
    Failed(String),
}

/// The process's exit status when a second signal arrives while calls drain (it ends at
/// once); the binary's code for "a failure while working".
pub const EXIT_ON_SECOND_SIGNAL: i32 = 3;

/// How long a stdio server whose client has gone waits for preparations into the cache.
const EXIT_GRACE: Duration = Duration::from_secs(60);

/// Serves MCP over stdin/stdout until the client closes it. stdout carries protocol messages
/// only; logs go to stderr. `protocol` is the stdout to write to when the process's own was
/// redirected (where native plugins' writes are captured).
pub async fn stdio(
    engine: Arc<Engine>,
    audit: Option<crate::audit::Audit>,
    protocol: Option<std::fs::File>,
) -> Result<(), ServeError> {
    let served = match protocol {
        Some(out) => {
            over(
                Arc::clone(&engine),
                audit,
                tokio::io::stdin(),
                tokio::fs::File::from_std(out),
            )
            .await
        }
        None => {
            over(
                Arc::clone(&engine),
                audit,
                tokio::io::stdin(),
                tokio::io::stdout(),
            )
            .await
        }
    };
    // A client that asks a question or two and goes must not leave a preparation into the
    // cache half done (the next start would prepare again): it is given a while to finish,
    // unless the process is told to stop.
    tokio::select! {
        _ = engine.finish_preparations(EXIT_GRACE) => {},
        _ = shutdown_signal() => {},
    }
    served
}

/// Serves one MCP session over a byte stream of newline-delimited JSON-RPC messages (the
/// stdio transport's framing) until the client closes its end: what [`stdio`] serves over the
/// process's stdin and stdout, and what a host or a test serves over a pipe, a socket or an
/// in-memory duplex. The caller is the stream's owner, who sees every dataset (as a stdio
/// client does). Returns once the last answer is written (waiting at most 5 s for it); a host
/// that ends its process then lets preparations into the cache finish first
/// (`Engine::finish_preparations`), as [`stdio`] does.
pub async fn over<R, W>(
    engine: Arc<Engine>,
    audit: Option<crate::audit::Audit>,
    input: R,
    output: W,
) -> Result<(), ServeError>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let server = TallyServer::new(Shared::with_audit(engine, audit));
    let (transport, writer) = crate::stdio::framed(input, output);
    let running = match server.serve(transport).await {
        Ok(r) => r,
        Err(e) => {
            return Err(ServeError::Failed(format!(
                "the MCP session could not start: {e}"
            )));
        }
    };
    let served = match running.waiting().await {
        Ok(reason) => {
            tracing::info!(?reason, "stdio session ended");
            Ok(())
        }
        Err(e) => Err(ServeError::Failed(format!("the MCP session failed: {e}"))),
    };
    // The last answers are written before the session ends.
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    served
}

/// Origins a browser page may call from: the server's own address, by default.
fn default_origins(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    vec![
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
    ]
}

/// `http://host:port` for a name the Host header may carry (`name`, `name:port`, an IPv6
/// address with or without brackets).
fn own_origin(host: &str, port: u16) -> String {
    if host.starts_with('[') {
        if host.contains("]:") {
            format!("http://{host}")
        } else {
            format!("http://{host}:{port}")
        }
    } else if host.contains("::") || host.matches(':').count() > 1 {
        format!("http://[{host}]:{port}")
    } else if host.contains(':') {
        format!("http://{host}")
    } else {
        format!("http://{host}:{port}")
    }
}

/// What guards the HTTP endpoint (see docs/security.md). The binary fills it from its flags
/// (`tally serve --help` says each); [`Default`] is what the flags default to.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Bearer tokens, one per line: `<id> <token> [<dataset>,<dataset>…]` (no list: every
    /// dataset). Required for any non-loopback address.
    pub token_file: Option<std::path::PathBuf>,
    /// An environment variable holding one bearer token (every dataset; its id is
    /// `env:<VAR>`). Tokens are never read from the command line.
    pub token_env: Option<String>,
    /// A further name the Host header may carry (repeatable); loopback names and the bound
    /// address are always allowed.
    pub allow_host: Vec<String>,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Requests per second one caller (token, or address without tokens) may make.
    pub rate_limit: f64,
    /// How many requests a caller may make at once before the rate applies.
    pub rate_burst: f64,
    /// Requests one caller may have in flight at once (without tokens, one MCP session, or
    /// one address outside a session).
    pub max_concurrent: usize,
    /// Requests of all callers in flight at once (never fewer than --max-concurrent).
    pub max_in_flight: usize,
    /// Open connections in total (kept below the process's open-file limit). When all are
    /// taken, the oldest connection not serving a request is closed to make room.
    pub max_connections: usize,
    /// Open connections from one peer address.
    pub max_connections_per_peer: usize,
    /// Time a client has to send a request's headers, in milliseconds (from connecting, or
    /// from the end of the previous response).
    pub header_timeout_ms: u64,
    /// Time a connection may pass without sending or receiving a byte, in milliseconds
    /// (server-sent event streams send a keep-alive every 15 s).
    pub idle_timeout_ms: u64,
    /// Failed authentications one peer address may make per minute before its requests are
    /// answered 429 (bursts of twice as many).
    pub auth_failures_per_minute: f64,
    /// Live MCP sessions one caller may hold; past it its oldest session is closed.
    pub max_sessions_per_caller: usize,
    /// Live MCP sessions of all callers together; past it the oldest session is closed.
    pub max_sessions: usize,
    /// What each caller may see (YAML): policies naming datasets, hidden fields and row
    /// conditions, granted to token ids and to OAuth scopes and claims (docs/security.md).
    pub policy_file: Option<std::path::PathBuf>,
    /// An environment variable holding the bearer token `/metrics` asks for. Without it,
    /// `/metrics` answers only clients on this machine (a loopback address).
    pub metrics_token_env: Option<String>,
    /// How long, after SIGTERM or Ctrl-C, the calls in flight may take to finish (new ones
    /// are answered 503) before the server ends them and exits; a second signal exits at once.
    pub drain_grace_ms: u64,
    pub oauth: crate::oauth::OAuthOptions,
    /// How the options are read again on SIGHUP (the settings file, the environment and the
    /// command line, as at start), when the binary says.
    pub reread: Option<Reread>,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            token_file: Default::default(),
            token_env: Default::default(),
            allow_host: Default::default(),
            max_body_bytes: 1024 * 1024,
            rate_limit: 50.0,
            rate_burst: 100.0,
            max_concurrent: 8,
            max_in_flight: crate::guard::MAX_IN_FLIGHT,
            max_connections: 1024,
            max_connections_per_peer: 64,
            header_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            auth_failures_per_minute: 10.0,
            max_sessions_per_caller: crate::guard::MAX_SESSIONS_PER_CALLER,
            max_sessions: crate::guard::MAX_SESSIONS,
            policy_file: Default::default(),
            metrics_token_env: Default::default(),
            drain_grace_ms: 20_000,
            oauth: Default::default(),
            reread: Default::default(),
        }
    }
}

/// Reads `tally serve`'s options again, as at start (see [`HttpOptions::reread`]).
#[derive(Clone)]
pub struct Reread(pub Arc<dyn Fn() -> Result<HttpOptions, String> + Send + Sync>);

impl std::fmt::Debug for Reread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reread")
    }
}

impl HttpOptions {
    /// The sign-in options given, which apply to `--http` only (a stdio server's client owns
    /// the process and sees everything).
    pub fn sign_in_given(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        if self.token_file.is_some() {
            given.push("--token-file");
        }
        if self.token_env.is_some() {
            given.push("--token-env");
        }
        if self.policy_file.is_some() {
            given.push("--policy-file");
        }
        if self.oauth.issuer.is_some() {
            given.push("--oauth-issuer");
        }
        given
    }
}

/// Serves MCP over streamable HTTP at `/mcp`, with `GET /health`, until SIGTERM or Ctrl-C
/// (then drains: see [`HttpOptions::drain_grace_ms`]). `listening` is told the address bound
/// (the port, when 0 was asked) before the first request is taken.
pub async fn http(
    engine: Arc<Engine>,
    addr: SocketAddr,
    extra_origins: Vec<String>,
    options: HttpOptions,
    audit: Option<crate::audit::Audit>,
    listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    http_until(
        engine,
        addr,
        extra_origins,
        options,
        audit,
        listening,
        shutdown_signal(),
    )
    .await
}

/// [`http`], ended by `stop` instead of a signal (a host that embeds the server, a test):
/// when `stop` completes, new calls are refused, the calls in flight drain as after a signal,
/// the sessions close and this returns.
pub async fn http_until(
    engine: Arc<Engine>,
    addr: SocketAddr,
    extra_origins: Vec<String>,
    options: HttpOptions,
    audit: Option<crate::audit::Audit>,
    listening: impl FnOnce(SocketAddr),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let mut tokens = read_tokens(addr, &options)?;
    let policies = match read_policies(&engine, &options, &mut tokens) {
        Ok(policies) => policies,
        Err(e) => {
            return Err(ServeError::Setup(e.to_string()));
        }
    };
    if addr.ip().is_unspecified()
        && options.oauth.issuer.is_some()
        && options.oauth.resource.is_none()
    {
        return Err(ServeError::Setup(format!(
            "--oauth-issuer with --http {addr}: on every address of the machine the resource URI tokens must name cannot be derived from the address; give --oauth-resource as clients reach the server (e.g. https://tally.example.org/mcp)"
        )));
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            return Err(ServeError::Setup(format!("cannot listen on {addr}: {e}")));
        }
    };
    let bound = listener.local_addr().unwrap_or(addr);
    let oauth = match crate::oauth::OAuth::new(&options.oauth, bound) {
        Ok(oauth) => oauth.map(Arc::new),
        Err(e) => {
            return Err(ServeError::Setup(e.to_string()));
        }
    };
    let (hosts, origins) = allowed_names(bound, &options, extra_origins);
    // rmcp switches Origin validation off when the allow-list is empty; ours never is, and
    // validation is enforced explicitly. Host and body checks run in rmcp too.
    let config = StreamableHttpServerConfig::default()
        .with_allowed_origins(origins.clone())
        .enforce_origin_validation()
        .with_allowed_hosts(hosts.clone())
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_sse_keep_alive(Some(Duration::from_secs(15)));
    let cancel = config.cancellation_token.clone();
    let engine_call_timeout = engine.limits().call_timeout;
    let metrics_token = match read_metrics_token(&options) {
        Ok(t) => t,
        Err(e) => {
            return Err(ServeError::Setup(e.to_string()));
        }
    };
    let (service, sessions, shared) = mcp_service(&engine, audit, config);
    let authenticated = !tokens.is_empty() || oauth.is_some();
    let token_count = tokens.len();
    if let Some(oauth) = &oauth {
        tracing::info!(issuer = oauth.issuer(), resource = oauth.resource(), scopes = ?oauth.scopes(), "accepting OAuth access tokens");
    }
    let auth = crate::guard::Auth { tokens, policies };
    let mut guard = http_guard(auth, oauth.clone(), &hosts, &origins, &options, sessions);
    if let Some(g) = Arc::get_mut(&mut guard) {
        g.metrics = Some(Arc::clone(&shared.metrics));
    }
    let drained = Arc::clone(&shared);
    let served_state = Served {
        engine: Arc::clone(&engine),
        guard: Arc::clone(&guard),
        shared,
        metrics_token,
    };
    let app = router(&engine, service, Arc::clone(&guard), oauth, served_state);
    #[cfg(unix)]
    tokio::spawn(reload_on_hangup(
        Arc::clone(&engine),
        Arc::clone(&guard),
        options.clone(),
    ));
    let grace = Duration::from_millis(options.drain_grace_ms);
    // The address the server actually listens on, for scripts that asked for port 0.
    listening(bound);
    tracing::info!(%bound, ?origins, ?hosts, authenticated, tokens = token_count, "serving streamable HTTP");
    let served = crate::listen::serve(
        listener,
        app,
        crate::listen::ConnectionLimits {
            total: options.max_connections.max(1),
            per_peer: options.max_connections_per_peer.max(1),
            header_read: Duration::from_millis(options.header_timeout_ms.max(100)),
            // Never below a call's deadline plus the event-stream keep-alive: a call that
            // sends nothing until it answers must not be taken for an idle connection.
            idle: Duration::from_millis(options.idle_timeout_ms.max(1000))
                .max(engine_call_timeout + Duration::from_secs(20)),
        },
        async move {
            stop.await;
            drain(&guard, &drained, grace).await;
            guard.close_sessions().await;
            cancel.cancel();
        },
    )
    .await;
    served.map_err(|e| ServeError::Failed(format!("the HTTP server failed: {e}")))
}

/// Reads the bearer tokens the options name; refuses a non-loopback address without any.
fn read_tokens(
    addr: SocketAddr,
    options: &HttpOptions,
) -> Result<crate::guard::Tokens, ServeError> {
    let tokens = load_tokens(options).map_err(ServeError::Setup)?;
    if !addr.ip().is_loopback() && tokens.is_empty() && options.oauth.issuer.is_none() {
        return Err(ServeError::Setup(format!(
            "refusing to listen on {addr} without authentication: anyone who can reach a non-loopback address could query every dataset. \
             Give bearer tokens with --token-file FILE or --token-env VAR, an authorization server with --oauth-issuer URL, or listen on 127.0.0.1:{}.",
            addr.port()
        )));
    }
    Ok(tokens)
}

/// The tokens of `--token-file` and `--token-env`.
fn load_tokens(options: &HttpOptions) -> Result<crate::guard::Tokens, String> {
    let mut tokens = crate::guard::Tokens::default();
    if let Some(file) = &options.token_file {
        tokens.read_file(file)?;
    }
    if let Some(var) = &options.token_env {
        tokens.read_env(var)?;
    }
    Ok(tokens)
}

/// The tokens and policies as their files say now (SIGHUP): refused whole, with why, when
/// any of it does not hold.
fn reload_auth(engine: &Engine, options: &HttpOptions) -> Result<crate::guard::Auth, String> {
    let mut tokens = load_tokens(options)?;
    let policies = read_policies(engine, options, &mut tokens)?;
    Ok(crate::guard::Auth { tokens, policies })
}

/// Reads `--policy-file`, grants its policies to the static tokens it names, and checks
/// every policy against the datasets served (a field it hides that is not there, a row
/// condition that does not resolve, a definition that does not hold without the hidden
/// fields are refused here, not at the first call).
fn read_policies(
    engine: &Engine,
    options: &HttpOptions,
    tokens: &mut crate::guard::Tokens,
) -> Result<Option<Arc<crate::policies::Policies>>, String> {
    let Some(path) = &options.policy_file else {
        return Ok(None);
    };
    if tokens.is_empty() && options.oauth.issuer.is_none() {
        return Err(format!(
            "--policy-file {}: policies are granted to callers who sign in; give --token-file, --token-env or --oauth-issuer too",
            path.display()
        ));
    }
    let policies = crate::policies::Policies::read_file(path)?;
    for policy in policies.all() {
        engine.check_policy(policy).map_err(|e| {
            format!(
                "{}: policy `{}`: {e}",
                path.display(),
                policy.names.join(",")
            )
        })?;
    }
    let grants: Vec<(String, Vec<String>)> = policies
        .granted_tokens()
        .map(|(id, list)| (id.clone(), list.clone()))
        .collect();
    for (id, granted) in grants {
        tokens
            .grant(&id, policies.scope_of(&granted))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(Some(Arc::new(policies)))
}

/// The names the Host header may carry and the origins a page may call from, for the
/// address the server is bound to.
fn allowed_names(
    bound: SocketAddr,
    options: &HttpOptions,
    extra_origins: Vec<String>,
) -> (Vec<String>, Vec<String>) {
    let mut origins = default_origins(bound);
    let mut hosts: Vec<String> = vec!["127.0.0.1".into(), "localhost".into(), "::1".into()];
    if !bound.ip().is_loopback() {
        hosts.push(bound.ip().to_string());
    }
    hosts.extend(options.allow_host.iter().cloned());
    // The server's own origin under every name it answers to, so that its browser front
    // (served from that origin) can call `/mcp`. Behind a proxy that adds TLS, the https
    // origin is given with --allow-origin.
    for host in &hosts[3..] {
        let origin = own_origin(host, bound.port());
        if !origins.contains(&origin) {
            origins.push(origin);
        }
    }
    origins.extend(extra_origins);
    (hosts, origins)
}

/// The MCP transport over HTTP and the manager of its sessions.
fn mcp_service(
    engine: &Arc<Engine>,
    audit: Option<crate::audit::Audit>,
    config: StreamableHttpServerConfig,
) -> (
    StreamableHttpService<TallyServer, LocalSessionManager>,
    Arc<LocalSessionManager>,
    Arc<Shared>,
) {
    let shared = Shared::with_audit(Arc::clone(engine), audit);
    let kept = Arc::clone(&shared);
    // Events kept for clients that reconnect with Last-Event-ID (bounded).
    let sessions = Arc::new(LocalSessionManager::default().with_event_store(Arc::new(
        crate::events::Store(crate::events::Events::new(Default::default())),
    )));
    let service: StreamableHttpService<TallyServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(TallyServer::new(Arc::clone(&shared))),
            Arc::clone(&sessions),
            config,
        );
    (service, sessions, kept)
}

/// What the operator's routes (`/metrics`, `/ready`) read.
#[derive(Clone)]
struct Served {
    engine: Arc<Engine>,
    guard: Arc<crate::guard::Guard>,
    shared: Arc<Shared>,
    /// The digest of the bearer token `/metrics` asks for, when one is set.
    metrics_token: Option<[u8; 32]>,
}

/// Reads `--metrics-token-env`: the digest of the token it names.
fn read_metrics_token(options: &HttpOptions) -> Result<Option<[u8; 32]>, String> {
    use sha2::Digest;
    let Some(var) = &options.metrics_token_env else {
        return Ok(None);
    };
    let token = std::env::var(var).map_err(|_| {
        format!(
            "--metrics-token-env {var}: the environment variable {var} is not set (or not UTF-8)"
        )
    })?;
    let token = token.trim();
    if token.chars().count() < 16 {
        return Err(format!(
            "--metrics-token-env {var}: the token has fewer than 16 characters; use a long random one (e.g. `openssl rand -hex 32`)"
        ));
    }
    Ok(Some(sha2::Sha256::digest(token.as_bytes()).into()))
}

impl Served {
    /// Who may read `/metrics`: the bearer of `--metrics-token-env`'s token, else only a client
    /// on this machine.
    fn may_scrape(
        &self,
        peer: std::net::SocketAddr,
        headers: &axum::http::HeaderMap,
    ) -> Result<(), axum::response::Response> {
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        use sha2::Digest;
        let refuse = |status: StatusCode, message: &str, fix: &str| {
            let body = serde_json::json!({"error": {"message": message, "fix": fix}}).to_string();
            (
                status,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        };
        match &self.metrics_token {
            Some(want) => {
                let presented = headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().split_once(' '))
                    .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                    .map(|(_, token)| token.trim())
                    .unwrap_or("");
                let got: [u8; 32] = sha2::Sha256::digest(presented.as_bytes()).into();
                let differs = got.iter().zip(want).fold(0u8, |d, (a, b)| d | (a ^ b));
                if differs != 0 {
                    let mut r = refuse(
                        StatusCode::UNAUTHORIZED,
                        "/metrics needs its own bearer token",
                        "send `Authorization: Bearer <token>` with the token --metrics-token-env names",
                    );
                    r.headers_mut().insert(
                        axum::http::header::WWW_AUTHENTICATE,
                        axum::http::HeaderValue::from_static("Bearer realm=\"tally-metrics\""),
                    );
                    return Err(r);
                }
                Ok(())
            }
            None if peer.ip().is_loopback() => Ok(()),
            None => Err(refuse(
                StatusCode::FORBIDDEN,
                "/metrics answers only clients on this machine",
                "scrape from 127.0.0.1, or give the server --metrics-token-env VAR and send that token",
            )),
        }
    }

    fn scrape(&self) -> crate::metrics::Scrape {
        let view = crate::view::View::of(&self.engine, crate::view::Caller::operator());
        let (heavy_running, heavy_queued) = self.engine.heavy_load();
        let budget = self.engine.budget();
        let (cache_hits, cache_misses) = tally_engine::storage::cache_hits_and_misses();
        let mut scrape = crate::metrics::Scrape {
            requests_in_flight: self.guard.requests_in_flight(),
            heavy_running,
            heavy_queued,
            memory_used_bytes: budget.used(),
            memory_budget_bytes: budget.limit(),
            datasets_served: view.datasets().count(),
            datasets_broken: view.broken().count(),
            datasets_pending: view.pending().count(),
            reloads: self.engine.reloads(),
            cache_hits,
            cache_misses,
            cache_bytes: self.engine.cache().map_or(0, |c| c.bytes()),
            plugin_faults: tally_engine::storage::plugin_faults(),
            sessions: self.guard.session_count(),
            draining: self.guard.is_draining(),
            ..Default::default()
        };
        self.shared.scrape_into(&mut scrape);
        scrape
    }

    /// `/ready`: 200 when the catalog is loaded, the cache (if any) usable and the server not
    /// draining; 503 with why otherwise.
    fn ready(&self) -> (axum::http::StatusCode, serde_json::Value) {
        let mut reasons = Vec::new();
        if self.guard.is_draining() {
            reasons.push("draining: the server was told to stop".to_string());
        }
        if let Some(cache) = self.engine.cache()
            && cache.dir().exists()
            && let Err(why) = tally_engine::storage::check_cache_private(cache.dir())
        {
            reasons.push(format!("the cache cannot be used: {why}"));
        }
        if reasons.is_empty() {
            (
                axum::http::StatusCode::OK,
                serde_json::json!({"status": "ready"}),
            )
        } else {
            (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"status": "not_ready", "reasons": reasons}),
            )
        }
    }
}

/// After a signal to stop: requests for work are answered 503 while those in flight finish,
/// for at most `grace`; a second signal exits at once.
async fn drain(guard: &Arc<crate::guard::Guard>, shared: &Arc<Shared>, grace: Duration) {
    guard
        .draining
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let in_flight = guard.requests_in_flight();
    tracing::info!(
        in_flight,
        grace_ms = grace.as_millis() as u64,
        "draining: new calls are answered 503 while those in flight finish"
    );
    // Calls in flight: requests being answered, and calls run as MCP tasks still working
    // (their clients poll for the answers, which are kept until the process ends).
    let busy = || {
        guard.requests_in_flight()
            + shared
                .tasks_by_state()
                .iter()
                .filter(|(state, _)| matches!(state.as_str(), "working" | "input_required"))
                .map(|(_, n)| n)
                .sum::<usize>()
    };
    let idle = async {
        while busy() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        () = idle => tracing::info!("drained: no call in flight"),
        () = tokio::time::sleep(grace) => tracing::warn!(
            in_flight = busy(),
            "the drain's grace period ended with calls still in flight; they are ended"
        ),
        () = shutdown_signal() => {
            tracing::warn!("a second signal while draining: exiting now");
            std::process::exit(EXIT_ON_SECOND_SIGNAL);
        }
    }
}

/// The options read again on SIGHUP: the token file, `--token-env` and the policy file as the
/// settings now name them are taken; any other setting that changed is said in the log to
/// take a restart. Settings that do not read keep the ones before (said in the log).
fn reread_settings(current: HttpOptions) -> HttpOptions {
    let Some(reread) = current.reread.clone() else {
        return current;
    };
    let new = match (reread.0)() {
        Ok(new) => new,
        Err(e) => {
            tracing::error!(
                "SIGHUP: the settings could not be read again, so those read before stay in force: {}",
                tally_engine::storage::escape_controls(&e, tally_engine::storage::Lines::Escaped)
            );
            return current;
        }
    };
    let taken = HttpOptions {
        token_file: new.token_file.clone(),
        token_env: new.token_env.clone(),
        policy_file: new.policy_file.clone(),
        ..current.clone()
    };
    let as_now = format!(
        "{:?}",
        HttpOptions {
            reread: None,
            ..taken.clone()
        }
    );
    let as_read = format!(
        "{:?}",
        HttpOptions {
            reread: None,
            ..new
        }
    );
    if as_now != as_read {
        tracing::warn!(
            "SIGHUP: settings other than the token file, --token-env and the policy file changed; they take effect at a restart"
        );
    }
    taken
}

/// SIGHUP: the datasets directory is scanned again now (as a change it watches would be),
/// then the token file and the policy file are read again and swapped in whole (kept as they
/// were, with the reason in the log, when they do not hold).
#[cfg(unix)]
async fn reload_on_hangup(
    engine: Arc<Engine>,
    guard: Arc<crate::guard::Guard>,
    options: HttpOptions,
) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    else {
        return;
    };
    let mut options = options;
    while hangups.recv().await.is_some() {
        options = reread_settings(options);
        let scanning = Arc::clone(&engine);
        let scanned =
            // The operator says the writes are done: read what changed now, without waiting
            // for folders to be quiet.
            tokio::task::spawn_blocking(move || scanning.reload(Duration::ZERO)).await;
        match scanned {
            Ok((changes, pending)) => tracing::info!(
                added = changes.added.len(),
                updated = changes.updated.len(),
                removed = changes.removed.len(),
                pending,
                "SIGHUP: the datasets directory was scanned again"
            ),
            Err(e) => tracing::warn!("SIGHUP: the scan did not finish: {e}"),
        }
        if options.token_file.is_none() && options.policy_file.is_none() {
            continue;
        }
        match reload_auth(&engine, &options) {
            Ok(auth) => {
                tracing::info!(
                    tokens = auth.tokens.len(),
                    policies = auth.policies.is_some(),
                    "SIGHUP: the token and policy files were read again"
                );
                guard.set_auth(auth);
            }
            Err(e) => tracing::error!(
                "SIGHUP: the token or policy file does not hold, so the ones read before stay in force: {}",
                tally_engine::storage::escape_controls(&e, tally_engine::storage::Lines::Escaped)
            ),
        }
    }
}

/// The guard in front of the endpoint, with the options' limits.
fn http_guard(
    auth: crate::guard::Auth,
    oauth: Option<Arc<crate::oauth::OAuth>>,
    hosts: &[String],
    origins: &[String],
    options: &HttpOptions,
    sessions: Arc<LocalSessionManager>,
) -> Arc<crate::guard::Guard> {
    let mut guard = crate::guard::Guard::new(
        crate::guard::Tokens::default(),
        hosts.to_vec(),
        origins.to_vec(),
        options.rate_limit,
        options.rate_burst,
        options.max_concurrent,
        options.max_body_bytes,
    );
    guard.auth_failures_per_minute = options.auth_failures_per_minute.max(0.01);
    guard.max_sessions_per_caller = options.max_sessions_per_caller.max(1);
    guard.max_sessions = options.max_sessions.max(1);
    // Never below one caller's share: a raised --max-concurrent raises the total with it.
    guard.max_in_flight = options.max_in_flight.max(guard.concurrent);
    guard.live = Some(sessions);
    guard.oauth = oauth;
    guard.set_auth(auth);
    Arc::new(guard)
}

/// The routes (`/health`, `/mcp`, the browser front, the protected resource metadata), all
/// behind the guard.
fn router(
    engine: &Arc<Engine>,
    service: StreamableHttpService<TallyServer, LocalSessionManager>,
    guard: Arc<crate::guard::Guard>,
    oauth: Option<Arc<crate::oauth::OAuth>>,
    served: Served,
) -> axum::Router {
    let health_engine = Arc::clone(engine);
    let scraped = served.clone();
    let readied = served;
    let mut routes = axum::Router::new()
        .route(
            "/metrics",
            get(
                move |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
                      headers: axum::http::HeaderMap| {
                    let served = scraped.clone();
                    async move {
                        use axum::response::IntoResponse;
                        if let Err(refused) = served.may_scrape(peer, &headers) {
                            return refused;
                        }
                        let text = served.shared.metrics.render(&served.scrape());
                        (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                crate::metrics::CONTENT_TYPE,
                            )],
                            text,
                        )
                            .into_response()
                    }
                },
            ),
        )
        .route(
            "/ready",
            get(move || {
                let served = readied.clone();
                async move {
                    let (status, body) = served.ready();
                    (status, Json(body))
                }
            }),
        );
    if let Some(oauth) = oauth {
        // RFC 9728: at the well-known path, and under it with the resource's path (where
        // MCP clients look first); open to everyone, as a client reads it before signing in.
        let metadata = oauth.metadata();
        let mut paths = vec![
            "/.well-known/oauth-protected-resource".to_string(),
            "/.well-known/oauth-protected-resource/mcp".to_string(),
        ];
        let own = oauth
            .metadata_url()
            .find("/.well-known/")
            .map(|i| oauth.metadata_url()[i..].to_string());
        if let Some(own) = own.filter(|p| !paths.contains(p)) {
            paths.push(own);
        }
        for path in paths {
            let metadata = metadata.clone();
            routes = routes.route(
                &path,
                get(move || {
                    let metadata = metadata.clone();
                    async move {
                        (
                            [(axum::http::header::CACHE_CONTROL, "max-age=300")],
                            Json(metadata),
                        )
                    }
                }),
            );
        }
    }
    routes
        .route(
            "/health",
            get(move |request: axum::extract::Request| {
                let engine = Arc::clone(&health_engine);
                async move {
                    // The guard names the caller of every request it lets through.
                    let caller = request
                        .extensions()
                        .get::<crate::view::Caller>()
                        .cloned()
                        .unwrap_or_else(|| crate::view::Caller {
                            id: "anonymous".into(),
                            scope: tally_engine::Scope::Only(Arc::default()),
                        });
                    Json(crate::view::View::of(&engine, caller).health())
                }
            }),
        )
        .route_service("/mcp", service)
        .route("/", get(front))
        .route("/index.html", get(front))
        .route("/app/{file}", get(front))
        .layer(axum::middleware::from_fn_with_state(
            guard,
            crate::guard::check,
        ))
}

/// The browser front: a page and its scripts, the same for everyone (no data is in them; the
/// page asks `/mcp` with the caller's token). Behind the same Host and Origin checks as `/mcp`.
async fn front(uri: axum::http::Uri) -> axum::response::Response {
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::IntoResponse;
    let Some((content_type, body)) = crate::ui::front_file(uri.path()) else {
        return (StatusCode::NOT_FOUND, "no such file\n").into_response();
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(crate::ui::FRONT_CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_may_call_from_every_name_the_server_answers_to() {
        assert_eq!(
            own_origin("tally.example", 8765),
            "http://tally.example:8765"
        );
        assert_eq!(
            own_origin("tally.example:80", 8765),
            "http://tally.example:80"
        );
        assert_eq!(own_origin("10.0.0.5", 8765), "http://10.0.0.5:8765");
        assert_eq!(own_origin("fd00::5", 8765), "http://[fd00::5]:8765");
        assert_eq!(own_origin("[fd00::5]", 8765), "http://[fd00::5]:8765");
        assert_eq!(own_origin("[fd00::5]:9000", 8765), "http://[fd00::5]:9000");
    }
}
