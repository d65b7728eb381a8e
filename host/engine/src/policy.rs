//! What a caller may see of a dataset: policies.
//!
//! A policy names datasets, and within one may hide fields and restrict rows to those a
//! fixed condition in the request language holds for (`{"所管府省庁": "デジタル庁"}`). It is
//! applied where every surface already looks for a dataset, the caller's view of the catalog
//! (`Engine::seen`, in `twin.rs`): a restricted caller is handed a *restricted twin* of the dataset, a
//! dataset of its own whose definition was read without the hidden fields and whose backend
//! reads only the rows the condition holds for. Everything the engine computes for it
//! (statistics kept while preparing, codelists counted from dictionaries, text and part
//! indexes, record counts, caches, cursors, `inspect_dataset`'s memo) is computed from those
//! rows and fields alone, so no surface can show a hidden field or count a restricted row,
//! and the condition is part of every plan, never applied after an aggregation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tally_storage::Dataset;

/// Which datasets a caller may see. Outside its scope a dataset is neither listed nor
/// queryable, and asking for one gets the same "not found" as a dataset that does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    All,
    Only(Arc<std::collections::BTreeSet<String>>),
    /// Datasets as policies show them: some whole, some with fields hidden or rows
    /// restricted (see [`policy`]).
    Policy(Arc<Policy>),
}

impl Scope {
    pub fn allows(&self, dataset: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(set) => set.contains(dataset),
            Scope::Policy(p) => p.allows(dataset),
        }
    }

    /// What of `dataset` a policy keeps from the caller, unless they see it whole.
    pub fn restriction(&self, dataset: &str) -> Option<&Restriction> {
        match self {
            Scope::Policy(p) => p.restriction(dataset),
            _ => None,
        }
    }
}

/// What a caller may see: the datasets (every one, or those named) and, per dataset, what
/// of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// The policies this one is made of, by name (for the audit log).
    pub names: Vec<String>,
    /// Every dataset not named in `datasets` is seen whole.
    pub every: bool,
    pub datasets: BTreeMap<String, Restriction>,
}

/// What a caller may see of one dataset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restriction {
    /// Fields left out everywhere.
    pub hide: BTreeSet<String>,
    /// `None`: every row. Else the rows at least one of these conditions (a `where` in the
    /// request language each) holds for.
    pub rows: Option<Vec<Value>>,
}

impl Restriction {
    pub fn is_whole(&self) -> bool {
        self.hide.is_empty() && self.rows.is_none()
    }

    /// What a caller granted both sees: the fields either shows, the rows either lets
    /// through.
    fn union(&self, other: &Restriction) -> Restriction {
        Restriction {
            hide: self.hide.intersection(&other.hide).cloned().collect(),
            rows: match (&self.rows, &other.rows) {
                (Some(a), Some(b)) => {
                    let mut rows = a.clone();
                    rows.extend(b.iter().filter(|r| !a.contains(r)).cloned());
                    Some(rows)
                }
                _ => None,
            },
        }
    }

    /// Names this restriction among others (part of the twin's version), salted with a value
    /// of this process: a caller who sees the suffix cannot test guesses of what it hides.
    pub(crate) fn key(&self, salt: u64) -> String {
        let text = json!({"hide": self.hide, "rows": self.rows}).to_string();
        let mut hasher = Sha256::new();
        hasher.update(salt.to_le_bytes());
        hasher.update(text.as_bytes());
        let digest = hasher.finalize();
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Policy {
    pub fn allows(&self, dataset: &str) -> bool {
        self.every || self.datasets.contains_key(dataset)
    }

    /// The restriction on `dataset`, unless it is seen whole.
    pub fn restriction(&self, dataset: &str) -> Option<&Restriction> {
        self.datasets.get(dataset).filter(|r| !r.is_whole())
    }

    /// What a caller granted several policies sees: each dataset any of them shows, as much
    /// of it as any of them shows.
    pub fn union<'p>(policies: impl IntoIterator<Item = &'p Policy>) -> Policy {
        let mut all = Policy::default();
        for p in policies {
            all.names.extend(p.names.iter().cloned());
            for (id, r) in &p.datasets {
                let merged = match all.datasets.get(id) {
                    Some(have) => have.union(r),
                    None if all.every => Restriction::default(),
                    None => r.clone(),
                };
                all.datasets.insert(id.clone(), merged);
            }
            if p.every {
                // Datasets this policy does not name it shows whole.
                for (id, r) in all.datasets.iter_mut() {
                    if !p.datasets.contains_key(id) {
                        *r = Restriction::default();
                    }
                }
                all.every = true;
            }
        }
        all.names.sort();
        all.names.dedup();
        all
    }
}

/// The note every answer on a restricted twin carries (what is restricted is not said).
pub const RESTRICTED_NOTE: &str = "An access policy applies to you on this dataset: some of its records or fields may not be visible to you, and every count, sum and statistic covers only what you may see.";

/// Restricted twins kept, by (dataset version, restriction key).
#[derive(Debug)]
pub(crate) struct Twins {
    pub(crate) made: std::sync::Mutex<HashMap<(String, String), Arc<Dataset>>>,
    pub(crate) salt: u64,
}

impl Default for Twins {
    fn default() -> Twins {
        use std::hash::BuildHasher;
        Twins {
            made: Default::default(),
            // Random per process (the standard library seeds each RandomState so).
            salt: std::collections::hash_map::RandomState::new().hash_one(0x7a11_u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restricted(hide: &[&str], rows: Option<Vec<Value>>) -> Restriction {
        Restriction {
            hide: hide.iter().map(|s| s.to_string()).collect(),
            rows,
        }
    }

    #[test]
    fn a_caller_granted_several_policies_sees_what_any_shows() {
        let a = Policy {
            names: vec!["a".into()],
            every: false,
            datasets: BTreeMap::from([
                (
                    "x".into(),
                    restricted(&["mail", "phone"], Some(vec![json!({"dept": "A"})])),
                ),
                ("y".into(), restricted(&["mail"], None)),
            ]),
        };
        let b = Policy {
            names: vec!["b".into()],
            every: false,
            datasets: BTreeMap::from([(
                "x".into(),
                restricted(&["mail"], Some(vec![json!({"dept": "B"})])),
            )]),
        };
        let u = Policy::union([&a, &b]);
        assert_eq!(u.names, ["a", "b"]);
        let x = u.restriction("x").unwrap();
        assert_eq!(x.hide, BTreeSet::from(["mail".to_string()]));
        assert_eq!(x.rows.as_ref().unwrap().len(), 2);
        assert!(u.allows("y") && !u.allows("z"));
        let everything = Policy {
            names: vec!["all".into()],
            every: true,
            datasets: BTreeMap::new(),
        };
        let u = Policy::union([&a, &everything]);
        assert!(u.allows("z") && u.restriction("x").is_none() && u.restriction("y").is_none());
        let u = Policy::union([&everything, &a]);
        assert!(u.restriction("x").is_none(), "{u:?}");
    }

    #[test]
    fn the_key_tells_restrictions_apart() {
        let a = restricted(&["m"], Some(vec![json!({"d": "A"})]));
        let b = restricted(&["m"], Some(vec![json!({"d": "B"})]));
        assert_ne!(a.key(1), b.key(1));
        assert_eq!(a.key(1), a.clone().key(1));
        assert_ne!(a.key(1), a.key(2));
    }
}
