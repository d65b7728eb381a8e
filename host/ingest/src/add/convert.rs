//! Converting the rows: each cell read as its column's type and pushed to the Parquet sink,
//! what could not be read refused (or stored as empty with `--accept-drift`), and warnings
//! on what converting did to cells.

use super::open::Opened;
use super::options::{AddOptions, Progress};
use super::rows::{is_null_marker, scan_data};
use crate::error::{IngestError, Place};
use crate::folder::DEFINITION_FILE;
use crate::input::Cell;
use crate::values::{self, Value};
use crate::write::{OutColumn, Sink};

/// Failures to read a column's cells as its type.
#[derive(Debug, Default, Clone)]
struct Failures {
    count: u64,
    first: Option<(Place, String)>,
}

/// What converting the rows counted.
pub(super) struct Tallies {
    /// Data rows read.
    rows: u64,
    /// Cells of each column that could not be read as its type.
    failures: Vec<Failures>,
    /// Cells of each column stored as empty.
    pub(super) nulls: Vec<u64>,
    /// Cells of each column that held a null marker.
    marked: Vec<u64>,
    /// Spreadsheet error values kept as text.
    errors_kept: u64,
    /// Blank rows skipped.
    blank: u64,
}

/// Reads the file's data rows, converts each cell to its column's type, and pushes the rows
/// to `sink`.
pub(super) fn convert_rows(
    opened: &Opened,
    columns: &[OutColumn],
    sink: &mut Sink,
    progress: &dyn Progress,
) -> Result<Tallies, IngestError> {
    let (input, header, null_markers) = (&opened.input, &opened.header, &opened.null_markers);
    let mut failures: Vec<Failures> = vec![Failures::default(); columns.len()];
    let mut nulls: Vec<u64> = vec![0; columns.len()];
    let mut marked: Vec<u64> = vec![0; columns.len()];
    let mut errors_kept: u64 = 0;
    let mut blank = 0;
    progress.begin("converting", input.size);
    let mut values: Vec<Value> = Vec::with_capacity(columns.len());
    let rows = scan_data(input, header, progress, &mut blank, &mut |row| {
        values.clear();
        for (i, c) in columns.iter().enumerate() {
            let cell = c
                .source
                .and_then(|s| row.cells.get(s))
                .unwrap_or(&Cell::Empty);
            let v = if is_null_marker(cell, null_markers) {
                marked[i] += 1;
                Value::Null
            } else {
                if matches!(cell, Cell::Error(_)) {
                    errors_kept += 1;
                }
                match values::convert(cell, c.kind) {
                    Ok(v) => v,
                    Err(values::NotOfType) => {
                        let f = &mut failures[i];
                        f.count += 1;
                        if f.first.is_none() {
                            let place = input
                                .place()
                                .row(row.number)
                                .column(c.source.unwrap_or(0), Some(&c.name));
                            f.first =
                                Some((place, cell.as_text().unwrap_or_default().into_owned()));
                        }
                        Value::Null
                    }
                }
            };
            if v == Value::Null {
                nulls[i] += 1;
            }
            values.push(v);
        }
        sink.push(values.drain(..))
    })?;
    progress.end();
    Ok(Tallies {
        rows,
        failures,
        nulls,
        marked,
        errors_kept,
        blank,
    })
}

/// Refuses a file without data rows, and one with values that cannot be read as their
/// column's type (the file drifted from its definition, or changed between the two reads);
/// with `--accept-drift`, such values are stored as empty, with a warning.
pub(super) fn check_values(
    options: &AddOptions,
    opened: &Opened,
    columns: &[OutColumn],
    tallies: &Tallies,
    warnings: &mut Vec<String>,
) -> Result<(), IngestError> {
    let (input, def) = (&opened.input, &opened.def);
    if tallies.rows == 0 {
        return Err(IngestError::input(
            input.place(),
            format!(
                "the file has a header (row {}) but no rows of data",
                opened.header.row
            ),
            "give a file with data, or check --header-rows",
        ));
    }
    let mut differences = Vec::new();
    for (c, f) in columns.iter().zip(&tallies.failures) {
        if let Some((place, value)) = &f.first {
            differences.push(format!(
                "{}: {} value{} cannot be read as {} (declared data_type); the first, at {place}, is {value:?}",
                c.name,
                f.count,
                if f.count == 1 { "" } else { "s" },
                c.kind.data_type()
            ));
        }
    }
    if !differences.is_empty() {
        if options.accept_drift || def.is_none() {
            if def.is_none() {
                // The types were guessed from the first read; only a file written to while it
                // is read can hold other values on the second.
                return Err(IngestError::input(
                    input.place(),
                    format!(
                        "the file changed while it was converted (its values differ between the two reads: {})",
                        differences.join("; ")
                    ),
                    "wait until the file is completely written (or convert a copy) and run tally add again",
                ));
            }
            for d in differences {
                warnings.push(format!("{d}: stored as empty (--accept-drift)"));
            }
        } else {
            return Err(IngestError::Drift {
                file: input.path.clone(),
                definition: opened.folder.join(DEFINITION_FILE),
                differences,
            });
        }
    }
    Ok(())
}

/// The warnings about what converting did to cells: blank rows skipped, error values kept,
/// null markers stored as empty.
pub(super) fn conversion_warnings(
    opened: &Opened,
    columns: &[OutColumn],
    tallies: &Tallies,
    warnings: &mut Vec<String>,
) {
    let blank = tallies.blank;
    if blank > 0 {
        warnings.push(format!("{blank} blank rows were skipped"));
    }
    let errors_kept = tallies.errors_kept;
    if errors_kept > 0 {
        warnings.push(format!("{errors_kept} cells hold a spreadsheet error value (such as #N/A) and were kept as that text"));
    }
    for (c, n) in columns.iter().zip(&tallies.marked) {
        if *n > 0 {
            warnings.push(format!(
                "{}: {n} cells holding a null marker ({}) were stored as empty",
                c.name,
                opened.null_markers.join(", ")
            ));
        }
    }
}
