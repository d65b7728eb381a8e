//! Parquet and JSON Lines input: files that name their columns themselves. Each is handed on
//! as one header row followed by the data rows, like a sheet.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatchReader};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

use crate::error::IngestError;
use crate::read::{Cell, Flow, Input, Row};

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
    let file = File::open(&input.path)
        .map_err(|e| IngestError::io(format!("cannot read {}", input.path.display()), e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad(&e))?;
    let total_rows = builder.metadata().file_metadata().num_rows().max(1) as u64;
    let reader = builder.with_batch_size(8192).build().map_err(|e| bad(&e))?;
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
/// (found by a first read of the file); a key a line lacks is empty there.
pub fn scan_json_lines(
    input: &Input,
    visit: &mut dyn FnMut(Row<'_>) -> Result<Flow, IngestError>,
) -> Result<(), IngestError> {
    let mut keys: Vec<String> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    each_object(input, &mut |_, _, object| {
        for k in object.keys() {
            if !index.contains_key(k) {
                index.insert(k.clone(), keys.len());
                keys.push(k.clone());
            }
        }
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
    each_object(input, &mut |line, bytes, object| {
        cells.iter_mut().for_each(|c| *c = Cell::Empty);
        for (k, v) in object {
            if let Some(&i) = index.get(k) {
                cells[i] = json_cell(v);
            }
        }
        visit(Row {
            number: line,
            cells: &cells,
            bytes_read: bytes,
        })
    })
}

fn json_cell(v: &Value) -> Cell {
    match v {
        Value::Null => Cell::Empty,
        Value::Bool(b) => Cell::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cell::Int(i),
            None => match n.as_f64() {
                Some(f) if n.is_f64() => Cell::Float(f),
                // A u64 past the i64 range: kept exact as text.
                _ => Cell::Text(n.to_string()),
            },
        },
        Value::String(s) if s.is_empty() => Cell::Empty,
        Value::String(s) => Cell::Text(s.clone()),
        // Nested values are kept as their JSON text.
        other => Cell::Text(other.to_string()),
    }
}

/// Called with each object's line number, the bytes read so far, and the object.
type ObjectVisitor<'a> =
    dyn FnMut(u64, u64, &serde_json::Map<String, Value>) -> Result<Flow, IngestError> + 'a;

fn each_object(input: &Input, f: &mut ObjectVisitor<'_>) -> Result<(), IngestError> {
    let file = File::open(&input.path)
        .map_err(|e| IngestError::io(format!("cannot read {}", input.path.display()), e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let mut number: u64 = 0;
    let mut bytes: u64 = 0;
    loop {
        line.clear();
        // One line is one record: held whole, so bounded like a CSV record.
        let limit = crate::read::MAX_RECORD_BYTES + 1;
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
                    crate::read::MAX_RECORD_BYTES >> 20
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
        let value: Value = serde_json::from_str(text).map_err(|e| {
            IngestError::input(
                input.place().row(number),
                format!("not a JSON value: {e}"),
                "write one JSON object per line",
            )
        })?;
        let Value::Object(object) = value else {
            return Err(IngestError::input(
                input.place().row(number),
                "the line is JSON but not an object",
                "write one JSON object per line, e.g. {\"id\": 1, \"name\": \"…\"}",
            ));
        };
        if f(number, bytes, &object)? == Flow::Stop {
            return Ok(());
        }
    }
}
