//! e-Gov law XML (法令標準XML) read into paragraphs and items.

use roxmltree::{Document, Node};
use tally_plugin_api::locator;

/// Which law and revision a file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub law_id: String,
    /// `xml` (the API wrapper's `ApplData/LawId`) or `file name`.
    pub law_id_from: &'static str,
    /// `<YYYYMMDD>_<amending law id>`, from the file name.
    pub revision_id: Option<String>,
    /// `YYYY-MM-DD`, from the file name.
    pub revision_date: Option<String>,
}

/// A law's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Law {
    pub title: String,
    /// The short titles e-Gov gives the law (`LawTitle`'s `Abbrev` attribute, e.g.
    /// 不正アクセス禁止法; several are written `マイナンバー法,個人番号法,番号法`), in order.
    pub abbrevs: Vec<String>,
    pub number: Option<String>,
    /// The promulgation date (`YYYY-MM-DD`) when the root element gives it.
    pub promulgated: Option<String>,
    pub units: Vec<Unit>,
}

/// One paragraph or one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// `paragraph` or `item`.
    pub kind: &'static str,
    pub supplementary: bool,
    pub chapter: Option<String>,
    pub section: Option<String>,
    pub article: Option<String>,
    pub caption: Option<String>,
    pub paragraph: Option<u64>,
    pub item: Option<String>,
    pub locator: String,
    pub text: String,
}

/// `<LawId>_<YYYYMMDD>_<amending law id>.xml` → (law id, revision id, revision date).
fn from_file_name(name: &str) -> Option<(String, Option<(String, String)>)> {
    let stem = name.strip_suffix(".xml")?;
    let mut parts = stem.split('_');
    let law_id = parts.next()?;
    let valid_id = law_id.len() >= 12
        && law_id.len() <= 20
        && law_id.chars().all(|c| c.is_ascii_alphanumeric())
        && law_id.chars().take(3).all(|c| c.is_ascii_digit());
    if !valid_id {
        return None;
    }
    let revision = match (parts.next(), parts.next(), parts.next()) {
        (Some(date), Some(amend), None)
            if date.len() == 8
                && date.chars().all(|c| c.is_ascii_digit())
                && !amend.is_empty()
                && amend.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            let iso = format!("{}-{}-{}", &date[0..4], &date[4..6], &date[6..8]);
            valid_date(&iso).then(|| (format!("{date}_{amend}"), iso))
        }
        _ => None,
    };
    Some((law_id.to_string(), revision))
}

fn valid_date(iso: &str) -> bool {
    let y: u32 = iso[0..4].parse().unwrap_or(0);
    let m: u32 = iso[5..7].parse().unwrap_or(0);
    let d: u32 = iso[8..10].parse().unwrap_or(0);
    let leap = (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 0,
    };
    y >= 1868 && (1..=days).contains(&d)
}

/// Which law and revision a file holds: the XML's `ApplData/LawId` first, the file name
/// otherwise.
pub fn identity(file_name: &str, text: &str) -> Result<Identity, String> {
    let doc = Document::parse(text).map_err(|e| format!("not well-formed XML: {e}"))?;
    let from_xml = doc
        .descendants()
        .find(|n| n.has_tag_name("ApplData"))
        .and_then(|a| a.children().find(|n| n.has_tag_name("LawId")))
        .map(|n| text_of(n).trim().to_string())
        .filter(|s| !s.is_empty());
    let from_name = from_file_name(file_name);
    let (revision_id, revision_date) = match from_name.as_ref().and_then(|(_, r)| r.clone()) {
        Some((id, date)) => (Some(id), Some(date)),
        None => (None, None),
    };
    match (from_xml, from_name) {
        (Some(law_id), name) => {
            // A revision read from the file name belongs to the law the XML names only.
            let same = name.as_ref().is_some_and(|(id, _)| *id == law_id);
            Ok(Identity {
                law_id,
                law_id_from: "xml",
                revision_id: revision_id.filter(|_| same),
                revision_date: revision_date.filter(|_| same),
            })
        }
        (None, Some((law_id, _))) => Ok(Identity {
            law_id,
            law_id_from: "file name",
            revision_id,
            revision_date,
        }),
        (None, None) => Err(
            "the XML does not state its law id (no ApplData/LawId) and the file name does not start with one; name the file <LawId>_<YYYYMMDD>_<amending law id>.xml as e-Gov does"
                .to_string(),
        ),
    }
}

/// The text of a node without ruby readings (`Rt`).
fn text_of(node: Node) -> String {
    let mut out = String::new();
    for d in node.descendants() {
        if d.is_text()
            && !d
                .ancestors()
                .take_while(|a| *a != node)
                .any(|a| a.has_tag_name("Rt"))
        {
            out.push_str(d.text().unwrap_or_default());
        }
    }
    out
}

fn child<'a, 'i>(node: Node<'a, 'i>, tag: &str) -> Option<Node<'a, 'i>> {
    node.children().find(|n| n.has_tag_name(tag))
}

fn child_text(node: Node, tag: &str) -> Option<String> {
    child(node, tag)
        .map(|n| text_of(n).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The sentences of a `…Sentence` element: columns joined by a full-width space.
fn sentences(node: Node) -> String {
    let columns: Vec<Node> = node
        .children()
        .filter(|n| n.has_tag_name("Column"))
        .collect();
    if columns.is_empty() {
        node.children()
            .filter(|n| n.has_tag_name("Sentence"))
            .map(text_of)
            .collect::<Vec<_>>()
            .join("")
    } else {
        columns
            .iter()
            .map(|c| {
                c.children()
                    .filter(|n| n.has_tag_name("Sentence"))
                    .map(text_of)
                    .collect::<Vec<_>>()
                    .join("")
            })
            .collect::<Vec<_>>()
            .join("\u{3000}")
    }
}

/// The text of subitems (`Subitem1`…`Subitem10`), one line each: `イ　…`.
fn subitems(node: Node, depth: usize, out: &mut Vec<String>) {
    let tag = format!("Subitem{depth}");
    for s in node.children().filter(|n| n.has_tag_name(tag.as_str())) {
        let title = child_text(s, &format!("{tag}Title")).unwrap_or_default();
        let body = child(s, &format!("{tag}Sentence"))
            .map(sentences)
            .unwrap_or_default();
        out.push(format!("{title}\u{3000}{body}").trim().to_string());
        if depth < 10 {
            subitems(s, depth + 1, out);
        }
    }
}

fn deleted(node: Node) -> bool {
    node.attribute("Delete") == Some("true")
}

#[derive(Debug, Clone, Default)]
struct Context {
    supplementary: bool,
    /// `附則` or `附則（平成二六年六月一三日法律第六九号）` in front of a supplementary provision's
    /// locators.
    prefix: String,
    chapter: Option<String>,
    section: Option<String>,
}

/// Reads a law: its title, number, promulgation date and every paragraph and item.
pub fn parse(text: &str) -> Result<Law, String> {
    let doc = Document::parse(text).map_err(|e| format!("not well-formed XML: {e}"))?;
    let law = doc
        .descendants()
        .find(|n| n.has_tag_name("Law") && child(*n, "LawBody").is_some())
        .ok_or("no <Law> element with a <LawBody>: not e-Gov law XML")?;
    let body = child(law, "LawBody").ok_or("no <LawBody>")?;
    let title = child_text(body, "LawTitle").ok_or("the law has no <LawTitle>")?;
    let abbrevs = child(body, "LawTitle")
        .and_then(|t| t.attribute("Abbrev"))
        .map(short_titles)
        .unwrap_or_default();
    let number = child_text(law, "LawNum");
    let mut units = Vec::new();
    if let Some(main) = child(body, "MainProvision") {
        walk(main, &Context::default(), &mut units);
    }
    for suppl in body.children().filter(|n| n.has_tag_name("SupplProvision")) {
        let prefix = match suppl.attribute("AmendLawNum") {
            Some(num) if !num.trim().is_empty() => format!("附則（{}）", num.trim()),
            _ => "附則".to_string(),
        };
        let ctx = Context {
            supplementary: true,
            prefix,
            ..Context::default()
        };
        walk(suppl, &ctx, &mut units);
    }
    Ok(Law {
        title,
        abbrevs,
        number,
        promulgated: promulgated(law),
        units,
    })
}

/// `マイナンバー法,個人番号法,番号法` → each short title once, trimmed, in order. e-Gov
/// separates them with a comma; a full-width one is read alike.
fn short_titles(abbrev: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in abbrev.split([',', '，']).map(str::trim) {
        if !a.is_empty() && !out.iter().any(|o| o == a) {
            out.push(a.to_string());
        }
    }
    out
}

fn promulgated(law: Node) -> Option<String> {
    let base = match law.attribute("Era")? {
        "Meiji" => 1867,
        "Taisho" => 1911,
        "Showa" => 1925,
        "Heisei" => 1988,
        "Reiwa" => 2018,
        _ => return None,
    };
    let year: u32 = law.attribute("Year")?.parse().ok()?;
    let month: u32 = law.attribute("PromulgateMonth")?.parse().ok()?;
    let day: u32 = law.attribute("PromulgateDay")?.parse().ok()?;
    let iso = format!("{:04}-{month:02}-{day:02}", base + year);
    valid_date(&iso).then_some(iso)
}

/// Walks chapters, sections and other groupings down to articles and paragraphs.
fn walk(node: Node, ctx: &Context, out: &mut Vec<Unit>) {
    for n in node.children().filter(|n| n.is_element() && !deleted(*n)) {
        match n.tag_name().name() {
            "Part" | "Chapter" | "Section" | "Subsection" | "Division" => {
                let mut inner = ctx.clone();
                match n.tag_name().name() {
                    "Chapter" => {
                        inner.chapter = child_text(n, "ChapterTitle");
                        inner.section = None;
                    }
                    "Section" => inner.section = child_text(n, "SectionTitle"),
                    _ => {}
                }
                walk(n, &inner, out);
            }
            "Article" => article(n, ctx, out),
            "Paragraph" => paragraph(n, ctx, None, None, out),
            _ => {}
        }
    }
}

fn article(node: Node, ctx: &Context, out: &mut Vec<Unit>) {
    // An article of a supplementary provision is named with it (`附則第三条`): the main
    // provision has its own 第三条.
    let name = node
        .attribute("Num")
        .and_then(locator::article)
        .or_else(|| child_text(node, "ArticleTitle"))
        .map(|a| format!("{}{a}", ctx.prefix));
    let caption = child_text(node, "ArticleCaption");
    for p in node
        .children()
        .filter(|n| n.has_tag_name("Paragraph") && !deleted(*n))
    {
        paragraph(p, ctx, name.clone(), caption.clone(), out);
    }
}

fn paragraph(
    node: Node,
    ctx: &Context,
    article: Option<String>,
    caption: Option<String>,
    out: &mut Vec<Unit>,
) {
    let number: Option<u64> = node
        .attribute("Num")
        .and_then(|n| n.split('_').next())
        .and_then(|n| n.parse().ok());
    let mut locator = match &article {
        Some(a) => a.clone(),
        None => ctx.prefix.clone(),
    };
    if let Some(n) = number {
        locator.push_str(&locator::paragraph(n));
    }
    let text = child(node, "ParagraphSentence")
        .map(sentences)
        .unwrap_or_default();
    let unit = |kind, item: Option<String>, locator: String, text: String| Unit {
        kind,
        supplementary: ctx.supplementary,
        chapter: ctx.chapter.clone(),
        section: ctx.section.clone(),
        article: article.clone(),
        caption: caption.clone(),
        paragraph: number,
        item,
        locator,
        text,
    };
    out.push(unit("paragraph", None, locator.clone(), text));
    for i in node
        .children()
        .filter(|n| n.has_tag_name("Item") && !deleted(*n))
    {
        let name = i
            .attribute("Num")
            .and_then(locator::item)
            .or_else(|| child_text(i, "ItemTitle"));
        let mut lines = vec![child(i, "ItemSentence").map(sentences).unwrap_or_default()];
        subitems(i, 1, &mut lines);
        let item_locator = format!("{locator}{}", name.clone().unwrap_or_default());
        out.push(unit("item", name, item_locator, lines.join("\n")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BARE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Law Era="Heisei" Lang="ja" LawType="Act" Num="88" Year="05" PromulgateMonth="11" PromulgateDay="12">
<LawNum>平成五年法律第八十八号</LawNum><LawBody><LawTitle Kana="x">行政手続法</LawTitle>
<MainProvision><Chapter Num="1"><ChapterTitle>第一章　総則</ChapterTitle>
<Article Num="2"><ArticleCaption>（定義）</ArticleCaption><ArticleTitle>第二条</ArticleTitle>
<Paragraph Num="1"><ParagraphNum/><ParagraphSentence><Sentence Num="1">この法律において、次に掲げる用語の意義は、当該各号に定めるところによる。</Sentence></ParagraphSentence>
<Item Num="1"><ItemTitle>一</ItemTitle><ItemSentence><Column Num="1"><Sentence>法令</Sentence></Column><Column Num="2"><Sentence>法律をいう。</Sentence></Column></ItemSentence></Item>
<Item Num="6_2"><ItemTitle>六の二</ItemTitle><ItemSentence><Sentence>処分</Sentence></ItemSentence>
<Subitem1><Subitem1Title>イ</Subitem1Title><Subitem1Sentence><Sentence>その一</Sentence></Subitem1Sentence></Subitem1></Item>
</Paragraph></Article></Chapter>
<Chapter Num="4_2"><ChapterTitle>第四章の二　処分等の求め</ChapterTitle>
<Article Num="36_3"><ArticleTitle>第三十六条の三</ArticleTitle><Paragraph Num="1"><ParagraphSentence><Sentence>何人も、<Ruby>法<Rt>ほう</Rt></Ruby>令に違反する事実がある場合には</Sentence><Sentence>、求めることができる。</Sentence></ParagraphSentence></Paragraph>
<Paragraph Num="2"><ParagraphNum>２</ParagraphNum><ParagraphSentence><Sentence>前項の申出は</Sentence></ParagraphSentence></Paragraph></Article></Chapter>
</MainProvision>
<SupplProvision><SupplProvisionLabel>附　則</SupplProvisionLabel><Article Num="3"><ArticleTitle>第三条</ArticleTitle><Paragraph Num="1"><ParagraphSentence><Sentence>経過措置</Sentence></ParagraphSentence></Paragraph></Article></SupplProvision>
<SupplProvision AmendLawNum="平成二六年六月一三日法律第六九号"><Paragraph Num="1"><ParagraphSentence><Sentence>施行する。</Sentence></ParagraphSentence></Paragraph></SupplProvision>
</LawBody></Law>"#;

    #[test]
    fn paragraphs_and_items_with_locators() {
        let law = parse(BARE).expect("parses");
        assert_eq!(law.title, "行政手続法");
        assert!(law.abbrevs.is_empty(), "the title states no short title");
        assert_eq!(law.number.as_deref(), Some("平成五年法律第八十八号"));
        assert_eq!(law.promulgated.as_deref(), Some("1993-11-12"));
        let got: Vec<(&str, &str, Option<&str>, &str)> = law
            .units
            .iter()
            .map(|u| {
                (
                    u.kind,
                    u.locator.as_str(),
                    u.chapter.as_deref(),
                    u.text.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "paragraph",
                    "第二条第一項",
                    Some("第一章　総則"),
                    "この法律において、次に掲げる用語の意義は、当該各号に定めるところによる。"
                ),
                (
                    "item",
                    "第二条第一項第一号",
                    Some("第一章　総則"),
                    "法令\u{3000}法律をいう。"
                ),
                (
                    "item",
                    "第二条第一項第六号の二",
                    Some("第一章　総則"),
                    "処分\nイ\u{3000}その一"
                ),
                (
                    "paragraph",
                    "第三十六条の三第一項",
                    Some("第四章の二　処分等の求め"),
                    "何人も、法令に違反する事実がある場合には、求めることができる。"
                ),
                (
                    "paragraph",
                    "第三十六条の三第二項",
                    Some("第四章の二　処分等の求め"),
                    "前項の申出は"
                ),
                ("paragraph", "附則第三条第一項", None, "経過措置"),
                (
                    "paragraph",
                    "附則（平成二六年六月一三日法律第六九号）第一項",
                    None,
                    "施行する。"
                ),
            ]
        );
        assert_eq!(law.units[0].caption.as_deref(), Some("（定義）"));
        assert_eq!(law.units[0].article.as_deref(), Some("第二条"));
        assert_eq!(law.units[2].item.as_deref(), Some("第六号の二"));
        assert!(law.units[5].supplementary);
    }

    #[test]
    fn short_titles_from_the_abbrev_attribute() {
        let with = BARE.replace(
            r#"<LawTitle Kana="x">"#,
            r#"<LawTitle Kana="x" Abbrev="マイナンバー法, 個人番号法,番号法,,番号法" AbbrevKana="ま,こ,ば">"#,
        );
        let law = parse(&with).expect("parses");
        assert_eq!(law.title, "行政手続法");
        assert_eq!(law.abbrevs, vec!["マイナンバー法", "個人番号法", "番号法"]);
    }

    #[test]
    fn identity_from_the_xml_or_the_file_name() {
        let id = identity("405AC0000000088_20240401_504AC0100000052.xml", BARE).expect("id");
        assert_eq!(
            id,
            Identity {
                law_id: "405AC0000000088".into(),
                law_id_from: "file name",
                revision_id: Some("20240401_504AC0100000052".into()),
                revision_date: Some("2024-04-01".into()),
            }
        );
        let wrapped = format!(
            "<DataRoot><ApplData><LawId>411AC0000000128</LawId><LawFullText>{}</LawFullText></ApplData></DataRoot>",
            BARE.trim_start_matches(r#"<?xml version="1.0" encoding="UTF-8"?>"#)
        );
        let id = identity(
            "411AC0000000128_egov-api-v1_retrieved-20250924.xml",
            &wrapped,
        )
        .expect("id");
        assert_eq!(id.law_id, "411AC0000000128");
        assert_eq!(id.law_id_from, "xml");
        assert_eq!(id.revision_id, None);
        assert!(parse(&wrapped).is_ok());
        assert!(identity("law.xml", BARE).unwrap_err().contains("file name"));
        assert!(
            identity("x.xml", "<Law")
                .unwrap_err()
                .contains("well-formed")
        );
    }
}
