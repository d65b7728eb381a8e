//! Tally as an OAuth 2.1 resource server (the MCP authorization specification): it never
//! issues tokens, it checks those an organisation's authorization server issued.
//!
//! - A JWT access token is checked against the issuer's key set (JWKS, fetched over https,
//!   cached, refreshed when a token names a key not in it, at most once every
//!   [`REFRESH_AT_MOST_EVERY`], and kept when a refresh fails): its signature under an
//!   allowed algorithm (RS256, ES256, EdDSA; `none` and HMAC are refused, and the key's type
//!   must be the algorithm's), `iss` equal to the issuer, `aud` naming this resource
//!   (RFC 8707), `exp`/`nbf`/`iat` within [`SKEW`], and the scopes the server requires.
//! - An opaque token is asked about at the issuer's introspection endpoint (RFC 7662) when
//!   one is configured, and the answer kept for a short while ([`INTROSPECTION_TTL`]).
//!
//! What a request presents is never logged or kept: a token's digest keys the introspection
//! cache, and the caller is named by the token's subject (`oauth:<sub>`).

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

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
/// The largest key set or metadata document read.
const MAX_DOCUMENT_BYTES: u64 = 512 * 1024;
/// How long a fetch from the issuer may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// OAuth 2.1: accept access tokens issued by an authorization server (see docs/security.md).
/// The binary fills it from its `--oauth-*` flags; [`Default`] is OAuth off.
#[derive(Debug, Clone)]
pub struct OAuthOptions {
    /// The authorization server's issuer identifier (an https URL). Turns OAuth on: access
    /// tokens it issued for this server are accepted beside the static tokens.
    pub issuer: Option<String>,
    /// The issuer's key set (JWKS). Without it, `jwks_uri` is read from the issuer's
    /// metadata (RFC 8414, then OpenID Connect discovery).
    pub jwks_url: Option<String>,
    /// The resource URI tokens must name in `aud` (RFC 8707). Default: this server's MCP
    /// endpoint, `http://<address>/mcp`.
    pub resource: Option<String>,
    /// A scope every token must carry (repeatable); a token without it is answered 403
    /// `insufficient_scope`.
    pub scopes: Vec<String>,
    /// The issuer's token introspection endpoint (RFC 7662), for opaque access tokens.
    pub introspection_url: Option<String>,
    /// This server's client id at the introspection endpoint.
    pub client_id: Option<String>,
    /// An environment variable holding this server's client secret at the introspection
    /// endpoint (secrets are never read from the command line).
    pub client_secret_env: Option<String>,
    /// Certificate authorities (PEM) trusted for the issuer's endpoints, instead of the
    /// built-in roots.
    pub ca_certs: Vec<PathBuf>,
}

impl Default for OAuthOptions {
    fn default() -> OAuthOptions {
        OAuthOptions {
            issuer: Default::default(),
            jwks_url: Default::default(),
            resource: Default::default(),
            scopes: vec!["tally".to_string()],
            introspection_url: Default::default(),
            client_id: Default::default(),
            client_secret_env: Default::default(),
            ca_certs: Default::default(),
        }
    }
}

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

#[derive(Debug, Clone)]
struct Jwk {
    kid: Option<String>,
    alg: Option<String>,
    key: KeyMaterial,
}

#[derive(Debug, Clone)]
enum KeyMaterial {
    Rsa { n: Vec<u8>, e: Vec<u8> },
    P256(Vec<u8>),
    Ed25519(Vec<u8>),
}

/// The algorithms accepted, with the type of key each needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    Rs256,
    Es256,
    EdDsa,
}

impl Alg {
    fn parse(name: &str) -> Result<Alg, Rejection> {
        match name {
            "RS256" => Ok(Alg::Rs256),
            "ES256" => Ok(Alg::Es256),
            "EdDSA" => Ok(Alg::EdDsa),
            other => Err(Rejection::Invalid(format!(
                "the token is signed with `{other}`, which this server does not accept (RS256, ES256 or EdDSA)"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Es256 => "ES256",
            Alg::EdDsa => "EdDSA",
        }
    }

    fn fits(self, key: &KeyMaterial) -> bool {
        matches!(
            (self, key),
            (Alg::Rs256, KeyMaterial::Rsa { .. })
                | (Alg::Es256, KeyMaterial::P256(_))
                | (Alg::EdDsa, KeyMaterial::Ed25519(_))
        )
    }
}

impl Jwk {
    /// A key of a key set; `None` for one this server cannot use (another type, curve or use).
    fn parse(value: &Value) -> Option<Jwk> {
        let text = |name: &str| value.get(name).and_then(Value::as_str);
        let bytes = |name: &str| text(name).and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
        if text("use").is_some_and(|u| u != "sig") {
            return None;
        }
        let key = match (text("kty")?, text("crv")) {
            ("RSA", _) => KeyMaterial::Rsa {
                n: bytes("n")?,
                e: bytes("e")?,
            },
            ("EC", Some("P-256")) => {
                let (x, y) = (bytes("x")?, bytes("y")?);
                if x.len() != 32 || y.len() != 32 {
                    return None;
                }
                let mut point = vec![4u8];
                point.extend(x);
                point.extend(y);
                KeyMaterial::P256(point)
            }
            ("OKP", Some("Ed25519")) => {
                let x = bytes("x")?;
                if x.len() != 32 {
                    return None;
                }
                KeyMaterial::Ed25519(x)
            }
            _ => return None,
        };
        Some(Jwk {
            kid: text("kid").map(str::to_string),
            alg: text("alg").map(str::to_string),
            key,
        })
    }

    fn verifies(&self, alg: Alg, message: &[u8], signature: &[u8]) -> bool {
        use ring::signature;
        if !alg.fits(&self.key) || self.alg.as_deref().is_some_and(|a| a != alg.name()) {
            return false;
        }
        match &self.key {
            KeyMaterial::Rsa { n, e } => signature::RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
            KeyMaterial::P256(point) => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
            KeyMaterial::Ed25519(x) => signature::UnparsedPublicKey::new(&signature::ED25519, x)
                .verify(message, signature)
                .is_ok(),
        }
    }
}

/// A JWT split and decoded, not yet trusted.
struct Jwt {
    alg: Alg,
    kid: Option<String>,
    claims: Map<String, Value>,
    signed: Vec<u8>,
    signature: Vec<u8>,
}

/// Whether a token is shaped as a JWT (three base64url parts whose first is a JSON object).
fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let header = parts.next().unwrap_or("");
    parts.clone().count() == 2
        && URL_SAFE_NO_PAD
            .decode(header)
            .ok()
            .and_then(|h| serde_json::from_slice::<Value>(&h).ok())
            .is_some_and(|h| h.is_object())
}

impl Jwt {
    fn parse(token: &str) -> Result<Jwt, Rejection> {
        let bad =
            |what: &str| Rejection::Invalid(format!("the token is not a well-formed JWT ({what})"));
        let parts: Vec<&str> = token.split('.').collect();
        let [header, payload, signature] = parts.as_slice() else {
            return Err(bad("a JWT has three parts separated by dots"));
        };
        let decode = |part: &str, what: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| bad(what));
        let header: Map<String, Value> =
            serde_json::from_slice(&decode(header, "its header is not base64url")?)
                .map_err(|_| bad("its header is not a JSON object"))?;
        let claims: Map<String, Value> =
            serde_json::from_slice(&decode(payload, "its claims are not base64url")?)
                .map_err(|_| bad("its claims are not a JSON object"))?;
        let signature = decode(signature, "its signature is not base64url")?;
        if header.contains_key("crit") {
            return Err(Rejection::Invalid(
                "the token has critical header parameters (`crit`) this server does not understand"
                    .into(),
            ));
        }
        if let Some(typ) = header.get("typ").and_then(Value::as_str) {
            let typ = typ.to_ascii_lowercase();
            if !["jwt", "at+jwt", "application/at+jwt", "application/jwt"].contains(&typ.as_str()) {
                return Err(Rejection::Invalid(format!(
                    "the token's type `{typ}` is not an access token (JWT or at+jwt)"
                )));
            }
        }
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("its header names no `alg`"))?;
        Ok(Jwt {
            alg: Alg::parse(alg)?,
            kid: header
                .get("kid")
                .and_then(Value::as_str)
                .map(str::to_string),
            signed: token.as_bytes()[..token.len() - parts[2].len() - 1].to_vec(),
            claims,
            signature,
        })
    }
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `https://…`, or `http://` to a loopback host (an issuer run on the same machine).
fn check_url(flag: &str, url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return Ok(());
    }
    if let Some(rest) = lower.strip_prefix("http://") {
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        let name = if host.starts_with('[') {
            host.split(']').next().unwrap_or("").trim_start_matches('[')
        } else {
            host.split(':').next().unwrap_or("")
        };
        if name == "localhost"
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
        {
            return Ok(());
        }
    }
    Err(format!(
        "{flag} {url}: not an https URL; tokens and keys are read from the issuer over https only (http is accepted for an issuer on this machine, 127.0.0.1 or localhost)"
    ))
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
    fn claims_hold(&self, claims: &Map<String, Value>, strict: bool) -> Result<(), Rejection> {
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

/// Whether a scope a token holds is the one required: the same, or the required one's last
/// part when it is written as a URI (Microsoft Entra ID asks clients for
/// `api://tally/tally` and puts `tally` in the token's `scp`).
fn scope_satisfies(held: &str, required: &str) -> bool {
    held == required
        || (required.contains("://")
            && required
                .strip_suffix(held)
                .is_some_and(|head| head.ends_with('/')))
}

/// The principal of claims that checked out: `sub` is required; scopes from `scope` (space
/// separated) or `scp` (a list or a string).
fn principal(claims: Map<String, Value>) -> Result<Principal, Rejection> {
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

/// `(scheme://authority, path)` of a URL.
fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    }
}

/// The key set's address from the issuer's metadata: RFC 8414 (the well-known path before
/// the issuer's path), then OpenID Connect discovery (after it). The metadata must name the
/// same issuer.
fn discover_jwks(agent: &ureq::Agent, issuer: &str) -> Result<String, String> {
    let (origin, path) = split_origin(issuer);
    let path = path.trim_end_matches('/');
    let candidates = [
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
    ];
    let mut failures = Vec::new();
    for url in &candidates {
        match get_json(agent, url) {
            Ok(metadata) => {
                let named = metadata.get("issuer").and_then(Value::as_str);
                if named != Some(issuer) {
                    return Err(format!(
                        "{url} names the issuer {named:?}, not `{issuer}` (RFC 8414 §3.3); give --oauth-issuer exactly as the authorization server names itself"
                    ));
                }
                let jwks = metadata
                    .get("jwks_uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{url} gives no `jwks_uri`; give --oauth-jwks-url"))?;
                check_url("jwks_uri", jwks)?;
                return Ok(jwks.to_string());
            }
            Err(e) => failures.push(e),
        }
    }
    Err(format!(
        "the issuer's metadata could not be read ({}); give --oauth-jwks-url",
        failures.join("; ")
    ))
}

fn get_json(agent: &ureq::Agent, url: &str) -> Result<Value, String> {
    let mut response = agent
        .get(url)
        .header("Accept", "application/json")
        .call()
        .map_err(|e| format!("{url}: {e}"))?;
    if response.status() != 200 {
        return Err(format!("{url} answered {}", response.status()));
    }
    response
        .body_mut()
        .with_config()
        .limit(MAX_DOCUMENT_BYTES)
        .read_json::<Value>()
        .map_err(|e| format!("{url}: not a JSON document ({e})"))
}

fn post_introspection(
    agent: &ureq::Agent,
    url: &str,
    client: Option<(String, String)>,
    token: &str,
) -> Result<Map<String, Value>, String> {
    let mut request = agent.post(url).header("Accept", "application/json");
    if let Some((id, secret)) = client {
        // RFC 6749 §2.3.1: each part form-encoded, then Basic.
        let encode = |s: &str| {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            encode(&id),
            encode(&secret)
        ));
        request = request.header("Authorization", &format!("Basic {basic}"));
    }
    let mut response = request
        .send_form([("token", token), ("token_type_hint", "access_token")])
        .map_err(|e| format!("the introspection endpoint {url}: {e}"))?;
    if response.status() != 200 {
        return Err(format!(
            "the introspection endpoint {url} answered {} (is --oauth-client-id/--oauth-client-secret-env right?)",
            response.status()
        ));
    }
    response
        .body_mut()
        .with_config()
        .limit(MAX_DOCUMENT_BYTES)
        .read_json::<Map<String, Value>>()
        .map_err(|e| format!("the introspection endpoint {url}: not a JSON object ({e})"))
}

/// The HTTPS client for the issuer: the given certificate authorities or the built-in roots,
/// no redirects, bounded time.
fn agent(ca_certs: &[PathBuf]) -> Result<ureq::Agent, String> {
    let mut tls = ureq::tls::TlsConfig::builder();
    if !ca_certs.is_empty() {
        let mut certs = Vec::new();
        for path in ca_certs {
            let pem = std::fs::read(path)
                .map_err(|e| format!("--oauth-ca-cert {}: cannot read it ({e})", path.display()))?;
            let before = certs.len();
            for item in ureq::tls::parse_pem(&pem) {
                match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
                    Ok(_) => {}
                    Err(e) => {
                        return Err(format!(
                            "--oauth-ca-cert {}: not a PEM file ({e}); give the certificate authority as PEM (-----BEGIN CERTIFICATE-----)",
                            path.display()
                        ));
                    }
                }
            }
            if certs.len() == before {
                return Err(format!(
                    "--oauth-ca-cert {}: holds no certificate; give the certificate authority as PEM (-----BEGIN CERTIFICATE-----)",
                    path.display()
                ));
            }
        }
        tls = tls.root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)));
    }
    let config = ureq::Agent::config_builder()
        .tls_config(tls.build())
        .https_only(false)
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_global(Some(FETCH_TIMEOUT))
        .user_agent(format!(
            "tally/{} (OAuth resource server)",
            env!("CARGO_PKG_VERSION")
        ))
        .build();
    Ok(ureq::Agent::new_with_config(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(v.to_string())
    }

    fn oauth() -> OAuth {
        let options = OAuthOptions {
            issuer: Some("https://issuer.example".into()),
            scopes: vec!["tally".into()],
            ..Default::default()
        };
        OAuth::new(&options, "127.0.0.1:8765".parse().unwrap())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn only_the_allowed_algorithms_parse() {
        for alg in ["none", "HS256", "RS512", "ES384", "PS256"] {
            let token = format!(
                "{}.{}.",
                b64(&json!({"alg": alg})),
                b64(&json!({"sub": "a"}))
            );
            assert!(
                matches!(Jwt::parse(&token), Err(Rejection::Invalid(m)) if m.contains(alg)),
                "{alg}"
            );
        }
        let token = format!(
            "{}.{}.AA",
            b64(&json!({"alg": "ES256", "kid": "k"})),
            b64(&json!({}))
        );
        let jwt = Jwt::parse(&token).unwrap();
        assert_eq!(jwt.alg, Alg::Es256);
        assert_eq!(jwt.signed, &token.as_bytes()[..token.len() - 3]);
    }

    #[test]
    fn a_key_of_another_type_never_verifies() {
        let rsa = Jwk {
            kid: None,
            alg: None,
            key: KeyMaterial::Rsa {
                n: vec![1; 256],
                e: vec![1, 0, 1],
            },
        };
        assert!(!rsa.verifies(Alg::Es256, b"m", b"s"));
        assert!(!rsa.verifies(Alg::EdDsa, b"m", b"s"));
        let pinned = Jwk {
            alg: Some("RS256".into()),
            ..rsa
        };
        assert!(!Alg::Es256.fits(&pinned.key));
    }

    /// Signs `claims` with a fresh key of `alg`; the key as a JWK with `kid`.
    fn signed(alg: Alg, kid: &str, claims: &Value) -> (String, Value) {
        use ring::rand::SystemRandom;
        use ring::signature::{self, KeyPair};
        let rng = SystemRandom::new();
        let header = b64(&json!({"alg": alg.name(), "kid": kid, "typ": "at+jwt"}));
        let input = format!("{header}.{}", b64(claims));
        let (signature, jwk) = match alg {
            Alg::Es256 => {
                let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(
                    &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &rng,
                )
                .unwrap();
                let key = signature::EcdsaKeyPair::from_pkcs8(
                    &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    pkcs8.as_ref(),
                    &rng,
                )
                .unwrap();
                let point = key.public_key().as_ref();
                let jwk = json!({"kty": "EC", "crv": "P-256", "kid": kid,
                    "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..])});
                (
                    key.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
                    jwk,
                )
            }
            Alg::EdDsa => {
                let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
                let key = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
                let jwk = json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
                    "x": URL_SAFE_NO_PAD.encode(key.public_key().as_ref())});
                (key.sign(input.as_bytes()).as_ref().to_vec(), jwk)
            }
            Alg::Rs256 => unreachable!("ring makes no RSA keys; the end-to-end tests sign RS256"),
        };
        (
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)),
            jwk,
        )
    }

    #[test]
    fn signatures_verify_with_their_key_only() {
        for alg in [Alg::Es256, Alg::EdDsa] {
            let claims = json!({"sub": "alice"});
            let (token, jwk) = signed(alg, "k1", &claims);
            let key = Jwk::parse(&jwk).unwrap();
            let jwt = Jwt::parse(&token).unwrap();
            assert_eq!(jwt.kid.as_deref(), Some("k1"));
            assert!(key.verifies(alg, &jwt.signed, &jwt.signature), "{alg:?}");
            // Another key of the same type does not verify it.
            let (_, other) = signed(alg, "k2", &claims);
            assert!(
                !Jwk::parse(&other)
                    .unwrap()
                    .verifies(alg, &jwt.signed, &jwt.signature)
            );
            // Claims changed after signing do not verify.
            let parts: Vec<&str> = token.split('.').collect();
            let tampered = format!(
                "{}.{}.{}",
                parts[0],
                b64(&json!({"sub": "mallory"})),
                parts[2]
            );
            let jwt = Jwt::parse(&tampered).unwrap();
            assert!(!key.verifies(alg, &jwt.signed, &jwt.signature), "{alg:?}");
            // A key whose `alg` names another algorithm is not used for this one.
            let mut pinned = jwk.clone();
            pinned["alg"] = json!("RS256");
            let jwt = Jwt::parse(&token).unwrap();
            assert!(
                !Jwk::parse(&pinned)
                    .unwrap()
                    .verifies(alg, &jwt.signed, &jwt.signature)
            );
            // An encryption key is not a signing key.
            let mut encryption = jwk.clone();
            encryption["use"] = json!("enc");
            assert!(Jwk::parse(&encryption).is_none());
        }
    }

    #[test]
    fn claims_are_checked() {
        let o = oauth();
        let now = now_seconds();
        let good = json!({"iss": "https://issuer.example", "aud": "http://127.0.0.1:8765/mcp", "exp": now + 300.0, "sub": "alice"});
        let claims = |v: &Value| v.as_object().unwrap().clone();
        o.claims_hold(&claims(&good), true).unwrap();
        let mut wrong_aud = good.clone();
        wrong_aud["aud"] = json!(["https://other.example/mcp"]);
        assert!(
            matches!(o.claims_hold(&claims(&wrong_aud), true), Err(Rejection::Invalid(m)) if m.contains("audience"))
        );
        let mut expired = good.clone();
        expired["exp"] = json!(now - 120.0);
        assert!(
            matches!(o.claims_hold(&claims(&expired), true), Err(Rejection::Invalid(m)) if m.contains("expired"))
        );
        let mut within_skew = good.clone();
        within_skew["exp"] = json!(now - 10.0);
        o.claims_hold(&claims(&within_skew), true).unwrap();
        let mut early = good.clone();
        early["nbf"] = json!(now + 600.0);
        assert!(o.claims_hold(&claims(&early), true).is_err());
        let mut other_issuer = good.clone();
        other_issuer["iss"] = json!("https://issuer.example/");
        assert!(o.claims_hold(&claims(&other_issuer), true).is_err());
        let mut no_exp = good.clone();
        no_exp.as_object_mut().unwrap().remove("exp");
        assert!(o.claims_hold(&claims(&no_exp), true).is_err());
        o.claims_hold(&claims(&no_exp), false).unwrap();
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let p = principal(
            json!({"sub": "a", "scope": "tally other"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .unwrap();
        assert!(p.scopes.contains("tally") && p.scopes.contains("other"));
        let p = principal(
            json!({"sub": "a", "scp": ["tally"]})
                .as_object()
                .unwrap()
                .clone(),
        )
        .unwrap();
        assert!(p.scopes.contains("tally"));
        assert!(principal(json!({"sub": ""}).as_object().unwrap().clone()).is_err());
    }

    #[test]
    fn a_scope_written_as_a_uri_is_held_by_its_last_part() {
        assert!(scope_satisfies("tally", "tally"));
        assert!(scope_satisfies("tally", "api://tally-app/tally"));
        assert!(scope_satisfies(
            "api://tally-app/tally",
            "api://tally-app/tally"
        ));
        assert!(!scope_satisfies("ally", "api://tally-app/tally"));
        assert!(!scope_satisfies("tally", "tally:read"));
        assert!(!scope_satisfies("read", "tally/read"));
    }

    #[test]
    fn urls_must_be_https_but_for_this_machine() {
        assert!(check_url("f", "https://id.example").is_ok());
        assert!(check_url("f", "http://127.0.0.1:8080/realms/x").is_ok());
        assert!(check_url("f", "http://localhost/x").is_ok());
        assert!(check_url("f", "http://[::1]:9/x").is_ok());
        assert!(check_url("f", "http://id.example").is_err());
        assert!(check_url("f", "http://127.0.0.1.evil.example/").is_err());
        assert!(check_url("f", "ftp://id.example").is_err());
    }

    #[test]
    fn the_metadata_is_served_under_the_resource_path() {
        let o = oauth();
        assert_eq!(
            o.metadata_url(),
            "http://127.0.0.1:8765/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(o.metadata()["resource"], "http://127.0.0.1:8765/mcp");
        assert_eq!(split_origin("https://a.example"), ("https://a.example", ""));
    }
}
