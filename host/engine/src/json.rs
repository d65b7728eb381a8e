//! Arrow values to JSON, column by column.

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Decimal128Array, Float32Array, Float64Array, Int8Array,
    Int16Array, Int32Array, Int64Array, LargeStringArray, ListArray, StringArray, StringViewArray,
    UInt8Array, UInt16Array, UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use serde_json::{Number, Value};

fn float(v: f64) -> Value {
    Number::from_f64(v)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// Each value of an array of type `$ty` as JSON (`$to` on a present value), null as null.
macro_rules! each {
    ($array:expr, $ty:ty, $to:expr) => {{
        let a = $array
            .as_any()
            .downcast_ref::<$ty>()
            .expect("matched on the data type");
        (0..a.len())
            .map(|i| {
                if a.is_null(i) {
                    Value::Null
                } else {
                    $to(a.value(i))
                }
            })
            .collect()
    }};
}

fn text(s: &str) -> Value {
    Value::String(s.to_string())
}

/// The values of one column.
pub fn column_values(array: &ArrayRef) -> Vec<Value> {
    match array.data_type() {
        DataType::Utf8 => each!(array, StringArray, text),
        DataType::LargeUtf8 => each!(array, LargeStringArray, text),
        DataType::Utf8View => each!(array, StringViewArray, text),
        // Integer sums are decimals of scale 0: exact while they fit 64 bits, a float beyond
        // (the caller warns).
        DataType::Decimal128(_, scale) => {
            let scale = *scale;
            each!(
                array,
                Decimal128Array,
                |v: i128| match (scale, i64::try_from(v)) {
                    (0, Ok(n)) => Value::from(n),
                    _ => float(v as f64 / 10f64.powi(i32::from(scale))),
                }
            )
        }
        DataType::Int8 => each!(array, Int8Array, Value::from),
        DataType::Int16 => each!(array, Int16Array, Value::from),
        DataType::Int32 => each!(array, Int32Array, Value::from),
        DataType::Int64 => each!(array, Int64Array, Value::from),
        DataType::UInt8 => each!(array, UInt8Array, Value::from),
        DataType::UInt16 => each!(array, UInt16Array, Value::from),
        DataType::UInt32 => each!(array, UInt32Array, Value::from),
        DataType::UInt64 => each!(array, UInt64Array, Value::from),
        DataType::Float32 => each!(array, Float32Array, |v: f32| float(f64::from(v))),
        DataType::Float64 => each!(array, Float64Array, float),
        DataType::Boolean => each!(array, BooleanArray, Value::Bool),
        DataType::List(_) => each!(array, ListArray, |v: ArrayRef| Value::Array(column_values(
            &v
        ))),
        DataType::Null => vec![Value::Null; array.len()],
        // Text of the prepared table: its values, as text.
        DataType::Dictionary(_, _) => {
            match datafusion::arrow::compute::cast(array, &DataType::Utf8) {
                Ok(strings) => each!(strings, StringArray, text),
                Err(_) => formatted(array),
            }
        }
        _ => formatted(array),
    }
}

/// Anything else is shown as Arrow prints it, rather than dropped.
fn formatted(array: &ArrayRef) -> Vec<Value> {
    let formatter = datafusion::arrow::util::display::ArrayFormatter::try_new(
        array.as_ref(),
        &Default::default(),
    );
    match formatter {
        Ok(f) => (0..array.len())
            .map(|i| {
                if array.is_null(i) {
                    Value::Null
                } else {
                    Value::String(f.value(i).to_string())
                }
            })
            .collect(),
        Err(_) => vec![Value::Null; array.len()],
    }
}

/// Rows (array of arrays) of the named columns across batches.
pub fn rows(batches: &[RecordBatch], columns: &[String]) -> Vec<Vec<Value>> {
    let mut out: Vec<Vec<Value>> = Vec::new();
    for batch in batches {
        let cols: Vec<Vec<Value>> = columns
            .iter()
            .map(|name| match batch.column_by_name(name) {
                Some(a) => column_values(a),
                None => vec![Value::Null; batch.num_rows()],
            })
            .collect();
        for r in 0..batch.num_rows() {
            out.push(cols.iter().map(|c| c[r].clone()).collect());
        }
    }
    out
}

/// Orders two JSON values of one column: numbers by value, anything else by its text.
pub fn compare_values(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => value_text(a).cmp(&value_text(b)),
    }
}

/// A JSON value as text in a sentence: a string without its quotes.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(t) => t.clone(),
        other => other.to_string(),
    }
}
