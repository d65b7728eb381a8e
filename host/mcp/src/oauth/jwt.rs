//! A JWT and the keys that verify it: the algorithms accepted with the type of key each
//! needs, a key set's keys, and a token split and decoded but not yet trusted.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use super::principal::Rejection;

#[derive(Debug, Clone)]
pub(super) struct Jwk {
    pub(super) kid: Option<String>,
    pub(super) alg: Option<String>,
    pub(super) key: KeyMaterial,
}

#[derive(Debug, Clone)]
pub(super) enum KeyMaterial {
    Rsa { n: Vec<u8>, e: Vec<u8> },
    P256(Vec<u8>),
    Ed25519(Vec<u8>),
}

/// The algorithms accepted, with the type of key each needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Alg {
    Rs256,
    Es256,
    EdDsa,
}

impl Alg {
    pub(super) fn parse(name: &str) -> Result<Alg, Rejection> {
        match name {
            "RS256" => Ok(Alg::Rs256),
            "ES256" => Ok(Alg::Es256),
            "EdDSA" => Ok(Alg::EdDsa),
            other => Err(Rejection::Invalid(format!(
                "the token is signed with `{other}`, which this server does not accept (RS256, ES256 or EdDSA)"
            ))),
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Es256 => "ES256",
            Alg::EdDsa => "EdDSA",
        }
    }

    pub(super) fn fits(self, key: &KeyMaterial) -> bool {
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
    pub(super) fn parse(value: &Value) -> Option<Jwk> {
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

    pub(super) fn verifies(&self, alg: Alg, message: &[u8], signature: &[u8]) -> bool {
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
pub(super) struct Jwt {
    pub(super) alg: Alg,
    pub(super) kid: Option<String>,
    pub(super) claims: Map<String, Value>,
    pub(super) signed: Vec<u8>,
    pub(super) signature: Vec<u8>,
}

/// Whether a token is shaped as a JWT (three base64url parts whose first is a JSON object).
pub(super) fn looks_like_jwt(token: &str) -> bool {
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
    pub(super) fn parse(token: &str) -> Result<Jwt, Rejection> {
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
