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

macro_rules! ints {
    ($array:expr, $ty:ty) => {{
        let a = $array
            .as_any()
            .downcast_ref::<$ty>()
            .expect("type checked above");
        (0..a.len())
            .map(|i| {
                if a.is_null(i) {
                    Value::Null
                } else {
                    Value::from(a.value(i))
                }
            })
            .collect()
    }};
}

/// The values of one column.
pub fn column_values(array: &ArrayRef) -> Vec<Value> {
    match array.data_type() {
        DataType::Utf8 => {
            let a = array.as_any().downcast_ref::<StringArray>().expect("utf8");
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        Value::String(a.value(i).to_string())
                    }
                })
                .collect()
        }
        DataType::LargeUtf8 => {
            let a = array
                .as_any()
                .downcast_ref::<LargeStringArray>()
                .expect("large utf8");
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        Value::String(a.value(i).to_string())
                    }
                })
                .collect()
        }
        DataType::Utf8View => {
            let a = array
                .as_any()
                .downcast_ref::<StringViewArray>()
                .expect("utf8 view");
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        Value::String(a.value(i).to_string())
                    }
                })
                .collect()
        }
        DataType::Decimal128(_, scale) => {
            let a = array
                .as_any()
                .downcast_ref::<Decimal128Array>()
                .expect("decimal128");
            let scale = *scale;
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        return Value::Null;
                    }
                    let v = a.value(i);
                    // Integer sums are decimals of scale 0: exact while they fit 64 bits,
                    // a float beyond (the caller warns).
                    match (scale, i64::try_from(v)) {
                        (0, Ok(n)) => Value::from(n),
                        _ => float(v as f64 / 10f64.powi(i32::from(scale))),
                    }
                })
                .collect()
        }
        DataType::Int8 => ints!(array, Int8Array),
        DataType::Int16 => ints!(array, Int16Array),
        DataType::Int32 => ints!(array, Int32Array),
        DataType::Int64 => ints!(array, Int64Array),
        DataType::UInt8 => ints!(array, UInt8Array),
        DataType::UInt16 => ints!(array, UInt16Array),
        DataType::UInt32 => ints!(array, UInt32Array),
        DataType::UInt64 => ints!(array, UInt64Array),
        DataType::Float32 => {
            let a = array.as_any().downcast_ref::<Float32Array>().expect("f32");
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        float(f64::from(a.value(i)))
                    }
                })
                .collect()
        }
        DataType::Float64 => {
            let a = array.as_any().downcast_ref::<Float64Array>().expect("f64");
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        float(a.value(i))
                    }
                })
                .collect()
        }
        DataType::Boolean => {
            let a = array.as_any().downcast_ref::<BooleanArray>().expect("bool");
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        Value::Bool(a.value(i))
                    }
                })
                .collect()
        }
        DataType::List(_) => {
            let a = array.as_any().downcast_ref::<ListArray>().expect("list");
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        Value::Array(column_values(&a.value(i)))
                    }
                })
                .collect()
        }
        DataType::Null => vec![Value::Null; array.len()],
        _ => {
            // Anything else is shown as Arrow prints it, rather than dropped.
            let formatted = datafusion::arrow::util::display::ArrayFormatter::try_new(
                array.as_ref(),
                &Default::default(),
            );
            match formatted {
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
