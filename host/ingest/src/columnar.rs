//! Parquet and JSON Lines input: files that name their columns themselves. Each is handed on
//! as one header row followed by the data rows, like a sheet.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatchReader};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::IngestError;
use crate::input::{Cell, Flow, Input, Row};

pub fn scan_parquet(
    input: &Input,
    visit: &mut dyn FnMut(Row<'_>) -> Result<Flow, IngestError>,
) -> Result<(), IngestError> {
    let bad = |e: &dyn std::fmt::Display| {
        IngestError::input(
            input.place(),
            format!("cannot read the Parquet file: {e}"),
            "check that the file is a complete Parquet file (not truncated or still being written) with flat columns (nested lists and structs cannot be converted: flatten them first)",
        )
    };
    check_footer(input)?;
    let file = File::open(&input.path)
        .map_err(|e| IngestError::io(format!("cannot read {}", input.path.display()), e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad(&e))?;
    let columns = builder.schema().fields().len();
    if columns > input.max_columns {
        return Err(crate::input::too_many_columns(
            input.place(),
            format!(
                "the file has {} columns",
                crate::input::count_text(columns as u64)
            ),
            input.max_columns,
        ));
    }
    let total_rows = builder.metadata().file_metadata().num_rows().max(1) as u64;
    // A batch holds every column's values for its rows: wide or long rows are read fewer at
    // a time, by the row groups' own (uncompressed) size a row.
    let (bytes, rows) = builder
        .metadata()
        .row_groups()
        .iter()
        .fold((0u64, 0u64), |(b, r), g| {
            (
                b.saturating_add(g.total_byte_size().max(0) as u64),
                r.saturating_add(g.num_rows().max(0) as u64),
            )
        });
    let per_row = (bytes / rows.max(1)).max(1);
    let batch_rows = (READ_BATCH_BYTES / per_row).clamp(1, 8192) as usize;
    let reader = builder
        .with_batch_size(batch_rows)
        .build()
        .map_err(|e| bad(&e))?;
    let schema = reader.schema();
    let header: Vec<Cell> = schema
        .fields()
        .iter()
        .map(|f| Cell::Text(f.name().clone()))
        .collect();
    if visit(Row {
        number: 1,
        cells: &header,
        bytes_read: 0,
    })? == Flow::Stop
    {
        return Ok(());
    }
    let mut number: u64 = 1;
    let mut cells = Vec::with_capacity(header.len());
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        let columns: Vec<(ArrayRef, bool)> = batch
            .columns()
            .iter()
            .map(canonical)
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&e))?;
        for i in 0..batch.num_rows() {
            number += 1;
            cells.clear();
            cells.extend(columns.iter().map(|c| cell_at(c, i)));
            let flow = visit(Row {
                number,
                cells: &cells,
                bytes_read: (number - 1).saturating_mul(input.size) / total_rows,
            })?;
            if flow == Flow::Stop {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Bytes of values a batch read from a Parquet file holds, about.
const READ_BATCH_BYTES: u64 = 32 << 20;
/// The largest footer read: its metadata is decoded whole before the first row (as the
/// engine bounds footers of the files it serves).
const MAX_FOOTER_BYTES: u64 = 64 << 20;

/// Refuses a footer past [`MAX_FOOTER_BYTES`] before it is decoded.
fn check_footer(input: &Input) -> Result<(), IngestError> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(&input.path)
        .map_err(|e| IngestError::io(format!("cannot read {}", input.path.display()), e))?;
    let mut tail = [0u8; 8];
    let read = file
        .seek(SeekFrom::End(-8))
        .and_then(|_| file.read_exact(&mut tail));
    if read.is_err() || &tail[4..] != b"PAR1" {
        return Err(IngestError::input(
            input.place(),
            "the Parquet file does not end with its footer (PAR1)",
            "check that the file is a complete Parquet file (not truncated or still being written)",
        ));
    }
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if footer > MAX_FOOTER_BYTES {
        return Err(IngestError::limit(
            format!(
                "{}: the Parquet footer is {} MiB, more than the {} MiB read",
                input.path.display(),
                footer >> 20,
                MAX_FOOTER_BYTES >> 20
            ),
            "write the file with fewer row groups or columns (its metadata is decoded whole), or convert it to CSV",
        ));
    }
    Ok(())
}

/// Integers as Int64, floats as Float64, booleans as they are, everything else as text.
/// Dates and times as ISO text, marked as dates.
fn canonical(a: &ArrayRef) -> Result<(ArrayRef, bool), arrow::error::ArrowError> {
    let to = match a.data_type() {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => DataType::Int64,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => DataType::Float64,
        // A u64 past the i64 range is kept exact as text rather than wrapped.
        DataType::UInt64 => {
            let u = a.as_primitive::<arrow::datatypes::UInt64Type>();
            if u.iter().flatten().all(|v| v <= i64::MAX as u64) {
                DataType::Int64
            } else {
                DataType::Utf8
            }
        }
        DataType::Boolean => return Ok((Arc::clone(a), false)),
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => {
            return Ok((arrow::compute::cast(a, &DataType::Utf8)?, true));
        }
        _ => DataType::Utf8,
    };
    Ok((arrow::compute::cast(a, &to)?, false))
}

fn cell_at((a, date): &(ArrayRef, bool), i: usize) -> Cell {
    if a.is_null(i) {
        return Cell::Empty;
    }
    if *date {
        return Cell::Date(a.as_string::<i32>().value(i).replace(' ', "T"));
    }
    match a.data_type() {
        DataType::Int64 => Cell::Int(a.as_primitive::<Int64Type>().value(i)),
        DataType::Float64 => Cell::Float(a.as_primitive::<Float64Type>().value(i)),
        DataType::Boolean => Cell::Bool(a.as_boolean().value(i)),
        _ => {
            let s = a.as_string::<i32>().value(i);
            if s.is_empty() {
                Cell::Empty
            } else {
                Cell::Text(s.to_string())
            }
        }
    }
}

/// JSON Lines: one object per line. The columns are the keys in order of first appearance
/// (found by a first read of the file, which stops at the column cap); a key a line lacks is
/// empty there. Each row costs the keys it holds, not the columns of the file: the cells a
/// line set are emptied again, and nothing is redone when a key first appears late.
pub fn scan_json_lines(
    input: &Input,
    visit: &mut dyn FnMut(Row<'_>) -> Result<Flow, IngestError>,
) -> Result<(), IngestError> {
    let cap = input.max_columns;
    let mut keys: Vec<String> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    each_line(input, &mut |line, _, text| {
        read_object(input, line, text, false, &mut |key, _| {
            if index.contains_key(key) {
                return Ok(());
            }
            if key.chars().count() > MAX_KEY_CHARS {
                return Err(IngestError::input(
                    input.place().row(line),
                    format!(
                        "a key of {} characters ({:?}…) cannot name a column (at most {MAX_KEY_CHARS})",
                        key.chars().count(),
                        key.chars().take(30).collect::<String>()
                    ),
                    "give the objects short keys: each key is a column's name",
                ));
            }
            if keys.len() >= cap {
                return Err(crate::input::too_many_columns(
                    input.place().row(line),
                    format!(
                        "the key {:?} makes the objects' keys number {} (each key is a column)",
                        key.chars().take(40).collect::<String>(),
                        crate::input::count_text(keys.len() as u64 + 1)
                    ),
                    cap,
                ));
            }
            index.insert(key.to_string(), keys.len());
            keys.push(key.to_string());
            Ok(())
        })?;
        Ok(Flow::Continue)
    })?;
    let header: Vec<Cell> = keys.iter().map(|k| Cell::Text(k.clone())).collect();
    if visit(Row {
        number: 0,
        cells: &header,
        bytes_read: 0,
    })? == Flow::Stop
    {
        return Ok(());
    }
    let mut cells = vec![Cell::Empty; keys.len()];
    let mut set: Vec<usize> = Vec::new();
    each_line(input, &mut |line, bytes, text| {
        for i in set.drain(..) {
            cells[i] = Cell::Empty;
        }
        read_object(input, line, text, true, &mut |key, cell| {
            if let Some(&i) = index.get(key) {
                cells[i] = cell;
                set.push(i);
            }
            Ok(())
        })?;
        visit(Row {
            number: line,
            cells: &cells,
            bytes_read: bytes,
        })
    })
}

/// The longest key read: a column's name (what a definition accepts).
const MAX_KEY_CHARS: usize = 200;

/// Called with each non-blank line's number, the bytes read so far, and its text.
type LineVisitor<'a> = dyn FnMut(u64, u64, &str) -> Result<Flow, IngestError> + 'a;

fn each_line(input: &Input, f: &mut LineVisitor<'_>) -> Result<(), IngestError> {
    let file = File::open(&input.path)
        .map_err(|e| IngestError::io(format!("cannot read {}", input.path.display()), e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let mut number: u64 = 0;
    let mut bytes: u64 = 0;
    loop {
        line.clear();
        // One line is one record: held whole, so bounded like a CSV record.
        let limit = crate::input::MAX_RECORD_BYTES + 1;
        let n = (&mut reader)
            .take(limit)
            .read_until(b'\n', &mut line)
            .map_err(|e| IngestError::io(format!("cannot read {}", input.path.display()), e))?;
        if n == 0 {
            return Ok(());
        }
        number += 1;
        if n as u64 >= limit && !line.ends_with(b"\n") {
            return Err(IngestError::input(
                input.place().row(number),
                format!(
                    "the line is longer than {} MiB",
                    crate::input::MAX_RECORD_BYTES >> 20
                ),
                "write one JSON object per line, each of at most a few megabytes",
            ));
        }
        bytes += n as u64;
        let text = match std::str::from_utf8(&line) {
            Ok(t) => t.trim_start_matches('\u{feff}').trim(),
            Err(e) => {
                return Err(IngestError::input(
                    input.place().row(number),
                    format!(
                        "the line is not UTF-8 (byte {} of the line)",
                        e.valid_up_to() + 1
                    ),
                    "JSON Lines must be UTF-8: re-save the file as UTF-8",
                ));
            }
        };
        if text.is_empty() {
            continue;
        }
        if f(number, bytes, text)? == Flow::Stop {
            return Ok(());
        }
    }
}

/// Called with each key of a line's object and its value as a cell (empty when values are
/// not wanted).
type KeyVisitor<'a> = dyn FnMut(&str, Cell) -> Result<(), IngestError> + 'a;

/// Reads one line's object key by key, straight into cells: no tree of the object is built
/// (a line of 16 MiB of `[0,0,…]` would be half a GiB of `Value`s), nested values become
/// their JSON text as they are read, and a line with more keys than the column cap is
/// refused at the key past it.
fn read_object(
    input: &Input,
    line: u64,
    text: &str,
    values: bool,
    visit: &mut KeyVisitor<'_>,
) -> Result<(), IngestError> {
    if !text.starts_with('{') {
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => IngestError::input(
                input.place().row(line),
                "the line is JSON but not an object",
                "write one JSON object per line, e.g. {\"id\": 1, \"name\": \"…\"}",
            ),
            Err(e) => not_json(input, line, &e),
        });
    }
    let mut refusal: Option<IngestError> = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let seed = ObjectSeed {
        cap: input.max_columns,
        values,
        visit,
        refusal: &mut refusal,
        input,
        line,
    };
    let read = serde::de::DeserializeSeed::deserialize(seed, &mut de).and_then(|()| de.end());
    match (read, refusal) {
        (_, Some(e)) => Err(e),
        (Ok(()), None) => Ok(()),
        (Err(e), None) => Err(not_json(input, line, &e)),
    }
}

fn not_json(input: &Input, line: u64, e: &serde_json::Error) -> IngestError {
    IngestError::input(
        input.place().row(line),
        format!("not a JSON value: {e}"),
        "write one JSON object per line",
    )
}

struct ObjectSeed<'a, 'v> {
    cap: usize,
    values: bool,
    visit: &'a mut KeyVisitor<'v>,
    refusal: &'a mut Option<IngestError>,
    input: &'a Input,
    line: u64,
}

impl<'de> serde::de::DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let mut n: usize = 0;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            n += 1;
            if n > self.cap {
                *self.refusal = Some(crate::input::too_many_columns(
                    self.input.place().row(self.line),
                    format!(
                        "the object has more than {} keys (each key is a column)",
                        crate::input::count_text(self.cap as u64)
                    ),
                    self.cap,
                ));
                return Err(A::Error::custom("too many keys"));
            }
            let cell = if self.values {
                map.next_value_seed(CellSeed)?
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
                Cell::Empty
            };
            if let Err(e) = (self.visit)(&key, cell) {
                *self.refusal = Some(e);
                return Err(A::Error::custom("refused"));
            }
        }
        Ok(())
    }
}

/// A JSON value as a cell: scalars as themselves, a string `""` and `null` as empty, a
/// number past the i64 range kept exact as text, arrays and objects as their JSON text.
struct CellSeed;

impl<'de> serde::de::DeserializeSeed<'de> for CellSeed {
    type Value = Cell;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Cell, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for CellSeed {
    type Value = Cell;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Cell, E> {
        Ok(Cell::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Cell, E> {
        Ok(Cell::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Cell, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => Cell::Int(i),
            Err(_) => Cell::Text(v.to_string()),
        })
    }

    fn visit_f64<E>(self, v: f64) -> Result<Cell, E> {
        Ok(Cell::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Cell, E> {
        Ok(if v.is_empty() {
            Cell::Empty
        } else {
            Cell::Text(v.to_string())
        })
    }

    fn visit_string<E>(self, v: String) -> Result<Cell, E> {
        Ok(if v.is_empty() {
            Cell::Empty
        } else {
            Cell::Text(v)
        })
    }

    fn visit_unit<E>(self) -> Result<Cell, E> {
        Ok(Cell::Empty)
    }

    fn visit_none<E>(self) -> Result<Cell, E> {
        Ok(Cell::Empty)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Cell, A::Error> {
        let mut text = String::new();
        JsonText(&mut text).visit_seq(seq)?;
        Ok(Cell::Text(text))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Cell, A::Error> {
        let mut text = String::new();
        JsonText(&mut text).visit_map(map)?;
        Ok(Cell::Text(text))
    }
}

/// Writes a nested value as compact JSON text while it is read (the text `Value::to_string`
/// gives, without the tree).
struct JsonText<'a>(&'a mut String);

impl<'de> serde::de::DeserializeSeed<'de> for JsonText<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

fn quoted(out: &mut String, s: &str) {
    match serde_json::to_string(s) {
        Ok(q) => out.push_str(&q),
        Err(_) => out.push_str("\"\""),
    }
}

impl<'de> serde::de::Visitor<'de> for JsonText<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.0.push_str(&v.to_string());
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.0.push_str(&v.to_string());
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        match serde_json::Number::from_f64(v) {
            Some(n) => self.0.push_str(&n.to_string()),
            None => self.0.push_str("null"),
        }
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        quoted(self.0, v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        let mut first = true;
        loop {
            let at = self.0.len();
            if !first {
                self.0.push(',');
            }
            if seq.next_element_seed(JsonText(self.0))?.is_none() {
                self.0.truncate(at);
                break;
            }
            first = false;
        }
        self.0.push(']');
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push('{');
        let mut first = true;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !first {
                self.0.push(',');
            }
            first = false;
            quoted(self.0, &key);
            self.0.push(':');
            map.next_value_seed(JsonText(self.0))?;
        }
        self.0.push('}');
        Ok(())
    }
}
