//! Periods as people write them: one period of a time field read from the forms a person or a
//! model writes (`2020`, `2020年`, `2020年度`, `FY2020`, `令和2年度`, `平成元年`, `R2`,
//! full-width digits, `令和二年`), for the field's grain. The reading is disclosed by the
//! caller (`resolved_fields`), with a note when the form names another kind of year than the
//! field holds (a fiscal year written on a calendar-year field).

use crate::definition::Grain;

/// The Japanese eras a year may be written in: name, romanised initial, first year.
const ERAS: &[(&str, char, i64, i64)] = &[
    // (era, initial, first Gregorian year, last year of the era)
    ("令和", 'r', 2019, i64::MAX),
    ("平成", 'h', 1989, 2019),
    ("昭和", 's', 1926, 1989),
    ("大正", 't', 1912, 1926),
    ("明治", 'm', 1868, 1912),
];

/// What kind of year a written form names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YearKind {
    /// Written without saying (`2020`, `令和2`).
    Plain,
    /// A calendar year (`2020年`, `令和2年`, `CY2020`).
    Calendar,
    /// A fiscal year (`2020年度`, `FY2020`, `令和2年度`).
    Fiscal,
}

/// One period read from text: its canonical text for the grain (`2020`, `2020-04`,
/// `2020-04-01`) and, when the form said so, what kind of year it named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub canonical: String,
    pub kind: YearKind,
    /// The form was not already the canonical one (an era, a suffix, `FY`): disclose it.
    pub rewritten: bool,
}

/// Reads `text` (already NFKC-folded and lowercased) as one period of `grain`; `None` when
/// it is not one.
pub fn read(text: &str, grain: Grain) -> Option<Read> {
    let t = text.trim();
    let (year, kind, rest) = year_prefix(t)?;
    let rest = rest.trim();
    let canonical = match grain {
        Grain::Year | Grain::FiscalYear => {
            if !rest.is_empty() {
                return None;
            }
            year.to_string()
        }
        Grain::Month => {
            let (month, rest) = number_prefix(rest.trim_start_matches(['-', '/', '.']))?;
            let rest = rest.trim_start_matches('月').trim();
            if !(1..=12).contains(&month) || !rest.is_empty() {
                return None;
            }
            format!("{year:04}-{month:02}")
        }
        Grain::Date => {
            let (month, rest) = number_prefix(rest.trim_start_matches(['-', '/', '.']))?;
            let rest = rest.trim_start_matches('月');
            let (day, rest) = number_prefix(rest.trim_start_matches(['-', '/', '.']))?;
            let rest = rest.trim_start_matches('日').trim();
            if !(1..=12).contains(&month) || !(1..=31).contains(&day) || !rest.is_empty() {
                return None;
            }
            format!("{year:04}-{month:02}-{day:02}")
        }
    };
    let rewritten = canonical != t;
    Some(Read {
        canonical,
        kind,
        rewritten,
    })
}

/// A year at the start of `t`: Gregorian (`2020`, `2020年`, `2020年度`, `fy2020`), or a
/// Japanese era (`令和2年度`, `平成元年`, `r2`, `h22年度`); the kind of year; what follows.
fn year_prefix(t: &str) -> Option<(i64, YearKind, &str)> {
    // `FY2020`, `FY 2020`, `CY2020`.
    for (prefix, kind) in [("fy", YearKind::Fiscal), ("cy", YearKind::Calendar)] {
        if let Some(rest) = t.strip_prefix(prefix) {
            let (year, rest) = number_prefix(rest.trim_start())?;
            return (1000..=9999).contains(&year).then_some((year, kind, rest));
        }
    }
    let (year, rest) = match era_year(t) {
        Some(found) => found,
        None => {
            let (year, rest) = number_prefix(t)?;
            if !(1000..=9999).contains(&year) {
                return None;
            }
            (year, rest)
        }
    };
    let (kind, rest) = if let Some(r) = rest.strip_prefix("年度") {
        (YearKind::Fiscal, r)
    } else if let Some(r) = rest.strip_prefix('年') {
        (YearKind::Calendar, r)
    } else {
        (YearKind::Plain, rest)
    };
    Some((year, kind, rest))
}

/// A year written in a Japanese era (`令和2`, `令和元`, `令和二`, `r2`, `h22`), as a
/// Gregorian year, and what follows it.
fn era_year(t: &str) -> Option<(i64, &str)> {
    for (name, initial, first, last) in ERAS {
        let rest = match t.strip_prefix(name) {
            Some(r) => r,
            None => match t.strip_prefix(*initial) {
                // An initial is followed by digits (`r2`), never by a word.
                Some(r) if r.starts_with(|c: char| c.is_ascii_digit()) => r,
                _ => continue,
            },
        };
        let rest = rest.trim_start();
        let (n, rest) = match rest.strip_prefix('元') {
            Some(r) => (1, r),
            None => number_prefix(rest)?,
        };
        let year = first.checked_add(n)? - 1;
        if n < 1 || year > *last {
            return None;
        }
        return Some((year, rest));
    }
    None
}

/// A number at the start of `t`, in ASCII digits or in kanji numerals (`二十二`), and what
/// follows it.
fn number_prefix(t: &str) -> Option<(i64, &str)> {
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 {
        // Past i64 the parse fails: no year.
        return Some((t[..digits].parse().ok()?, &t[digits..]));
    }
    const KANJI: &str = "〇一二三四五六七八九";
    let mut value = 0i64;
    let mut current = 0i64;
    let mut used = 0;
    for c in t.chars() {
        // A year is a few digits: a longer numeral is no year (and never overflows).
        if used >= 4 * '十'.len_utf8() {
            return None;
        }
        if let Some(d) = KANJI.chars().position(|k| k == c) {
            current = current * 10 + d as i64;
        } else if c == '十' {
            value += current.max(1) * 10;
            current = 0;
        } else {
            break;
        }
        used += c.len_utf8();
    }
    (used > 0).then_some((value + current, &t[used..]))
}

/// Whether a form naming `kind` of year is a different kind than `grain` holds (a fiscal
/// year written on a calendar-year field, or the other way), which the reading says.
pub fn other_kind(kind: YearKind, grain: Grain) -> bool {
    matches!(
        (kind, grain),
        (YearKind::Fiscal, Grain::Year) | (YearKind::Calendar, Grain::FiscalYear)
    )
}

/// Gaps listed by name at most.
const LISTED_GAPS: usize = 12;

/// The periods there are, as a refusal names them: `2009–2020 (12 periods, none missing)`,
/// `2009–2020 (10 periods; none for 2013, 2015)`.
pub fn describe(periods: &[crate::request::Scalar]) -> String {
    let (Some(first), Some(last)) = (periods.first(), periods.last()) else {
        return "no period (every record's is missing)".into();
    };
    if periods.len() == 1 {
        return format!("one period, {}", first.text());
    }
    let years: Option<Vec<i64>> = periods
        .iter()
        .map(|p| match p {
            crate::request::Scalar::Int(i) => Some(*i),
            _ => None,
        })
        .collect();
    let span = format!(
        "{}–{} ({} periods",
        first.text(),
        last.text(),
        periods.len()
    );
    match years {
        Some(years) => {
            let missing: Vec<i64> = years.windows(2).flat_map(|w| (w[0] + 1)..w[1]).collect();
            if missing.is_empty() {
                format!("{span}, none missing)")
            } else {
                let mut listed: Vec<String> = missing
                    .iter()
                    .take(LISTED_GAPS)
                    .map(ToString::to_string)
                    .collect();
                if missing.len() > LISTED_GAPS {
                    listed.push(format!("and {} more", missing.len() - LISTED_GAPS));
                }
                format!("{span}; none for {})", listed.join(", "))
            }
        }
        None => format!("{span})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn year(t: &str, grain: Grain) -> Option<String> {
        read(&crate::names::nfkc_value(t).to_lowercase(), grain).map(|r| r.canonical)
    }

    #[test]
    fn years_as_people_write_them() {
        for (written, expected) in [
            ("2020", "2020"),
            ("2020年", "2020"),
            ("2020年度", "2020"),
            ("２０２０年度", "2020"),
            ("FY2020", "2020"),
            ("FY 2020", "2020"),
            ("令和2年", "2020"),
            ("令和２年度", "2020"),
            ("令和元年", "2019"),
            ("令和元年度", "2019"),
            ("平成22年度", "2010"),
            ("平成31年", "2019"),
            ("昭和64年", "1989"),
            ("令和二年", "2020"),
            ("平成二十二年度", "2010"),
            ("R2", "2020"),
            ("H22年度", "2010"),
        ] {
            assert_eq!(
                year(written, Grain::FiscalYear).as_deref(),
                Some(expected),
                "{written}"
            );
        }
        for not_a_year in ["平成32年", "令和0年", "20", "東京", "2020年4月", "latest"] {
            assert_eq!(year(not_a_year, Grain::Year), None, "{not_a_year}");
        }
    }

    #[test]
    fn hostile_numerals_are_no_year_and_never_overflow() {
        let long_kanji = format!("令和{}年", "九".repeat(40));
        let huge = "令和9223372036854775807年";
        let huger = format!("{}年", "9".repeat(400));
        for text in [
            long_kanji.as_str(),
            huge,
            huger.as_str(),
            "平成十十十十十年",
            "fy99999999999999999999",
        ] {
            assert_eq!(year(text, Grain::Year), None, "{text}");
        }
        assert_eq!(year("令和十年", Grain::Year).as_deref(), Some("2028"));
    }

    #[test]
    fn months_and_days() {
        assert_eq!(year("2020年4月", Grain::Month).as_deref(), Some("2020-04"));
        assert_eq!(year("令和2年4月", Grain::Month).as_deref(), Some("2020-04"));
        assert_eq!(year("2020-04", Grain::Month).as_deref(), Some("2020-04"));
        assert_eq!(year("2020/4", Grain::Month).as_deref(), Some("2020-04"));
        assert_eq!(
            year("令和2年4月1日", Grain::Date).as_deref(),
            Some("2020-04-01")
        );
        assert_eq!(year("2020-13", Grain::Month), None);
    }

    #[test]
    fn the_kind_of_year_is_told() {
        let fiscal = read("2020年度", Grain::Year).expect("read");
        assert!(other_kind(fiscal.kind, Grain::Year) && fiscal.rewritten);
        let plain = read("2020", Grain::Year).expect("read");
        assert!(!plain.rewritten && !other_kind(plain.kind, Grain::FiscalYear));
    }
}
