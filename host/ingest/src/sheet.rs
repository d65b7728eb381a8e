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
use crate::input::{Cell, Flow, Input, Row};

/// Default cap on what a workbook may expand to.
pub const DEFAULT_MAX_UNPACKED: u64 = 2 * 1024 * 1024 * 1024;

/// Inflates every member of the archive, counting, and refuses the workbook once the total
/// passes `cap` (a zip bomb, or simply more than this machine should take). The XML is read
/// for what the sheet reader will hold in memory while the workbook is open (see [`Held`]),
/// which is refused past the same cap.
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
    let mut held = Held::default();
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
        let lower = name.to_ascii_lowercase();
        let mut xml =
            (lower.ends_with(".xml") || lower.ends_with(".rels")).then(XmlCounter::default);
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
            if let Some(x) = &mut xml {
                x.feed(&buf[..n], &mut held);
                if held.estimate() > cap {
                    return Err(held_too_much(path, &held, &cap_text));
                }
            }
        }
    }
    Ok(())
}

/// What the sheet reader (calamine) holds in memory for as long as a workbook is open: it
/// reads the shared strings, the styles, the workbook's sheet list and the relationships
/// whole, each element into structures of its own. A workbook can stay far under the
/// unpacked cap and still cost many times that in memory: `<si><t>x</t></si>` is 17 bytes of
/// XML but a `String` in a list (24 bytes, twice that while the list grows) and a heap block
/// (32 bytes at least). So elements are counted as they stream past, by local name, in every
/// XML member (whatever it is named: a hostile workbook can put its parts anywhere), and the
/// estimate is held to the same cap as the unpacked size.
#[derive(Debug, Default)]
struct Held {
    /// `<si>` elements: shared strings.
    strings: u64,
    /// The largest `uniqueCount` a `<sst>` declares: the reader reserves room for that many
    /// strings before reading one (a hostile count would allocate without end).
    declared: u64,
    /// Text inside `<si>` elements: an upper bound on the strings' characters.
    text: u64,
    /// Style records (`xf`, `font`, `fill`, `border`, `numFmt`), each a `Style` or a part of one.
    styles: u64,
    /// Sheets, defined names and relationships: two strings each.
    entries: u64,
}

/// A shared string beyond its text: its heap block's least size and rounding.
const STRING_HEAP: u64 = 32;
/// A `String` in the reader's list.
const STRING_SLOT: u64 = 24;
/// A sheet, defined name or relationship: two strings and their blocks.
const ENTRY_COST: u64 = 128;

impl Held {
    fn style_cost() -> u64 {
        // A style record is read into a `Style` (fonts, fills and borders cloned into it) and
        // its number format; a font, fill or border record into its own structure first.
        std::mem::size_of::<calamine::Style>() as u64 + 64
    }

    fn estimate(&self) -> u64 {
        // The list grows by doubling unless a count was declared (then exactly that many).
        let slots = self.declared.max(self.strings.saturating_mul(2));
        self.text
            .saturating_add(self.strings.saturating_mul(STRING_HEAP))
            .saturating_add(slots.saturating_mul(STRING_SLOT))
            .saturating_add(self.styles.saturating_mul(Self::style_cost()))
            .saturating_add(self.entries.saturating_mul(ENTRY_COST))
    }
}

fn held_too_much(path: &Path, held: &Held, cap: &str) -> IngestError {
    let mib = |b: u64| {
        if b < 1 << 20 {
            format!("{} KiB", b.div_ceil(1024))
        } else {
            format!("{:.0} MiB", b as f64 / f64::from(1 << 20))
        }
    };
    let mut parts = Vec::new();
    if held.strings > 0 || held.declared > 0 {
        parts.push(format!(
            "{} shared strings{} with {} of text",
            crate::input::count_text(held.strings),
            if held.declared > held.strings {
                format!(" (it declares {})", crate::input::count_text(held.declared))
            } else {
                String::new()
            },
            mib(held.text)
        ));
    }
    if held.styles > 0 {
        parts.push(format!(
            "{} style records",
            crate::input::count_text(held.styles)
        ));
    }
    if held.entries > 0 {
        parts.push(format!(
            "{} sheets, names and relationships",
            crate::input::count_text(held.entries)
        ));
    }
    IngestError::limit(
        format!(
            "{}: the sheet reader would hold more than {cap} in memory for this workbook ({}: about {} so far, each string or record costing far more than its bytes); it is refused",
            path.display(),
            parts.join(", "),
            mib(held.estimate())
        ),
        "if the workbook is genuine, raise the cap with --max-unpacked-mb (reading it takes about that much memory), or export the sheet as CSV (read as it streams)",
    )
}

/// Counts the elements of an XML member by local name as its bytes stream past, whatever the
/// chunks. Markup inside comments or CDATA may be counted too: the count is an upper bound,
/// which is what a budget needs.
#[derive(Debug, Default)]
struct XmlCounter {
    state: Scan,
    /// The local name being read (after any `prefix:`), up to its first 16 bytes.
    name: Vec<u8>,
    name_long: bool,
    closing: bool,
    /// Inside a `<si>` (its text is a shared string's).
    in_string: bool,
    /// The attributes of an `<sst>` tag while it is read (its first 4 KiB).
    sst: Option<Vec<u8>>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Scan {
    #[default]
    Text,
    /// Just after `<`.
    Open,
    Name,
    /// Inside a tag, after its name.
    Tag,
}

impl XmlCounter {
    fn feed(&mut self, bytes: &[u8], held: &mut Held) {
        let mut i = 0;
        while i < bytes.len() {
            if self.state == Scan::Text {
                // Text runs to the next tag; only a shared string's text is counted.
                let rest = &bytes[i..];
                let run = rest.iter().position(|b| *b == b'<').unwrap_or(rest.len());
                if self.in_string {
                    held.text += run as u64;
                }
                i += run;
                if i < bytes.len() {
                    self.state = Scan::Open;
                    i += 1;
                }
                continue;
            }
            let b = bytes[i];
            i += 1;
            match self.state {
                Scan::Text => {}
                Scan::Open => {
                    self.name.clear();
                    self.name_long = false;
                    self.closing = b == b'/';
                    if b == b'/' || b.is_ascii_alphabetic() || b == b'_' || b >= 0x80 {
                        if b != b'/' {
                            self.name.push(b);
                        }
                        self.state = Scan::Name;
                    } else {
                        // `<?…?>`, `<!--…-->`, `<![CDATA[…]]>`, `<!DOCTYPE…>`: no element.
                        self.state = if b == b'<' { Scan::Open } else { Scan::Tag };
                    }
                }
                Scan::Name => {
                    if b == b':' {
                        self.name.clear();
                        self.name_long = false;
                    } else if b.is_ascii_whitespace() || b == b'>' || b == b'/' {
                        self.element(held, b == b'>');
                        self.state = if b == b'>' { Scan::Text } else { Scan::Tag };
                    } else if self.name.len() < 16 {
                        self.name.push(b);
                    } else {
                        self.name_long = true;
                    }
                }
                Scan::Tag => {
                    if b == b'>' {
                        if let Some(attributes) = self.sst.take() {
                            held.declared = held.declared.max(unique_count(&attributes));
                        }
                        self.state = Scan::Text;
                    } else if let Some(attributes) = &mut self.sst
                        && attributes.len() < 4096
                    {
                        attributes.push(b);
                    }
                }
            }
        }
    }

    /// A tag's name has been read; `closed` when its `>` came right after it.
    fn element(&mut self, held: &mut Held, closed: bool) {
        let name: &[u8] = if self.name_long { b"" } else { &self.name };
        if self.closing {
            if name == b"si" {
                self.in_string = false;
            }
            return;
        }
        match name {
            b"si" => {
                held.strings += 1;
                self.in_string = true;
            }
            b"sst" if !closed => self.sst = Some(Vec::new()),
            b"xf" | b"font" | b"fill" | b"border" | b"numFmt" => held.styles += 1,
            b"sheet" | b"definedName" | b"Relationship" => held.entries += 1,
            _ => {}
        }
    }
}

/// The `uniqueCount` an `<sst>` tag declares (its attributes as written), 0 if none; a count
/// past `u64` is as good as endless.
fn unique_count(attributes: &[u8]) -> u64 {
    let key = b"uniqueCount";
    let Some(at) = attributes.windows(key.len()).position(|w| w == key) else {
        return 0;
    };
    let mut rest = attributes[at + key.len()..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace());
    if rest.next() != Some(&b'=') {
        return 0;
    }
    let mut rest = rest.skip_while(|b| b.is_ascii_whitespace());
    if !matches!(rest.next(), Some(b'"' | b'\'')) {
        return 0;
    }
    let mut n: u64 = 0;
    for b in rest.take_while(|b| b.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    n
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
        let value = to_cell(cell.get_value());
        if c >= input.max_columns {
            // Formatting past the cap makes empty cells, which are not columns.
            if value.is_empty() {
                continue;
            }
            return Err(crate::input::too_many_columns(
                input.place().row(u64::from(r) + 1).column(c, None),
                format!(
                    "the sheet has a value in column {}",
                    crate::input::count_text(c as u64 + 1)
                ),
                input.max_columns,
            ));
        }
        if row.len() <= c {
            row.resize(c + 1, Cell::Empty);
        }
        row[c] = value;
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
