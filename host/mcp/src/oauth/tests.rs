//! Unit tests of the resource server: algorithms, keys and signatures, claims, scopes, the
//! issuer's URLs and where the metadata is served.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::issuer::{check_url, split_origin};
use super::jwt::{Alg, Jwk, Jwt, KeyMaterial};
use super::options::OAuthOptions;
use super::principal::{Rejection, principal, scope_satisfies};
use super::resource::{OAuth, now_seconds};

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
