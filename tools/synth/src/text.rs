//! Japanese number and date spellings used in law numbers and articles.

const DIGITS: [&str; 10] = ["〇", "一", "二", "三", "四", "五", "六", "七", "八", "九"];

/// Kanji numeral as written in law titles and numbers: 201 → 二百一,
/// 10 → 十, 1000 → 千 (1 ≤ n ≤ 9999).
pub fn kanji(n: u32) -> String {
    assert!((1..=9999).contains(&n), "kanji numeral out of range: {n}");
    let mut out = String::new();
    for (unit, value) in [("千", 1000), ("百", 100), ("十", 10)] {
        let d = (n / value) % 10;
        if d > 1 {
            out.push_str(DIGITS[d as usize]);
        }
        if d > 0 {
            out.push_str(unit);
        }
    }
    if !n.is_multiple_of(10) {
        out.push_str(DIGITS[(n % 10) as usize]);
    }
    out
}

/// Full-width digits (５ for 5), a common inconsistency in the survey.
pub fn full_width(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '0'..='9' => char::from_u32(c as u32 - '0' as u32 + '０' as u32).unwrap_or(c),
            _ => c,
        })
        .collect()
}

/// Western year → Japanese era year, e.g. 1950 → 昭和二十五年, 1989 → 平成元年.
pub fn era_year(year: u32) -> String {
    let (era, y) = match year {
        ..=1988 => ("昭和", year.saturating_sub(1925).max(1)),
        1989..=2018 => ("平成", year - 1988),
        _ => ("令和", year - 2018),
    };
    if y == 1 {
        format!("{era}元年")
    } else {
        format!("{era}{}年", kanji(y))
    }
}

/// Rounds to two significant digits (half up), as the survey's counts are.
pub fn round2(n: i64) -> i64 {
    if n < 100 {
        return n;
    }
    let mut scale = 1;
    while n / scale >= 100 {
        scale *= 10;
    }
    (n + scale / 2) / scale * scale
}

/// Largest two-significant-digit number not above `n`.
pub fn floor2(n: i64) -> i64 {
    if n < 100 {
        return n;
    }
    let mut scale = 1;
    while n / scale >= 100 {
        scale *= 10;
    }
    n / scale * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kanji_numerals() {
        assert_eq!(kanji(1), "一");
        assert_eq!(kanji(10), "十");
        assert_eq!(kanji(19), "十九");
        assert_eq!(kanji(201), "二百一");
        assert_eq!(kanji(267), "二百六十七");
        assert_eq!(kanji(1000), "千");
        assert_eq!(kanji(2024), "二千二十四");
    }

    #[test]
    fn eras() {
        assert_eq!(era_year(1950), "昭和二十五年");
        assert_eq!(era_year(1989), "平成元年");
        assert_eq!(era_year(2018), "平成三十年");
        assert_eq!(era_year(2019), "令和元年");
    }

    #[test]
    fn rounding() {
        assert_eq!(round2(99), 99);
        assert_eq!(round2(123), 120);
        assert_eq!(round2(125), 130);
        assert_eq!(round2(338_538_154), 340_000_000);
        assert_eq!(floor2(338_538_154), 330_000_000);
        assert_eq!(full_width("第5条"), "第５条");
    }
}
