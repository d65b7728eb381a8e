//! The settings of OAuth as the binary gives them from its `--oauth-*` flags; the default is
//! OAuth off.

use std::path::PathBuf;

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
