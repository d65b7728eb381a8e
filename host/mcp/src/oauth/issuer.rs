//! What is read from the issuer over https: its metadata (where its key set is), its key
//! set, and its introspection answers, with the client that reads them (the certificate
//! authorities given, no redirects, bounded time and size).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value};

/// The largest key set or metadata document read.
const MAX_DOCUMENT_BYTES: u64 = 512 * 1024;
/// How long a fetch from the issuer may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// `https://…`, or `http://` to a loopback host (an issuer run on the same machine).
pub(super) fn check_url(flag: &str, url: &str) -> Result<(), String> {
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

/// `(scheme://authority, path)` of a URL.
pub(super) fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    }
}

/// The key set's address from the issuer's metadata: RFC 8414 (the well-known path before
/// the issuer's path), then OpenID Connect discovery (after it). The metadata must name the
/// same issuer.
pub(super) fn discover_jwks(agent: &ureq::Agent, issuer: &str) -> Result<String, String> {
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

pub(super) fn get_json(agent: &ureq::Agent, url: &str) -> Result<Value, String> {
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

pub(super) fn post_introspection(
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
pub(super) fn agent(ca_certs: &[PathBuf]) -> Result<ureq::Agent, String> {
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
