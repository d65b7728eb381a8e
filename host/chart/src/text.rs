//! Text: how values read, and how wide text is.
//!
//! Widths are estimated, not measured: the SVG is drawn before (and without) any font, and the
//! reader's fonts decide the final width. Full-width characters (CJK, kana, full-width forms)
//! are about 1 em in every Japanese font, Latin letters and digits about 0.6 em on average;
//! the estimate errs wide so that labels are cut rather than overlap.

use std::cmp::Ordering;

use serde_json::Value;

/// How a missing group value or metric reads, as in the HTML view.
pub(crate) const NO_VALUE: &str = "(no value)";

const ELLIPSIS: char = '…';

/// A group value as a label: null and the empty string read as [`NO_VALUE`]; numbers as
/// JavaScript prints them (`3`, not `3.0`).
pub(crate) fn cell_label(v: &Value) -> String {
    match v {
        Value::Null => NO_VALUE.to_owned(),
        Value::String(s) if s.is_empty() => NO_VALUE.to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// The order of a grouping's values as codes read: the view's `byCode`,
/// `a.localeCompare(b, undefined, { numeric: true })` with [`NO_VALUE`] last. Runs of digits
/// compare as numbers (`2` before `10`, `2 …` before `2-1 …` before `10 …`), a digit before
/// anything else, other runs as strings. Equal numbers written differently (`01`, `1`) fall
/// back to the whole strings, so that the order is total and does not depend on the input's.
///
/// Not a port of ICU's collation: letters compare by code point (`B` before `a`), which for
/// the codes and Japanese names grouped on gives the same order.
pub(crate) fn code_order(a: &str, b: &str) -> Ordering {
    match (a == NO_VALUE, b == NO_VALUE) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        (false, false) => {}
    }
    let (ra, rb) = (runs(a), runs(b));
    for (x, y) in ra.iter().zip(&rb) {
        let o = match (x, y) {
            (Run::Number(x), Run::Number(y)) => compare_digits(x, y),
            (Run::Number(_), Run::Text(_)) => Ordering::Less,
            (Run::Text(_), Run::Number(_)) => Ordering::Greater,
            (Run::Text(x), Run::Text(y)) => x.cmp(y),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    ra.len().cmp(&rb.len()).then_with(|| a.cmp(b))
}

/// A run of a value: digits (their values, 0..=9) or anything else.
#[derive(Debug)]
enum Run<'a> {
    Number(Vec<u8>),
    Text(&'a str),
}

/// The value of a decimal digit: ASCII and full-width (`０`..`９`, common in Japanese data),
/// which the view's collation also reads as numbers.
fn digit(c: char) -> Option<u8> {
    match c {
        '0'..='9' => Some(c as u8 - b'0'),
        '\u{FF10}'..='\u{FF19}' => Some((c as u32 - 0xFF10) as u8),
        _ => None,
    }
}

fn runs(s: &str) -> Vec<Run<'_>> {
    let mut out = Vec::new();
    let mut text_start = None;
    let mut number: Option<Vec<u8>> = None;
    for (i, c) in s.char_indices() {
        match digit(c) {
            Some(d) => {
                if let Some(start) = text_start.take() {
                    out.push(Run::Text(&s[start..i]));
                }
                number.get_or_insert_with(Vec::new).push(d);
            }
            None => {
                if let Some(n) = number.take() {
                    out.push(Run::Number(n));
                }
                text_start.get_or_insert(i);
            }
        }
    }
    if let Some(start) = text_start {
        out.push(Run::Text(&s[start..]));
    }
    if let Some(n) = number {
        out.push(Run::Number(n));
    }
    out
}

/// Digit runs compared as the numbers they write, of any length (no overflow): leading zeros
/// dropped, then the longer is larger, then digit by digit.
fn compare_digits(a: &[u8], b: &[u8]) -> Ordering {
    let strip = |d: &[u8]| {
        let first = d.iter().position(|&x| x != 0).unwrap_or(d.len());
        d[first..].to_vec()
    };
    let (a, b) = (strip(a), strip(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(&b))
}

/// A number with thousands separators and at most `max_decimals` decimals, trailing zeros
/// dropped (the view's `Intl.NumberFormat` with `maximumFractionDigits`).
pub(crate) fn format_number(x: f64, max_decimals: usize) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let fixed = format!("{x:.max_decimals$}");
    let (int_part, frac) = fixed.split_once('.').unwrap_or((&fixed, ""));
    let frac = frac.trim_end_matches('0');
    let digits = int_part.trim_start_matches('-');
    let negative =
        int_part.starts_with('-') && (!digits.trim_matches('0').is_empty() || !frac.is_empty());
    let mut out = String::with_capacity(fixed.len() + digits.len() / 3 + 1);
    if negative {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    out
}

/// A share (0..1) as a percentage with at most 2 decimals: `0.5234` → `52.34 %`.
pub(crate) fn format_percent(x: f64) -> String {
    format!("{} %", format_number(x * 100.0, 2))
}

/// Whether a character takes a full em (East Asian wide and full-width characters).
fn is_wide(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x115F       // Hangul Jamo
        | 0x2E80..=0x303E     // CJK radicals, punctuation
        | 0x3041..=0x33FF     // kana, CJK compatibility
        | 0x3400..=0x4DBF     // CJK extension A
        | 0x4E00..=0x9FFF     // CJK unified ideographs
        | 0xA000..=0xA4CF     // Yi
        | 0xAC00..=0xD7A3     // Hangul syllables
        | 0xF900..=0xFAFF     // CJK compatibility ideographs
        | 0xFE30..=0xFE4F     // CJK compatibility forms
        | 0xFF00..=0xFF60     // full-width forms
        | 0xFFE0..=0xFFE6
        | 0x1F300..=0x1F64F   // pictographs, emoji
        | 0x1F900..=0x1F9FF
        | 0x20000..=0x3FFFD) // CJK extensions B..
}

fn char_em(c: char) -> f64 {
    if c.is_control() {
        0.0
    } else if is_wide(c) {
        1.0
    } else {
        0.6
    }
}

/// The estimated width in pixels of `s` set at `px` pixels.
pub(crate) fn text_width(s: &str, px: f64) -> f64 {
    s.chars().map(char_em).sum::<f64>() * px
}

/// `s` cut to fit `max_width` pixels at `px`, ending with `…` when cut.
pub(crate) fn truncate(s: &str, max_width: f64, px: f64) -> String {
    if text_width(s, px) <= max_width {
        return s.to_owned();
    }
    let budget = max_width - char_em(ELLIPSIS) * px;
    let mut width = 0.0;
    let mut out = String::new();
    for c in s.chars() {
        width += char_em(c) * px;
        if width > budget {
            break;
        }
        out.push(c);
    }
    let mut out = out.trim_end().to_owned();
    out.push(ELLIPSIS);
    out
}

/// `s` broken into lines of at most `max_width` pixels at `px`, at most `max_lines` of them;
/// the last ends with `…` when text was left out. Lines break at spaces when a line has one,
/// else anywhere (Japanese has no spaces between words).
pub(crate) fn wrap(s: &str, max_width: f64, px: f64, max_lines: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut broke_at_space = false;
    let mut rest: Vec<char> = s
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .collect();
    while !rest.is_empty() && lines.len() < max_lines {
        let mut width = 0.0;
        let mut end = 0;
        while end < rest.len() && width + char_em(rest[end]) * px <= max_width {
            width += char_em(rest[end]) * px;
            end += 1;
        }
        if end == rest.len() {
            lines.push(rest.iter().collect());
            rest.clear();
            break;
        }
        // Break at the last space of the line if it is not too far back, so that a long
        // word is not pushed whole to the next line and leave this one mostly empty.
        let end = end.max(1);
        let cut = match rest[..end].iter().rposition(|c| *c == ' ') {
            Some(space) if space * 3 >= end => space,
            _ => end,
        };
        lines.push(rest[..cut].iter().collect::<String>().trim_end().to_owned());
        broke_at_space = rest.get(cut) == Some(&' ');
        let skip = if broke_at_space { cut + 1 } else { cut };
        rest.drain(..skip);
    }
    if let Some(last) = lines.last_mut().filter(|_| !rest.is_empty()) {
        let space = if broke_at_space { " " } else { "" };
        let with_rest = format!("{last}{space}{}", rest.iter().collect::<String>());
        *last = truncate(&with_rest, max_width, px);
    }
    lines
}

/// Whether XML 1.0 can hold `c` at all (it cannot hold most controls, nor U+FFFE and U+FFFF).
fn xml_char(c: char) -> bool {
    let control = (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r');
    !control && !matches!(c, '\u{FFFE}' | '\u{FFFF}')
}

/// `s` with what XML cannot hold (and other controls) as spaces: for text given to plotters,
/// which escapes markup but passes controls through.
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() || !xml_char(c) {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Text for an XML attribute or element.
pub(crate) fn escape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if !xml_char(c) => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_in_the_view() {
        for (x, d, expected) in [
            (1234567.0, 4, "1,234,567"),
            (1234.5678, 2, "1,234.57"),
            (-1234.5, 4, "-1,234.5"),
            (0.0, 4, "0"),
            (-0.00001, 2, "0"),
            (999.0, 0, "999"),
            (1000.0, 0, "1,000"),
            (0.3333, 4, "0.3333"),
        ] {
            assert_eq!(format_number(x, d), expected, "{x} with {d} decimals");
        }
        assert_eq!(format_percent(0.5234), "52.34 %");
        assert_eq!(format_percent(1.0), "100 %");
        assert_eq!(format_percent(0.66667), "66.67 %");
    }

    #[test]
    fn codes_sort_as_numbers_with_no_value_last() {
        let mut codes = vec![
            NO_VALUE,
            "10 その他",
            "2-1 届出",
            "1 申請",
            "2 報告",
            "02",
            "2",
            "１１ 全角",
            "3 審査",
            "b",
            "a10",
            "a9",
            "",
        ];
        codes.sort_by(|a, b| code_order(a, b));
        assert_eq!(
            codes,
            vec![
                "",
                "1 申請",
                "02",
                "2",
                "2 報告",
                "2-1 届出",
                "3 審査",
                "10 その他",
                "１１ 全角",
                "a9",
                "a10",
                "b",
                NO_VALUE,
            ]
        );
        // Longer than any integer type.
        assert_eq!(
            code_order("123456789012345678901234567890", "99"),
            Ordering::Greater
        );
        assert_eq!(code_order(NO_VALUE, NO_VALUE), Ordering::Equal);
    }

    #[test]
    fn wide_characters_count_double() {
        assert_eq!(text_width("総務省", 10.0), 30.0);
        assert_eq!(text_width("abc", 10.0), 18.0);
    }

    #[test]
    fn long_labels_are_cut_with_an_ellipsis() {
        let cut = truncate("デジタル庁デジタル庁デジタル庁", 60.0, 10.0);
        assert!(cut.ends_with('…'));
        assert!(text_width(&cut, 10.0) <= 60.0);
        assert_eq!(truncate("総務省", 60.0, 10.0), "総務省");
    }

    #[test]
    fn wrapping_keeps_every_line_within_the_width() {
        let text =
            "集計に使った 3 件のレコードの値が欠けています。the parts do not add up to the records";
        let lines = wrap(text, 120.0, 10.0, 10);
        assert!(lines.len() > 1);
        for l in &lines {
            assert!(text_width(l, 10.0) <= 120.0, "{l}");
        }
        assert_eq!(lines.concat().replace(' ', ""), text.replace(' ', ""));
        let cut = wrap(text, 120.0, 10.0, 2);
        assert_eq!(cut.len(), 2);
        assert!(cut[1].ends_with('…'));
        // A line cut at a space keeps the space before what follows.
        let english = wrap("one two three four five six seven eight", 60.0, 10.0, 1);
        assert_eq!(english, vec!["one two t…"]);
    }
}
