//! What preparing finds of each field's values (filled, least, greatest, sum, zeros), worked
//! out batch by batch and kept with the table, so describing it reads no record again.

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::DataType;

use super::intern::Dictionary;

/// What preparing found of one field's values, for `inspect_dataset`: how many are filled
/// (null and blank count as empty; blank as DataFusion's `btrim` reads it, spaces only), and
/// of a number its least and greatest value, its sum and how many are zero. Worked out while
/// the table is prepared, batch by batch, and kept with it (in the cache entry's header too),
/// so describing 7.5M records reads no record again.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FieldStats {
    pub filled: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sum: Option<f64>,
    #[serde(default)]
    pub zeros: u64,
}

impl FieldStats {
    /// The mean of a number's values (`None` for text, or with no value).
    pub fn mean(&self) -> Option<f64> {
        self.sum
            .filter(|_| self.filled > 0)
            .map(|s| s / self.filled as f64)
    }
}

/// A field's statistics as its batches go by.
#[derive(Debug)]
pub(super) enum Tally {
    /// Records per code of the field's dictionary.
    Text(Vec<u64>),
    Int(Option<(i64, i64)>, f64, u64, u64),
    Float(Option<(f64, f64)>, f64, u64, u64),
}

impl Tally {
    pub(super) fn of(target: &DataType) -> Tally {
        match target {
            DataType::Dictionary(_, _) => Tally::Text(Vec::new()),
            DataType::Int64 => Tally::Int(None, 0.0, 0, 0),
            _ => Tally::Float(None, 0.0, 0, 0),
        }
    }

    pub(super) fn add(&mut self, column: &ArrayRef) {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::{Float64Type, Int64Type};
        match self {
            Tally::Text(counts) => {
                if let Some(codes) =
                    column.as_primitive_opt::<datafusion::arrow::datatypes::UInt32Type>()
                {
                    for (r, k) in codes.values().iter().enumerate() {
                        if codes.is_valid(r) {
                            let k = *k as usize;
                            if k >= counts.len() {
                                counts.resize(k + 1, 0);
                            }
                            counts[k] += 1;
                        }
                    }
                }
            }
            Tally::Int(range, sum, n, zeros) => {
                if let Some(a) = column.as_primitive_opt::<Int64Type>() {
                    for v in a.iter().flatten() {
                        *range = Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                        *sum += v as f64;
                        *n += 1;
                        *zeros += u64::from(v == 0);
                    }
                }
            }
            Tally::Float(range, sum, n, zeros) => {
                if let Some(a) = column.as_primitive_opt::<Float64Type>() {
                    for v in a.iter().flatten() {
                        // NaN is no least or greatest value (as DataFusion's min and max).
                        if !v.is_nan() {
                            *range = Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                        }
                        *sum += v;
                        *n += 1;
                        *zeros += u64::from(v == 0.0);
                    }
                }
            }
        }
    }

    pub(super) fn finish(self, values: Option<&Dictionary>) -> FieldStats {
        match self {
            Tally::Text(counts) => FieldStats {
                filled: values.map_or(0, |d| {
                    counts
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| {
                            *k < d.values.len() && !d.values.value(*k).trim_matches(' ').is_empty()
                        })
                        .map(|(_, n)| *n)
                        .sum()
                }),
                ..FieldStats::default()
            },
            Tally::Int(range, sum, n, zeros) => FieldStats {
                filled: n,
                min: range.map(|(lo, _)| lo.into()),
                max: range.map(|(_, hi)| hi.into()),
                sum: (n > 0).then_some(sum),
                zeros,
            },
            Tally::Float(range, sum, n, zeros) => FieldStats {
                filled: n,
                min: range.and_then(|(lo, _)| serde_json::Number::from_f64(lo)),
                max: range.and_then(|(_, hi)| serde_json::Number::from_f64(hi)),
                sum: (n > 0).then_some(sum),
                zeros,
            },
        }
    }
}
