//! Workbooks (XLSX/XLSM) through `calamine`, a cell at a time.
//!
//! A workbook is a zip archive of XML: a few megabytes can expand to gigabytes. Before the
//! sheet reader opens it, every member is inflated once, counting, and the workbook is
//! refused past the cap — the declared sizes in the archive's directory are not trusted.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use calamine::{DataRef, Reader, Xlsx, XlsxError};

use crate::error::{IngestError, Place};
use crate::read::{Cell, Flow, Input, Row};

/// Default cap on what a workbook may expand to.
pub const DEFAULT_MAX_UNPACKED: u64 = 2 * 1024 * 1024 * 1024;

/// Inflates every member of the archive, counting, and refuses the workbook once the total
/// passes `cap` (a zip bomb, or simply more than this machine should take).
pub fn check_expansion(path: &Path, cap: u64) -> Result<(), IngestError> {
    let file = File::open(path)
        .map_err(|e| IngestError::io(format!("cannot read {}", path.display()), e))?;
    if is_compound_file(path) {
        return Err(if holds_encrypted_package(path) {
            password_error(path)
        } else {
            IngestError::input(
                Place::file(path),
                "is an old-format (Excel 97-2003) workbook or another compound document, not an .xlsx",
                "open it in a spreadsheet program and save it as .xlsx, or export the sheet as CSV",
            )
        });
    }
    let mut archive = zip::ZipArchive::new(BufReader::new(file)).map_err(|e| corrupt(path, e))?;
    let cap_text = format!("{} MiB", cap / (1024 * 1024));
    let mut total: u64 = 0;
    let mut buf = vec![0u8; 1 << 16];
    for i in 0..archive.len() {
        let mut member = archive.by_index(i).map_err(|e| corrupt(path, e))?;
        if member.is_dir() {
            continue;
        }
        let name = member
            .name()
            .map(|n| n.into_owned())
            .unwrap_or_else(|_| format!("#{i}"));
        let declared = member.size();
        if total.saturating_add(declared) > cap {
            return Err(bomb(path, &name, &cap_text));
        }
        loop {
            let n = member
                .read(&mut buf)
                .map_err(|e| corrupt(path, format!("member {name}: {e}")))?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > cap {
                return Err(bomb(path, &name, &cap_text));
            }
        }
    }
    Ok(())
}

fn bomb(path: &Path, member: &str, cap: &str) -> IngestError {
    IngestError::limit(
        format!(
            "{}: the workbook expands to more than {cap} (at member {member}); it is refused as a possible zip bomb",
            path.display()
        ),
        "if the workbook is genuine, raise the cap with --max-unpacked-mb, or export the sheet as CSV",
    )
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> IngestError {
    IngestError::input(
        Place::file(path),
        format!("the workbook is damaged or not a workbook: {e}"),
        "open it in a spreadsheet program and save it again as .xlsx, or export the sheet as CSV",
    )
}

fn password_error(path: &Path) -> IngestError {
    IngestError::input(
        Place::file(path),
        "the workbook is password-protected (encrypted)",
        "open it in a spreadsheet program, remove the password (File → Info → Protect Workbook), and save it again",
    )
}

/// An OLE compound file: what an encrypted OOXML workbook (or an old .xls) is.
fn is_compound_file(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == [0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1]
}

/// An encrypted OOXML workbook is a compound file with a stream named `EncryptedPackage`;
/// its directory entry holds the name in UTF-16LE.
fn holds_encrypted_package(path: &Path) -> bool {
    let needle: Vec<u8> = "EncryptedPackage"
        .encode_utf16()
        .flat_map(|u| u.to_le_bytes())
        .collect();
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    bytes.windows(needle.len()).any(|w| w == needle.as_slice())
}

fn open(path: &Path) -> Result<Xlsx<BufReader<File>>, IngestError> {
    let file = File::open(path)
        .map_err(|e| IngestError::io(format!("cannot read {}", path.display()), e))?;
    Xlsx::new(BufReader::with_capacity(1 << 16, file)).map_err(|e| match e {
        XlsxError::Password => password_error(path),
        other => corrupt(path, other),
    })
}

/// The workbook's sheets, and the one to read: the one named, else the first (the summary
/// says which was read and lists the others).
pub fn choose_sheet(
    path: &Path,
    wanted: Option<&str>,
) -> Result<(Vec<String>, String), IngestError> {
    let workbook = open(path)?;
    let names = workbook.sheet_names();
    if names.is_empty() {
        return Err(IngestError::input(
            Place::file(path),
            "the workbook has no sheets",
            "give a workbook with a sheet of data",
        ));
    }
    if let Some(w) = wanted {
        if names.iter().any(|n| n == w) {
            return Ok((names.clone(), w.to_string()));
        }
        let folded = |s: &str| tally_semantic::names::normalize(s);
        if let Some(n) = names.iter().find(|n| folded(n) == folded(w)) {
            return Ok((names.clone(), n.clone()));
        }
        return Err(IngestError::input(
            Place::file(path),
            format!("the workbook has no sheet `{w}`"),
            format!(
                "give one of its sheets with --sheet: {}",
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok((names.clone(), names[0].clone()))
}

/// Reads the chosen sheet's rows in order, cells in their columns (missing cells empty).
pub fn scan(
    input: &Input,
    visit: &mut dyn FnMut(Row<'_>) -> Result<Flow, IngestError>,
) -> Result<(), IngestError> {
    let path = &input.path;
    let sheet = input.sheet.clone().unwrap_or_default();
    let mut workbook = open(path)?;
    let mut cells_reader = workbook
        .worksheet_cells_reader(&sheet)
        .map_err(|e| corrupt(path, format!("sheet `{sheet}`: {e}")))?;
    let dims = cells_reader.dimensions();
    let total_rows = u64::from(dims.end.0.saturating_sub(dims.start.0)) + 1;
    let size = input.size;
    let mut row: Vec<Cell> = Vec::new();
    let mut current: Option<u32> = None;
    // The next row number to hand on: rows without a cell are blank rows, handed on too.
    let mut next: u32 = 0;
    let emit = |row_index: u32,
                cells: &mut Vec<Cell>,
                visit: &mut dyn FnMut(Row<'_>) -> Result<Flow, IngestError>|
     -> Result<Flow, IngestError> {
        // Progress of a sheet is by rows; the bytes are scaled to the file's size.
        let bytes = (u64::from(row_index) + 1).saturating_mul(size) / total_rows.max(1);
        let flow = visit(Row {
            number: u64::from(row_index) + 1,
            cells,
            bytes_read: bytes.min(size),
        })?;
        cells.clear();
        Ok(flow)
    };
    loop {
        let cell = cells_reader
            .next_cell()
            .map_err(|e| corrupt(path, format!("sheet `{sheet}`: {e}")))?;
        let Some(cell) = cell else { break };
        let (r, c) = cell.get_position();
        // Excel's last cell is XFD1048576; a cell claimed past it would make the blank rows
        // before it (or the row's cells) without end.
        if c >= 16_384 || r >= 1_048_576 {
            return Err(corrupt(
                path,
                format!(
                    "a cell at row {}, column {} lies past a sheet's last cell (XFD1048576)",
                    u64::from(r) + 1,
                    u64::from(c) + 1
                ),
            ));
        }
        if current != Some(r) {
            if let Some(prev) = current {
                if emit(prev, &mut row, visit)? == Flow::Stop {
                    return Ok(());
                }
                next = prev + 1;
            }
            while next < r {
                if emit(next, &mut row, visit)? == Flow::Stop {
                    return Ok(());
                }
                next += 1;
            }
            current = Some(r);
        }
        let c = c as usize;
        if row.len() <= c {
            row.resize(c + 1, Cell::Empty);
        }
        row[c] = to_cell(cell.get_value());
    }
    if let Some(prev) = current {
        emit(prev, &mut row, visit)?;
    }
    Ok(())
}

fn to_cell(value: &DataRef<'_>) -> Cell {
    match value {
        DataRef::Empty => Cell::Empty,
        DataRef::String(s) if s.is_empty() => Cell::Empty,
        DataRef::SharedString("") => Cell::Empty,
        DataRef::String(s) => Cell::Text(s.clone()),
        DataRef::SharedString(s) => Cell::Text((*s).to_string()),
        DataRef::Int(i) => Cell::Int(*i),
        DataRef::Float(f) => Cell::Float(*f),
        DataRef::Bool(b) => Cell::Bool(*b),
        DataRef::DateTime(d) => match d.as_datetime() {
            Some(t) if t.time() == chrono::NaiveTime::MIN && !d.is_duration() => {
                Cell::Date(t.date().format("%Y-%m-%d").to_string())
            }
            Some(t) if !d.is_duration() => Cell::Date(t.format("%Y-%m-%dT%H:%M:%S").to_string()),
            _ => Cell::Float(d.as_f64()),
        },
        DataRef::DateTimeIso(s) => Cell::Date(s.clone()),
        DataRef::DurationIso(s) => Cell::Text(s.clone()),
        DataRef::Error(e) => Cell::Error(e.to_string()),
    }
}
