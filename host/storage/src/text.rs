//! Text that comes from outside Tally's own code (what a plugin says: its errors, what it
//! wrote to stderr, its notes and descriptions) made safe to show a person. In a client's
//! terminal or the server's log, a control character moves the cursor, recolours, rings or
//! rewrites the line (ESC, BEL, CR), a line break starts what reads as a log line of its own,
//! and a bidirectional override shows the text in another order than it has.
//!
//! [`escape_controls`] is the one function that does it: the plugin host applies it where a
//! plugin's text enters, and the log lines that carry such text apply it again with line
//! breaks escaped too (a log field is one line).

use std::borrow::Cow;

/// What [`escape_controls`] does with line breaks (`\n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Kept: text a client is shown on lines of its own (the end of what a plugin wrote to
    /// stderr, under its error).
    Kept,
    /// Escaped like every other control character: one line (a log field, a name).
    Escaped,
}

/// `text` with every character that acts on a terminal or reorders text written visibly
/// instead: C0 controls, DEL and C1 controls as `\r`, `\t`, `\n` (unless `lines` keeps it) or
/// `\u{1b}`; the line and paragraph separators and the bidirectional marks, embeddings,
/// overrides and isolates (U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069) as
/// `\u{202e}`. Everything else, other scripts included, is kept as it is; text with nothing to
/// escape is not copied.
pub fn escape_controls(text: &str, lines: Lines) -> Cow<'_, str> {
    let escaped = |c: char| needs_escape(c) && !(c == '\n' && lines == Lines::Kept);
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !escaped(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            other => out.push_str(&format!("\\u{{{:x}}}", u32::from(other))),
        }
    }
    Cow::Owned(out)
}

/// A character [`escape_controls`] writes visibly.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_written_visibly() {
        let forged = "bad\u{1b}[2J\u{7}\rok\n2026-01-01T00:00:00Z ERROR forged\u{9b}\u{7f}\t.";
        assert_eq!(
            escape_controls(forged, Lines::Escaped),
            "bad\\u{1b}[2J\\u{7}\\rok\\n2026-01-01T00:00:00Z ERROR forged\\u{9b}\\u{7f}\\t."
        );
        assert_eq!(
            escape_controls(forged, Lines::Kept),
            "bad\\u{1b}[2J\\u{7}\\rok\n2026-01-01T00:00:00Z ERROR forged\\u{9b}\\u{7f}\\t."
        );
    }

    #[test]
    fn bidirectional_overrides_and_separators_are_written_visibly() {
        assert_eq!(
            escape_controls("a\u{202e}b\u{2066}c\u{200f}d\u{2028}e", Lines::Kept),
            "a\\u{202e}b\\u{2066}c\\u{200f}d\\u{2028}e"
        );
    }

    #[test]
    fn plain_text_is_kept_as_it_is() {
        for text in ["", "plain", "第五条の二 — “quoted” é", "a\\u{1b}b"] {
            assert!(matches!(
                escape_controls(text, Lines::Escaped),
                Cow::Borrowed(t) if t == text
            ));
        }
        assert!(matches!(
            escape_controls("two\nlines", Lines::Kept),
            Cow::Borrowed("two\nlines")
        ));
    }
}
