//! The header of an input file: its rows read (a title row above it detected), its names
//! cleaned and checked for what a definition could not declare, and warnings on how it was read.

use crate::error::IngestError;
use crate::input::{Cell, Flow, Input, Row};

/// The header of an input file and where its data starts.
#[derive(Debug, Clone)]
pub(super) struct Header {
    /// Column names, cleaned (trimmed, line breaks and runs of spaces made one space); empty
    /// for a column without a name.
    pub(super) names: Vec<String>,
    /// Non-blank rows before the data (the header row included).
    pub(super) skip: u64,
    /// The header's row number in the file.
    pub(super) row: u64,
    pub(super) header_rows: u32,
    /// A one-cell title row above the header.
    pub(super) title: Option<String>,
    /// Names that were cleaned (for warnings).
    pub(super) cleaned: Vec<(String, String)>,
}

fn clean_name(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(super) fn non_empty(cells: &[Cell]) -> usize {
    cells.iter().filter(|c| !c.is_empty()).count()
}

/// Reads the header rows: `given` of them, else one — or two, when the first row holds a
/// single cell (a title) over a row of names and `detect_title` is on.
pub(super) fn read_header(
    input: &Input,
    given: Option<u32>,
    detect_title: bool,
) -> Result<Header, IngestError> {
    match given {
        Some(0) => {
            return Err(IngestError::input(
                input.place(),
                "0 header rows: a file without a header row cannot be read by name",
                "add a header row naming the columns, or give --header-rows 1 or more (source.csv_header_rows in dataset.yaml)",
            ));
        }
        Some(n) if n > 100 => {
            return Err(IngestError::input(
                input.place(),
                format!("{n} header rows is more than the 100 read before the data"),
                "give the number of rows above the data, the last of them the header",
            ));
        }
        _ => {}
    }
    let want = given.unwrap_or(1).max(1) as usize;
    let look = if given.is_none() && detect_title {
        2
    } else {
        want
    };
    let mut rows: Vec<(u64, Vec<Cell>)> = Vec::new();
    input.scan(&mut |row: Row<'_>| {
        if non_empty(row.cells) == 0 {
            return Ok(Flow::Continue);
        }
        rows.push((row.number, row.cells.to_vec()));
        Ok(if rows.len() >= look {
            Flow::Stop
        } else {
            Flow::Continue
        })
    })?;
    if rows.len() < want {
        return Err(IngestError::input(
            input.place(),
            if rows.is_empty() {
                "the file holds no rows".to_string()
            } else {
                format!(
                    "the file has {} non-blank rows, fewer than the {want} header rows expected",
                    rows.len()
                )
            },
            "give a file with a header row and data, or the right --header-rows",
        ));
    }
    let mut header_rows = want as u32;
    let mut title = None;
    if given.is_none() && detect_title && rows.len() == 2 {
        let (first, second) = (&rows[0].1, &rows[1].1);
        if non_empty(first) == 1
            && non_empty(second) >= 2
            && first.first().is_some_and(|c| !c.is_empty())
        {
            header_rows = 2;
            title = first[0].as_text().map(|t| clean_name(&t));
        }
    }
    let (row, cells) = rows[header_rows as usize - 1].clone();
    let mut names = Vec::with_capacity(cells.len());
    let mut cleaned = Vec::new();
    for c in &cells {
        let raw = c.as_text().map(|t| t.into_owned()).unwrap_or_default();
        let name = clean_name(&raw);
        if name != raw && !name.is_empty() {
            cleaned.push((raw, name.clone()));
        }
        names.push(name);
    }
    while names.last().is_some_and(String::is_empty) {
        names.pop();
    }
    if names.is_empty() {
        return Err(IngestError::input(
            input.place().row(row),
            "the header row is empty",
            "give the number of rows above the data with --header-rows",
        ));
    }
    Ok(Header {
        names,
        skip: u64::from(header_rows),
        row,
        header_rows,
        title,
        cleaned,
    })
}

/// Longest column name a definition accepts.
const MAX_NAME_CHARS: usize = 200;

/// Header names a definition could not declare: too long, with control or invisible
/// characters, or two that read as one name (width and case folded).
pub(super) fn check_names(input: &Input, header: &Header) -> Result<(), IngestError> {
    let mut problems = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, n) in header.names.iter().enumerate() {
        if n.is_empty() {
            continue;
        }
        if n.chars().count() > MAX_NAME_CHARS {
            problems.push(format!(
                "column {} is headed by {} characters (at most {MAX_NAME_CHARS}): {:?}…",
                i + 1,
                n.chars().count(),
                n.chars().take(30).collect::<String>()
            ));
        }
        let invisible = |c: char| {
            c.is_control()
                || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
        };
        if n.chars().any(invisible) {
            problems.push(format!(
                "column {} is headed {n:?}, with control or invisible characters",
                i + 1
            ));
        }
        let key = tally_semantic::names::normalize(n);
        if let Some(first) = seen.insert(key, i) {
            if header.names[first] == *n {
                problems.push(format!("{n:?} heads columns {} and {}", first + 1, i + 1));
            } else {
                problems.push(format!(
                    "{:?} (column {}) and {n:?} (column {}) read as the same name (width and case are not told apart)",
                    header.names[first],
                    first + 1,
                    i + 1
                ));
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(IngestError::input(
        input.place().row(header.row),
        format!(
            "the header names columns a dataset cannot declare: {}",
            problems.join("; ")
        ),
        "give every column its own short name in the header row (or --header-rows if the header is another row)",
    ))
}

/// The warnings about how the header was read: names cleaned, and a title row skipped.
pub(super) fn header_warnings(header: &Header, given_rows: Option<u32>) -> Vec<String> {
    let mut warnings: Vec<String> = Vec::new();
    for (raw, name) in &header.cleaned {
        warnings.push(format!(
            "the header {raw:?} was read as {name:?} (spaces and line breaks made one space)"
        ));
    }
    if header.title.is_some() && given_rows.is_none() {
        warnings.push(format!(
            "row 1 holds only a title, so the header was taken from row {} (give --header-rows to say otherwise)",
            header.row
        ));
    }
    warnings
}
