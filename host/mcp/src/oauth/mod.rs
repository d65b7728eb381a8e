//! Tally as an OAuth 2.1 resource server (the MCP authorization specification): it never
//! issues tokens, it checks those an organisation's authorization server issued.
//!
//! - A JWT access token is checked against the issuer's key set (JWKS, fetched over https,
//!   cached, refreshed when a token names a key not in it, at most once every
//!   [`REFRESH_AT_MOST_EVERY`](resource::REFRESH_AT_MOST_EVERY), and kept when a refresh
//!   fails): its signature under an allowed algorithm (RS256, ES256, EdDSA; `none` and HMAC
//!   are refused, and the key's type must be the algorithm's), `iss` equal to the issuer,
//!   `aud` naming this resource (RFC 8707), `exp`/`nbf`/`iat` within
//!   [`SKEW`](resource::SKEW), and the scopes the server requires.
//! - An opaque token is asked about at the issuer's introspection endpoint (RFC 7662) when
//!   one is configured, and the answer kept for a short while
//!   ([`INTROSPECTION_TTL`](resource::INTROSPECTION_TTL)).
//!
//! What a request presents is never logged or kept: a token's digest keys the introspection
//! cache, and the caller is named by the token's subject (`oauth:<sub>`).
//!
//! The resource server and its checks (`resource`), over the options (`options`), what a
//! check yields (`principal`), JWTs and their keys (`jwt`) and what is read from the issuer
//! (`issuer`).

mod issuer;
mod jwt;
mod options;
mod principal;
mod resource;

pub use options::OAuthOptions;
pub use principal::{Principal, Rejection};
pub use resource::OAuth;

#[cfg(test)]
mod tests;
