//! Matching what a caller typed against a closed vocabulary (dataset ids, field names, metric
//! kinds, computed measures, result columns).
//!
//! Order: exact → Unicode NFKC + trim + case fold → a close match, only when it scores above
//! [`FUZZY_THRESHOLD`] *and* beats the runner-up by [`FUZZY_MARGIN`], and never for names of
//! [`MAX_UNFUZZY_CHARS`] characters or fewer (too short to tell a typo from another word). A
//! tie is never broken by guessing: `手続が行われるイベント` is as close to `…(個人)` as to
//! `…(法人)`, so it is refused with both as candidates. Every match other than an exact one is
//! reported by the caller. Free-text data values never pass through this module.

use unicode_normalization::UnicodeNormalization;

/// The comparison form of a name: NFKC (full-width ↔ half-width, compatibility characters),
/// trimmed, lower-cased.
pub fn normalize(s: &str) -> String {
    s.nfkc().collect::<String>().trim().to_lowercase()
}

/// The comparison form of text values for substring search (`q`, `$contains`, a plain string):
/// NFKC (full-width letters, digits and signs become their usual forms, half-width katakana
/// full-width) and lower-cased, not trimmed. Borrowed when the text is already in that form,
/// which most Japanese text is, so folding a column costs little more than reading it.
///
/// Every text cell of a dataset is folded once when it is prepared, so the common characters
/// are classified by hand (ASCII, kana, kanji, CJK punctuation: kept; full-width ASCII and the
/// ideographic space: mapped, as NFKC maps them); only text with other characters goes
/// through full normalisation.
pub fn fold(s: &str) -> std::borrow::Cow<'_, str> {
    let mut changes = false;
    for c in s.chars() {
        match fold_class(c) {
            Fold::Keep => {}
            Fold::Map => changes = true,
            Fold::Normalize => {
                return std::borrow::Cow::Owned(s.nfkc().collect::<String>().to_lowercase());
            }
        }
    }
    if changes {
        std::borrow::Cow::Owned(s.chars().map(fold_mapped).collect())
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

enum Fold {
    /// NFKC and lower case leave it as it is.
    Keep,
    /// [`fold_mapped`] gives its folded form.
    Map,
    /// Needs full normalisation (it may change, or compose with a neighbour).
    Normalize,
}

fn fold_class(c: char) -> Fold {
    match c {
        'A'..='Z' | '\u{3000}' | '\u{FF01}'..='\u{FF5E}' => Fold::Map,
        '\0'..='\u{7f}'
        | '\u{3001}'..='\u{3002}'
        | '\u{3005}'..='\u{3007}'
        | '\u{3008}'..='\u{3011}'
        | '\u{3014}'..='\u{301F}'
        | '\u{3041}'..='\u{3096}'
        | '\u{309D}'..='\u{309E}'
        | '\u{30A1}'..='\u{30FA}'
        | '\u{30FB}'..='\u{30FE}'
        | '\u{4E00}'..='\u{9FFF}' => Fold::Keep,
        _ => {
            use unicode_normalization::{IsNormalized, is_nfkc_quick};
            let mut lower = c.to_lowercase();
            let same_case = lower.next() == Some(c) && lower.next().is_none();
            if same_case && is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes {
                Fold::Keep
            } else {
                Fold::Normalize
            }
        }
    }
}

/// The folded form of a character [`fold_class`] says is mapped: NFKC takes full-width ASCII
/// to ASCII and the ideographic space to a space; then lower case.
fn fold_mapped(c: char) -> char {
    let c = match c {
        '\u{3000}' => ' ',
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
        other => other,
    };
    c.to_ascii_lowercase()
}

/// The comparison form of values compared exactly (`[...]`, `$eq`, `$in`) on fields without
/// a codelist: NFKC and trimmed, case kept (`ABC` and `abc` may be different codes).
pub fn nfkc_value(s: &str) -> String {
    nfkc_form(s).into_owned()
}

/// [`nfkc_value`] borrowed where the value is its own form (already NFKC and trimmed, most
/// text): a field of millions of distinct values is compared without a copy of each.
pub fn nfkc_form(s: &str) -> std::borrow::Cow<'_, str> {
    use unicode_normalization::{IsNormalized, is_nfkc_quick};
    let trimmed = s.trim();
    if is_nfkc_quick(trimmed.chars()) == IsNormalized::Yes {
        std::borrow::Cow::Borrowed(trimmed)
    } else {
        std::borrow::Cow::Owned(s.nfkc().collect::<String>().trim().to_string())
    }
}

/// The comparison form of a value matched against the other names a record is known by (a
/// field's `aliases`, such as a law's short title and its law number): [`nfkc_value`], with
/// every number written where a number is counted read as that number, in kanji or in digits
/// alike: a run of numerals after `第` or before `年` or `号` (`平成十一年法律第百二十八号` and
/// `平成11年法律第128号` are one law number, `元年` is year 1). Numerals elsewhere are kept as
/// written (`一般` stays `一般`), and a run too long to be a number is kept too.
pub fn alias_key(s: &str) -> String {
    let chars: Vec<char> = nfkc_value(s).chars().collect();
    let mut out = String::with_capacity(chars.len() * 3);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '元' && chars.get(i + 1) == Some(&'年') {
            out.push('1');
            i += 1;
            continue;
        }
        if !is_numeral(c) {
            out.push(c);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_numeral(chars[i]) {
            i += 1;
        }
        let run = &chars[start..i];
        let counted =
            (start > 0 && chars[start - 1] == '第') || matches!(chars.get(i), Some('年' | '号'));
        match numeral_value(run).filter(|_| counted) {
            Some(n) => out.push_str(&n.to_string()),
            None => out.extend(run),
        }
    }
    out
}

fn kanji_digit(c: char) -> Option<u64> {
    "〇一二三四五六七八九"
        .chars()
        .position(|k| k == c)
        .map(|p| p as u64)
}

fn is_numeral(c: char) -> bool {
    c.is_ascii_digit() || kanji_digit(c).is_some() || matches!(c, '十' | '百' | '千' | '万')
}

/// A run of numerals as a number: ASCII digits, or kanji written with units (`百二十八`) or
/// digit by digit (`一二八`); `None` for a mix of both, or past `u64`.
fn numeral_value(run: &[char]) -> Option<u64> {
    if run.iter().all(char::is_ascii_digit) {
        return run.iter().try_fold(0u64, |n, c| {
            n.checked_mul(10)?.checked_add(u64::from(c.to_digit(10)?))
        });
    }
    if run.iter().any(char::is_ascii_digit) {
        return None;
    }
    let (mut total, mut section, mut digit): (u64, u64, Option<u64>) = (0, 0, None);
    for &c in run {
        if let Some(d) = kanji_digit(c) {
            digit = Some(digit.unwrap_or(0).checked_mul(10)?.checked_add(d)?);
            continue;
        }
        let unit = match c {
            '十' => 10,
            '百' => 100,
            '千' => 1000,
            _ => {
                // 万: what came before it counts ten-thousands.
                let man = section.checked_add(digit.take().unwrap_or(0))?.max(1);
                total = total.checked_add(man.checked_mul(10_000)?)?;
                section = 0;
                continue;
            }
        };
        section = section.checked_add(digit.take().unwrap_or(1).checked_mul(unit)?)?;
    }
    total.checked_add(section)?.checked_add(digit.unwrap_or(0))
}

/// Lowest similarity at which a name is corrected.
pub const FUZZY_THRESHOLD: f64 = 0.75;
/// How much the best candidate must beat the second best by to be corrected.
pub const FUZZY_MARGIN: f64 = 0.1;
/// Names this short are never fuzzy-matched (as input or as candidate).
pub const MAX_UNFUZZY_CHARS: usize = 2;
/// Input longer than this is never fuzzy-matched: an edit distance costs the product of the
/// two lengths, and a name this long that matches nothing exactly is not a typo.
pub const MAX_FUZZY_CHARS: usize = 128;
/// Ranking candidates for a message scores at most this many characters of each side.
pub const MAX_SCORED_CHARS: usize = 64;

/// The highest edit similarity two lengths allow: the distance is at least their difference.
fn reachable(a: usize, b: usize) -> f64 {
    if a.max(b) == 0 {
        1.0
    } else {
        a.min(b) as f64 / a.max(b) as f64
    }
}

/// How an input matched its canonical name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    Exact,
    /// Equal after NFKC + trim + case fold: reported in `resolved_fields`.
    Normalized,
    /// A close, unambiguous match (a typo): reported in `resolved_fields` and as a warning.
    Fuzzy,
}

/// An input resolved to a name of the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved<'a> {
    pub canonical: &'a str,
    /// The position of `canonical` in the vocabulary it was resolved against (for a
    /// dataset's fields, the field's id): callers never look the name up again.
    pub index: usize,
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
    if let Some((index, exact)) = names.clone().enumerate().find(|(_, n)| *n == input) {
        return Ok(Resolved {
            canonical: exact,
            index,
            how: Match::Exact,
        });
    }
    let wanted = normalize(input);
    let mut normalized = names
        .clone()
        .enumerate()
        .filter(|(_, n)| normalize(n) == wanted);
    if let (Some((index, only)), None) = (normalized.next(), normalized.next()) {
        return Ok(Resolved {
            canonical: only,
            index,
            how: Match::Normalized,
        });
    }
    if let Some(index) = fuzzy_index(&wanted, names.clone())
        && let Some(best) = names.clone().nth(index)
    {
        return Ok(Resolved {
            canonical: best,
            index,
            how: Match::Fuzzy,
        });
    }
    Err(rank(input, names))
}

/// The one clearly closest name, if the threshold, margin and length rules allow a correction.
///
/// Scores are plain edit similarity (no bonus for containment). Beyond threshold and margin, a
/// correction is refused when
/// - the input is a word found inside several names (`手続件数` in `総手続件数`,
///   `オンライン手続件数`, …): a generic term, not a typo — unless the closest name only adds
///   one final character (`procedure` → `procedures`);
/// - its numbers differ from the name's (`survey-r5` is another data set than `survey-r6`);
/// - it holds characters no name has that typos do not produce: control or invisible
///   characters, ASCII punctuation (`;`, `"`, `-`), or letters of a script the vocabulary
///   does not use (a Cyrillic `е` in a Latin name).
pub fn fuzzy<'a>(wanted: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let names: Vec<&str> = names.into_iter().collect();
    fuzzy_index(wanted, names.iter().copied()).map(|i| names[i])
}

/// [`fuzzy`], giving the position of the match in `names`.
fn fuzzy_index<'a>(wanted: &str, names: impl IntoIterator<Item = &'a str>) -> Option<usize> {
    let wanted_chars = wanted.chars().count();
    if wanted_chars <= MAX_UNFUZZY_CHARS || wanted_chars > MAX_FUZZY_CHARS {
        return None;
    }
    let names: Vec<(&str, String)> = names.into_iter().map(|n| (n, normalize(n))).collect();
    if suspicious(wanted, names.iter().map(|(_, n)| n.as_str())) {
        return None;
    }
    let mut best: Option<(f64, usize)> = None;
    let mut second = 0.0f64;
    for (i, (_, normalized)) in names.iter().enumerate() {
        // A name whose length alone keeps it under threshold − margin can neither be the
        // correction nor spoil the margin of one: it is not scored (linear, not quadratic).
        if reachable(wanted_chars, normalized.chars().count()) < FUZZY_THRESHOLD - FUZZY_MARGIN {
            continue;
        }
        let score = strsim::normalized_damerau_levenshtein(wanted, normalized);
        match best {
            Some((b, _)) if score <= b => second = second.max(score),
            _ => {
                if let Some((b, _)) = best {
                    second = second.max(b);
                }
                best = Some((score, i));
            }
        }
    }
    let (score, i) = best?;
    let (_, normalized) = &names[i];
    let containing = names.iter().filter(|(_, n)| n.contains(wanted)).count();
    let truncated = normalized
        .strip_prefix(wanted)
        .is_some_and(|rest| rest.chars().count() == 1);
    let eligible = normalized.chars().count() > MAX_UNFUZZY_CHARS
        && (digits(wanted).is_empty() || digits(wanted) == digits(normalized))
        && (containing <= 1 || truncated);
    (eligible && score >= FUZZY_THRESHOLD && score - second >= FUZZY_MARGIN).then_some(i)
}

/// Names an ambiguity offers at most (a choice a person reads through).
pub const MAX_CHOICES: usize = 10;

/// The names `input` fits equally well when it fits several and none better than the others
/// (a name it resolves to is never ambiguous): several names equal to it under NFKC and case
/// folding, a word found inside several names (`手続件数` in `総手続件数` and
/// `オンライン手続件数`), or several spellings equally close to it. At most [`MAX_CHOICES`], in
/// the vocabulary's order; empty when it fits one name or none.
pub fn ambiguous<'a, I>(input: &str, vocabulary: I) -> Vec<&'a str>
where
    I: IntoIterator<Item = &'a str>,
    I::IntoIter: Clone,
{
    let names = vocabulary.into_iter();
    let wanted = normalize(input);
    let length = wanted.chars().count();
    if length == 0 || length > MAX_FUZZY_CHARS {
        return Vec::new();
    }
    let several = |fits: Vec<&'a str>| {
        if fits.len() > 1 {
            fits.into_iter().take(MAX_CHOICES).collect()
        } else {
            Vec::new()
        }
    };
    let equal = several(names.clone().filter(|n| normalize(n) == wanted).collect());
    if !equal.is_empty() || length <= MAX_UNFUZZY_CHARS {
        return equal;
    }
    let containing = several(
        names
            .clone()
            .filter(|n| normalize(n).contains(&wanted))
            .collect(),
    );
    if !containing.is_empty() {
        return containing;
    }
    let scored: Vec<(f64, &'a str)> = names
        .filter(|n| reachable(length, n.chars().count()) >= FUZZY_THRESHOLD)
        .map(|n| {
            let score = strsim::normalized_damerau_levenshtein(
                &wanted,
                &normalize(n)
                    .chars()
                    .take(MAX_FUZZY_CHARS)
                    .collect::<String>(),
            );
            (score, n)
        })
        .collect();
    let best = scored.iter().map(|(s, _)| *s).fold(0.0, f64::max);
    if best < FUZZY_THRESHOLD {
        return Vec::new();
    }
    several(
        scored
            .into_iter()
            .filter(|(s, _)| best - s < FUZZY_MARGIN)
            .map(|(_, n)| n)
            .collect(),
    )
}

fn digits(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// Characters that make a close match a likely trick rather than a typo (see [`fuzzy`]).
fn suspicious<'a>(wanted: &str, vocabulary: impl Iterator<Item = &'a str> + Clone) -> bool {
    let script = |c: char| match c as u32 {
        0x0370..=0x03FF => 1, // Greek
        0x0400..=0x052F => 2, // Cyrillic
        _ => 0,
    };
    // Punctuation that quotes, ends or comments out statements, or walks paths; `-`, `_`, `.`
    // alone are ordinary typos and pass.
    let quoting = |c: char| {
        matches!(
            c,
            ';' | '\'' | '"' | '`' | '\\' | '/' | '<' | '>' | '{' | '}' | '|' | '='
        )
    };
    wanted.contains("--")
        || wanted.contains("/*")
        || wanted.contains("..")
        || wanted.chars().any(|c| {
            let odd = c.is_control()
                || matches!(c as u32, 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x2064 | 0xFEFF)
                || quoting(c)
                || script(c) != 0;
            odd && !vocabulary.clone().any(|n| n.contains(c))
        })
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
/// when one contains the other (a caller often types part of a long Japanese name), larger
/// the more of the longer name the shorter covers and when it is its start: `年` ranks
/// `年度` before `年平均気温`.
///
/// At most [`MAX_SCORED_CHARS`] characters of each are scored, so ranking a long input
/// against many names costs a bounded time per name.
pub fn similarity(a: &str, b: &str) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let head = |s: &str| -> String { s.chars().take(MAX_SCORED_CHARS).collect() };
    let base = strsim::normalized_damerau_levenshtein(&head(a), &head(b));
    let (short, long) = if a.chars().count() <= b.chars().count() {
        (a, b)
    } else {
        (b, a)
    };
    if long.contains(short) {
        let covered = short.chars().count() as f64 / long.chars().count() as f64;
        let contained = if long.starts_with(short) {
            0.7 + 0.25 * covered
        } else {
            0.5 + 0.2 * covered
        };
        base.max(contained).min(1.0)
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
    fn a_name_that_fits_several_equally_is_ambiguous_and_one_that_fits_one_is_not() {
        let fields = [
            "手続が行われるイベント(個人)",
            "手続が行われるイベント(法人)",
            "総手続件数",
            "オンライン手続件数",
            "所管府省庁",
            "region",
            "Region",
        ];
        let names = || fields.iter().copied();
        // A word inside several names.
        assert_eq!(
            ambiguous("手続が行われるイベント", names()),
            [
                "手続が行われるイベント(個人)",
                "手続が行われるイベント(法人)"
            ]
        );
        assert_eq!(
            ambiguous("手続件数", names()),
            ["総手続件数", "オンライン手続件数"]
        );
        // Equal to several under case folding.
        assert_eq!(ambiguous("REGION", names()), ["region", "Region"]);
        // Resolved to one name, or close to none: nothing to choose.
        assert!(ambiguous("所管府省", names()).is_empty());
        assert!(ambiguous("府省", names()).is_empty());
        assert!(ambiguous("budget", names()).is_empty());
        // Two spellings equally close.
        assert_eq!(
            ambiguous("regoin", ["regain", "rejoin", "amount"]),
            ["regain", "rejoin"]
        );
        // At most MAX_CHOICES, however many fit.
        let many: Vec<String> = (0..30).map(|i| format!("件数{i:02}")).collect();
        assert_eq!(
            ambiguous("件数", many.iter().map(String::as_str)).len(),
            0,
            "two characters never fit by containment"
        );
        let many: Vec<String> = (0..30).map(|i| format!("手続件数{i:02}")).collect();
        assert_eq!(
            ambiguous("手続件数", many.iter().map(String::as_str)).len(),
            MAX_CHOICES
        );
    }

    #[test]
    fn fold_makes_full_width_and_case_comparable() {
        assert_eq!(
            fold("国税電子申告・納税システム（ｅ－Ｔａｘ）"),
            "国税電子申告・納税システム(e-tax)"
        );
        assert_eq!(fold("e-Tax"), "e-tax");
        assert_eq!(fold("押印＋印鑑証明"), "押印+印鑑証明");
        assert_eq!(fold("ｶﾀｶﾅ"), "カタカナ");
        assert!(matches!(fold("電子申請"), std::borrow::Cow::Borrowed(_)));
        assert!(matches!(fold("plain ascii"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(nfkc_value(" １ 押印＋印鑑証明 "), "1 押印+印鑑証明");
        assert_eq!(fold("ＡＢＣ　ｄｅ"), "abc de");
        assert_eq!(fold("ÄBC"), "äbc");
        assert_eq!(fold("ガ"), "ガ");
        assert_eq!(fold("①"), "1");
    }

    /// The hand-classified characters fold exactly as NFKC + lower case does.
    #[test]
    fn fold_agrees_with_full_normalisation() {
        let full = |s: &str| s.nfkc().collect::<String>().to_lowercase();
        let ranges = [
            0x20u32..0x7f,
            0x3000..0x3020,
            0x3040..0x3100,
            0x4e00..0x4e80,
            0x9f00..0xa000,
            0xff00..0xffef,
            0x2460..0x2470,
            0xc0..0x180,
        ];
        for range in ranges {
            for code in range {
                if let Some(c) = char::from_u32(code) {
                    let s = format!("a{c}ア");
                    assert_eq!(fold(&s), full(&s), "U+{code:04X}");
                }
            }
        }
    }

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
                index: 0,
                how: Match::Exact
            })
        );
        // The position comes back with every kind of match, so nothing looks it up again.
        assert_eq!(resolve("count", vocab).map(|r| r.index), Ok(2));
        assert_eq!(
            resolve("ｶｳﾝﾄ数", ["件数", "カウント数"]).map(|r| (r.index, r.how)),
            Ok((1, Match::Normalized))
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
    fn a_clear_typo_is_corrected() {
        let vocab = [
            "所管府省庁",
            "手続名",
            "オンライン化の実施予定及び検討時の懸念点",
            "オンライン化実施時期",
        ];
        let r = resolve("オンライン化の実施予定及び検討時の憸念点", vocab).expect("corrected");
        assert_eq!(r.canonical, "オンライン化の実施予定及び検討時の懸念点");
        assert_eq!(r.how, Match::Fuzzy);
        assert_eq!(
            resolve("所管省庁", vocab).map(|r| r.canonical),
            Ok("所管府省庁")
        );
    }

    #[test]
    fn a_tie_is_never_corrected() {
        let vocab = [
            "手続が行われるイベント(個人)",
            "手続が行われるイベント(法人)",
            "手続名",
        ];
        let ranked = resolve("手続が行われるイベント", vocab).expect_err("a tie is refused");
        assert_eq!(
            &ranked[..2],
            [
                "手続が行われるイベント(個人)",
                "手続が行われるイベント(法人)"
            ]
        );
        // Near-ties (within the margin) are refused too.
        let vocab = ["オンライン手続件数", "非オンライン手続件数", "総手続件数"];
        // A word inside several names is a generic term, not a typo…
        assert!(resolve("手続件数", vocab).is_err());
        // …unless only a final character is missing.
        assert_eq!(
            resolve("procedure", ["procedures", "procedures-survey-r6"]).map(|r| r.canonical),
            Ok("procedures")
        );
    }

    #[test]
    fn short_names_are_never_fuzzy() {
        assert!(
            resolve("ab", ["abc", "xyz"]).is_err(),
            "input of 2 characters"
        );
        assert!(resolve("年度", ["年度末", "会計"]).is_err());
        assert!(
            resolve("idx", ["id", "name"]).is_err(),
            "candidate of 2 characters"
        );
        assert_eq!(
            resolve("ID", ["id", "name"]).map(|r| r.how),
            Ok(Match::Normalized),
            "case folding still applies"
        );
    }

    #[test]
    fn numbers_and_odd_characters_are_never_corrected_away() {
        let ids = ["procedures", "procedures-survey-r6"];
        assert!(
            resolve("procedures-survey-r5", ids).is_err(),
            "another round, not a typo"
        );
        assert!(resolve("procеdures", ids).is_err(), "Cyrillic е");
        assert!(resolve("procedures\0", ids).is_err(), "a control character");
        assert!(
            resolve("所管府\u{200b}省庁", ["所管府省庁"]).is_err(),
            "a zero-width space"
        );
        assert!(
            resolve("所管府省庁;--", ["所管府省庁"]).is_err(),
            "punctuation"
        );
        assert_eq!(
            resolve(
                "添付書類等提出の撤廃/省略状態",
                ["添付書類等提出の撤廃/省略状況", "手続名"]
            )
            .map(|r| r.canonical),
            Ok("添付書類等提出の撤廃/省略状況"),
            "punctuation the names have is fine"
        );
    }

    #[test]
    fn below_the_threshold_is_refused() {
        assert!(resolve("ministry", ["所管府省庁", "手続名"]).is_err());
        assert!(resolve("sum", ["count", "avg"]).is_err());
    }

    /// Regression (issue 36, "fuzzy matching bounded by input length"): a long input against
    /// many long names is refused or ranked in bounded time, never scored whole.
    #[test]
    fn long_inputs_are_never_scored_whole() {
        let names: Vec<String> = (0..2000)
            .map(|i| format!("{}{i}", "名".repeat(200)))
            .collect();
        let input = "名".repeat(250);
        let started = std::time::Instant::now();
        assert!(resolve(&input, names.iter().map(String::as_str)).is_err());
        assert!(
            fuzzy(
                &"x".repeat(MAX_FUZZY_CHARS + 1),
                ["x".repeat(MAX_FUZZY_CHARS).as_str()]
            )
            .is_none()
        );
        // Not a timing assertion: printed for whoever reads the output.
        println!(
            "2,000 names of 200 characters ranked against 250: {:?}",
            started.elapsed()
        );
        assert_eq!(reachable(10, 20), 0.5);
        assert_eq!(reachable(0, 0), 1.0);
    }

    #[test]
    fn alias_keys_read_counted_numbers_in_kanji_and_digits_alike() {
        let egov = alias_key("平成十一年法律第百二十八号");
        assert_eq!(egov, "平成11年法律第128号");
        assert_eq!(alias_key("平成11年法律第128号"), egov);
        assert_eq!(alias_key("平成１１年法律第１２８号"), egov);
        assert_eq!(alias_key(" 平成十一年法律第一二八号 "), egov);
        assert_eq!(alias_key("令和元年法律第二号"), "令和1年法律第2号");
        assert_eq!(
            alias_key("昭和二十五年法律第二百一号"),
            "昭和25年法律第201号"
        );
        assert_eq!(
            alias_key("平成二十六年特定個人情報保護委員会規則第一号"),
            "平成26年特定個人情報保護委員会規則第1号"
        );
        assert_eq!(alias_key("第一万二千三号"), "第12003号");
        // Numerals that count nothing are kept; different numbers stay different.
        assert_eq!(alias_key("一般社団法人法"), "一般社団法人法");
        assert_eq!(alias_key("不正アクセス禁止法"), "不正アクセス禁止法");
        assert_ne!(
            alias_key("平成十一年法律第百二十八号"),
            alias_key("平成十一年法律第百二十九号")
        );
        // A run no number fits in is kept as written, never wrapped.
        let long = format!("第{}号", "9".repeat(40));
        assert_eq!(alias_key(&long), long);
        assert_eq!(alias_key("第1二号"), "第1二号");
    }

    #[test]
    fn a_name_that_starts_with_what_was_typed_ranks_first() {
        let ranked = rank("年", ["年平均気温", "年度", "総人口"]);
        assert_eq!(ranked[..2], ["年度", "年平均気温"]);
        let ranked = rank("人口", ["15歳未満人口", "人口総数", "総人口"]);
        assert_eq!(ranked[0], "人口総数");
    }

    #[test]
    fn suggestions_need_a_margin() {
        assert_eq!(suggest("feilds", ["fields", "title"]), Some("fields"));
        assert_eq!(suggest("zzz", ["fields", "title"]), None);
    }
}
