//! The resource server: its settings read from the options, and a token checked: a JWT
//! against the issuer's key set (cached and refreshed), an opaque one at the introspection
//! endpoint (its answer kept a short while), then its claims and the scopes required.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::issuer::{agent, check_url, discover_jwks, get_json, post_introspection, split_origin};
use super::jwt::{Jwk, Jwt, looks_like_jwt};
use super::options::OAuthOptions;
use super::principal::{Principal, Rejection, principal, scope_satisfies};

/// Clock difference allowed between the issuer and this server.
pub const SKEW: Duration = Duration::from_secs(60);
/// A token naming a key not in the cached set refreshes it at most this often (a flood of
/// made-up key ids costs the issuer one fetch per period).
pub const REFRESH_AT_MOST_EVERY: Duration = Duration::from_secs(30);
/// A key set older than this is fetched again at the next use.
const KEYS_FRESH_FOR: Duration = Duration::from_secs(600);
/// When the issuer cannot be reached, keys fetched within this time are still used.
const KEYS_KEPT_FOR: Duration = Duration::from_secs(6 * 3600);
/// How long an introspection answer is reused (never past the token's own expiry).
pub const INTROSPECTION_TTL: Duration = Duration::from_secs(60);
/// How long "not active" is remembered (a replayed dead token does not reach the issuer).
const INACTIVE_TTL: Duration = Duration::from_secs(10);
/// Introspection answers kept at once; past it the cache starts again.
const INTROSPECTION_CACHE: usize = 10_000;
/// The longest token looked at.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The resource server's settings and caches.
pub struct OAuth {
    issuer: String,
    resource: String,
    scopes: Vec<String>,
    jwks_url: Option<String>,
    introspection: Option<Introspection>,
    agent: ureq::Agent,
    keys: Arc<tokio::sync::Mutex<KeyCache>>,
    introspected: std::sync::Mutex<HashMap<[u8; 32], Introspected>>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// An introspection answer, kept until the instant.
type Introspected = (Result<Principal, Rejection>, Instant);

struct Introspection {
    url: String,
    client: Option<(String, String)>,
}

#[derive(Default)]
struct KeyCache {
    keys: Vec<Jwk>,
    /// When the keys were last read.
    fetched: Option<Instant>,
    /// When a fetch was last tried (whether or not it worked).
    tried: Option<Instant>,
    /// The key set's address, once known (given, or read from the issuer's metadata).
    url: Option<String>,
    /// Why the last fetch failed.
    failure: Option<String>,
}

impl KeyCache {
    /// Keeps what a fetch read, or why it failed (keeping the keys there are).
    fn store(&mut self, issuer: &str, fetched: Result<(String, Vec<Jwk>), String>) {
        match fetched {
            Ok((url, keys)) => {
                self.url = Some(url);
                self.keys = keys;
                self.fetched = Some(Instant::now());
                self.failure = None;
            }
            Err(e) => {
                tracing::warn!(%issuer, "the issuer's key set could not be read: {e}");
                self.failure = Some(e);
            }
        }
    }
}

pub(super) fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl OAuth {
    /// The resource server the options describe, for a server bound to `bound`; `None` when
    /// no issuer is given. Refused (with what would work) when the options do not hold.
    pub fn new(
        options: &OAuthOptions,
        bound: std::net::SocketAddr,
    ) -> Result<Option<OAuth>, String> {
        let Some(issuer) = options.issuer.as_deref() else {
            return Ok(None);
        };
        check_url("--oauth-issuer", issuer)?;
        if let Some(url) = &options.jwks_url {
            check_url("--oauth-jwks-url", url)?;
        }
        if let Some(url) = &options.introspection_url {
            check_url("--oauth-introspection-url", url)?;
        }
        let resource = match &options.resource {
            Some(r) => {
                let lower = r.to_ascii_lowercase();
                if !(lower.starts_with("https://") || lower.starts_with("http://"))
                    || r.contains('#')
                {
                    return Err(format!(
                        "--oauth-resource {r}: a resource URI is an absolute http(s) URL without a fragment (RFC 8707), e.g. https://tally.example.org/mcp"
                    ));
                }
                r.clone()
            }
            None if bound.ip().is_unspecified() => {
                return Err(format!(
                    "--oauth-issuer: the server listens on {bound}, every address of the machine, so the resource URI tokens must name cannot be derived from it; give --oauth-resource as clients reach the server (e.g. https://tally.example.org/mcp)"
                ));
            }
            None => format!("http://{bound}/mcp"),
        };
        let scopes: Vec<String> = options
            .scopes
            .iter()
            .flat_map(|s| s.split_whitespace())
            .map(str::to_string)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if scopes.is_empty() {
            return Err("--oauth-scope: give at least one scope every access token must carry (e.g. --oauth-scope tally)".to_string());
        }
        let client = match (&options.client_id, &options.client_secret_env) {
            (Some(id), Some(var)) => {
                let secret = std::env::var(var).map_err(|_| {
                    format!("--oauth-client-secret-env {var}: the environment variable {var} is not set (or not UTF-8)")
                })?;
                Some((id.clone(), secret.trim().to_string()))
            }
            (Some(id), None) => Some((id.clone(), String::new())),
            _ => None,
        };
        Ok(Some(OAuth {
            issuer: issuer.to_string(),
            resource,
            scopes,
            jwks_url: options.jwks_url.clone(),
            introspection: options
                .introspection_url
                .clone()
                .map(|url| Introspection { url, client }),
            agent: agent(&options.ca_certs)?,
            keys: Arc::new(tokio::sync::Mutex::new(KeyCache::default())),
            introspected: std::sync::Mutex::new(HashMap::new()),
        }))
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// The protected resource metadata (RFC 9728).
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": self.scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "Tally",
        })
    }

    /// Where the metadata is served for this resource: the well-known path with the
    /// resource's path after it (RFC 9728 §3.1), at the resource's own origin.
    pub fn metadata_url(&self) -> String {
        let (origin, path) = split_origin(&self.resource);
        let path = path.trim_end_matches('/');
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// The principal `token` speaks for, or why it is refused.
    pub async fn check(&self, token: &str) -> Result<Principal, Rejection> {
        self.check_with(token, true).await
    }

    /// As [`OAuth::check`], without asking the issuer about an opaque token (for `/health`,
    /// which anyone may call as often as they like).
    pub async fn check_locally(&self, token: &str) -> Result<Principal, Rejection> {
        self.check_with(token, false).await
    }

    async fn check_with(&self, token: &str, introspect: bool) -> Result<Principal, Rejection> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Rejection::Invalid(format!(
                "the token is longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        let principal = if looks_like_jwt(token) {
            self.check_jwt(token).await?
        } else if self.introspection.is_some() && introspect {
            self.introspect(token).await?
        } else {
            return Err(Rejection::Invalid(
                "the token is not a JWT, and this server checks opaque tokens only with an introspection endpoint (--oauth-introspection-url), which it was not given".into(),
            ));
        };
        let missing: Vec<String> = self
            .scopes
            .iter()
            .filter(|required| {
                !principal
                    .scopes
                    .iter()
                    .any(|held| scope_satisfies(held, required))
            })
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(Rejection::Scope(missing));
        }
        Ok(principal)
    }

    async fn check_jwt(&self, token: &str) -> Result<Principal, Rejection> {
        let jwt = Jwt::parse(token)?;
        let verified = {
            let mut cache = self.keys.lock().await;
            self.ensure_keys(&mut cache, jwt.kid.as_deref()).await?;
            let candidates: Vec<&Jwk> = cache
                .keys
                .iter()
                .filter(|k| match (&jwt.kid, &k.kid) {
                    (Some(want), Some(have)) => want == have,
                    (Some(_), None) => false,
                    (None, _) => true,
                })
                .collect();
            if candidates.is_empty() {
                let why = cache
                    .failure
                    .as_ref()
                    .map(|f| format!(" (the key set could not be read again: {f})"))
                    .unwrap_or_default();
                return Err(Rejection::Invalid(format!(
                    "the token is signed with a key the issuer does not publish (kid {}){why}",
                    jwt.kid.as_deref().unwrap_or("not given")
                )));
            }
            candidates
                .iter()
                .any(|k| k.verifies(jwt.alg, &jwt.signed, &jwt.signature))
        };
        if !verified {
            return Err(Rejection::Invalid(format!(
                "the token's signature does not verify ({} with the issuer's key{})",
                jwt.alg.name(),
                jwt.kid
                    .as_deref()
                    .map(|k| format!(" `{k}`"))
                    .unwrap_or_default()
            )));
        }
        self.claims_hold(&jwt.claims, true)?;
        principal(jwt.claims)
    }

    /// The checks on the claims of a token (or an introspection answer): issuer, audience,
    /// lifetime. `strict`: `exp` is required (a JWT); an introspection answer may leave it out.
    pub(super) fn claims_hold(
        &self,
        claims: &Map<String, Value>,
        strict: bool,
    ) -> Result<(), Rejection> {
        let now = now_seconds();
        let skew = SKEW.as_secs_f64();
        match claims.get("iss").and_then(Value::as_str) {
            Some(iss) if iss == self.issuer => {}
            None if !strict => {}
            Some(iss) => {
                return Err(Rejection::Invalid(format!(
                    "the token was issued by `{iss}`, not by this server's issuer `{}`",
                    self.issuer
                )));
            }
            None => {
                return Err(Rejection::Invalid(
                    "the token names no issuer (`iss`)".into(),
                ));
            }
        }
        let audiences: Vec<&str> = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.as_str()],
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !audiences.contains(&self.resource.as_str()) {
            return Err(Rejection::Invalid(format!(
                "the token is not meant for this server: its audience (`aud`) is {}, not `{}`; ask the authorization server for a token with resource={} (RFC 8707)",
                if audiences.is_empty() {
                    "missing".to_string()
                } else {
                    format!("{audiences:?}")
                },
                self.resource,
                self.resource
            )));
        }
        match claims.get("exp").and_then(Value::as_f64) {
            Some(exp) if exp + skew <= now => {
                return Err(Rejection::Invalid(format!(
                    "the token expired {} s ago",
                    (now - exp).round()
                )));
            }
            Some(_) => {}
            None if strict => {
                return Err(Rejection::Invalid(
                    "the token has no expiry (`exp`); this server accepts only tokens that expire"
                        .into(),
                ));
            }
            None => {}
        }
        for (claim, what) in [("nbf", "is not valid before"), ("iat", "was issued at")] {
            if let Some(t) = claims.get(claim).and_then(Value::as_f64)
                && t > now + skew
            {
                return Err(Rejection::Invalid(format!(
                    "the token {what} a time {} s from now (`{claim}`); check the clocks",
                    (t - now).round()
                )));
            }
        }
        Ok(())
    }

    /// Makes sure the key set is there and fresh enough for a token naming `kid`: fetched at
    /// first use, again when older than [`KEYS_FRESH_FOR`], and when `kid` is not in it (at
    /// most once every [`REFRESH_AT_MOST_EVERY`]). A failed fetch keeps the keys there are.
    async fn ensure_keys(&self, cache: &mut KeyCache, kid: Option<&str>) -> Result<(), Rejection> {
        let now = Instant::now();
        let may_try = cache
            .tried
            .is_none_or(|t| now.duration_since(t) >= REFRESH_AT_MOST_EVERY);
        let stale = cache
            .fetched
            .is_none_or(|t| now.duration_since(t) >= KEYS_FRESH_FOR);
        let unknown =
            kid.is_some_and(|kid| !cache.keys.iter().any(|k| k.kid.as_deref() == Some(kid)));
        if may_try && (unknown || cache.fetched.is_none()) {
            // The token cannot be checked without the fetch: the calls wait for it (one
            // fetch; the others find its keys).
            cache.tried = Some(now);
            let fetched = self.fetch_keys(cache.url.clone()).await;
            cache.store(&self.issuer, fetched);
        } else if may_try && stale {
            // The keys there are still check this token; they are read again meanwhile,
            // without holding up this call or any other.
            cache.tried = Some(now);
            let fetch = self.fetch_keys(cache.url.clone());
            let keys = Arc::clone(&self.keys);
            let issuer = self.issuer.clone();
            tokio::spawn(async move {
                let fetched = fetch.await;
                keys.lock().await.store(&issuer, fetched);
            });
        }
        let usable = cache
            .fetched
            .is_some_and(|t| now.duration_since(t) < KEYS_KEPT_FOR);
        if !usable {
            let retry = cache
                .tried
                .map(|t| REFRESH_AT_MOST_EVERY.saturating_sub(now.duration_since(t)))
                .unwrap_or_default();
            return Err(Rejection::Unavailable(
                format!(
                    "the issuer's key set cannot be read ({})",
                    cache.failure.as_deref().unwrap_or("not fetched yet")
                ),
                retry.as_secs().max(1),
            ));
        }
        Ok(())
    }

    /// Reads the key set (its address from the issuer's metadata the first time, when not
    /// given), off the serving threads.
    fn fetch_keys(
        &self,
        known: Option<String>,
    ) -> impl std::future::Future<Output = Result<(String, Vec<Jwk>), String>> + Send + 'static
    {
        let agent = self.agent.clone();
        let issuer = self.issuer.clone();
        let given = self.jwks_url.clone().or(known);
        let blocking = tokio::task::spawn_blocking(move || {
            let url = match given {
                Some(url) => url,
                None => discover_jwks(&agent, &issuer)?,
            };
            let document = get_json(&agent, &url)?;
            let listed = document
                .get("keys")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("{url} is not a JWK set (no `keys` array)"))?;
            let keys: Vec<Jwk> = listed.iter().filter_map(Jwk::parse).collect();
            if keys.is_empty() && !listed.is_empty() {
                return Err(format!(
                    "{url} holds no key this server can use (RSA, EC P-256 or Ed25519 signing keys)"
                ));
            }
            Ok((url, keys))
        });
        async move {
            blocking
                .await
                .map_err(|e| format!("the fetch did not finish: {e}"))?
        }
    }

    /// Asks the issuer whether an opaque token is active (RFC 7662); the answer is kept for
    /// [`INTROSPECTION_TTL`] (never past the token's expiry), "not active" for less.
    async fn introspect(&self, token: &str) -> Result<Principal, Rejection> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        {
            let cache = self.introspected.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((answer, until)) = cache.get(&digest)
                && *until > now
            {
                return answer.clone();
            }
        }
        let Some(introspection) = &self.introspection else {
            return Err(Rejection::Invalid("no introspection endpoint".into()));
        };
        let agent = self.agent.clone();
        let url = introspection.url.clone();
        let client = introspection.client.clone();
        let presented = token.to_string();
        let answer = tokio::task::spawn_blocking(move || {
            post_introspection(&agent, &url, client, &presented)
        })
        .await
        .map_err(|e| Rejection::Unavailable(format!("the introspection did not finish: {e}"), 5))?
        .map_err(|e| Rejection::Unavailable(e, 5))?;
        let result = if answer.get("active").and_then(Value::as_bool) == Some(true) {
            self.claims_hold(&answer, false)
                .and_then(|()| principal(answer.clone()))
        } else {
            Err(Rejection::Invalid(
                "the issuer says the token is not active (revoked, expired or unknown)".into(),
            ))
        };
        let keep = match &result {
            Ok(_) => {
                let left = answer
                    .get("exp")
                    .and_then(Value::as_f64)
                    .map(|exp| Duration::from_secs_f64((exp - now_seconds()).max(0.0)))
                    .unwrap_or(INTROSPECTION_TTL);
                INTROSPECTION_TTL.min(left)
            }
            Err(_) => INACTIVE_TTL,
        };
        let mut cache = self.introspected.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= INTROSPECTION_CACHE {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= INTROSPECTION_CACHE {
                cache.clear();
            }
        }
        cache.insert(digest, (result.clone(), now + keep));
        result
    }
}
