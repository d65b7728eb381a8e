//! The static bearer tokens a server accepts (from a token file or an environment variable,
//! kept as digests and compared in constant time) and what each may see, with the policies
//! granted to OAuth callers: the `Auth` read again on SIGHUP.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use axum::http::header;
use sha2::{Digest, Sha256};
use tally_engine::Scope;

#[derive(Debug)]
pub(super) struct Token {
    pub(super) id: String,
    digest: [u8; 32],
    pub(super) scope: Scope,
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

    pub(super) fn add(&mut self, id: &str, secret: &str, scope: Scope) -> Result<(), String> {
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
    pub(super) fn find(&self, presented: &str) -> Option<&Token> {
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
pub(super) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
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
