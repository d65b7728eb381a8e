//! Matching what a caller typed against a closed vocabulary (dataset ids, field names, metric
//! kinds, computed measures, result columns).
//!
//! Order: exact → Unicode NFKC + trim + case fold. A name that matches neither is refused with
//! ranked candidates; close-match correction comes with the resolution issue and will sit here.
//! Free-text data values never pass through this module.

use unicode_normalization::UnicodeNormalization;

/// The comparison form of a name: NFKC (full-width ↔ half-width, compatibility characters),
/// trimmed, lower-cased.
pub fn normalize(s: &str) -> String {
    s.nfkc().collect::<String>().trim().to_lowercase()
}

/// How an input matched its canonical name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    Exact,
    /// Equal after NFKC + trim + case fold: reported in `resolved_fields`.
    Normalized,
}

/// An input resolved to a name of the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved<'a> {
    pub canonical: &'a str,
    pub how: Match,
}

/// Resolves `input` against `vocabulary`; on failure returns the vocabulary ranked by
/// closeness to the input (best first).
pub fn resolve<'a, I>(input: &str, vocabulary: I) -> Result<Resolved<'a>, Vec<&'a str>>
where
    I: IntoIterator<Item = &'a str>,
    I::IntoIter: Clone,
{
    let names = vocabulary.into_iter();
    if let Some(exact) = names.clone().find(|n| *n == input) {
        return Ok(Resolved {
            canonical: exact,
            how: Match::Exact,
        });
    }
    let wanted = normalize(input);
    let mut normalized = names.clone().filter(|n| normalize(n) == wanted);
    if let (Some(only), None) = (normalized.next(), normalized.next()) {
        return Ok(Resolved {
            canonical: only,
            how: Match::Normalized,
        });
    }
    Err(rank(input, names))
}

/// The vocabulary ordered by similarity to `input`, best first; ties keep vocabulary order.
pub fn rank<'a>(input: &str, vocabulary: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let wanted = normalize(input);
    let mut scored: Vec<(f64, usize, &str)> = vocabulary
        .into_iter()
        .enumerate()
        .map(|(i, name)| (similarity(&wanted, &normalize(name)), i, name))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, _, name)| name).collect()
}

/// Similarity in 0..=1 of two normalised names: edit distance over characters, with a bonus
/// when one contains the other (a caller often types part of a long Japanese name).
pub fn similarity(a: &str, b: &str) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let base = strsim::normalized_damerau_levenshtein(a, b);
    if a.contains(b) || b.contains(a) {
        base.max(0.5) + 0.25 * (1.0 - base)
    } else {
        base
    }
}

/// The one clearly nearest name, if any: used to suggest a spelling in messages (never to
/// change what a caller asked for).
pub fn suggest<'a>(input: &str, vocabulary: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = normalize(input);
    let mut scored: Vec<(f64, &str)> = vocabulary
        .into_iter()
        .map(|name| (similarity(&wanted, &normalize(name)), name))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (best_score, best) = *scored.first()?;
    let runner_up = scored.get(1).map_or(0.0, |s| s.0);
    (best_score >= 0.6 && best_score - runner_up >= 0.1).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfkc_and_case_fold() {
        assert_eq!(normalize(" ＡＢＣ１ "), "abc1");
        assert_eq!(normalize("ｵﾝﾗｲﾝ"), "オンライン");
    }

    #[test]
    fn exact_then_normalized() {
        let vocab = ["所管府省庁", "Count", "count"];
        assert_eq!(
            resolve("所管府省庁", vocab),
            Ok(Resolved {
                canonical: "所管府省庁",
                how: Match::Exact
            })
        );
        // Two names normalise alike: never guess between them.
        assert!(resolve("COUNT", vocab).is_err());
        assert_eq!(
            resolve("所管府省庁 ", ["所管府省庁"]).map(|r| r.how),
            Ok(Match::Normalized)
        );
    }

    #[test]
    fn ranking_puts_the_typo_first() {
        let ranked = rank("所管省庁", ["手続名", "所管府省庁", "法令名"]);
        assert_eq!(ranked[0], "所管府省庁");
    }

    #[test]
    fn suggestions_need_a_margin() {
        assert_eq!(suggest("feilds", ["fields", "title"]), Some("fields"));
        assert_eq!(suggest("zzz", ["fields", "title"]), None);
    }
}
