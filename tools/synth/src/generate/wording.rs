//! Cell text in the survey's own styles: procedure names filled in from patterns, articles
//! and processing periods as the survey spells them, lists of receivers and of codes.

use crate::rng::Rng;
use crate::sampling::combo;
use crate::text::{full_width, kanji};
use crate::vocab;

pub(super) fn join(parts: &[&str]) -> String {
    parts.join("; ")
}

/// Replaces `{S}` and friends in a name pattern.
pub(super) fn fill(pattern: &str, rng: &mut Rng, subject: &str) -> String {
    let mut s = pattern.replace("{S}", subject);
    for (key, words) in [
        ("{O}", vocab::NAME_OBJECTS),
        ("{A}", vocab::NAME_ACTIONS),
        ("{D}", vocab::NAME_DOCUMENTS),
        ("{R}", vocab::NAME_RECORDS),
    ] {
        if s.contains(key) {
            let word = if pattern.contains("{S}の{O}") && key == "{O}" && rng.chance(0.3) {
                *rng.pick(vocab::NAME_DECISIONS)
            } else {
                *rng.pick(words)
            };
            s = s.replace(key, word);
        }
    }
    s
}

/// A 根拠条項号 such as 第12条の2第1項, in one of the spellings the survey
/// mixes: Arabic, kanji, full-width, 第5の2条, with a law prefix, or listing
/// two articles.
pub(super) fn article(rng: &mut Rng, max: u64) -> String {
    // Article 1 states a law's purpose and rarely grounds a procedure;
    // lower articles are still somewhat more common than later ones.
    let max = max.max(3);
    let a = if rng.chance(0.6) {
        rng.range(2, max)
    } else {
        rng.skewed(2, max)
    };
    let a = if rng.chance(0.02) { 1 } else { a };
    let branch = rng.chance(0.12).then(|| rng.range(2, 5));
    let para = rng.chance(0.55).then(|| rng.skewed(1, 8));
    let item = rng.chance(0.2).then(|| rng.skewed(1, 15));
    let arabic = |a: u64| {
        let mut s = format!("第{a}条");
        if let Some(b) = branch {
            s.push_str(&format!("の{b}"));
        }
        if let Some(p) = para {
            s.push_str(&format!("第{p}項"));
        }
        if let Some(i) = item {
            s.push_str(&format!("第{i}号"));
        }
        s
    };
    match rng.below(100) {
        0..=79 => arabic(a),
        80..=88 => {
            let k = |n: u64| kanji(n as u32);
            let mut s = format!("第{}条", k(a));
            if let Some(b) = branch {
                s.push_str(&format!("の{}", k(b)));
            }
            if let Some(p) = para {
                s.push_str(&format!("第{}項", k(p)));
            }
            if let Some(i) = item {
                s.push_str(&format!("第{}号", k(i)));
            }
            s
        }
        89..=93 => full_width(&arabic(a)),
        94..=95 => match (branch, para) {
            (Some(b), Some(p)) => format!("第{a}の{b}条第{p}項"),
            (Some(b), None) => format!("第{a}の{b}条"),
            (None, Some(p)) => format!("第{a}条{p}項"),
            (None, None) => format!("{a}条"),
        },
        96..=97 => format!(
            "{}{}",
            rng.pick(&["法", "令", "規則", "施行規則"]),
            arabic(a)
        ),
        _ => format!("{}、第{}条", arabic(a), a + 1),
    }
}

/// A standard processing period in the free-text style of the survey.
pub(super) fn period(rng: &mut Rng) -> String {
    // Round, customary periods dominate; the rest is the long tail of
    // free-text answers.
    const TYPICAL: &[(&str, f64)] = &[
        ("1か月", 6.0),
        ("30日", 6.0),
        ("14日", 5.0),
        ("7日", 4.0),
        ("10日", 3.0),
        ("2か月", 3.0),
        ("3か月", 3.0),
        ("60日", 2.0),
        ("20日", 2.0),
        ("15日", 2.0),
        ("90日", 2.0),
        ("2週間", 2.0),
        ("即日", 2.0),
        ("45日", 1.5),
        ("6か月", 1.0),
        ("5日", 1.0),
        ("3日", 1.0),
    ];
    const DAYS: &[u64] = &[1, 2, 3, 5, 7, 10, 14, 15, 20, 21, 30, 40, 45, 60, 90, 120];
    if rng.chance(0.55) {
        return (*rng.pick_weighted(TYPICAL)).to_string();
    }
    let days = |rng: &mut Rng| {
        if rng.chance(0.7) {
            *rng.pick(DAYS)
        } else {
            rng.range(1, 180)
        }
    };
    match rng.below(100) {
        0..=27 => format!("{}日", days(rng)),
        28..=39 => format!("{}か月", rng.pick(&[1u64, 2, 3, 4, 6, 12])),
        40..=49 => format!("{}日以内", days(rng)),
        50..=56 => format!("{}営業日", rng.pick(&[3u64, 5, 7, 10, 14, 20, 30])),
        57..=66 => format!("{}週間", rng.range(1, 8)),
        67..=78 => {
            let a = days(rng);
            let b = a * rng.range(2, 6);
            format!("{a}日～{b}日")
        }
        79..=83 => (*rng.pick(&["定めなし", "標準処理期間なし", "随時", "個別に判断"])).to_string(),
        84..=90 => format!("概ね{}日", days(rng)),
        91..=94 => format!("{}か月～{}か月", rng.range(1, 3), rng.range(4, 12)),
        _ => format!("{}日（補正期間を除く）", days(rng)),
    }
}

/// Where an application is handed in: generic bodies, the ministry's own
/// offices, and local government, listed in a fixed order as on a form.
pub(super) fn receiver_list(
    rng: &mut Rng,
    offices: &[&str],
    national: bool,
    local: bool,
) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if national {
        if offices.is_empty() || rng.chance(0.55) {
            parts.push(vocab::GENERIC_RECEIVERS[0]);
        }
        if rng.chance(0.08) {
            parts.push(*rng.pick(&vocab::GENERIC_RECEIVERS[1..]));
        }
        if !offices.is_empty() && (parts.is_empty() || rng.chance(0.35)) {
            parts.push(*rng.pick(offices));
            if rng.chance(0.1) {
                parts.push(*rng.pick(offices));
            }
        }
    }
    if local || (!national && rng.chance(0.5)) {
        parts.push("地方等");
    }
    if parts.is_empty() {
        parts.push(vocab::GENERIC_RECEIVERS[0]);
    }
    let order = |p: &str| {
        vocab::GENERIC_RECEIVERS
            .iter()
            .chain(offices)
            .position(|x| *x == p)
            .unwrap_or(usize::MAX)
    };
    parts.sort_by_key(|p| order(p));
    parts.dedup();
    join(&parts)
}

/// Multi-value cell from the codes of a codelist (weights by position).
pub(super) fn code_combo(
    rng: &mut Rng,
    codes: &[&str],
    weights: &[f64],
    exclusive: &[&str],
    max: usize,
) -> String {
    let vocab: Vec<(&str, f64)> = codes.iter().copied().zip(weights.iter().copied()).collect();
    combo(rng, &vocab, exclusive, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn articles_look_like_articles() {
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let a = article(&mut rng, 50);
            assert!(a.contains('条'), "{a}");
        }
    }
}
