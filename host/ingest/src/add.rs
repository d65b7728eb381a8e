//! `tally add`: a file converted into a dataset folder (Parquet, a definition skeleton and
//! the record of what was read).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use sha2::Digest;
use tally_semantic::DatasetDef;

use crate::error::{IngestError, Place};
use crate::folder::{
    DEFINITION_FILE, FETCH_RECORD, Staging, check_id, definition_text, read_definition,
    remove_stale_staging, rename, write_synced,
};
use crate::infer::Statistics;
use crate::input::{Cell, Flow, Input, Row};
use crate::read::{Format, ReadOptions};
use crate::sheet::DEFAULT_MAX_UNPACKED;
use crate::values::{Kind, Value};
use crate::write::{OutColumn, Sink};
use crate::{answers, error, infer, input, skeleton, values};

/// Told how far reading has got. The command line draws a bar on a terminal and writes
/// plain lines otherwise.
pub trait Progress {
    /// A new phase (`reading`, `converting`, `downloading`) over `total` bytes.
    fn begin(&self, phase: &str, total: u64);
    /// Rows and bytes done in this phase so far.
    fn update(&self, rows: u64, bytes: u64);
    /// The phase is over.
    fn end(&self);
}

/// No progress reports (tests, libraries).
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn begin(&self, _: &str, _: u64) {}
    fn update(&self, _: u64, _: u64) {}
    fn end(&self) {}
}

/// What `tally add` was asked to do.
#[derive(Debug, Clone)]
pub struct AddOptions {
    pub dataset_id: String,
    pub file: PathBuf,
    pub datasets: PathBuf,
    pub read: ReadOptions,
    /// Rows above the data (the last is the header); default `source.csv_header_rows`, else
    /// 1 (with a one-cell title row above the header detected when there is no definition).
    pub header_rows: Option<u32>,
    /// Convert even when the file no longer matches `dataset.yaml`.
    pub accept_drift: bool,
    /// Values to store as empty, beside `source.null_markers`.
    pub null_markers: Vec<String>,
    /// Keep `.fetch.json` (set by `fetch`, which writes a new one). Otherwise replacing the
    /// data removes it: the data no longer comes from the fetched file.
    pub keep_fetch_record: bool,
}

/// What `tally add` did: printed as JSON on stdout.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub dataset_id: String,
    /// The Parquet file written.
    pub data_file: PathBuf,
    /// `kept` (the folder's definition was used), `updated` (used, with the answers this
    /// run gave recorded in it: `recorded`) or `written` (a skeleton).
    pub definition: &'static str,
    pub definition_file: PathBuf,
    /// What this run's answers changed in the definition (`--null-marker` given for a
    /// question the skeleton asked: the marker, the field's type and role, its TODO lines).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<String>,
    pub input: InputSummary,
    pub rows: u64,
    pub columns: Vec<ColumnSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_field: Option<String>,
    pub warnings: Vec<String>,
    /// Things only a person can answer (candidate null markers), also in the skeleton.
    pub questions: Vec<String>,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct InputSummary {
    pub file: String,
    pub format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding_detection: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sheet: Option<String>,
    pub header_rows: u32,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ColumnSummary {
    pub name: String,
    pub data_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// The input column it was read from (0-based), none when the file lacks it.
    pub from_column: Option<usize>,
    pub nulls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codes: Option<usize>,
}

/// The header of an input file and where its data starts.
#[derive(Debug, Clone)]
struct Header {
    /// Column names, cleaned (trimmed, line breaks and runs of spaces made one space); empty
    /// for a column without a name.
    names: Vec<String>,
    /// Non-blank rows before the data (the header row included).
    skip: u64,
    /// The header's row number in the file.
    row: u64,
    header_rows: u32,
    /// A one-cell title row above the header.
    title: Option<String>,
    /// Names that were cleaned (for warnings).
    cleaned: Vec<(String, String)>,
}

fn clean_name(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn non_empty(cells: &[Cell]) -> usize {
    cells.iter().filter(|c| !c.is_empty()).count()
}

/// Reads the header rows: `given` of them, else one — or two, when the first row holds a
/// single cell (a title) over a row of names and `detect_title` is on.
fn read_header(
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
fn scan_data(
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
fn is_null_marker(cell: &Cell, markers: &[String]) -> bool {
    if markers.is_empty() {
        return false;
    }
    // Any cell as it reads: a sheet's `#N/A` error, a `999` stored as a number.
    cell.as_text().is_some_and(|t| {
        let t = t.trim();
        markers.iter().any(|m| m.trim() == t)
    })
}

/// Longest column name a definition accepts.
const MAX_NAME_CHARS: usize = 200;

/// Header names a definition could not declare: too long, with control or invisible
/// characters, or two that read as one name (width and case folded).
fn check_names(input: &Input, header: &Header) -> Result<(), IngestError> {
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

/// The file the Parquet backend reads for `def`: one plain file inside the folder.
fn data_file_of(def: Option<&DatasetDef>) -> Result<String, IngestError> {
    let Some(def) = def else {
        return Ok("data.parquet".to_string());
    };
    if def.backend.kind != tally_semantic::definition::BackendKind::Parquet {
        return Err(IngestError::dataset(
            format!(
                "dataset `{}` is served by a {} plugin, not from a Parquet file",
                def.id,
                def.backend.kind.as_str()
            ),
            "tally add writes Parquet datasets; add the file to a new dataset id",
        ));
    }
    let f = &def.data_file;
    if f.contains(['*', '?', '['])
        || f.ends_with('/')
        || f.contains("..")
        || f.contains('/')
        || Path::new(f).is_absolute()
    {
        return Err(IngestError::dataset(
            format!(
                "data_file `{f}` names a set of files or a path in a subfolder; tally add writes one file"
            ),
            "set data_file to a file name such as data.parquet, or convert each part yourself",
        ));
    }
    Ok(f.clone())
}

fn sha256_file(path: &Path) -> Result<String, IngestError> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| IngestError::io(format!("cannot read {}", path.display()), e))?;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hasher)
        .map_err(|e| IngestError::io(format!("cannot read {}", path.display()), e))?;
    Ok(format!("sha256:{:x}", hasher.finalize()))
}

/// Failures to read a column's cells as its type.
#[derive(Debug, Default, Clone)]
struct Failures {
    count: u64,
    first: Option<(Place, String)>,
}

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

/// An add's input, opened, and what it is checked against.
struct Opened {
    /// The dataset's folder in the datasets directory (not there yet for a new dataset).
    folder: PathBuf,
    /// The folder's definition, when it has one.
    def: Option<DatasetDef>,
    /// The name of the Parquet file in the folder.
    data_file: String,
    input: Input,
    header: Header,
    /// Header rows given by `--header-rows` or `source.csv_header_rows`.
    given_rows: Option<u32>,
    /// `--null-markers` and `source.null_markers`, sorted, each once.
    null_markers: Vec<String>,
}

/// Checks the dataset id and the datasets directory, reads the folder's definition, and opens
/// the file and reads its header.
fn open(options: &AddOptions) -> Result<Opened, IngestError> {
    check_id(&options.dataset_id)?;
    if !options.datasets.is_dir() {
        return Err(IngestError::dataset(
            format!(
                "the datasets directory {} does not exist",
                options.datasets.display()
            ),
            "create it, run from the folder that holds datasets/, or pass --datasets DIR",
        ));
    }
    // First, whatever this add goes on to do: a killed add's half-written files go now, not
    // at the next add that gets as far as writing.
    remove_stale_staging(&options.datasets);
    let folder = options.datasets.join(&options.dataset_id);
    let def = if folder.is_dir() {
        read_definition(&folder, &options.dataset_id)?
    } else {
        None
    };
    let data_file = data_file_of(def.as_ref())?;
    let input = open_input(options)?;
    let given_rows = options
        .header_rows
        .or_else(|| def.as_ref().and_then(|d| d.source.csv_header_rows));
    if !input.format.has_header_rows() && options.header_rows.is_some() {
        return Err(IngestError::input(
            input.place(),
            format!(
                "--header-rows applies to CSV and workbooks; a {} file names its columns itself",
                input.format.name()
            ),
            "leave out --header-rows",
        ));
    }
    let header = read_header(
        &input,
        if input.format.has_header_rows() {
            given_rows
        } else {
            Some(1)
        },
        def.is_none() && input.format.has_header_rows(),
    )?;
    let mut null_markers: Vec<String> = options.null_markers.clone();
    if let Some(d) = &def {
        null_markers.extend(d.source.null_markers.iter().cloned());
    }
    null_markers.sort();
    null_markers.dedup();
    Ok(Opened {
        folder,
        def,
        data_file,
        input,
        header,
        given_rows,
        null_markers,
    })
}

/// With a definition and `--null-marker` values it does not declare yet: the answers recorded
/// in its text (see [`answers`]), read from the file again with every marker as empty, and the
/// definition this add converts by replaced with the updated one. `None` when there is nothing
/// to record. A text the edit would leave invalid is not written: the markers are still
/// applied to this conversion, and a warning says what to write by hand.
fn record_answers(
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

/// Opens `options.file` for reading, naming it in an error that names no file.
fn open_input(options: &AddOptions) -> Result<Input, IngestError> {
    let mut read_options = options.read.clone();
    if read_options.max_unpacked_bytes == 0 {
        read_options.max_unpacked_bytes = DEFAULT_MAX_UNPACKED;
    }
    Input::open(&options.file, &read_options).map_err(|e| match e {
        IngestError::Input {
            mut place,
            message,
            hint,
        } if place.file.as_os_str().is_empty() => {
            place.file = options.file.clone();
            IngestError::Input {
                place,
                message,
                hint,
            }
        }
        other => other,
    })
}

/// The warnings about how the header was read: names cleaned, and a title row skipped.
fn header_warnings(header: &Header, given_rows: Option<u32>) -> Vec<String> {
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

/// The columns to write: the definition's when there is one, else guessed in a first read,
/// with the skeleton written from the guesses and their questions gathered.
fn plan_columns(
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

/// The record of the conversion kept in the Parquet file's metadata (`tally.ingest`): the
/// file converted, its hash, and how it was read.
fn ingest_record(input: &Input, header: &Header, file_name: &str, sha256: &str) -> String {
    let converted_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let record = serde_json::json!({
        "tool": "tally add",
        "version": env!("CARGO_PKG_VERSION"),
        "converted_at": converted_at,
        "file": file_name,
        "sha256": sha256,
        "bytes": input.size,
        "format": input.format.name(),
        "encoding": input.encoding.map(|e| e.name()),
        "sheet": input.sheet,
        "header_rows": header.header_rows,
    });
    record.to_string()
}

/// What converting the rows counted.
struct Tallies {
    /// Data rows read.
    rows: u64,
    /// Cells of each column that could not be read as its type.
    failures: Vec<Failures>,
    /// Cells of each column stored as empty.
    nulls: Vec<u64>,
    /// Cells of each column that held a null marker.
    marked: Vec<u64>,
    /// Spreadsheet error values kept as text.
    errors_kept: u64,
    /// Blank rows skipped.
    blank: u64,
}

/// Reads the file's data rows, converts each cell to its column's type, and pushes the rows
/// to `sink`.
fn convert_rows(
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
fn check_values(
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
fn conversion_warnings(
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

/// Moves the staged data, and a skeleton written, into the dataset's folder, and returns
/// where the data is now.
fn put_in_place(
    options: &AddOptions,
    opened: &Opened,
    mut staging: Staging,
    yaml: Option<&str>,
    file_name: &str,
    warnings: &mut Vec<String>,
) -> Result<PathBuf, IngestError> {
    let folder = &opened.folder;
    let staged_data = staging.dir.join(&opened.data_file);
    // Into place: a new folder appears whole; an existing one gets its data first and then
    // the definition (a folder without one is not served, so it is never seen half-made).
    let target_data = folder.join(&opened.data_file);
    if !folder.exists() {
        if let Some(text) = yaml {
            write_synced(&staging.dir.join(DEFINITION_FILE), text)?;
        }
        staging.release_lock();
        rename(&staging.dir, folder)?;
        staging.keep = true;
    } else {
        rename(&staged_data, &target_data)?;
        let record = folder.join(FETCH_RECORD);
        if !options.keep_fetch_record && record.exists() {
            match std::fs::remove_file(&record) {
                Ok(()) => warnings.push(format!(
                    "{} was removed: the data served is now converted from {file_name}, not from the file fetched",
                    FETCH_RECORD
                )),
                Err(e) => warnings.push(format!(
                    "{} could not be removed ({e}): answers will cite the file fetched before, not {file_name}",
                    FETCH_RECORD
                )),
            }
        }
        if let Some(text) = yaml {
            let staged_yaml = staging.dir.join(DEFINITION_FILE);
            write_synced(&staged_yaml, text)?;
            rename(&staged_yaml, &folder.join(DEFINITION_FILE))?;
        }
    }
    drop(staging);
    Ok(target_data)
}

/// Each column written, for the summary: its type and role (guessed or declared) and how
/// many of its cells are empty.
fn column_summaries(
    columns: &[OutColumn],
    skeleton: Option<&Skeleton>,
    def: Option<&DatasetDef>,
    nulls: &[u64],
) -> Vec<ColumnSummary> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let guess = skeleton.map(|sk| &sk.guesses[i]);
            let declared = def.and_then(|d| d.field(&c.name));
            ColumnSummary {
                name: c.name.clone(),
                data_type: c.kind.data_type(),
                role: guess
                    .map(|g| g.role)
                    .or_else(|| declared.map(|f| f.role.as_str())),
                from_column: c.source,
                nulls: nulls[i],
                multi_value: guess
                    .and_then(|g| g.multi_value.clone())
                    .or_else(|| declared.and_then(|f| f.multi_value.clone())),
                codes: guess.and_then(|g| match &g.codelist {
                    Some(infer::Codelist::Static(c)) => Some(c.len()),
                    _ => None,
                }),
            }
        })
        .collect()
}

/// The skeleton's guesses and its text.
struct Skeleton {
    guesses: Vec<infer::Guess>,
    id: Option<usize>,
    /// Data rows of the first read.
    rows: u64,
    text: String,
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
fn skeleton_text(
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
fn infer_columns(
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

/// With a definition: each declared field's column, found by `csv_col_index` or by name, and
/// every difference between the file and the definition.
fn map_definition(
    input: &Input,
    header: &Header,
    def: &DatasetDef,
    accept_drift: bool,
    warnings: &mut Vec<String>,
) -> Result<Vec<OutColumn>, IngestError> {
    let names = &header.names;
    let index = HeaderIndex::new(input, names);
    let mut differences = Vec::new();
    let mut used = vec![false; names.len()];
    let mut columns = Vec::new();
    for f in &def.fields {
        let source = index.locate(f, &mut differences);
        if let Some(s) = source {
            used[s] = true;
            if names[s] != f.name {
                warnings.push(format!(
                    "{}: the file heads it {:?} (read as the same name)",
                    f.name, names[s]
                ));
            }
        } else if accept_drift {
            warnings.push(format!(
                "{}: not in the file; written as an empty column (--accept-drift)",
                f.name
            ));
        }
        columns.push(OutColumn {
            name: f.name.clone(),
            kind: Kind::from_definition(f.data_type),
            source,
            dictionary: f.role != tally_semantic::definition::Role::Id,
            bloom: def.id_field.as_deref() == Some(f.name.as_str()),
        });
    }
    index.add_undeclared(
        &used,
        accept_drift,
        &mut columns,
        &mut differences,
        warnings,
    );
    if !differences.is_empty() && !accept_drift {
        return Err(IngestError::Drift {
            file: input.path.clone(),
            definition: PathBuf::from(format!("{}/{DEFINITION_FILE}", def.id)),
            differences,
        });
    }
    Ok(columns)
}

/// The header's columns, looked up by name as written and as normalised, and placed as a
/// person finds them in the file.
struct HeaderIndex<'a> {
    input: &'a Input,
    names: &'a [String],
    /// Each column's name, normalised.
    normalized: Vec<String>,
    by_exact: HashMap<&'a str, Vec<usize>>,
    by_norm: HashMap<String, Vec<usize>>,
}

impl<'a> HeaderIndex<'a> {
    /// Indexes the header's names.
    fn new(input: &'a Input, names: &'a [String]) -> HeaderIndex<'a> {
        let norm = |s: &str| tally_semantic::names::normalize(s);
        // Every name's columns, as written and normalised, looked up once per field: a search
        // of the header for each of thousands of fields would be quadratic.
        let mut by_exact: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut by_norm: HashMap<String, Vec<usize>> = HashMap::new();
        let normalized: Vec<String> = names.iter().map(|n| norm(n)).collect();
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() {
                continue;
            }
            by_exact.entry(n.as_str()).or_default().push(i);
            by_norm.entry(normalized[i].clone()).or_default().push(i);
        }
        HeaderIndex {
            input,
            names,
            normalized,
            by_exact,
            by_norm,
        }
    }

    /// The columns named `name`: exactly so, else once normalised.
    fn find(&self, name: &str) -> Vec<usize> {
        if let Some(exact) = self.by_exact.get(name) {
            return exact.clone();
        }
        self.by_norm
            .get(&tally_semantic::names::normalize(name))
            .cloned()
            .unwrap_or_default()
    }

    /// A column as a person finds it: by letter in a sheet, by number otherwise.
    fn place(&self, i: usize) -> String {
        if self.input.format.is_sheet() {
            format!("column {}", error::column_letters(i))
        } else {
            format!("column {}", i + 1)
        }
    }

    /// The column a declared field is read from: at its `csv_col_index` when that column
    /// bears its name, else the one column of its name; a mismatch is noted in `differences`.
    fn locate(
        &self,
        f: &tally_semantic::definition::Field,
        differences: &mut Vec<String>,
    ) -> Option<usize> {
        let names = self.names;
        let by_name = self.find(&f.name);
        let field_norm = tally_semantic::names::normalize(&f.name);
        match f.csv_col_index.map(|i| i as usize) {
            Some(i)
                if i < names.len() && (names[i] == f.name || self.normalized[i] == field_norm) =>
            {
                Some(i)
            }
            Some(i) => {
                let at = if i < names.len() {
                    format!("{} is headed {:?}", self.place(i), names[i])
                } else {
                    format!("the file has only {} columns", names.len())
                };
                match by_name.as_slice() {
                    [k] => {
                        differences.push(format!(
                            "{}: declared at csv_col_index {i}, but {at}; {:?} is {} now",
                            f.name,
                            f.name,
                            self.place(*k)
                        ));
                        Some(*k)
                    }
                    _ => {
                        differences.push(format!(
                            "{}: declared at csv_col_index {i}, but {at}, and no column is named {:?}",
                            f.name, f.name
                        ));
                        None
                    }
                }
            }
            None => match by_name.as_slice() {
                [k] => Some(*k),
                [] => {
                    differences.push(format!(
                        "{}: a declared field, but no column of the file is named so",
                        f.name
                    ));
                    None
                }
                many => {
                    differences.push(format!(
                        "{}: {} columns are named so ({}); give the field a csv_col_index",
                        f.name,
                        many.len(),
                        many.iter()
                            .map(|k| self.place(*k))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    None
                }
            },
        }
    }

    /// Notes each named column no field was read from as a difference; with
    /// `--accept-drift`, keeps it in the data as text unless its name is taken.
    fn add_undeclared(
        &self,
        used: &[bool],
        accept_drift: bool,
        columns: &mut Vec<OutColumn>,
        differences: &mut Vec<String>,
        warnings: &mut Vec<String>,
    ) {
        let mut written: HashSet<String> = columns
            .iter()
            .map(|c| tally_semantic::names::normalize(&c.name))
            .collect();
        for (i, n) in self.names.iter().enumerate() {
            if used[i] || n.is_empty() {
                continue;
            }
            differences.push(format!(
                "{} {n:?} is in the file but not declared in dataset.yaml",
                self.place(i)
            ));
            let taken = !written.insert(self.normalized[i].clone());
            if accept_drift && taken {
                warnings.push(format!(
                    "{} {n:?}: not declared, and its name is taken by a column written; left out",
                    self.place(i)
                ));
            } else if accept_drift {
                warnings.push(format!(
                    "{n}: not declared; kept in the data as text (not served until it is declared)"
                ));
                columns.push(OutColumn {
                    name: n.clone(),
                    kind: Kind::Text,
                    source: Some(i),
                    dictionary: true,
                    bloom: false,
                });
            }
        }
    }
}
