//! The policy file (`--policy-file`): what each caller of the HTTP server may see, and who is
//! granted which policy (static tokens by id, OAuth access tokens by scope or claim). See
//! docs/security.md.
//!
//! ```yaml
//! policies:
//!   digital-team:
//!     datasets:
//!       survey:
//!         hide: [担当者]
//!         rows: {所管府省庁: デジタル庁}
//!       laws: {}
//!   everyone:
//!     datasets: "*"
//! grants:
//!   tokens: {reports-bot: [everyone]}
//!   scopes: {"tally:all": [everyone]}
//!   claims: {groups: {digital: [digital-team]}}
//!   default: []
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use tally_engine::Scope;
use tally_engine::policy::{Policy, Restriction};

use crate::oauth::Principal;

/// The policies of a server and who is granted which.
#[derive(Debug, Default)]
pub struct Policies {
    policies: BTreeMap<String, Policy>,
    tokens: BTreeMap<String, Vec<String>>,
    scopes: BTreeMap<String, Vec<String>>,
    claims: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    default: Vec<String>,
}

fn nearest(word: &str, known: &[&str]) -> String {
    known
        .iter()
        .min_by_key(|k| strsim::levenshtein(word, k))
        .filter(|k| strsim::levenshtein(word, k) <= 3)
        .map(|k| format!(" (did you mean `{k}`?)"))
        .unwrap_or_else(|| format!(" (known: {})", known.join(", ")))
}

fn object<'v>(value: &'v Value, at: &str) -> Result<&'v serde_json::Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("`{at}` must be a mapping"))
}

fn keys_known(
    map: &serde_json::Map<String, Value>,
    at: &str,
    known: &[&str],
) -> Result<(), String> {
    for key in map.keys() {
        if !known.contains(&key.as_str()) {
            return Err(format!(
                "`{at}` has an unknown key `{key}`{}",
                nearest(key, known)
            ));
        }
    }
    Ok(())
}

/// A list of names (a string alone is a list of one).
fn names(value: &Value, at: &str) -> Result<Vec<String>, String> {
    match value {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(list) => list
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("`{at}` must list names (strings)"))
            })
            .collect(),
        Value::Null => Ok(Vec::new()),
        _ => Err(format!("`{at}` must be a list of names")),
    }
}

fn restriction(value: &Value, at: &str) -> Result<Restriction, String> {
    if value.is_null() {
        return Ok(Restriction::default());
    }
    let map = object(value, at)?;
    keys_known(map, at, &["hide", "rows"])?;
    let hide: BTreeSet<String> = names(
        map.get("hide").unwrap_or(&Value::Null),
        &format!("{at}.hide"),
    )?
    .into_iter()
    .collect();
    let rows = match map.get("rows") {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) if o.is_empty() => {
            return Err(format!(
                "`{at}.rows` is empty; give a condition (e.g. {{\"所管府省庁\": \"デジタル庁\"}}) or leave `rows` out to show every row"
            ));
        }
        Some(v @ Value::Object(_)) => Some(vec![v.clone()]),
        Some(Value::Array(list)) if !list.is_empty() && list.iter().all(Value::is_object) => {
            Some(list.clone())
        }
        Some(_) => {
            return Err(format!(
                "`{at}.rows` must be a condition in the request language (a mapping, as `where` takes), or a list of them (rows any of them holds for)"
            ));
        }
    };
    Ok(Restriction { hide, rows })
}

impl Policies {
    /// Reads a policy file (YAML, or JSON which is YAML).
    pub fn read_file(path: &Path) -> Result<Policies, String> {
        let text = tally_semantic::files::read_small(path, 4 * 1024 * 1024)
            .map_err(|e| format!("cannot read the policy file {}: {e}", path.display()))?;
        let root = tally_semantic::yaml::parse(&text)
            .map_err(|e| {
                format!(
                    "{}: not valid YAML at line {}: {}",
                    path.display(),
                    e.pos.line,
                    e.message
                )
            })?
            .to_json();
        Policies::from_json(&root).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn from_json(root: &Value) -> Result<Policies, String> {
        let top = root
            .as_object()
            .ok_or("the policy file must be a mapping with `policies` (and `grants`)")?;
        for key in top.keys() {
            if !["policies", "grants"].contains(&key.as_str()) {
                return Err(format!(
                    "the policy file has an unknown key `{key}`{}",
                    nearest(key, &["policies", "grants"])
                ));
            }
        }
        let mut out = Policies::default();
        let listed = top
            .get("policies")
            .ok_or("the policy file has no `policies`; name at least one")?;
        let listed = object(listed, "policies")?;
        if listed.is_empty() {
            return Err("`policies` defines none; name at least one".into());
        }
        for (name, body) in listed {
            let at = format!("policies.{name}");
            let body = object(body, &at)?;
            keys_known(body, &at, &["datasets"])?;
            let mut policy = Policy {
                names: vec![name.clone()],
                ..Policy::default()
            };
            match body.get("datasets") {
                Some(Value::String(star)) if star == "*" => policy.every = true,
                Some(Value::Array(ids)) => {
                    for id in names(&Value::Array(ids.clone()), &format!("{at}.datasets"))? {
                        policy.datasets.insert(id, Restriction::default());
                    }
                }
                Some(Value::Object(by_id)) => {
                    for (id, r) in by_id {
                        policy
                            .datasets
                            .insert(id.clone(), restriction(r, &format!("{at}.datasets.{id}"))?);
                    }
                }
                _ => {
                    return Err(format!(
                        "`{at}.datasets` must be \"*\" (every dataset), a list of dataset ids, or a mapping from dataset id to what of it is shown (`hide`, `rows`)"
                    ));
                }
            }
            out.policies.insert(name.clone(), policy);
        }
        let known: Vec<&str> = out.policies.keys().map(String::as_str).collect();
        let check = |list: &[String], at: &str| -> Result<(), String> {
            for name in list {
                if !out.policies.contains_key(name) {
                    return Err(format!(
                        "`{at}` grants `{name}`, which `policies` does not define{}",
                        nearest(name, &known)
                    ));
                }
            }
            Ok(())
        };
        let mut tokens = BTreeMap::new();
        let mut scopes = BTreeMap::new();
        let mut claims = BTreeMap::new();
        let mut default = Vec::new();
        if let Some(grants) = top.get("grants") {
            let grants = object(grants, "grants")?;
            keys_known(grants, "grants", &["tokens", "scopes", "claims", "default"])?;
            for (kind, into) in [("tokens", &mut tokens), ("scopes", &mut scopes)] {
                if let Some(map) = grants.get(kind) {
                    for (who, list) in object(map, &format!("grants.{kind}"))? {
                        let at = format!("grants.{kind}.{who}");
                        let list = names(list, &at)?;
                        check(&list, &at)?;
                        into.insert(who.clone(), list);
                    }
                }
            }
            if let Some(map) = grants.get("claims") {
                for (claim, values) in object(map, "grants.claims")? {
                    let mut by_value = BTreeMap::new();
                    for (value, list) in object(values, &format!("grants.claims.{claim}"))? {
                        let at = format!("grants.claims.{claim}.{value}");
                        let list = names(list, &at)?;
                        check(&list, &at)?;
                        by_value.insert(value.clone(), list);
                    }
                    claims.insert(claim.clone(), by_value);
                }
            }
            if let Some(list) = grants.get("default") {
                default = names(list, "grants.default")?;
                check(&default, "grants.default")?;
            }
        }
        out.tokens = tokens;
        out.scopes = scopes;
        out.claims = claims;
        out.default = default;
        Ok(out)
    }

    /// Every policy, to be checked against the datasets served.
    pub fn all(&self) -> impl Iterator<Item = &Policy> {
        self.policies.values()
    }

    /// The token ids grants name.
    pub fn granted_tokens(&self) -> impl Iterator<Item = (&String, &Vec<String>)> {
        self.tokens.iter()
    }

    /// The scope of the policies named.
    pub fn scope_of(&self, granted: &[String]) -> Scope {
        let policies: Vec<&Policy> = granted
            .iter()
            .filter_map(|n| self.policies.get(n))
            .collect();
        if policies.is_empty() {
            return Scope::Only(Arc::default());
        }
        Scope::Policy(Arc::new(Policy::union(policies)))
    }

    /// What an OAuth caller sees: the policies its scopes and claims are granted, else the
    /// default ones (none: nothing).
    pub fn scope_of_principal(&self, principal: &Principal) -> Scope {
        let mut granted: Vec<String> = Vec::new();
        for scope in &principal.scopes {
            if let Some(list) = self.scopes.get(scope) {
                granted.extend(list.iter().cloned());
            }
        }
        for (claim, by_value) in &self.claims {
            let values: Vec<String> = match principal.claims.get(claim) {
                Some(Value::String(s)) => vec![s.clone()],
                Some(Value::Array(list)) => list
                    .iter()
                    .filter_map(|v| match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        Value::Bool(b) => Some(b.to_string()),
                        _ => None,
                    })
                    .collect(),
                Some(Value::Number(n)) => vec![n.to_string()],
                Some(Value::Bool(b)) => vec![b.to_string()],
                _ => Vec::new(),
            };
            for v in values {
                if let Some(list) = by_value.get(&v) {
                    granted.extend(list.iter().cloned());
                }
            }
        }
        if granted.is_empty() {
            granted = self.default.clone();
        }
        self.scope_of(&granted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> Value {
        json!({
            "policies": {
                "digital": {"datasets": {"survey": {"hide": ["mail"], "rows": {"dept": "D"}}, "laws": null}},
                "all": {"datasets": "*"},
                "few": {"datasets": ["laws"]}
            },
            "grants": {
                "tokens": {"bot": ["all"]},
                "scopes": {"tally:all": "all"},
                "claims": {"groups": {"digital": ["digital"]}},
                "default": ["few"]
            }
        })
    }

    fn principal(claims: Value) -> Principal {
        let claims = claims.as_object().unwrap().clone();
        Principal {
            subject: "s".into(),
            scopes: claims
                .get("scope")
                .and_then(Value::as_str)
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            claims,
        }
    }

    #[test]
    fn grants_map_scopes_and_claims_to_policies() {
        let p = Policies::from_json(&file()).unwrap();
        let Scope::Policy(d) =
            p.scope_of_principal(&principal(json!({"groups": ["digital", "x"]})))
        else {
            panic!()
        };
        assert!(d.allows("survey") && d.allows("laws") && !d.allows("other"));
        assert!(d.restriction("survey").is_some() && d.restriction("laws").is_none());
        let Scope::Policy(all) = p.scope_of_principal(&principal(
            json!({"scope": "tally tally:all", "groups": "digital"}),
        )) else {
            panic!()
        };
        assert!(all.allows("other") && all.restriction("survey").is_none());
        let Scope::Policy(few) = p.scope_of_principal(&principal(json!({}))) else {
            panic!()
        };
        assert!(few.allows("laws") && !few.allows("survey"));
    }

    #[test]
    fn mistakes_are_refused_with_what_would_work() {
        let e = Policies::from_json(
            &json!({"policies": {"a": {"datasets": "*"}}, "grants": {"token": {}}}),
        )
        .unwrap_err();
        assert!(e.contains("`tokens`"), "{e}");
        let e = Policies::from_json(
            &json!({"policies": {"a": {"datasets": "*"}}, "grants": {"tokens": {"x": ["b"]}}}),
        )
        .unwrap_err();
        assert!(e.contains("does not define"), "{e}");
        let e = Policies::from_json(&json!({"policies": {"a": {"datasets": {"s": {"rows": {}}}}}}))
            .unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e =
            Policies::from_json(&json!({"policies": {"a": {"datasets": {"s": {"hid": ["x"]}}}}}))
                .unwrap_err();
        assert!(e.contains("`hide`"), "{e}");
    }
}
