//! The `dataset.yaml` written when a folder has none: the guesses, each one a person must
//! confirm marked `# TODO` with its reason. The text is checked by the semantic layer's own
//! reader before it is written, so `tally check` accepts it as it is.

use std::fmt::Write;

use crate::infer::{Codelist, Guess};

/// What the skeleton is written from.
#[derive(Debug)]
pub struct SkeletonInput<'a> {
    pub dataset_id: &'a str,
    pub file_name: &'a str,
    pub format: &'a str,
    pub encoding: Option<&'a str>,
    pub sheet: Option<&'a str>,
    pub header_rows: u32,
    /// The text of a title row above the header, if one was found.
    pub title_row: Option<&'a str>,
    pub null_markers: &'a [String],
    pub names: &'a [String],
    /// The column index of each name in the file.
    pub indices: &'a [usize],
    pub guesses: &'a [Guess],
    pub id: Option<usize>,
    pub rows: u64,
    pub data_file: &'a str,
    pub date: &'a str,
    /// The per-field TODO comments (left out of a file that would be past the size a
    /// definition may be).
    pub comments: bool,
}

/// A YAML scalar: plain where that reads back as the same string, double-quoted otherwise.
pub fn scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && s.trim() == s
        && !s.starts_with([
            '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%',
            '@', '`', '.', '+', '~',
        ])
        && !s.chars().next().is_some_and(|c| c.is_ascii_digit())
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.ends_with(':')
        && !s.chars().any(|c| c.is_control() || c == '\u{feff}')
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
        );
    if plain {
        s.to_string()
    } else {
        // A JSON string is a YAML double-quoted scalar.
        serde_json::to_string(s).unwrap_or_else(|_| format!("\"{}\"", s.escape_default()))
    }
}

/// One comment line (no line breaks inside).
fn comment(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// The first line of a skeleton: editors that read it (VS Code's YAML extension, other
/// editors built on the YAML language server) complete and check the file against the
/// published schema of `dataset.yaml` (`tally schema` prints it, for a copy kept offline).
pub fn schema_line() -> String {
    format!(
        "# yaml-language-server: $schema={}",
        tally_semantic::definition::schema_url()
    )
}

/// The comments above the keys: the schema, where the file came from, what to confirm.
fn header(input: &SkeletonInput<'_>) -> String {
    let mut y = String::new();
    y.push_str(&schema_line());
    y.push('\n');
    let _ = writeln!(
        y,
        "# Written by `tally add {}` (Tally {}) on {} from {} ({}{}{}, {} header row{}, {} data rows).",
        input.dataset_id,
        env!("CARGO_PKG_VERSION"),
        input.date,
        comment(input.file_name),
        input.format,
        input.encoding.map(|e| format!(", {e}")).unwrap_or_default(),
        input
            .sheet
            .map(|s| format!(", sheet {}", comment(s)))
            .unwrap_or_default(),
        input.header_rows,
        if input.header_rows == 1 { "" } else { "s" },
        input.rows
    );
    y.push_str(
        "# Lines marked TODO are guesses for a person to confirm or complete: a field's role\n",
    );
    y.push_str(
        "# decides how it can be filtered and grouped, and notes travel with every answer.\n",
    );
    y.push_str(
        "# `tally check` accepts this file as it is; run `tally add` again after editing it.\n",
    );
    if !input.comments {
        y.push_str(
            "# The TODO comments of each field were left out: with them this file would be\n",
        );
        y.push_str("# past the size a definition may be. Confirm every role and data_type.\n");
    }
    y
}

pub fn write(input: &SkeletonInput<'_>) -> String {
    let mut y = header(input);
    y.push_str("schema_version: \"1\"\n");
    let stem = std::path::Path::new(input.file_name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| input.dataset_id.to_string());
    match input.title_row {
        Some(t) => {
            let _ = writeln!(
                y,
                "title: {}  # TODO: taken from the title row above the header; confirm",
                scalar(t)
            );
        }
        None => {
            let _ = writeln!(
                y,
                "title: {}  # TODO: the dataset's title as its publisher gives it",
                scalar(&stem)
            );
        }
    }
    y.push_str("# publisher: TODO who publishes the data\n");
    y.push_str("# license: TODO the licence it is published under\n");
    y.push_str("# as_of_date: TODO the date the data describes (YYYY-MM-DD)\n");
    y.push_str("source:\n");
    y.push_str(
        "  # url: TODO the publisher's page; with asset_pattern (a regular expression for the\n",
    );
    y.push_str("  # file's name), `tally fetch` downloads new versions from it\n");
    let _ = writeln!(y, "  csv_filename: {}", scalar(input.file_name));
    if input.header_rows != 1 {
        let _ = writeln!(y, "  csv_header_rows: {}", input.header_rows);
    }
    if !input.null_markers.is_empty() {
        let _ = writeln!(
            y,
            "  null_markers: [{}]",
            input
                .null_markers
                .iter()
                .map(|m| scalar(m))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(i) = input.id {
        let _ = writeln!(y, "id_field: {}", scalar(&input.names[i]));
    }
    let _ = writeln!(y, "data_file: {}", scalar(input.data_file));
    y.push_str("fields:\n");
    for (i, (name, g)) in input.names.iter().zip(input.guesses).enumerate() {
        let _ = writeln!(y, "- name: {}", scalar(name));
        let _ = writeln!(y, "  role: {}", g.role);
        if let Some(grain) = g.grain {
            let _ = writeln!(y, "  grain: {grain}");
        }
        let _ = writeln!(y, "  data_type: {}", g.kind.data_type());
        if let Some(sep) = &g.multi_value {
            if sep == ";" {
                y.push_str("  multi_value: true\n");
            } else {
                let _ = writeln!(y, "  multi_value: {{separator: {}}}", scalar(sep));
            }
        }
        match &g.codelist {
            Some(Codelist::Auto) => y.push_str("  codelist: auto\n"),
            Some(Codelist::AutoSplit) => y.push_str("  codelist: auto_split\n"),
            Some(Codelist::Static(codes)) => {
                y.push_str("  codelist:\n");
                for c in codes {
                    let _ = writeln!(y, "  - {}", scalar(c));
                }
            }
            None => {}
        }
        let _ = writeln!(y, "  csv_col_index: {}", input.indices[i]);
        if !input.comments {
            continue;
        }
        for t in &g.todos {
            let _ = writeln!(y, "  # TODO: {}", comment(t));
        }
        for q in &g.questions {
            let _ = writeln!(y, "  # TODO (question): {}", comment(q));
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::Kind;

    fn guess(kind: Kind, role: &'static str) -> Guess {
        Guess {
            kind,
            role,
            grain: None,
            codelist: None,
            multi_value: None,
            todos: vec!["confirm the role".into()],
            questions: Vec::new(),
        }
    }

    /// A skeleton names the published schema on its first line, and the schema accepts it
    /// (an editor opening it shows no problem before a person edits it).
    #[test]
    fn a_skeleton_names_the_schema_first_and_the_schema_accepts_it() {
        let names: Vec<String> = ["手続ID", "年度", "区分", "添付書類", "件数", "note: free"]
            .map(String::from)
            .to_vec();
        let guesses = vec![
            guess(Kind::Text, "id"),
            Guess {
                grain: Some("fiscal_year"),
                ..guess(Kind::Int, "time")
            },
            Guess {
                codelist: Some(Codelist::Static(vec!["1 実施済".into(), "2 未実施".into()])),
                ..guess(Kind::Text, "dim")
            },
            Guess {
                codelist: Some(Codelist::AutoSplit),
                multi_value: Some("|".into()),
                ..guess(Kind::Text, "attr")
            },
            guess(Kind::Int, "measure"),
            Guess {
                codelist: Some(Codelist::Auto),
                questions: vec!["cells hold `-` (2). Does that mean \"no value\"?".into()],
                ..guess(Kind::Text, "attr")
            },
        ];
        let null_markers = ["不明".to_string()];
        let input = SkeletonInput {
            dataset_id: "survey",
            file_name: "survey.csv",
            format: "CSV",
            encoding: Some("cp932"),
            sheet: None,
            header_rows: 2,
            title_row: Some("調査結果"),
            null_markers: &null_markers,
            names: &names,
            indices: &[0, 1, 2, 3, 4, 5],
            guesses: &guesses,
            id: Some(0),
            rows: 10,
            data_file: "data.parquet",
            date: "2025-07-24",
            comments: true,
        };
        let text = write(&input);
        assert_eq!(
            text.lines().next(),
            Some(
                "# yaml-language-server: $schema=https://raw.githubusercontent.com/tally-mcp/tally/main/schemas/dataset.schema.json"
            )
        );
        let loaded =
            tally_semantic::definition::load_definition("survey/dataset.yaml", "survey", &text)
                .unwrap_or_else(|e| panic!("the reader accepts the skeleton: {e:?}\n{text}"));
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        let schema = tally_semantic::definition::json_schema();
        let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
        let instance = tally_semantic::yaml::parse(&text)
            .expect("parses")
            .to_json();
        let problems: Vec<String> = validator
            .iter_errors(&instance)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(problems.is_empty(), "{problems:#?}\n{text}");
    }

    #[test]
    fn scalars_read_back_as_written() {
        for s in [
            "手続ID",
            "処理期間(オンライン)",
            "1 実施済",
            "-",
            "yes",
            "a: b",
            "x #y",
            " padded",
            "line\nbreak",
            "添付書類等提出の撤廃/省略状況",
            "007",
            "\"quoted\"",
        ] {
            let yaml = format!("k: {}\n", scalar(s));
            let node = tally_semantic::yaml::parse(&yaml).expect("parses");
            assert_eq!(node.to_json()["k"].as_str(), Some(s), "{yaml}");
        }
    }
}
