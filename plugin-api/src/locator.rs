//! Law locators: where in a Japanese law a provision is, written as e-Gov writes it.
//!
//! A locator is `第九条第一項第二号`: the article (`第三十六条の二` for e-Gov's article number
//! `36_2`), the paragraph (`第一項`, always written, also for an article of one paragraph) and
//! the item (`第六号の四`), in kanji numerals; provisions of a supplementary provision start
//! with `附則`. The law plugin writes every row's locator this way, and the host reads the
//! inconsistent forms people write (`第５条の２第３項`, `第5の2条`, `法第12条1項`, lists such as
//! `第20条第1項及び第3項`) into the same form with [`normalize_references`], so a reference
//! from another dataset finds its provision.

/// A number in kanji numerals as laws write them (`三十六`, `百十`, `二千`, `一万`).
pub fn kanji(n: u64) -> String {
    const DIGITS: [&str; 10] = ["〇", "一", "二", "三", "四", "五", "六", "七", "八", "九"];
    if n == 0 {
        return DIGITS[0].to_string();
    }
    fn below_10000(n: u64, out: &mut String) {
        const DIGITS: [&str; 10] = ["", "一", "二", "三", "四", "五", "六", "七", "八", "九"];
        for (unit, name) in [(1000, "千"), (100, "百"), (10, "十")] {
            let d = (n / unit) % 10;
            if d > 0 {
                if d > 1 {
                    out.push_str(DIGITS[d as usize]);
                }
                out.push_str(name);
            }
        }
        out.push_str(DIGITS[(n % 10) as usize]);
    }
    let mut out = String::new();
    let (man, rest) = (n / 10_000, n % 10_000);
    if man > 0 {
        if man >= 10_000 {
            // Beyond what any law numbers; written plainly rather than guessed.
            return n.to_string();
        }
        below_10000(man, &mut out);
        out.push('万');
    }
    below_10000(rest, &mut out);
    out
}

/// An e-Gov number attribute (`36`, `36_2`, `2_3_6`) as kanji joined with の (`三十六の二`);
/// `None` if it is not numbers joined by `_`.
pub fn numbers(num: &str) -> Option<String> {
    let parts: Vec<u64> = num
        .split('_')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    (!parts.is_empty()).then(|| join(&parts))
}

fn join(parts: &[u64]) -> String {
    parts
        .iter()
        .map(|&p| kanji(p))
        .collect::<Vec<_>>()
        .join("の")
}

/// `第三十六条の二` for an article number `36_2`.
pub fn article(num: &str) -> Option<String> {
    let parts: Vec<u64> = num
        .split('_')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let (first, rest) = parts.split_first()?;
    let mut out = format!("第{}条", kanji(*first));
    for p in rest {
        out.push('の');
        out.push_str(&kanji(*p));
    }
    Some(out)
}

/// `第二項` for paragraph 2.
pub fn paragraph(n: u64) -> String {
    format!("第{}項", kanji(n))
}

/// `第六号の四` for an item number `6_4`.
pub fn item(num: &str) -> Option<String> {
    let parts: Vec<u64> = num
        .split('_')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let (first, rest) = parts.split_first()?;
    let mut out = format!("第{}号", kanji(*first));
    for p in rest {
        out.push('の');
        out.push_str(&kanji(*p));
    }
    Some(out)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Article(Vec<u64>),
    Paragraph(u64),
    Item(Vec<u64>),
    Supplementary,
    Other,
}

#[derive(Debug, Clone, Default)]
struct Reference {
    supplementary: bool,
    article: Option<Vec<u64>>,
    paragraph: Option<u64>,
    item: Option<Vec<u64>>,
}

impl Reference {
    fn render(&self) -> Option<String> {
        let article = self.article.as_ref()?;
        let mut out = String::new();
        if self.supplementary {
            out.push_str("附則");
        }
        out.push_str(&format!("第{}条", kanji(article[0])));
        for p in &article[1..] {
            out.push('の');
            out.push_str(&kanji(*p));
        }
        match (self.paragraph, &self.item) {
            (Some(p), _) => out.push_str(&paragraph(p)),
            // An item cited without its paragraph is an item of an article of one paragraph.
            (None, Some(_)) => out.push_str(&paragraph(1)),
            (None, None) => {}
        }
        if let Some(item) = &self.item {
            out.push_str(&format!("第{}号", kanji(item[0])));
            for p in &item[1..] {
                out.push('の');
                out.push_str(&kanji(*p));
            }
        }
        Some(out)
    }
}

fn kanji_digit(c: char) -> Option<u64> {
    "〇一二三四五六七八九"
        .chars()
        .position(|k| k == c)
        .map(|p| p as u64)
}

fn is_number_char(c: char) -> bool {
    c.is_ascii_digit() || kanji_digit(c).is_some() || "十百千万".contains(c)
}

/// Reads a number (ASCII digits or kanji numerals) at `i`.
fn number(chars: &[char], i: usize) -> Option<(u64, usize)> {
    let start = i;
    let mut j = i;
    if chars.get(j).is_some_and(char::is_ascii_digit) {
        let mut n: u64 = 0;
        while let Some(d) = chars.get(j).and_then(|c| c.to_digit(10)) {
            n = n.checked_mul(10)?.checked_add(d as u64)?;
            j += 1;
        }
        return Some((n, j));
    }
    let mut total: u64 = 0;
    let mut section: u64 = 0;
    let mut digit: Option<u64> = None;
    while let Some(&c) = chars.get(j) {
        if let Some(d) = kanji_digit(c) {
            digit = Some(digit.unwrap_or(0) * 10 + d);
        } else if let Some(unit) = match c {
            '十' => Some(10),
            '百' => Some(100),
            '千' => Some(1000),
            _ => None,
        } {
            section += digit.take().unwrap_or(1) * unit;
        } else if c == '万' {
            total += (section + digit.take().unwrap_or(0)).max(1) * 10_000;
            section = 0;
        } else {
            break;
        }
        j += 1;
    }
    (j > start).then(|| (total + section + digit.unwrap_or(0), j))
}

/// Reads `N(のM)*` at `i`.
fn number_path(chars: &[char], i: usize) -> Option<(Vec<u64>, usize)> {
    let (first, mut j) = number(chars, i)?;
    let mut parts = vec![first];
    while chars.get(j) == Some(&'の') && chars.get(j + 1).is_some_and(|c| is_number_char(*c)) {
        let (n, k) = number(chars, j + 1)?;
        parts.push(n);
        j = k;
    }
    Some((parts, j))
}

/// Reads one component (or a list such as `3・8・12号`) at `i`: `第?N(のM)*(条|項|号)(のM)*`,
/// also `第N(のM)+条` (article numbers written before 条).
fn components(chars: &[char], i: usize) -> Option<(Vec<Token>, usize)> {
    let mut j = i;
    if chars.get(j) == Some(&'第') {
        j += 1;
    }
    let (mut parts, k) = number_path(chars, j)?;
    j = k;
    match chars.get(j) {
        Some('条') => {
            j += 1;
            while chars.get(j) == Some(&'の')
                && chars.get(j + 1).is_some_and(|c| is_number_char(*c))
            {
                let (more, k) = number_path(chars, j + 1)?;
                parts.extend(more);
                j = k;
            }
            Some((vec![Token::Article(parts)], j))
        }
        Some('項') => Some((vec![Token::Paragraph(parts[0])], j + 1)),
        Some('号') => {
            j += 1;
            while chars.get(j) == Some(&'の')
                && chars.get(j + 1).is_some_and(|c| is_number_char(*c))
            {
                let (more, k) = number_path(chars, j + 1)?;
                parts.extend(more);
                j = k;
            }
            Some((vec![Token::Item(parts)], j))
        }
        // A list whose kind comes after its last number: `3・8・12・13号`, `1、2項`.
        Some('・' | '、' | ',') if chars.get(j + 1).is_some_and(|c| is_number_char(*c)) => {
            let (rest, k) = components(chars, j + 1)?;
            let kind = rest.first()?.clone();
            let mut tokens = vec![match kind {
                Token::Article(_) => Token::Article(parts),
                Token::Paragraph(_) => Token::Paragraph(parts[0]),
                Token::Item(_) => Token::Item(parts),
                _ => return None,
            }];
            tokens.extend(rest);
            Some((tokens, k))
        }
        _ => None,
    }
}

fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| match c {
            // Full-width digits and punctuation as ASCII.
            '０'..='９' => char::from_u32(c as u32 - '０' as u32 + '0' as u32).unwrap_or(c),
            '，' => ',',
            _ => c,
        })
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '附' && chars.get(i + 1) == Some(&'則') {
            out.push(Token::Supplementary);
            i += 2;
            continue;
        }
        if (chars[i] == '第' || is_number_char(chars[i]))
            && let Some((t, j)) = components(&chars, i)
        {
            out.extend(t);
            i = j;
            continue;
        }
        out.push(Token::Other);
        i += 1;
    }
    out
}

/// The locators a free-text reference names, in the form the law plugin writes (see the
/// module documentation), in order and without repeats; empty when it names no article.
///
/// `第５条の２第３項` and `第5の2条第3項` → `第五条の二第三項`; `第20条第1項及び第3項` →
/// `第二十条第一項`, `第二十条第三項`; `第58条で準用する第45条` → `第五十八条`, `第四十五条`;
/// `附則第3条` → `附則第三条`; a law named before the article (`法第12条`, `令和元年総務省令第19号第9条`)
/// is left out.
pub fn normalize_references(text: &str) -> Vec<String> {
    let mut refs: Vec<String> = Vec::new();
    let mut cur = Reference::default();
    let mut supplementary = false;
    let push = |r: &Reference, refs: &mut Vec<String>| {
        if let Some(s) = r.render()
            && !refs.contains(&s)
        {
            refs.push(s);
        }
    };
    for t in tokens(text) {
        match t {
            Token::Supplementary => supplementary = true,
            Token::Article(parts) => {
                push(&cur, &mut refs);
                cur = Reference {
                    supplementary,
                    article: Some(parts),
                    paragraph: None,
                    item: None,
                };
                supplementary = false;
            }
            Token::Paragraph(p) => {
                if cur.article.is_none() {
                    continue;
                }
                if cur.paragraph.is_some() || cur.item.is_some() {
                    push(&cur, &mut refs);
                    cur.item = None;
                }
                cur.paragraph = Some(p);
            }
            Token::Item(parts) => {
                if cur.article.is_none() {
                    // `第19号` before any article is a law's number, not an item.
                    continue;
                }
                if cur.item.is_some() {
                    push(&cur, &mut refs);
                }
                cur.item = Some(parts);
            }
            Token::Other => {}
        }
    }
    push(&cur, &mut refs);
    refs
}

/// Whether `locator` is the provision `reference` names or lies inside it: `第五条` holds
/// `第五条第一項` and `第五条第一項第二号`, but not `第五条の二`.
pub fn within(locator: &str, reference: &str) -> bool {
    locator == reference
        || locator
            .strip_prefix(reference)
            .is_some_and(|rest| rest.starts_with('第'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kanji_numerals() {
        for (n, k) in [
            (1, "一"),
            (10, "十"),
            (11, "十一"),
            (20, "二十"),
            (36, "三十六"),
            (100, "百"),
            (110, "百十"),
            (166, "百六十六"),
            (1000, "千"),
            (2045, "二千四十五"),
            (10000, "一万"),
        ] {
            assert_eq!(kanji(n), k, "{n}");
            let chars: Vec<char> = k.chars().collect();
            assert_eq!(number(&chars, 0).map(|(v, _)| v), Some(n), "{k}");
        }
    }

    #[test]
    fn egov_numbers() {
        assert_eq!(article("36_2").as_deref(), Some("第三十六条の二"));
        assert_eq!(article("2_3_6").as_deref(), Some("第二条の三の六"));
        assert_eq!(item("6_4").as_deref(), Some("第六号の四"));
        assert_eq!(paragraph(1), "第一項");
        assert_eq!(article("x"), None);
    }

    /// The inconsistent forms of the survey's 根拠条項号 (all seen in the real data) and the
    /// locators they are read as.
    #[test]
    fn survey_forms() {
        let table: &[(&str, &[&str])] = &[
            ("第5条第1項", &["第五条第一項"]),
            ("第５条の２第３項", &["第五条の二第三項"]),
            ("第5の2条", &["第五条の二"]),
            ("第2の2条第1項", &["第二条の二第一項"]),
            ("第2の3の6条第10項", &["第二条の三の六第十項"]),
            ("第25条の13の８第4項", &["第二十五条の十三の八第四項"]),
            ("第11条第４項", &["第十一条第四項"]),
            ("第８条", &["第八条"]),
            ("第9条6項", &["第九条第六項"]),
            ("第4条1項13号", &["第四条第一項第十三号"]),
            ("第10条の第3項", &["第十条第三項"]),
            ("第17条の21\u{3000}第2項", &["第十七条の二十一第二項"]),
            ("第166条第1項第6号の4", &["第百六十六条第一項第六号の四"]),
            ("法第12条第1項", &["第十二条第一項"]),
            ("附則第22条第4項", &["附則第二十二条第四項"]),
            ("改正附則第33条第1項", &["附則第三十三条第一項"]),
            ("制定附則第13条の2第1項", &["附則第十三条の二第一項"]),
            ("令和元年総務省令第19号第9条第4項", &["第九条第四項"]),
            ("第58条で準用する第45条", &["第五十八条", "第四十五条"]),
            (
                "第21条第3項において読み替えて準用する第14条",
                &["第二十一条第三項", "第十四条"],
            ),
            (
                "第20条第1項及び第3項",
                &["第二十条第一項", "第二十条第三項"],
            ),
            (
                "第24条第1項、第3項",
                &["第二十四条第一項", "第二十四条第三項"],
            ),
            (
                "第23条第1項・2項",
                &["第二十三条第一項", "第二十三条第二項"],
            ),
            (
                "第2条第４項、第５項、第６項、第７項",
                &[
                    "第二条第四項",
                    "第二条第五項",
                    "第二条第六項",
                    "第二条第七項",
                ],
            ),
            (
                "第30条第1号及び第2号",
                &["第三十条第一項第一号", "第三十条第一項第二号"],
            ),
            (
                "第106条3・8・12・13号",
                &[
                    "第百六条第一項第三号",
                    "第百六条第一項第八号",
                    "第百六条第一項第十二号",
                    "第百六条第一項第十三号",
                ],
            ),
            ("第三十六条の二", &["第三十六条の二"]),
            ("第九条第一項第二号", &["第九条第一項第二号"]),
            ("第2項", &[]),
            ("", &[]),
        ];
        for (input, expected) in table {
            assert_eq!(
                normalize_references(input),
                expected.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{input}"
            );
        }
    }

    #[test]
    fn containment() {
        assert!(within("第五条第一項", "第五条"));
        assert!(within("第五条第一項第二号", "第五条第一項"));
        assert!(within("第五条", "第五条"));
        assert!(!within("第五条の二第一項", "第五条"));
        assert!(!within("第五十条第一項", "第五条"));
        assert!(!within("第六号の四", "第六号"));
    }
}
