//! The share column of a `count_where` measure: whether each record's value counts, decided
//! once per dictionary value (or per distinct view of text read from the files).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, DictionaryArray, Float64Array};
use datafusion::arrow::datatypes::{DataType, UInt32Type};
use tally_semantic::definition::{FieldId, MeasureId};

use crate::error::StorageError;

/// Counted values a share compares each row's view with; with more, each distinct view of a
/// batch is decided once instead ([`Share::column`]).
const VIEWS_COMPARED: usize = 16;

/// A `count_where` measure whose records count or not, decided once per dictionary value.
#[derive(Debug, Clone)]
pub struct Share {
    pub measure: MeasureId,
    pub field: FieldId,
    pub separator: Option<String>,
    pub values: Vec<String>,
}

impl Share {
    /// Whether a record with this (present) value counts.
    pub fn counts(&self, v: &str) -> bool {
        match &self.separator {
            Some(sep) => v
                .split(sep.as_str())
                .any(|p| self.values.iter().any(|c| c == p.trim())),
            None => self.values.iter().any(|c| c == v),
        }
    }

    /// [`Share::column`] of a single-value field read as views, each row's view compared
    /// with the values' own: a value of up to 12 bytes is its view, so a row holds it when
    /// their views are equal; a longer one's view starts with its length and first 4 bytes,
    /// and only a row whose view starts so has its bytes compared. No text is hashed (deciding
    /// each batch's distinct views was a fifth of a summary with a computed rate).
    fn column_of_views(&self, view: &datafusion::arrow::array::StringViewArray) -> Float64Array {
        use datafusion::arrow::array::builder::make_view;
        let short: Vec<u128> = self
            .values
            .iter()
            .filter(|v| v.len() <= 12)
            .map(|v| make_view(v.as_bytes(), 0, 0))
            .collect();
        let long: Vec<(u64, &str)> = self
            .values
            .iter()
            .filter(|v| v.len() > 12)
            .map(|v| (make_view(v.as_bytes(), 0, 0) as u64, v.as_str()))
            .collect();
        let nulls = view.nulls().filter(|n| n.null_count() > 0);
        let mut out = vec![0.0f64; view.len()];
        // Without branches on the row's value (the values of a column come in no order, and a
        // branch on each was mispredicted half the time): a short value's view can equal no
        // long value's first 8 bytes, which start with a length over 12.
        for (r, (v, o)) in view.views().iter().zip(out.iter_mut()).enumerate() {
            let mut holds = short.iter().fold(false, |h, s| h | (s == v));
            let head = *v as u64;
            if long.iter().fold(false, |h, (l, _)| h | (*l == head)) {
                holds = long
                    .iter()
                    .any(|(l, text)| *l == head && view.value(r) == *text);
            }
            let valid = nulls.is_none_or(|n| n.is_valid(r));
            *o = f64::from(u8::from(holds & valid));
        }
        Float64Array::from(out)
    }

    /// 1.0 for each record of a text column that counts, else 0.0 (a null never counts).
    pub fn column(&self, text: &dyn Array) -> Result<ArrayRef, StorageError> {
        let n = text.len();
        let out: Float64Array = if let Some(dict) = text.as_dictionary_opt::<UInt32Type>() {
            let values = dict.values().as_string::<i32>();
            let mask: Vec<bool> = if values.len() <= dict.len() {
                (0..values.len())
                    .map(|i| self.counts(values.value(i)))
                    .collect()
            } else {
                // A dictionary larger than the batch (a chunk's, of which a condition kept
                // few rows): only the values the rows hold are decided.
                let mut decided: Vec<Option<bool>> = vec![None; values.len()];
                for k in dict.keys().values() {
                    if let Some(slot @ None) = decided.get_mut(*k as usize) {
                        *slot = Some(self.counts(values.value(*k as usize)));
                    }
                }
                decided.into_iter().map(|d| d.unwrap_or(false)).collect()
            };
            share_of_codes(dict, &mask)
        } else if let Some(view) = text.as_string_view_opt()
            && self.separator.is_none()
            && self.values.len() <= VIEWS_COMPARED
        {
            self.column_of_views(view)
        } else if let Some(view) = text.as_string_view_opt() {
            // Read from the files: each distinct view decided once when values repeat.
            match crate::views::distinct_views(view) {
                Some((index, firsts)) => {
                    // Per distinct view its share, then one more for a null (which never
                    // counts).
                    let shares: Vec<f64> = firsts
                        .iter()
                        .map(|r| f64::from(u8::from(self.counts(view.value(*r)))))
                        .chain(std::iter::once(0.0))
                        .collect();
                    index
                        .values()
                        .iter()
                        .map(|i| shares.get(*i as usize).copied().unwrap_or(0.0))
                        .collect()
                }
                None => (0..n)
                    .map(|r| {
                        if view.is_valid(r) && self.counts(view.value(r)) {
                            1.0
                        } else {
                            0.0
                        }
                    })
                    .collect(),
            }
        } else {
            let text = datafusion::arrow::compute::cast(text, &DataType::Utf8)
                .map_err(|e| StorageError::internal(format!("a share column: {e}")))?;
            let strings = text.as_string::<i32>();
            (0..n)
                .map(|r| {
                    if strings.is_valid(r) && self.counts(strings.value(r)) {
                        1.0
                    } else {
                        0.0
                    }
                })
                .collect()
        };
        Ok(Arc::new(out))
    }
}

/// The share column of a dictionary column, given whether each value counts.
/// Without a branch on the row's value (the values come in no order, and a branch on each
/// was mispredicted often: a sixth of a summary with a computed rate over dictionaries).
pub(super) fn share_of_codes(dict: &DictionaryArray<UInt32Type>, mask: &[bool]) -> Float64Array {
    let shares: Vec<f64> = mask.iter().map(|m| f64::from(u8::from(*m))).collect();
    let keys = dict.keys();
    let mut values: Vec<f64> = keys
        .values()
        .iter()
        .map(|k| shares.get(*k as usize).copied().unwrap_or(0.0))
        .collect();
    if let Some(nulls) = keys.nulls().filter(|n| n.null_count() > 0) {
        for (v, valid) in values.iter_mut().zip(nulls.iter()) {
            *v *= f64::from(u8::from(valid));
        }
    }
    Float64Array::from(values)
}
