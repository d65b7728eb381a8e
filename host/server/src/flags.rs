//! The options every data command takes, and the per-call budgets (they hold for the CLI,
//! stdio and HTTP alike).

use std::path::PathBuf;

use clap::Args;

use tally_mcp::serve;

use crate::cluster;

/// Options every data command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// The datasets directory.
    #[arg(long, global = true, default_value = "datasets")]
    pub(crate) datasets: PathBuf,
    /// Print the envelope on one line instead of indented.
    #[arg(long, global = true)]
    pub(crate) compact: bool,
    /// `prov`: also give the provenance as W3C PROV-O in JSON-LD (`prov` beside
    /// `provenance`); `json` (the default): Tally's JSON only.
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["json", "prov"])]
    pub(crate) provenance: Option<String>,
    #[command(flatten)]
    pub(crate) budgets: Budgets,
    #[command(flatten)]
    pub(crate) cluster: cluster::ClusterArgs,
}

impl Common {
    /// The per-call limits; with a cluster, Parquet datasets are read from their files at
    /// every call (what a cluster's executors can do) unless `--streaming` says otherwise.
    pub fn limits(&self) -> tally_engine::Limits {
        let mut limits = self.budgets.limits();
        if self.cluster.cluster.is_some() && self.budgets.streaming == StreamingArg::Auto {
            limits.serving = tally_engine::storage::Serving::Streaming;
        }
        limits
    }
}

/// Per-call budgets (they hold for the CLI, stdio and HTTP alike).
#[derive(Debug, Args)]
pub struct Budgets {
    /// Wall-clock time one call may take, in milliseconds.
    #[arg(long, global = true, default_value_t = 10_000)]
    pub(crate) call_timeout_ms: u64,
    /// Wall-clock time a call run as an MCP task may take, in milliseconds (a client that
    /// declares the tasks extension gets a task for a call estimated past half its budget).
    #[arg(long, global = true, default_value_t = 600_000)]
    pub(crate) task_timeout_ms: u64,
    /// Memory the operators of one call may reserve, in MiB.
    #[arg(long, global = true, default_value_t = 512)]
    pub(crate) call_memory_mb: usize,
    /// Size of the rows of one result, in bytes; rows past it are left out and that is said.
    #[arg(long, global = true, default_value_t = 4 * 1024 * 1024)]
    pub(crate) max_result_bytes: usize,
    /// Estimated tokens of the rows of one result (about 4 ASCII characters or 1 kana/kanji
    /// a token); rows past it are left out with a cursor, and that is said.
    #[arg(long, global = true, default_value_t = 6_000)]
    pub(crate) max_result_tokens: usize,
    /// Wall-clock time one wasm plugin call may run, in milliseconds.
    #[arg(long, global = true, default_value_t = 5_000)]
    pub(crate) plugin_deadline_ms: u64,
    /// Memory one wasm plugin instance may grow to, in MiB.
    #[arg(long, global = true, default_value_t = 256)]
    pub(crate) plugin_memory_mb: usize,
    /// Size of what one wasm plugin scan may return, in MiB.
    #[arg(long, global = true, default_value_t = 64)]
    pub(crate) plugin_output_mb: usize,
    /// Load native plugins (shared libraries named by `backend: {kind: native}`). They run
    /// with the server's full rights: allow them only for libraries you trust.
    #[arg(long, global = true, env = "TALLY_ALLOW_NATIVE", value_parser = clap::builder::FalseyValueParser::new())]
    pub(crate) allow_native: bool,
    /// Memory the whole server may hold for data and calls, in MiB: prepared datasets, files
    /// being read and the operators of every call in flight. A Parquet dataset whose prepared
    /// table does not fit is read from its files at every call instead (a plugin's is
    /// refused); a call that does not fit is stopped. Default: half of the machine's memory.
    #[arg(long, global = true, value_name = "MIB")]
    pub(crate) memory_budget: Option<usize>,
    /// Groups one summary may build; past it the summary stops while aggregating and says
    /// how to narrow it.
    #[arg(long, global = true, default_value_t = 100_000)]
    pub(crate) max_groups: usize,
    /// Rows one summary may add by exploding multi-value fields, beyond one row per record
    /// (a record of three parts adds two).
    #[arg(long, global = true, default_value_t = 10_000_000)]
    pub(crate) max_explode_rows: u64,
    /// Size of an answer `tally verify` or the verify_answer tool checks, in bytes; a larger
    /// one is refused before it is read.
    #[arg(long, global = true, default_value_t = 16 * 1024 * 1024)]
    pub(crate) max_envelope_bytes: usize,
    /// Heavy calls (reading many records: files read at every call, an unprepared table or
    /// one of 250,000 records or more, an inspection not yet computed, a check of an answer)
    /// that run at once, each
    /// on a thread of its own apart from those serving requests; the others wait for a slot,
    /// the caller with the fewest running first. Default: one a core.
    #[arg(long, global = true, value_name = "N")]
    pub(crate) heavy_calls: Option<usize>,
    /// Heavy calls that may wait for a slot, in all; past it (or past its time budget while
    /// waiting) a call is refused, saying which bound it met.
    #[arg(long, global = true, default_value_t = 32)]
    pub(crate) heavy_queue: usize,
    /// Heavy calls one caller may have waiting for a slot.
    #[arg(long, global = true, default_value_t = 8)]
    pub(crate) heavy_queue_per_caller: usize,
    /// How Parquet datasets are served: `auto` prepares a table when it fits the memory
    /// budget (or the cache) and reads the files at every call when it does not, and while a
    /// large one (a million records or more) is being prepared; `always` reads the files at
    /// every call; `never` always prepares (a dataset over the budget is refused).
    #[arg(long, global = true, value_enum, default_value_t = StreamingArg::Auto)]
    pub(crate) streaming: StreamingArg,
    /// Where each dataset version's prepared data is kept, written once and mapped on later
    /// starts (the first answer after a restart does not prepare again). Entries are checked
    /// before use and rebuilt when they do not check out. Default: the user's cache
    /// directory (`$XDG_CACHE_HOME/tally`, else `~/.cache/tally`), one folder per datasets
    /// directory.
    #[arg(long, global = true, value_name = "DIR", env = "TALLY_CACHE_DIR")]
    pub(crate) cache_dir: Option<std::path::PathBuf>,
    /// Keep no prepared data across starts (every start prepares the data it is asked for).
    #[arg(
        long,
        global = true,
        env = "TALLY_NO_CACHE",
        // 1/0, true/false, yes/no, on/off (an empty value is off). It wins over a cache
        // directory (no conflict: TALLY_NO_CACHE=0 beside TALLY_CACHE_DIR is fine).
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub(crate) no_cache: bool,
}

impl Budgets {
    /// The backends datasets may name: Parquet, wasm components in their sandbox, and native
    /// libraries when allowed. With a `cache` of prepared data, compiled wasm components
    /// are kept in it too (its `code` folder).
    pub fn backends(
        &self,
        cache: Option<&tally_engine::storage::Cache>,
    ) -> tally_engine::storage::Backends {
        tally_plugin_host::backends(tally_plugin_host::PluginOptions {
            code_cache: cache.map(|c| tally_plugin_host::CodeCache::new(c.dir().join("code"))),
            limits: tally_plugin_host::PluginLimits {
                deadline: std::time::Duration::from_millis(self.plugin_deadline_ms.max(10)),
                memory_bytes: self.plugin_memory_mb.max(1) * 1024 * 1024,
                output_bytes: self.plugin_output_mb.max(1) * 1024 * 1024,
                ..Default::default()
            },
            allow_native: self.allow_native,
        })
    }

    /// The cache of prepared data for the datasets directory `datasets`: the one named, else
    /// a folder of the user's cache directory kept for this datasets directory (two
    /// directories with a dataset of the same name never evict each other's entries); none
    /// with `--no-cache`, or when there is no cache directory to use.
    pub fn cache(&self, datasets: &std::path::Path) -> Option<tally_engine::storage::Cache> {
        if self.no_cache {
            return None;
        }
        if let Some(dir) = self
            .cache_dir
            .as_ref()
            .filter(|d| !d.as_os_str().is_empty())
        {
            return Some(tally_engine::storage::Cache::new(dir));
        }
        let root = tally_engine::storage::Cache::default_dir()?;
        Some(tally_engine::storage::Cache::new(
            root.join(tally_engine::storage::Cache::folder_for(datasets)),
        ))
    }

    pub fn limits(&self) -> tally_engine::Limits {
        tally_engine::Limits {
            call_timeout: std::time::Duration::from_millis(self.call_timeout_ms.max(1)),
            task_timeout: std::time::Duration::from_millis(self.task_timeout_ms.max(1)),
            call_memory_bytes: self.call_memory_mb.max(1) * 1024 * 1024,
            max_result_bytes: self.max_result_bytes.max(1024),
            max_result_tokens: self.max_result_tokens.max(100),
            memory_budget_bytes: self
                .memory_budget
                .map(|m| m.max(16) * 1024 * 1024)
                .unwrap_or_else(tally_engine::storage::default_memory_budget),
            max_groups: self.max_groups.max(1),
            max_explode_rows: self.max_explode_rows.max(1),
            max_envelope_bytes: self.max_envelope_bytes.max(1024),
            heavy_calls: self
                .heavy_calls
                .unwrap_or(tally_engine::Limits::default().heavy_calls)
                .max(1),
            heavy_queue: self.heavy_queue,
            heavy_queue_per_caller: self.heavy_queue_per_caller.max(1),
            serving: match self.streaming {
                StreamingArg::Auto => tally_engine::storage::Serving::Auto,
                StreamingArg::Always => tally_engine::storage::Serving::Streaming,
                StreamingArg::Never => tally_engine::storage::Serving::Prepared,
            },
            ..tally_engine::Limits::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamingArg {
    Auto,
    Always,
    Never,
}

/// What guards the HTTP endpoint (see docs/security.md): `tally serve`'s flags, handed to
/// the MCP layer as its [`serve::HttpOptions`].
#[derive(Debug, Clone, clap::Args)]
pub struct HttpFlags {
    /// Bearer tokens, one per line: `<id> <token> [<dataset>,<dataset>…]` (no list: every
    /// dataset). Required for any non-loopback address.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<std::path::PathBuf>,
    /// An environment variable holding one bearer token (every dataset; its id is
    /// `env:<VAR>`). Tokens are never read from the command line.
    #[arg(long, value_name = "VAR")]
    pub(crate) token_env: Option<String>,
    /// A further name the Host header may carry (repeatable); loopback names and the bound
    /// address are always allowed.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub(crate) allow_host: Vec<String>,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = serve::HttpOptions::default().max_body_bytes)]
    pub(crate) max_body_bytes: usize,
    /// Requests per second one caller (token, or address without tokens) may make.
    #[arg(long, default_value_t = serve::HttpOptions::default().rate_limit)]
    pub(crate) rate_limit: f64,
    /// How many requests a caller may make at once before the rate applies.
    #[arg(long, default_value_t = serve::HttpOptions::default().rate_burst)]
    pub(crate) rate_burst: f64,
    /// Requests one caller may have in flight at once (without tokens, one MCP session, or
    /// one address outside a session).
    #[arg(long, default_value_t = serve::HttpOptions::default().max_concurrent)]
    pub(crate) max_concurrent: usize,
    /// Requests of all callers in flight at once (never fewer than --max-concurrent).
    #[arg(long, default_value_t = serve::HttpOptions::default().max_in_flight)]
    pub(crate) max_in_flight: usize,
    /// Open connections in total (kept below the process's open-file limit). When all are
    /// taken, the oldest connection not serving a request is closed to make room.
    #[arg(long, default_value_t = serve::HttpOptions::default().max_connections)]
    pub(crate) max_connections: usize,
    /// Open connections from one peer address.
    #[arg(long, default_value_t = serve::HttpOptions::default().max_connections_per_peer)]
    pub(crate) max_connections_per_peer: usize,
    /// Time a client has to send a request's headers, in milliseconds (from connecting, or
    /// from the end of the previous response).
    #[arg(long, default_value_t = serve::HttpOptions::default().header_timeout_ms)]
    pub(crate) header_timeout_ms: u64,
    /// Time a connection may pass without sending or receiving a byte, in milliseconds
    /// (server-sent event streams send a keep-alive every 15 s).
    #[arg(long, default_value_t = serve::HttpOptions::default().idle_timeout_ms)]
    pub(crate) idle_timeout_ms: u64,
    /// Failed authentications one peer address may make per minute before its requests are
    /// answered 429 (bursts of twice as many).
    #[arg(long, default_value_t = serve::HttpOptions::default().auth_failures_per_minute)]
    pub(crate) auth_failures_per_minute: f64,
    /// Live MCP sessions one caller may hold; past it its oldest session is closed.
    #[arg(long, default_value_t = serve::HttpOptions::default().max_sessions_per_caller)]
    pub(crate) max_sessions_per_caller: usize,
    /// Live MCP sessions of all callers together; past it the oldest session is closed.
    #[arg(long, default_value_t = serve::HttpOptions::default().max_sessions)]
    pub(crate) max_sessions: usize,
    /// What each caller may see (YAML): policies naming datasets, hidden fields and row
    /// conditions, granted to token ids and to OAuth scopes and claims (docs/security.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) policy_file: Option<std::path::PathBuf>,
    /// An environment variable holding the bearer token `/metrics` asks for. Without it,
    /// `/metrics` answers only clients on this machine (a loopback address).
    #[arg(long, value_name = "VAR")]
    pub(crate) metrics_token_env: Option<String>,
    /// How long, after SIGTERM or Ctrl-C, the calls in flight may take to finish (new ones
    /// are answered 503) before the server ends them and exits; a second signal exits at once.
    #[arg(long, default_value_t = serve::HttpOptions::default().drain_grace_ms)]
    pub(crate) drain_grace_ms: u64,
    #[command(flatten)]
    pub(crate) oauth: OAuthFlags,
}

impl From<HttpFlags> for serve::HttpOptions {
    fn from(f: HttpFlags) -> serve::HttpOptions {
        serve::HttpOptions {
            token_file: f.token_file,
            token_env: f.token_env,
            allow_host: f.allow_host,
            max_body_bytes: f.max_body_bytes,
            rate_limit: f.rate_limit,
            rate_burst: f.rate_burst,
            max_concurrent: f.max_concurrent,
            max_in_flight: f.max_in_flight,
            max_connections: f.max_connections,
            max_connections_per_peer: f.max_connections_per_peer,
            header_timeout_ms: f.header_timeout_ms,
            idle_timeout_ms: f.idle_timeout_ms,
            auth_failures_per_minute: f.auth_failures_per_minute,
            max_sessions_per_caller: f.max_sessions_per_caller,
            max_sessions: f.max_sessions,
            policy_file: f.policy_file,
            metrics_token_env: f.metrics_token_env,
            drain_grace_ms: f.drain_grace_ms,
            oauth: f.oauth.into(),
            reread: None,
        }
    }
}

/// OAuth 2.1: accept access tokens issued by an authorization server (see docs/security.md),
/// handed to the MCP layer as its `OAuthOptions`.
#[derive(Debug, Clone, clap::Args)]
pub struct OAuthFlags {
    /// The authorization server's issuer identifier (an https URL). Turns OAuth on: access
    /// tokens it issued for this server are accepted beside the static tokens.
    #[arg(long = "oauth-issuer", value_name = "URL")]
    pub(crate) issuer: Option<String>,
    /// The issuer's key set (JWKS). Without it, `jwks_uri` is read from the issuer's
    /// metadata (RFC 8414, then OpenID Connect discovery).
    #[arg(long = "oauth-jwks-url", value_name = "URL", requires = "issuer")]
    pub(crate) jwks_url: Option<String>,
    /// The resource URI tokens must name in `aud` (RFC 8707). Default: this server's MCP
    /// endpoint, `http://<address>/mcp`.
    #[arg(long = "oauth-resource", value_name = "URL", requires = "issuer")]
    pub(crate) resource: Option<String>,
    /// A scope every token must carry (repeatable); a token without it is answered 403
    /// `insufficient_scope`.
    #[arg(
        long = "oauth-scope",
        value_name = "SCOPE",
        default_value = "tally",
        requires = "issuer"
    )]
    pub(crate) scopes: Vec<String>,
    /// The issuer's token introspection endpoint (RFC 7662), for opaque access tokens.
    #[arg(
        long = "oauth-introspection-url",
        value_name = "URL",
        requires = "issuer"
    )]
    pub(crate) introspection_url: Option<String>,
    /// This server's client id at the introspection endpoint.
    #[arg(
        long = "oauth-client-id",
        value_name = "ID",
        requires = "introspection_url"
    )]
    pub(crate) client_id: Option<String>,
    /// An environment variable holding this server's client secret at the introspection
    /// endpoint (secrets are never read from the command line).
    #[arg(
        long = "oauth-client-secret-env",
        value_name = "VAR",
        requires = "client_id"
    )]
    pub(crate) client_secret_env: Option<String>,
    /// Certificate authorities (PEM) trusted for the issuer's endpoints, instead of the
    /// built-in roots.
    #[arg(long = "oauth-ca-cert", value_name = "FILE", requires = "issuer")]
    pub(crate) ca_certs: Vec<PathBuf>,
}

impl From<OAuthFlags> for serve::OAuthOptions {
    fn from(f: OAuthFlags) -> serve::OAuthOptions {
        serve::OAuthOptions {
            issuer: f.issuer,
            jwks_url: f.jwks_url,
            resource: f.resource,
            scopes: f.scopes,
            introspection_url: f.introspection_url,
            client_id: f.client_id,
            client_secret_env: f.client_secret_env,
            ca_certs: f.ca_certs,
        }
    }
}
