//! Reading an input file as rows of cells, whatever its format.
//!
//! Every format is read *pushed*: [`Input::scan`] calls a visitor with each row in file order
//! (header rows included), so a file is never held whole; a conversion reads it once, or
//! twice when the types must be inferred first. Text files are decoded as they stream.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use encoding_rs::Encoding;

use crate::error::{IngestError, Place};

pub use crate::input::{
    Cell, DEFAULT_MAX_COLUMNS, Flow, Format, Input, MAX_RECORD_BYTES, ReadOptions, Row, float_text,
};

/// Bytes sniffed for detecting the encoding.
const SNIFF_BYTES: usize = 1 << 20;

impl Input {
    /// Opens `path`, choosing the format by its name and first bytes, the encoding of text by
    /// its byte-order mark or by which decoding reads the first megabyte cleanly.
    pub fn open(path: &Path, options: &ReadOptions) -> Result<Input, IngestError> {
        let meta = std::fs::metadata(path)
            .map_err(|e| IngestError::io(format!("cannot read {}", path.display()), e))?;
        if meta.is_dir() {
            return Err(IngestError::input(
                Place::file(path),
                "is a folder, not a data file",
                "name a CSV, TSV, XLSX, Parquet or JSON Lines file",
            ));
        }
        if meta.len() == 0 {
            return Err(IngestError::input(
                Place::file(path),
                "the file is empty",
                "give a file with a header row and at least one row of data",
            ));
        }
        let mut head = Vec::with_capacity(SNIFF_BYTES.min(meta.len() as usize));
        File::open(path)
            .and_then(|f| f.take(SNIFF_BYTES as u64).read_to_end(&mut head))
            .map_err(|e| IngestError::io(format!("cannot read {}", path.display()), e))?;
        let format = detect_format(path, &head)?;
        let mut input = Input {
            path: path.to_path_buf(),
            format,
            encoding: None,
            encoding_source: None,
            sheet: None,
            sheets: Vec::new(),
            size: meta.len(),
            max_columns: if options.max_columns == 0 {
                DEFAULT_MAX_COLUMNS
            } else {
                options.max_columns
            },
        };
        match format {
            Format::Csv { .. } | Format::JsonLines => {
                let (encoding, source) = match &options.encoding {
                    Some(label) => (encoding_for_label(label)?, "given"),
                    None => detect_encoding(path, &head, meta.len() as usize <= SNIFF_BYTES)?,
                };
                input.encoding = Some(encoding);
                input.encoding_source = Some(source);
                if let Format::Csv { delimiter: 0 } = format {
                    let (text, _, _) = encoding.decode(&head);
                    input.format = Format::Csv {
                        delimiter: sniff_delimiter(&text),
                    };
                }
                if format == Format::JsonLines && encoding != encoding_rs::UTF_8 {
                    return Err(IngestError::input(
                        Place::file(path),
                        format!(
                            "JSON Lines must be UTF-8, but the file reads as {}",
                            encoding.name()
                        ),
                        "convert the file to UTF-8 (JSON text is UTF-8 by definition)",
                    ));
                }
            }
            Format::Xlsx => {
                crate::sheet::check_expansion(path, options.max_unpacked_bytes)?;
                let (sheets, chosen) = crate::sheet::choose_sheet(path, options.sheet.as_deref())?;
                input.sheets = sheets;
                input.sheet = Some(chosen);
            }
            Format::Parquet => {}
        }
        if let (Some(_), false) = (&options.sheet, format.is_sheet()) {
            return Err(IngestError::input(
                Place::file(path),
                format!(
                    "--sheet applies to workbooks, but this is a {} file",
                    format.name()
                ),
                "leave out --sheet",
            ));
        }
        Ok(input)
    }

    /// Place of an error in this file.
    pub fn place(&self) -> Place {
        Place {
            sheet: self.format.is_sheet(),
            ..Place::file(&self.path)
        }
    }

    /// Reads every row in file order (header rows included), calling `visit` with each until
    /// it says stop. Blank rows are passed too (all cells empty).
    pub fn scan(
        &self,
        visit: &mut dyn FnMut(Row<'_>) -> Result<Flow, IngestError>,
    ) -> Result<(), IngestError> {
        match self.format {
            Format::Csv { delimiter } => self.scan_text(delimiter, visit),
            Format::Xlsx => crate::sheet::scan(self, visit),
            Format::Parquet => crate::columnar::scan_parquet(self, visit),
            Format::JsonLines => crate::columnar::scan_json_lines(self, visit),
        }
    }

    fn scan_text(
        &self,
        delimiter: u8,
        visit: &mut dyn FnMut(Row<'_>) -> Result<Flow, IngestError>,
    ) -> Result<(), IngestError> {
        let encoding = self.encoding.unwrap_or(encoding_rs::UTF_8);
        let file = File::open(&self.path)
            .map_err(|e| IngestError::io(format!("cannot read {}", self.path.display()), e))?;
        let counted = Counting::new(file);
        let bytes = counted.count.clone();
        let decoded = Decoding::new(counted, encoding);
        let lines = std::rc::Rc::clone(&decoded.index);
        let record_start = std::rc::Rc::clone(&decoded.record_start);
        let quotes = std::rc::Rc::clone(&decoded.quotes);
        let mut last: Option<(u64, bool)> = None;
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(delimiter)
            .buffer_capacity(1 << 16)
            .from_reader(decoded);
        let mut record = csv::StringRecord::new();
        let mut cells: Vec<Cell> = Vec::new();
        loop {
            match reader.read_record(&mut record) {
                Ok(false) => {
                    // A quote opened in the last record and never closed: csv reads the rest
                    // of the file as that one value, without an error of its own.
                    if let Some((line, true)) = last
                        && quotes.get() % 2 == 1
                    {
                        return Err(IngestError::input(
                            self.place().row(line),
                            "a quoted value opened in this record is never closed: the rest of the file was read as one value",
                            "close the quote (a `\"` inside a quoted value is written `\"\"`)",
                        ));
                    }
                    return Ok(());
                }
                Ok(true) => {}
                Err(e) => {
                    let line = last.map_or(1, |(l, _)| l + 1);
                    return Err(self.text_error(e, encoding, line));
                }
            }
            record_start.set(reader.position().byte());
            let line = record
                .position()
                .map(|p| lines.borrow_mut().line_of(p.byte()))
                .unwrap_or(0);
            // A record past the column cap is refused before its cells are made (a line of
            // 16 MiB of commas is 16 million fields); empty fields past it, as spreadsheets
            // write them, are dropped.
            if record.len() > self.max_columns
                && let Some(k) = record
                    .iter()
                    .skip(self.max_columns)
                    .position(|f| !f.is_empty())
            {
                return Err(crate::input::too_many_columns(
                    self.place().row(line),
                    format!(
                        "the row has {} fields (field {} holds a value)",
                        crate::input::count_text(record.len() as u64),
                        crate::input::count_text((self.max_columns + k + 1) as u64)
                    ),
                    self.max_columns,
                ));
            }
            cells.clear();
            cells.extend(record.iter().take(self.max_columns).map(|s| {
                if s.is_empty() {
                    Cell::Empty
                } else {
                    Cell::Text(s.to_string())
                }
            }));
            last = Some((line, record.iter().any(|f| f.contains('\n'))));
            let flow = visit(Row {
                number: line,
                cells: &cells,
                bytes_read: bytes.get(),
            })?;
            if flow == Flow::Stop {
                return Ok(());
            }
        }
    }

    fn text_error(&self, e: csv::Error, encoding: &'static Encoding, next: u64) -> IngestError {
        let line = e.position().map(|p| p.line());
        if let csv::ErrorKind::Io(io) = e.kind()
            && io.get_ref().is_some_and(|i| i.is::<RecordTooLong>())
        {
            return IngestError::input(
                self.place().row(next),
                format!(
                    "the record starting here runs past {} MiB: a quoted value is probably never closed",
                    MAX_RECORD_BYTES >> 20
                ),
                "close the quote (a `\"` inside a quoted value is written `\"\"`), or check that the file is delimited text",
            );
        }
        if let csv::ErrorKind::Io(io) = e.kind()
            && let Some(bad) = io.get_ref().and_then(|i| i.downcast_ref::<Undecodable>())
        {
            let how = match self.encoding_source {
                Some("given") => "as given with --encoding",
                Some(s) => s,
                None => "",
            };
            return IngestError::input(
                self.place().row(bad.line),
                format!(
                    "bytes {} at byte offset {} cannot be decoded as {} ({how})",
                    bad.bytes
                        .iter()
                        .map(|b| format!("{b:02X}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                    bad.offset,
                    encoding.name()
                ),
                "give the file's encoding with --encoding (utf-8, shift_jis/cp932, euc-jp), or re-save it as UTF-8",
            );
        }
        let mut place = self.place();
        place.row = line;
        IngestError::input(
            place,
            format!("cannot read the file as {}: {e}", self.format.name()),
            "check that the file is delimited text with one record per line",
        )
    }
}

fn detect_format(path: &Path, head: &[u8]) -> Result<Format, IngestError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let zip = head.starts_with(b"PK\x03\x04");
    let cfb = head.starts_with(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1]);
    let parquet = head.starts_with(b"PAR1");
    match ext.as_str() {
        "xlsx" | "xlsm" => {
            if zip || cfb {
                // An encrypted workbook is a compound file; the sheet reader tells it apart.
                Ok(Format::Xlsx)
            } else {
                Err(IngestError::input(
                    Place::file(path),
                    format!(
                        "is named .{ext} but is not a workbook (it is {})",
                        describe_head(head)
                    ),
                    "give the workbook itself (an .xlsx file is a zip archive starting with PK)",
                ))
            }
        }
        "xls" => Err(IngestError::input(
            Place::file(path),
            "old Excel 97-2003 workbooks (.xls) are not read",
            "open it in a spreadsheet program and save it as .xlsx or CSV",
        )),
        "parquet" | "parq" => {
            if parquet {
                Ok(Format::Parquet)
            } else {
                Err(IngestError::input(
                    Place::file(path),
                    format!(
                        "is named .{ext} but is not a Parquet file (it is {})",
                        describe_head(head)
                    ),
                    "give a Parquet file (it starts with PAR1)",
                ))
            }
        }
        "jsonl" | "ndjson" => Ok(Format::JsonLines),
        "tsv" | "tab" => Ok(Format::Csv { delimiter: b'\t' }),
        _ if zip => Ok(Format::Xlsx),
        _ if parquet => Ok(Format::Parquet),
        // The delimiter is chosen once the text is decoded (UTF-16 bytes hold commas and line
        // feeds that are not characters).
        "csv" | "txt" | "" => Ok(Format::Csv { delimiter: 0 }),
        _ => Err(IngestError::input(
            Place::file(path),
            format!("cannot tell the format of a .{ext} file"),
            "give a .csv, .tsv, .xlsx, .xlsm, .parquet or .jsonl file",
        )),
    }
}

/// Whether the first bytes are an HTML page (what a server sends in place of a file it
/// cannot or will not serve).
pub(crate) fn looks_like_html(head: &[u8]) -> bool {
    let start = String::from_utf8_lossy(&head[..head.len().min(64)]).to_ascii_lowercase();
    let t = start.trim_start();
    ["<!doctype html", "<html", "<head", "<body"]
        .iter()
        .any(|p| t.starts_with(p))
}

/// What the first bytes look like, for an error message.
pub(crate) fn describe_head(head: &[u8]) -> String {
    if looks_like_html(head) {
        "an HTML page".to_string()
    } else if String::from_utf8_lossy(&head[..head.len().min(64)])
        .trim_start()
        .starts_with('<')
    {
        "XML or HTML text".to_string()
    } else if head.is_empty() {
        "an empty file".to_string()
    } else {
        format!(
            "bytes starting {}",
            head.iter()
                .take(8)
                .map(|b| format!("{b:02X}"))
                .collect::<Vec<_>>()
                .join(" ")
        )
    }
}

/// Tab when more of the first lines hold tabs than commas (a title line of one cell holds
/// neither), else comma.
fn sniff_delimiter(text: &str) -> u8 {
    let (mut tab_lines, mut comma_lines) = (0, 0);
    for line in text.lines().take(20) {
        let tabs = line.matches('\t').count();
        let commas = line.matches(',').count();
        if tabs > commas {
            tab_lines += 1;
        } else if commas > tabs {
            comma_lines += 1;
        }
    }
    if tab_lines > comma_lines { b'\t' } else { b',' }
}

/// The encoding for a label, with the names Windows and Python use for Shift_JIS's Microsoft
/// form (`cp932`, `windows-31j` is WHATWG's own) accepted too.
pub fn encoding_for_label(label: &str) -> Result<&'static Encoding, IngestError> {
    let l = label.trim().to_ascii_lowercase();
    let l = match l.as_str() {
        "cp932" | "ms932" | "mskanji" | "sjis-win" | "shift_jis-2004" | "sjis" => "shift_jis",
        "eucjp" | "euc_jp" | "ujis" | "eucjp-ms" | "cp51932" => "euc-jp",
        "utf8" | "utf-8-sig" | "utf8-sig" => "utf-8",
        other => other,
    };
    Encoding::for_label(l.as_bytes()).ok_or_else(|| {
        IngestError::input(
            Place::file(""),
            format!("`{label}` is not an encoding name"),
            "give one of utf-8, shift_jis (also cp932), euc-jp, utf-16le, utf-16be",
        )
    })
}

/// UTF-8 (with or without BOM) or UTF-16 by BOM; else the one of UTF-8, Shift_JIS (cp932)
/// and EUC-JP that decodes the first megabyte without error, the likelier Japanese text when
/// two do.
fn detect_encoding(
    path: &Path,
    head: &[u8],
    whole: bool,
) -> Result<(&'static Encoding, &'static str), IngestError> {
    if let Some((enc, _)) = Encoding::for_bom(head) {
        return Ok((enc, "detected by its byte-order mark"));
    }
    let clean = |enc: &'static Encoding| -> Option<String> {
        let mut decoder = enc.new_decoder_without_bom_handling();
        let mut out = String::with_capacity(head.len() * 2 + 16);
        let (result, read) = decoder.decode_to_string_without_replacement(head, &mut out, whole);
        match result {
            encoding_rs::DecoderResult::InputEmpty => Some(out),
            // The sniffed bytes may end inside a character.
            encoding_rs::DecoderResult::Malformed(..) if !whole && head.len() - read < 4 => {
                Some(out)
            }
            _ => None,
        }
    };
    if clean(encoding_rs::UTF_8).is_some() {
        return Ok((encoding_rs::UTF_8, "detected: the text is valid UTF-8"));
    }
    let sjis = clean(encoding_rs::SHIFT_JIS);
    let euc = clean(encoding_rs::EUC_JP);
    match (sjis, euc) {
        (Some(_), None) => Ok((
            encoding_rs::SHIFT_JIS,
            "detected: the text decodes as Shift_JIS (cp932)",
        )),
        (None, Some(_)) => Ok((encoding_rs::EUC_JP, "detected: the text decodes as EUC-JP")),
        (Some(s), Some(e)) => {
            if japanese_score(&e) > japanese_score(&s) {
                Ok((
                    encoding_rs::EUC_JP,
                    "detected: the text reads as EUC-JP (it also decodes as Shift_JIS)",
                ))
            } else {
                Ok((
                    encoding_rs::SHIFT_JIS,
                    "detected: the text reads as Shift_JIS (cp932) (it also decodes as EUC-JP)",
                ))
            }
        }
        (None, None) => Err(IngestError::input(
            Place::file(path),
            "the text is not UTF-8, Shift_JIS (cp932) or EUC-JP",
            "give its encoding with --encoding (any WHATWG label, e.g. utf-16le, windows-1252), or re-save it as UTF-8",
        )),
    }
}

/// Kana and common kanji count for, half-width katakana and rare symbols against: text
/// decoded with the wrong one of two Japanese encodings is mostly the latter.
fn japanese_score(text: &str) -> i64 {
    text.chars()
        .map(|c| match c as u32 {
            0x3040..=0x30FF => 2,
            0x4E00..=0x9FFF => 1,
            0xFF61..=0xFF9F => -3,
            0x0080..=0x02FF => -2,
            _ => 0,
        })
        .sum()
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R> Counting<R> {
    fn new(inner: R) -> Self {
        Counting {
            inner,
            count: std::rc::Rc::new(std::cell::Cell::new(0)),
        }
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Where the line breaks of the decoded text are, so that a record's byte offset gives its
/// line (the CSV reader's own line count is off for CRLF files). Offsets before the record
/// being read are dropped as they pass, so it holds only what the reader has buffered.
#[derive(Debug, Default)]
struct LineIndex {
    breaks: std::collections::VecDeque<u64>,
    passed: u64,
    produced: u64,
}

impl LineIndex {
    fn record(&mut self, out: &[u8]) {
        for (i, b) in out.iter().enumerate() {
            if *b == b'\n' {
                self.breaks.push_back(self.produced + i as u64);
            }
        }
        self.produced += out.len() as u64;
    }

    /// The 1-based line of a record the CSV reader says starts at `offset` (offsets must
    /// not go back). A break *at* the offset counts as passed: after `\r` ends a record the
    /// reader places the next one at the `\n` that follows, and no record starts with a
    /// line break (empty lines are skipped).
    fn line_of(&mut self, offset: u64) -> u64 {
        while self.breaks.front().is_some_and(|b| *b <= offset) {
            self.breaks.pop_front();
            self.passed += 1;
        }
        self.passed + 1
    }
}

/// A record longer than [`MAX_RECORD_BYTES`]: an unclosed quote, or not delimited text.
#[derive(Debug)]
pub struct RecordTooLong;

impl std::fmt::Display for RecordTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a record longer than {} MiB", MAX_RECORD_BYTES >> 20)
    }
}

impl std::error::Error for RecordTooLong {}

/// Bytes that do not decode, where they are.
#[derive(Debug)]
pub struct Undecodable {
    pub offset: u64,
    pub line: u64,
    pub bytes: Vec<u8>,
}

impl std::fmt::Display for Undecodable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "undecodable bytes at offset {} (line {})",
            self.offset, self.line
        )
    }
}

impl std::error::Error for Undecodable {}

/// Decodes a byte stream to UTF-8 as it is read, stopping at the first byte sequence that
/// the encoding cannot decode (never replacing it: a `?` or U+FFFD would be served as data).
struct Decoding<R> {
    inner: BufReader<R>,
    decoder: encoding_rs::Decoder,
    input: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    /// Bytes of the input consumed by the decoder.
    consumed: u64,
    /// Newlines written so far.
    lines: u64,
    /// The last bytes fed, to show the malformed sequence.
    recent: Vec<u8>,
    done: bool,
    index: std::rc::Rc<std::cell::RefCell<LineIndex>>,
    /// Where the record being read starts in the decoded text (set by the CSV loop).
    record_start: std::rc::Rc<std::cell::Cell<u64>>,
    /// `"` characters decoded so far: odd at the end means a quote was never closed.
    quotes: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Decoding<R> {
    fn new(inner: R, encoding: &'static Encoding) -> Self {
        Decoding {
            inner: BufReader::with_capacity(1 << 16, inner),
            decoder: encoding.new_decoder_with_bom_removal(),
            input: vec![0; 1 << 16],
            out: Vec::with_capacity(1 << 18),
            out_pos: 0,
            consumed: 0,
            lines: 0,
            recent: Vec::new(),
            done: false,
            index: Default::default(),
            record_start: Default::default(),
            quotes: Default::default(),
        }
    }

    fn refill(&mut self) -> std::io::Result<()> {
        self.out.clear();
        self.out_pos = 0;
        while self.out.is_empty() && !self.done {
            let n = self.inner.read(&mut self.input)?;
            let last = n == 0;
            let src = &self.input[..n];
            let need = self
                .decoder
                .max_utf8_buffer_length_without_replacement(n)
                .unwrap_or(n * 3 + 16);
            self.out.resize(need, 0);
            let (result, read, written) =
                self.decoder
                    .decode_to_utf8_without_replacement(src, &mut self.out, last);
            self.out.truncate(written);
            self.lines += memchr_count(b'\n', &self.out) as u64;
            self.index.borrow_mut().record(&self.out);
            self.quotes
                .set(self.quotes.get() + memchr_count(b'"', &self.out) as u64);
            let produced = self.index.borrow().produced;
            if produced.saturating_sub(self.record_start.get()) > MAX_RECORD_BYTES + (1 << 17) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    RecordTooLong,
                ));
            }
            match result {
                encoding_rs::DecoderResult::InputEmpty => {
                    self.consumed += read as u64;
                    if last {
                        self.done = true;
                    }
                }
                encoding_rs::DecoderResult::Malformed(len, after) => {
                    // The malformed sequence ends `after` bytes before what was read; it may
                    // have begun in the previous buffer.
                    let end = read.saturating_sub(after as usize);
                    let mut bytes = self.recent.clone();
                    bytes.extend_from_slice(&src[..end]);
                    let shown = bytes[bytes.len().saturating_sub(len as usize)..].to_vec();
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        Undecodable {
                            offset: (self.consumed + end as u64).saturating_sub(len as u64),
                            line: self.lines + 1,
                            bytes: shown,
                        },
                    ));
                }
                encoding_rs::DecoderResult::OutputFull => {
                    return Err(std::io::Error::other(
                        "internal: the decoding buffer was too small",
                    ));
                }
            }
            let keep = src.len().min(4);
            self.recent = src[src.len() - keep..].to_vec();
        }
        Ok(())
    }
}

fn memchr_count(needle: u8, haystack: &[u8]) -> usize {
    haystack.iter().filter(|b| **b == needle).count()
}

impl<R: Read> Read for Decoding<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.out_pos >= self.out.len() {
            self.refill()?;
        }
        let available = &self.out[self.out_pos..];
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.out_pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8], enc: &'static Encoding) -> std::io::Result<String> {
        let mut d = Decoding::new(bytes, enc);
        let mut s = String::new();
        d.read_to_string(&mut s)?;
        Ok(s)
    }

    #[test]
    fn cp932_decodes_as_windows_writes_it() {
        // 0x8160 is the wave dash Windows shows as U+FF5E; ① and ㈱ are NEC extensions.
        let (bytes, _, _) = encoding_rs::SHIFT_JIS.encode("申請～①㈱");
        assert_eq!(
            decode_all(&bytes, encoding_rs::SHIFT_JIS).unwrap(),
            "申請～①㈱"
        );
        assert_eq!(&bytes[4..6], &[0x81, 0x60]);
    }

    #[test]
    fn undecodable_bytes_are_refused_with_their_line() {
        let mut bytes = b"a,b\r\nc,d\r\n".to_vec();
        bytes.extend_from_slice(&[0x82, 0xA0, b',', 0xFF, b'\r', b'\n']);
        let e = decode_all(&bytes, encoding_rs::SHIFT_JIS).unwrap_err();
        let bad = e.get_ref().unwrap().downcast_ref::<Undecodable>().unwrap();
        assert_eq!(bad.line, 3);
        assert_eq!(bad.bytes, vec![0xFF]);
        assert_eq!(bad.offset, 13);
    }

    #[test]
    fn encodings_are_detected() {
        let text = "手続ID,所管府省庁\n1,デジタル庁\n";
        for enc in [
            encoding_rs::SHIFT_JIS,
            encoding_rs::EUC_JP,
            encoding_rs::UTF_8,
        ] {
            let (bytes, _, _) = enc.encode(text);
            let (found, _) = detect_encoding(Path::new("x.csv"), &bytes, true).unwrap();
            assert_eq!(found, enc, "{}", enc.name());
        }
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend_from_slice(text.as_bytes());
        assert_eq!(
            detect_encoding(Path::new("x.csv"), &bom, true).unwrap().0,
            encoding_rs::UTF_8
        );
        assert_eq!(decode_all(&bom, encoding_rs::UTF_8).unwrap(), text);
    }

    #[test]
    fn labels_include_the_windows_names() {
        assert_eq!(encoding_for_label("cp932").unwrap(), encoding_rs::SHIFT_JIS);
        assert_eq!(encoding_for_label("EUC-JP").unwrap(), encoding_rs::EUC_JP);
        assert!(encoding_for_label("klingon").is_err());
    }

    #[test]
    fn sheet_columns_are_lettered() {
        assert_eq!(crate::error::column_letters(0), "A");
        assert_eq!(crate::error::column_letters(25), "Z");
        assert_eq!(crate::error::column_letters(26), "AA");
        assert_eq!(crate::error::column_letters(37), "AL");
    }
}
