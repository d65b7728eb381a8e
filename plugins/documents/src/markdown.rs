//! Markdown split into sections by its headings (ATX `#` and setext underlines), ignoring
//! headings inside fenced code blocks.

/// A document's sections, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The first level-1 heading.
    pub title: Option<String>,
    pub sections: Vec<Section>,
}

/// The text under one heading, up to the next heading of any level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The headings from the top down to this one (empty before the first heading).
    pub heading_path: Vec<String>,
    pub heading: String,
    /// 1–6, or 0 for the text before the first heading.
    pub level: u8,
    pub text: String,
}

/// Splits a document into sections. The text before the first heading is a level-0 section
/// when it is not blank; every heading gives a section, even an empty one.
pub fn sections(source: &str) -> Document {
    let lines: Vec<&str> = source.lines().collect();
    let mut title = None;
    let mut sections = Vec::new();
    let mut stack: Vec<(u8, String)> = Vec::new();
    let mut current = Section {
        heading_path: Vec::new(),
        heading: String::new(),
        level: 0,
        text: String::new(),
    };
    let mut body: Vec<&str> = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some((ch, len)) = fence {
            if closes_fence(line, ch, len) {
                fence = None;
            }
            body.push(line);
            i += 1;
            continue;
        }
        if let Some(open) = opens_fence(line) {
            fence = Some(open);
            body.push(line);
            i += 1;
            continue;
        }
        let heading = atx_heading(line).or_else(|| {
            let next = lines.get(i + 1)?;
            let level = setext_level(next)?;
            let previous_blank = i == 0 || lines[i - 1].trim().is_empty();
            // A setext heading is a one-line paragraph here: the line before it is blank or
            // a heading, so a table or list line followed by `---` stays text.
            (!line.trim().is_empty()
                && (previous_blank || atx_heading(lines[i - 1]).is_some())
                && is_plain_line(line))
            .then(|| (level, clean_heading(line)))
        });
        match heading {
            Some((level, text)) => {
                finish(&mut current, &mut body, &mut sections);
                while stack.last().is_some_and(|(l, _)| *l >= level) {
                    stack.pop();
                }
                stack.push((level, text.clone()));
                if level == 1 && title.is_none() && !text.is_empty() {
                    title = Some(text.clone());
                }
                current = Section {
                    heading_path: stack.iter().map(|(_, t)| t.clone()).collect(),
                    heading: text,
                    level,
                    text: String::new(),
                };
                i += if atx_heading(line).is_some() { 1 } else { 2 };
            }
            None => {
                body.push(line);
                i += 1;
            }
        }
    }
    finish(&mut current, &mut body, &mut sections);
    Document { title, sections }
}

fn finish(current: &mut Section, body: &mut Vec<&str>, out: &mut Vec<Section>) {
    let text = body.join("\n").trim().to_string();
    body.clear();
    if current.level == 0 && text.is_empty() {
        return;
    }
    let mut section = current.clone();
    section.text = text;
    out.push(section);
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn atx_heading(line: &str) -> Option<(u8, String)> {
    if indent(line) > 3 {
        return None;
    }
    let rest = line.trim_start_matches(' ');
    let hashes = rest.len() - rest.trim_start_matches('#').len();
    if hashes == 0 || hashes > 6 {
        return None;
    }
    let after = &rest[hashes..];
    if !(after.is_empty() || after.starts_with(' ') || after.starts_with('\t')) {
        return None;
    }
    // A closing sequence of #s is not part of the heading.
    let mut text = after.trim();
    let stripped = text.trim_end_matches('#');
    if stripped.is_empty() || stripped.ends_with(' ') || stripped.ends_with('\t') {
        text = stripped.trim_end();
    }
    Some((hashes as u8, clean_heading(text)))
}

fn setext_level(line: &str) -> Option<u8> {
    if indent(line) > 3 {
        return None;
    }
    let t = line.trim();
    if t.is_empty() {
        return None;
    }
    if t.chars().all(|c| c == '=') {
        Some(1)
    } else if t.chars().all(|c| c == '-') && t.len() >= 2 {
        Some(2)
    } else {
        None
    }
}

/// Not a list item, quote, table row or HTML block: a line that can be a setext heading.
fn is_plain_line(line: &str) -> bool {
    let t = line.trim_start();
    !(t.starts_with('|')
        || t.starts_with('>')
        || t.starts_with('<')
        || t.starts_with("- ")
        || t.starts_with("* ")
        || t.starts_with("+ ")
        || t.split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())))
}

/// Heading text without HTML comments (`<!-- omit in toc -->`) and surrounding space.
fn clean_heading(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

fn opens_fence(line: &str) -> Option<(char, usize)> {
    if indent(line) > 3 {
        return None;
    }
    let t = line.trim_start();
    for ch in ['`', '~'] {
        let n = t.len() - t.trim_start_matches(ch).len();
        if n >= 3 {
            return Some((ch, n));
        }
    }
    None
}

fn closes_fence(line: &str, ch: char, len: usize) -> bool {
    if indent(line) > 3 {
        return false;
    }
    let t = line.trim();
    let n = t.len() - t.trim_start_matches(ch).len();
    n >= len && t[n..].trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(doc: &Document) -> Vec<(u8, String, String)> {
        doc.sections
            .iter()
            .map(|s| (s.level, s.heading_path.join(" > "), s.text.clone()))
            .collect()
    }

    #[test]
    fn headings_nest_and_close() {
        let doc = sections(
            "Intro line\n\n# Guide <!-- omit in toc -->\n\nAbout.\n\n## Install ##\n\nRun it.\n\n### Linux\n\napt\n\n## Use\n\nCall it.\n",
        );
        assert_eq!(doc.title.as_deref(), Some("Guide"));
        assert_eq!(
            summary(&doc),
            vec![
                (0, "".into(), "Intro line".into()),
                (1, "Guide".into(), "About.".into()),
                (2, "Guide > Install".into(), "Run it.".into()),
                (3, "Guide > Install > Linux".into(), "apt".into()),
                (2, "Guide > Use".into(), "Call it.".into()),
            ]
        );
    }

    #[test]
    fn fenced_code_is_text() {
        let doc = sections("# A\n\n```sh\n# not a heading\n```\n\n~~~~\n## nor this\n~~~~\n");
        assert_eq!(doc.sections.len(), 1);
        assert!(doc.sections[0].text.contains("# not a heading"));
        assert!(doc.sections[0].text.contains("## nor this"));
    }

    #[test]
    fn setext_headings_and_thematic_breaks() {
        let doc = sections("Title\n=====\n\ntext\n\n-----\n\nSub\n---\nbody\n\n| a |\n---\n");
        assert_eq!(
            summary(&doc),
            vec![
                (1, "Title".into(), "text\n\n-----".into()),
                (2, "Title > Sub".into(), "body\n\n| a |\n---".into()),
            ]
        );
    }

    #[test]
    fn not_headings() {
        let doc = sections("#hashtag\n    # indented code\n####### seven\n");
        assert_eq!(doc.sections.len(), 1);
        assert_eq!(doc.sections[0].level, 0);
    }

    #[test]
    fn empty_heading_sections_are_kept() {
        let doc = sections("# A\n## B\n## C\ntext");
        assert_eq!(doc.sections.len(), 3);
        assert_eq!(doc.sections[1].text, "");
    }
}
