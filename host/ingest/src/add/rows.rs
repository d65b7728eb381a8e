//! The data rows after the header: each checked against it (ragged rows, data in columns
//! without a name), blank rows skipped and counted, and null markers told apart.

use super::header::{Header, non_empty};
use super::options::Progress;
use crate::error::IngestError;
use crate::input::{Cell, Flow, Input, Row};
use crate::read::Format;

/// Checks a data row against the header: ragged text rows, and data in columns that have no
/// name.
fn check_row(input: &Input, header: &Header, row: &Row<'_>) -> Result<(), IngestError> {
    let n = header.names.len();
    let text = matches!(input.format, Format::Csv { .. });
    if text && row.cells.len() < n {
        return Err(IngestError::input(
            input.place().row(row.number),
            format!(
                "the row has {} fields but the header (row {}) has {n}",
                row.cells.len(),
                header.row
            ),
            "every row must have as many fields as the header: check for a missing delimiter or an unclosed quote on this or the previous row",
        ));
    }
    for (i, c) in row.cells.iter().enumerate() {
        if c.is_empty() || header.names.get(i).is_some_and(|name| !name.is_empty()) {
            continue;
        }
        let value = c
            .as_text()
            .unwrap_or_default()
            .chars()
            .take(40)
            .collect::<String>();
        return Err(IngestError::input(
            input.place().row(row.number).column(i, None),
            if i >= n {
                if text {
                    format!(
                        "the row has {} fields but the header (row {}) has {n}; field {} holds {value:?}",
                        row.cells.len(),
                        header.row,
                        i + 1
                    )
                } else {
                    format!(
                        "holds {value:?} but its column has no header (the header has {n} columns)"
                    )
                }
            } else {
                format!(
                    "holds {value:?} but its column has no name in the header (row {})",
                    header.row
                )
            },
            "name every column that holds data in the header row, or check for a stray delimiter",
        ));
    }
    Ok(())
}

/// Visits the data rows (after the header, blank rows skipped and counted), checked against
/// the header.
pub(super) fn scan_data(
    input: &Input,
    header: &Header,
    progress: &dyn Progress,
    blank: &mut u64,
    visit: &mut dyn FnMut(&Row<'_>) -> Result<(), IngestError>,
) -> Result<u64, IngestError> {
    let mut seen: u64 = 0;
    let mut rows: u64 = 0;
    // Blank lines and rows are layout in text files and sheets; in Parquet and JSON Lines a
    // record of nulls is a record.
    let skips_blank = input.format.has_header_rows();
    input.scan(&mut |row: Row<'_>| {
        if skips_blank && non_empty(row.cells) == 0 {
            if seen >= header.skip {
                *blank += 1;
            }
            return Ok(Flow::Continue);
        }
        seen += 1;
        if seen <= header.skip {
            return Ok(Flow::Continue);
        }
        check_row(input, header, &row)?;
        visit(&row)?;
        rows += 1;
        if rows.is_multiple_of(4096) {
            progress.update(rows, row.bytes_read);
        }
        Ok(Flow::Continue)
    })?;
    progress.update(rows, input.size);
    Ok(rows)
}

/// A value stored as empty because the definition or the command line names it.
pub(super) fn is_null_marker(cell: &Cell, markers: &[String]) -> bool {
    if markers.is_empty() {
        return false;
    }
    // Any cell as it reads: a sheet's `#N/A` error, a `999` stored as a number.
    cell.as_text().is_some_and(|t| {
        let t = t.trim();
        markers.iter().any(|m| m.trim() == t)
    })
}
