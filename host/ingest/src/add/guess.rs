//! Without a definition: each column's type and role guessed in a first read, and the
//! skeleton `dataset.yaml` written from the guesses and checked as `tally check` would.

use super::header::{Header, check_names};
use super::options::Progress;
use super::rows::{is_null_marker, scan_data};
use crate::error::IngestError;
use crate::folder::DEFINITION_FILE;
use crate::infer::{self, Statistics};
use crate::input::{self, Cell, Input};
use crate::skeleton;
use crate::write::OutColumn;

/// The skeleton's guesses and its text.
pub(super) struct Skeleton {
    pub(super) guesses: Vec<infer::Guess>,
    pub(super) id: Option<usize>,
    /// Data rows of the first read.
    pub(super) rows: u64,
    pub(super) text: String,
}

/// A size in MiB with one decimal, as messages give it.
fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// The skeleton `dataset.yaml`, checked by the same reader `tally check` uses. A definition
/// may be at most 4 MiB (and 200,000 values): past that, the per-field TODO comments are
/// left out (said in a warning and at the top of the file), and a file whose fields alone do
/// not fit is refused.
#[expect(clippy::too_many_arguments, reason = "the parts of one file, named")]
pub(super) fn skeleton_text(
    dataset_id: &str,
    input: &Input,
    header: &Header,
    file_name: &str,
    null_markers: &[String],
    columns: &[OutColumn],
    sk: &Skeleton,
    data_file: &str,
    warnings: &mut Vec<String>,
) -> Result<String, IngestError> {
    let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let indices: Vec<usize> = columns.iter().map(|c| c.source.unwrap_or(0)).collect();
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let mut parts = skeleton::SkeletonInput {
        dataset_id,
        file_name,
        format: input.format.name(),
        encoding: input.encoding.map(|e| e.name()),
        sheet: input.sheet.as_deref(),
        header_rows: header.header_rows,
        title_row: header.title.as_deref(),
        null_markers,
        names: &names,
        indices: &indices,
        guesses: &sk.guesses,
        id: sk.id,
        rows: sk.rows,
        data_file,
        date: &today,
        comments: true,
    };
    let max = tally_semantic::yaml::MAX_DOCUMENT_BYTES;
    let mut text = skeleton::write(&parts);
    if text.len() > max {
        parts.comments = false;
        let full = text.len();
        text = skeleton::write(&parts);
        if text.len() <= max {
            warnings.push(format!(
                "the TODO comments of each field were left out of {DEFINITION_FILE}: with them it would be {}, more than the {} a definition may be",
                mib(full),
                mib(max)
            ));
        }
    }
    let too_large = |what: String| {
        IngestError::limit(
            format!(
                "{}: a {DEFINITION_FILE} declaring its {} columns {what}, so none is written",
                input.path.display(),
                input::count_text(columns.len() as u64)
            ),
            "split the columns into several files (a dataset each), shorten long column names, or lower --max-columns to refuse such files sooner",
        )
    };
    if text.len() > max {
        return Err(too_large(format!(
            "would be {} even without comments, more than the {} a definition may be",
            mib(text.len()),
            mib(max)
        )));
    }
    if let Err(e) = tally_semantic::yaml::parse(&text) {
        return Err(too_large(format!(
            "is past what a definition may hold ({})",
            e.message
        )));
    }
    if let Err(e) = tally_semantic::load_definition(DEFINITION_FILE, dataset_id, &text) {
        // The names were checked and every guess is one the reader accepts; anything left is
        // a name or value of the file the definition reader refuses.
        return Err(IngestError::input(
            input.place().row(header.row),
            format!(
                "a {DEFINITION_FILE} for the file cannot be written: {}",
                e.diagnostics
                    .iter()
                    .map(|d| format!("line {}: {} ({})", d.line, d.message, d.path))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            "rename the columns named there in the header, or write dataset.yaml yourself (tally check says what it accepts) and run tally add again",
        ));
    }
    Ok(text)
}

/// Without a definition: one read to gather statistics, then a guess per column.
pub(super) fn infer_columns(
    input: &Input,
    header: &Header,
    null_markers: &[String],
    progress: &dyn Progress,
) -> Result<(Vec<OutColumn>, Skeleton), IngestError> {
    check_names(input, header)?;
    let indices: Vec<usize> = (0..header.names.len())
        .filter(|i| !header.names[*i].is_empty())
        .collect();
    let mut stats = Statistics::new(indices.len());
    let mut blank = 0;
    progress.begin("reading", input.size);
    let rows = scan_data(input, header, progress, &mut blank, &mut |row| {
        for (k, &i) in indices.iter().enumerate() {
            let cell = row.cells.get(i).unwrap_or(&Cell::Empty);
            if is_null_marker(cell, null_markers) {
                stats.add(k, row.number, &Cell::Empty);
            } else {
                stats.add(k, row.number, cell);
            }
        }
        stats.end_row();
        Ok(())
    })?;
    progress.end();
    let names: Vec<String> = indices.iter().map(|i| header.names[*i].clone()).collect();
    let (guesses, id) = infer::guess(&names, &stats.columns, rows);
    let columns = indices
        .iter()
        .zip(&guesses)
        .enumerate()
        .map(|(k, (&i, g))| OutColumn {
            name: names[k].clone(),
            kind: g.kind,
            source: Some(i),
            dictionary: Some(k) != id,
            bloom: Some(k) == id,
        })
        .collect();
    Ok((
        columns,
        Skeleton {
            guesses,
            id,
            rows,
            text: String::new(),
        },
    ))
}
