//! Each reference read as the provisions it names and matched to the linked dataset's: found
//! (per group, law and provision), or missed and listed by why.

use std::collections::BTreeMap;

use serde_json::Value;
use tally_plugin_api::locator::{normalize_references, within};

use super::read::{Linked, Provisional, folded};
use crate::results::{Unmatched, UnmatchedReference};

/// References listed per reason at most (all are counted).
const LISTED: usize = 50;

/// Why a reference found no provision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Miss {
    NoReference,
    LawNotServed,
    NotInForce,
    NotFound,
    Unparsable,
}

impl Miss {
    fn reason(self, target: &str, as_of: Option<&str>) -> String {
        match self {
            Miss::NotInForce => format!(
                "law not in force: `{target}` has the law, but no revision of it in force on {}",
                as_of.unwrap_or("the date asked")
            ),
            Miss::NoReference => "no reference: the record names no law or provision".to_string(),
            Miss::LawNotServed => {
                format!("law not served: `{target}` holds no law of that name or number")
            }
            Miss::NotFound => format!(
                "provision not found: the law is served by `{target}`, but has no such article, paragraph or item"
            ),
            Miss::Unparsable => {
                "unparsable reference: it names no article (第…条) Tally can read".to_string()
            }
        }
    }
}

/// A provision found, per group: (group values, the law's key values, the provision).
pub(super) type ProvisionKey = (Vec<Option<String>>, Vec<String>, String);
/// What rests on a provision: records, the linked rows it stands for, its revision.
pub(super) type Found = (u64, Vec<u64>, Option<String>);
/// A reference that found nothing: the link's values, the provision read (if any).
pub(super) type MissedReference = (Vec<Option<String>>, Option<String>);

/// Each reference read as provisions, and found or missed.
pub(super) struct Matched {
    /// (group values, law key, provision) → records, and the rows it stands for.
    pub(super) found: BTreeMap<ProvisionKey, Found>,
    pub(super) misses: BTreeMap<Miss, BTreeMap<MissedReference, u64>>,
    /// Records per reason, each record once (a reference naming two missing provisions is
    /// one record under "provision not found").
    pub(super) missed_records: BTreeMap<Miss, u64>,
    pub(super) records_missing: u64,
    pub(super) records_matched: u64,
}

pub(super) fn match_references(
    distinct: &[(Vec<Option<String>>, u64)],
    groups: usize,
    e: usize,
    linked: &Linked,
) -> Matched {
    let mut m = Matched {
        found: BTreeMap::new(),
        misses: BTreeMap::new(),
        missed_records: BTreeMap::new(),
        records_missing: 0,
        records_matched: 0,
    };
    for (values, n) in distinct {
        let n = *n;
        let group: Vec<Option<String>> = values[..groups].to_vec();
        let link_values = &values[groups..];
        let law_values = &link_values[..e];
        let reference = link_values[e].clone();
        let mut reasons: Vec<Miss> = Vec::new();
        let misses = &mut m.misses;
        let mut miss = |why: Miss, provision: Option<String>| {
            *misses
                .entry(why)
                .or_default()
                .entry((link_values.to_vec(), provision))
                .or_insert(0) += n;
            if !reasons.contains(&why) {
                reasons.push(why);
            }
        };
        if law_values
            .iter()
            .any(|v| v.as_deref().is_none_or(|v| v.trim().is_empty()))
            || reference.as_deref().is_none_or(|r| r.trim().is_empty())
        {
            miss(Miss::NoReference, None);
            *m.missed_records.entry(Miss::NoReference).or_insert(0) += n;
            m.records_missing += n;
            continue;
        }
        let key: Vec<String> = law_values
            .iter()
            .map(|v| folded(v.as_deref().unwrap_or("")))
            .collect();
        let Some(provisions) = linked.laws.get(&key) else {
            if linked.in_force_elsewhere.contains(&key) {
                miss(Miss::NotInForce, None);
            } else {
                miss(Miss::LawNotServed, None);
            }
            for why in reasons {
                *m.missed_records.entry(why).or_insert(0) += n;
            }
            m.records_missing += n;
            continue;
        };
        let named = normalize_references(reference.as_deref().unwrap_or(""));
        if named.is_empty() {
            miss(Miss::Unparsable, None);
            *m.missed_records.entry(Miss::Unparsable).or_insert(0) += n;
            m.records_missing += n;
            continue;
        }
        let mut any = false;
        for locator in named {
            let rows: Vec<&Provisional> = provisions
                .iter()
                .filter(|p| within(&p.locator, &locator))
                .collect();
            if rows.is_empty() {
                miss(Miss::NotFound, Some(locator));
                continue;
            }
            any = true;
            let entry = m
                .found
                .entry((group.clone(), key.clone(), locator))
                .or_insert_with(|| {
                    (
                        0,
                        rows.iter().map(|p| p.row).collect(),
                        rows[0].revision.clone(),
                    )
                });
            entry.0 += n;
        }
        if any {
            m.records_matched += n;
        }
        if !reasons.is_empty() {
            for why in reasons {
                *m.missed_records.entry(why).or_insert(0) += n;
            }
            m.records_missing += n;
        }
    }
    m
}

/// The references that found no provision, by why, the most frequent first.
pub(super) fn unmatched(
    misses: BTreeMap<Miss, BTreeMap<MissedReference, u64>>,
    missed_records: &BTreeMap<Miss, u64>,
    target: &str,
    as_of: Option<&str>,
) -> Vec<Unmatched> {
    let mut unmatched = Vec::new();
    for (why, refs) in misses {
        let mut listed: Vec<_> = refs.into_iter().collect();
        listed.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        unmatched.push(Unmatched {
            reason: why.reason(target, as_of),
            records: missed_records.get(&why).copied().unwrap_or(0),
            references: listed
                .into_iter()
                .take(LISTED)
                .map(|((values, provision), n)| UnmatchedReference {
                    values: values
                        .into_iter()
                        .map(|v| v.map_or(Value::Null, Value::String))
                        .collect(),
                    provision,
                    records: n,
                })
                .collect(),
        });
    }
    unmatched
}
