//! `tally add`: a file converted into a dataset folder (Parquet, a definition skeleton and
//! the record of what was read).
//!
//! The phases, each in its module: the input opened and its header read (`open`, `header`),
//! the columns planned from the definition or guessed (`plan`, `declared`, `guess`), the
//! rows converted (`rows`, `convert`), the result put in place (`publish`) and summed up
//! (`summary`).

mod convert;
mod declared;
mod guess;
mod header;
mod open;
mod options;
mod plan;
mod publish;
mod rows;
mod summary;

use std::time::Instant;

pub use options::{AddOptions, Progress, Silent};
pub use summary::{ColumnSummary, InputSummary, Summary};

use crate::error::IngestError;
use crate::folder::{DEFINITION_FILE, Staging};
use crate::write::Sink;
use convert::{check_values, conversion_warnings, convert_rows};
use header::header_warnings;
use open::open;
use plan::{plan_columns, record_answers};
use publish::{ingest_record, put_in_place, sha256_file};
use summary::column_summaries;

/// Converts `options.file` into the dataset folder `options.datasets/<id>`.
pub fn add(options: &AddOptions, progress: &dyn Progress) -> Result<Summary, IngestError> {
    let started = Instant::now();
    let mut opened = open(options)?;
    let mut warnings = header_warnings(&opened.header, opened.given_rows);
    let mut questions = Vec::new();
    let answered = record_answers(
        options,
        &mut opened,
        &mut warnings,
        &mut questions,
        progress,
    )?;
    let (folder, def, input, header) = (&opened.folder, &opened.def, &opened.input, &opened.header);
    let sha256 = sha256_file(&input.path)?;
    let file_name = input
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();

    // The columns to write and, without a definition, the skeleton's guesses.
    let (columns, skeleton) = plan_columns(
        options,
        &opened,
        &file_name,
        &mut warnings,
        &mut questions,
        progress,
    )?;

    // Convert and write.
    let staging = Staging::new(&options.datasets, &options.dataset_id)?;
    let staged_data = staging.dir.join(&opened.data_file);
    let record = ingest_record(input, header, &file_name, &sha256);
    let mut sink = Sink::create(
        &staged_data,
        &columns,
        vec![("tally.ingest".to_string(), record)],
    )?;
    let tallies = convert_rows(&opened, &columns, &mut sink, progress)?;
    check_values(options, &opened, &columns, &tallies, &mut warnings)?;
    let written = sink.finish()?;
    conversion_warnings(&opened, &columns, &tallies, &mut warnings);

    if let Some(sk) = &skeleton
        && sk.rows != written
    {
        return Err(IngestError::input(
            input.place(),
            format!(
                "the file changed while it was converted ({} data rows on the first read, {written} on the second)",
                sk.rows
            ),
            "wait until the file is completely written (or convert a copy) and run tally add again",
        ));
    }
    let mut id_field = def.as_ref().and_then(|d| d.id_field.clone());
    if let Some(sk) = &skeleton {
        id_field = sk.id.map(|i| columns[i].name.clone());
    }
    let yaml = skeleton
        .as_ref()
        .map(|sk| sk.text.clone())
        .or_else(|| answered.as_ref().map(|a| a.text.clone()));

    let target_data = put_in_place(
        options,
        &opened,
        staging,
        yaml.as_deref(),
        &file_name,
        &mut warnings,
    )?;

    let summary_columns =
        column_summaries(&columns, skeleton.as_ref(), def.as_ref(), &tallies.nulls);
    Ok(Summary {
        dataset_id: options.dataset_id.clone(),
        data_file: target_data,
        definition: if skeleton.is_some() {
            "written"
        } else if answered.is_some() {
            "updated"
        } else {
            "kept"
        },
        definition_file: folder.join(DEFINITION_FILE),
        recorded: answered.map(|a| a.changes).unwrap_or_default(),
        input: InputSummary {
            file: file_name,
            format: input.format.name(),
            encoding: input.encoding.map(|e| e.name()),
            encoding_detection: input.encoding_source,
            sheet: input.sheet.clone(),
            header_rows: header.header_rows,
            bytes: input.size,
            sha256,
        },
        rows: written,
        columns: summary_columns,
        id_field,
        warnings,
        questions,
        seconds: started.elapsed().as_secs_f64(),
    })
}
