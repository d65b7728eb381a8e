//! The columns to write: the definition's, with this run's answers recorded in it first, or,
//! without one, those guessed in a first read with the skeleton written from them.

use super::declared::map_definition;
use super::guess::{Skeleton, infer_columns, skeleton_text};
use super::open::Opened;
use super::options::{AddOptions, Progress};
use crate::answers;
use crate::error::IngestError;
use crate::folder::{DEFINITION_FILE, definition_text};
use crate::write::OutColumn;

/// The columns to write: the definition's when there is one, else guessed in a first read,
/// with the skeleton written from the guesses and their questions gathered.
pub(super) fn plan_columns(
    options: &AddOptions,
    opened: &Opened,
    file_name: &str,
    warnings: &mut Vec<String>,
    questions: &mut Vec<String>,
    progress: &dyn Progress,
) -> Result<(Vec<OutColumn>, Option<Skeleton>), IngestError> {
    let (input, header) = (&opened.input, &opened.header);
    Ok(match &opened.def {
        Some(d) => (
            map_definition(input, header, d, options.accept_drift, warnings)?,
            None,
        ),
        None => {
            let (columns, mut sk) = infer_columns(input, header, &opened.null_markers, progress)?;
            for g in &sk.guesses {
                questions.extend(g.questions.iter().cloned());
            }
            // Written (and checked) before converting: a file too wide for a definition is
            // refused before the work of writing its data.
            sk.text = skeleton_text(
                &options.dataset_id,
                input,
                header,
                file_name,
                &opened.null_markers,
                &columns,
                &sk,
                &opened.data_file,
                warnings,
            )?;
            (columns, Some(sk))
        }
    })
}

/// With a definition and `--null-marker` values it does not declare yet: the answers recorded
/// in its text (see [`answers`]), read from the file again with every marker as empty, and the
/// definition this add converts by replaced with the updated one. `None` when there is nothing
/// to record. A text the edit would leave invalid is not written: the markers are still
/// applied to this conversion, and a warning says what to write by hand.
pub(super) fn record_answers(
    options: &AddOptions,
    opened: &mut Opened,
    warnings: &mut Vec<String>,
    questions: &mut Vec<String>,
    progress: &dyn Progress,
) -> Result<Option<answers::Recorded>, IngestError> {
    let Some(def) = &opened.def else {
        return Ok(None);
    };
    let declared = &def.source.null_markers;
    if options.null_markers.iter().all(|m| declared.contains(m)) {
        return Ok(None);
    }
    let path = opened.folder.join(DEFINITION_FILE);
    let Some(text) = definition_text(&path)? else {
        return Err(IngestError::io(
            format!("cannot read {}", path.display()),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
    };
    // The file read again as a skeleton would read it with the markers given.
    let (columns, sk) = infer_columns(
        &opened.input,
        &opened.header,
        &opened.null_markers,
        progress,
    )?;
    let guess = |name: &str| {
        columns
            .iter()
            .position(|c| c.name == name)
            .map(|i| sk.guesses[i].clone())
    };
    let recorded = answers::record(&text, declared, &options.null_markers, &guess);
    warnings.extend(recorded.not_recorded.iter().cloned());
    questions.extend(recorded.open_questions.iter().cloned());
    if recorded.changes.is_empty() {
        return Ok(None);
    }
    let label = format!("{}/{DEFINITION_FILE}", def.id);
    match tally_semantic::load_definition(&label, &def.id, &recorded.text) {
        Ok(loaded) => {
            opened.def = Some(loaded.dataset);
            Ok(Some(recorded))
        }
        Err(e) => {
            warnings.push(format!(
                "the answers were not written into {label}: with them it would not validate ({}); add {} to source.null_markers by hand",
                e.diagnostics
                    .iter()
                    .find(|d| d.severity == tally_semantic::definition::Severity::Error)
                    .map(|d| format!("line {}: {}", d.line, d.message))
                    .unwrap_or_default(),
                options
                    .null_markers
                    .iter()
                    .map(|m| format!("{m:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            Ok(None)
        }
    }
}
