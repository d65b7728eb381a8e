//! Answers given on a re-run, recorded in the `dataset.yaml` a first `tally add` wrote.
//!
//! The skeleton asks what only a person can say: whether a cell such as `-` means "no value".
//! A person answers by running `tally add` again with `--null-marker -`. The answer is then
//! written where the definition keeps it (`source.null_markers`). Each field the question was
//! about is read again with the marker as empty: its guessed type (kept as text while the
//! question was open), its role, and its TODO lines are updated. The question is removed. The
//! rest of the file is left as the person wrote it, comments included: the edit is by lines
//! of the shape the skeleton writes, and what has another shape is reported as not recorded,
//! with what to write by hand.

use crate::infer::{Codelist, Guess};
use crate::skeleton::scalar;

/// The definition's new text and what the edit changed or could not change.
#[derive(Debug, Default, PartialEq)]
pub struct Recorded {
    pub text: String,
    /// Each change, in words (`amount: data_type string → integer`).
    pub changes: Vec<String>,
    /// What could not be written into the file, with what to write by hand.
    pub not_recorded: Vec<String>,
    /// The questions still open after the answers (markers not yet given).
    pub open_questions: Vec<String>,
}

/// Records `given` null markers (those not yet in `declared`, the definition's own) into
/// `text`, and updates each field that asked about them from `guesses` (the file read again
/// with every marker as empty), found by the field's name.
pub fn record(
    text: &str,
    declared: &[String],
    given: &[String],
    guesses: &dyn Fn(&str) -> Option<Guess>,
) -> Recorded {
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut out = Recorded::default();
    let new: Vec<&String> = given.iter().filter(|m| !declared.contains(m)).collect();
    if !new.is_empty() {
        record_markers(&mut lines, declared, &new, &mut out);
    }
    record_fields(&mut lines, guesses, &mut out);
    let mut text_out = lines.join(newline);
    if text.ends_with('\n') {
        text_out.push_str(newline);
    }
    out.text = text_out;
    out
}

/// Whether `line` is the top-level key `key` (`source:`, `fields:`), maybe with a value.
fn top_level<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.strip_prefix(key)?.strip_prefix(':').map(str::trim)
}

/// Whether a line ends the block of a top-level key: another top-level key (not indented,
/// not a comment, not a sequence item).
fn ends_block(line: &str) -> bool {
    !line.is_empty()
        && !line.starts_with([' ', '\t', '#', '-'])
        && !line.trim_start().starts_with('#')
}

fn flow_list(markers: &[String]) -> String {
    format!(
        "[{}]",
        markers
            .iter()
            .map(|m| scalar(m))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Adds the new markers to `source.null_markers`: the flow list the skeleton writes is
/// extended, a missing one is added at the end of `source:`.
fn record_markers(
    lines: &mut Vec<String>,
    declared: &[String],
    new: &[&String],
    out: &mut Recorded,
) {
    let mut all: Vec<String> = declared.to_vec();
    all.extend(new.iter().map(|m| (*m).clone()));
    let listed = new
        .iter()
        .map(|m| format!("{m:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let by_hand = format!(
        "source.null_markers: {listed} not written into dataset.yaml (its source is not written as tally add writes it); add them to source.null_markers by hand"
    );
    let Some(source) = lines.iter().position(|l| top_level(l, "source").is_some()) else {
        // No source at all: one is added before the fields.
        let at = lines
            .iter()
            .position(|l| top_level(l, "fields").is_some())
            .unwrap_or(lines.len());
        lines.insert(at, format!("  null_markers: {}", flow_list(&all)));
        lines.insert(at, "source:".to_string());
        out.changes
            .push(format!("source.null_markers: {listed} added"));
        return;
    };
    if top_level(&lines[source], "source").is_some_and(|v| !v.is_empty() && !v.starts_with('#')) {
        out.not_recorded.push(by_hand);
        return;
    }
    let end = (source + 1..lines.len())
        .find(|&i| ends_block(&lines[i]))
        .unwrap_or(lines.len());
    let children: Vec<usize> = (source + 1..end)
        .filter(|&i| {
            let t = lines[i].trim_start();
            !t.is_empty() && !t.starts_with('#')
        })
        .collect();
    let indent: String = children
        .first()
        .map(|&i| {
            lines[i]
                .chars()
                .take_while(|c| *c == ' ')
                .collect::<String>()
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "  ".to_string());
    let existing = children
        .iter()
        .copied()
        .find(|&i| lines[i].trim_start().starts_with("null_markers:"));
    match existing {
        Some(i) => {
            let value = lines[i].trim_start()["null_markers:".len()..].trim();
            if value.starts_with('[') && value.ends_with(']') {
                lines[i] = format!("{indent}null_markers: {}", flow_list(&all));
                out.changes
                    .push(format!("source.null_markers: {listed} added"));
            } else {
                out.not_recorded.push(by_hand);
            }
        }
        None => {
            let at = children.last().map_or(source + 1, |&i| i + 1);
            lines.insert(at, format!("{indent}null_markers: {}", flow_list(&all)));
            out.changes
                .push(format!("source.null_markers: {listed} added"));
        }
    }
}

/// The TODO line a skeleton writes for a type kept as text while a question is open.
const KEPT_AS_TEXT: &str = "kept as text until they are answered";
const QUESTION: &str = "# TODO (question): ";
const TODO: &str = "# TODO: ";

/// The field blocks of `fields:` as the skeleton writes them (`- name: X` at the start of a
/// line, its keys indented): each one's name and its lines `[start, end)`.
fn field_blocks(lines: &[String]) -> Vec<(String, usize, usize)> {
    let Some(fields) = lines.iter().position(|l| top_level(l, "fields").is_some()) else {
        return Vec::new();
    };
    let end = (fields + 1..lines.len())
        .find(|&i| ends_block(&lines[i]))
        .unwrap_or(lines.len());
    let starts: Vec<usize> = (fields + 1..end)
        .filter(|&i| lines[i].starts_with("- name:"))
        .collect();
    starts
        .iter()
        .enumerate()
        .filter_map(|(k, &s)| {
            let next = starts.get(k + 1).copied().unwrap_or(end);
            let name = field_name(lines[s]["- name:".len()..].trim())?;
            Some((name, s, next))
        })
        .collect()
}

/// A field's name as the skeleton writes it: plain, or a JSON (double-quoted) string.
fn field_name(raw: &str) -> Option<String> {
    if raw.starts_with('"') {
        serde_json::from_str(raw).ok()
    } else {
        let plain = raw.split(" #").next().unwrap_or(raw).trim();
        (!plain.is_empty()).then(|| plain.to_string())
    }
}

fn comment(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Updates each field block holding a question from its new guess.
fn record_fields(
    lines: &mut Vec<String>,
    guesses: &dyn Fn(&str) -> Option<Guess>,
    out: &mut Recorded,
) {
    let mut per_field: Vec<Vec<String>> = Vec::new();
    // Last first: editing a block moves the lines after it only.
    for (name, start, end) in field_blocks(lines).into_iter().rev() {
        let Some(q) = (start..end).find(|&i| lines[i].trim_start().starts_with(QUESTION)) else {
            continue;
        };
        let Some(guess) = guesses(&name) else {
            continue;
        };
        let indent: String = lines[q].chars().take_while(|c| *c == ' ').collect();
        if !guess.questions.is_empty() {
            // Some of its markers are still unanswered: the question says which.
            let asked: Vec<String> = guess
                .questions
                .iter()
                .map(|t| format!("{indent}{QUESTION}{}", comment(t)))
                .collect();
            lines.splice(q..q + 1, asked);
            out.open_questions.extend(guess.questions.iter().cloned());
            continue;
        }
        let mut block: Vec<String> = lines[start..end].to_vec();
        block.retain(|l| {
            let t = l.trim_start();
            let kept_as_text = t.starts_with(TODO) && t.contains(KEPT_AS_TEXT);
            !t.starts_with(QUESTION) && !kept_as_text
        });
        let mut changed = vec![format!("{name}: the question on its null markers answered")];
        let new_type = guess.kind.data_type();
        let retyped = match block.iter().position(|l| l.trim() == "data_type: string") {
            Some(i) if new_type != "string" => {
                block[i] = format!("{indent}data_type: {new_type}");
                changed.push(format!("{name}: data_type string → {new_type}"));
                true
            }
            _ => false,
        };
        if retyped {
            if guess.role == "measure"
                && let Some(i) = block
                    .iter()
                    .position(|l| matches!(l.trim(), "role: attr" | "role: dim"))
            {
                let old = block[i].trim()["role: ".len()..].to_string();
                block[i] = format!("{indent}role: measure");
                changed.push(format!("{name}: role {old} → measure"));
            }
            if guess.codelist.is_none() || guess.codelist == Some(Codelist::AutoSplit) {
                let before = block.len();
                block.retain(|l| l.trim() != "codelist: auto");
                if block.len() != before {
                    changed.push(format!(
                        "{name}: codelist auto removed (a number has no codes)"
                    ));
                }
            }
        }
        // The new guess's TODOs (what a person should confirm now), after the block's last
        // line that is not blank.
        let last = block
            .iter()
            .rposition(|l| !l.trim().is_empty())
            .map_or(block.len(), |i| i + 1);
        let todos: Vec<String> = guess
            .todos
            .iter()
            .map(|t| format!("{indent}{TODO}{}", comment(t)))
            .filter(|t| !block.iter().any(|l| l.trim() == t.trim()))
            .collect();
        block.splice(last..last, todos);
        lines.splice(start..end, block);
        per_field.push(changed);
    }
    out.changes.extend(per_field.into_iter().rev().flatten());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::Kind;

    /// What `tally add` writes (its first line names the published schema).
    const WRITTEN: &str = "\
# yaml-language-server: $schema=https://raw.githubusercontent.com/tally-mcp/tally/main/schemas/dataset.schema.json
schema_version: \"1\"
title: data  # TODO: the dataset's title as its publisher gives it
source:
  # url: TODO the publisher's page
  csv_filename: data.csv
id_field: id
data_file: data.parquet
fields:
- name: id
  role: id
  data_type: integer
  csv_col_index: 0
- name: amount
  role: attr
  data_type: string
  codelist: auto
  csv_col_index: 2
  # TODO: its values are integers except the cells asked about below: kept as text until they are answered
  # TODO (question): amount: cells hold `-` (2). Does that mean \"no value\"? If so, list it in source.null_markers (or pass --null-marker) and run tally add again to store such cells as empty; they are kept as written until then
- name: \"note: free\"
  role: attr
  data_type: string
  csv_col_index: 3
  # TODO (question): note: free: cells hold `-` (1), `n/a` (3). Does that mean \"no value\"?
";

    fn guess(kind: Kind, role: &'static str, todos: &[&str], questions: &[&str]) -> Guess {
        Guess {
            kind,
            role,
            grain: None,
            codelist: None,
            multi_value: None,
            todos: todos.iter().map(|t| t.to_string()).collect(),
            questions: questions.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn guesses(name: &str) -> Option<Guess> {
        match name {
            "amount" => Some(guess(
                Kind::Int,
                "measure",
                &["empty in 2 of 5 rows: say in notes what an empty value means"],
                &[],
            )),
            "note: free" => Some(guess(
                Kind::Text,
                "attr",
                &[],
                &["note: free: cells hold `n/a` (3). Does that mean \"no value\"?"],
            )),
            _ => None,
        }
    }

    #[test]
    fn an_answer_is_recorded_and_its_question_and_guesses_updated() {
        let r = record(WRITTEN, &[], &["-".to_string()], &guesses);
        assert!(r.not_recorded.is_empty(), "{:?}", r.not_recorded);
        let expected = "\
# yaml-language-server: $schema=https://raw.githubusercontent.com/tally-mcp/tally/main/schemas/dataset.schema.json
schema_version: \"1\"
title: data  # TODO: the dataset's title as its publisher gives it
source:
  # url: TODO the publisher's page
  csv_filename: data.csv
  null_markers: [\"-\"]
id_field: id
data_file: data.parquet
fields:
- name: id
  role: id
  data_type: integer
  csv_col_index: 0
- name: amount
  role: measure
  data_type: integer
  csv_col_index: 2
  # TODO: empty in 2 of 5 rows: say in notes what an empty value means
- name: \"note: free\"
  role: attr
  data_type: string
  csv_col_index: 3
  # TODO (question): note: free: cells hold `n/a` (3). Does that mean \"no value\"?
";
        assert_eq!(r.text, expected);
        assert_eq!(
            r.changes,
            [
                "source.null_markers: \"-\" added",
                "amount: the question on its null markers answered",
                "amount: data_type string → integer",
                "amount: role attr → measure",
                "amount: codelist auto removed (a number has no codes)",
            ]
        );
        assert_eq!(r.open_questions.len(), 1);
    }

    #[test]
    fn a_flow_list_is_extended_and_a_missing_source_added() {
        let text =
            "title: t\nsource:\n  csv_filename: a.csv\n  null_markers: [x]\nfields:\n- {name: a}\n";
        let r = record(
            text,
            &["x".to_string()],
            &["-".to_string(), "x".to_string()],
            &|_| None,
        );
        assert_eq!(
            r.text,
            "title: t\nsource:\n  csv_filename: a.csv\n  null_markers: [x, \"-\"]\nfields:\n- {name: a}\n"
        );
        let r = record(
            "title: t\nfields:\n- {name: a}\n",
            &[],
            &["-".to_string()],
            &|_| None,
        );
        assert_eq!(
            r.text,
            "title: t\nsource:\n  null_markers: [\"-\"]\nfields:\n- {name: a}\n"
        );
    }

    #[test]
    fn a_shape_not_written_by_tally_add_is_reported_not_edited() {
        let text = "title: t\nsource:\n  null_markers:\n  - x\nfields: []\n";
        let r = record(text, &["x".to_string()], &["-".to_string()], &|_| None);
        assert_eq!(r.text, text);
        assert!(r.changes.is_empty());
        assert!(r.not_recorded[0].contains("add them to source.null_markers by hand"));
        let text = "title: t\nsource: {csv_filename: a.csv}\nfields: []\n";
        let r = record(text, &[], &["-".to_string()], &|_| None);
        assert_eq!(r.text, text);
        assert_eq!(r.not_recorded.len(), 1);
    }

    #[test]
    fn crlf_files_stay_crlf() {
        let text = "title: t\r\nsource:\r\n  csv_filename: a.csv\r\nfields: []\r\n";
        let r = record(text, &[], &["-".to_string()], &|_| None);
        assert_eq!(
            r.text,
            "title: t\r\nsource:\r\n  csv_filename: a.csv\r\n  null_markers: [\"-\"]\r\nfields: []\r\n"
        );
    }
}
