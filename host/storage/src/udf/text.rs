//! What every function over text shares: its literal arguments read, its text argument's type
//! coerced, and a function run over a dictionary's values (or a batch's distinct views) once
//! instead of row by row.

use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, UInt32Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::ColumnarValue;

pub(super) fn scalar_str(v: &ColumnarValue, what: &str) -> Result<String> {
    match v {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(s))) => Ok(s.clone()),
        _ => Err(DataFusionError::Internal(format!(
            "{what} must be a string literal"
        ))),
    }
}

pub(super) fn scalar_bool(v: &ColumnarValue, what: &str) -> Result<bool> {
    match v {
        ColumnarValue::Scalar(ScalarValue::Boolean(Some(b))) => Ok(*b),
        _ => Err(DataFusionError::Internal(format!(
            "{what} must be a boolean literal"
        ))),
    }
}

/// What a function computed for the values of a dictionary, kept while its plan lives: a
/// dictionary shared by every batch of a table is worked on once, not once per batch.
#[derive(Debug, Default)]
pub(super) struct Memo(Mutex<Vec<(ArrayRef, String, ArrayRef)>>);

impl Memo {
    fn get_or(
        &self,
        values: &ArrayRef,
        key: &str,
        make: impl FnOnce() -> Result<ArrayRef>,
    ) -> Result<ArrayRef> {
        if let Ok(memo) = self.0.lock()
            && let Some((_, _, out)) = memo
                .iter()
                .find(|(v, k, _)| Arc::ptr_eq(v, values) && k == key)
        {
            return Ok(Arc::clone(out));
        }
        let out = make()?;
        if let Ok(mut memo) = self.0.lock() {
            if memo.len() >= 4 {
                memo.remove(0);
            }
            memo.push((Arc::clone(values), key.to_string(), Arc::clone(&out)));
        }
        Ok(out)
    }
}

/// Per row of a dictionary array, the row of `per_value` (one row per dictionary value, then
/// one for a null) its key points at.
pub(super) fn by_key(keys: &UInt32Array, per_value: &ArrayRef, values: usize) -> Result<ArrayRef> {
    let indices: UInt32Array = keys
        .iter()
        .map(|k| Some(k.map_or(values as u32, |k| k.min(values as u32))))
        .collect();
    Ok(datafusion::arrow::compute::take(
        per_value.as_ref(),
        &indices,
        None,
    )?)
}

/// The text of a column that is not a dictionary of `UInt32` codes, as strings.
pub(super) fn strings_of(array: &ArrayRef) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::Utf8 | DataType::Utf8View => Ok(Arc::clone(array)),
        _ => Ok(datafusion::arrow::compute::cast(array, &DataType::Utf8)?),
    }
}

/// Value `i` of a string array (`Utf8` or `Utf8View`), `None` when null.
pub(super) fn string_at<'a>(array: &'a ArrayRef) -> Box<dyn Fn(usize) -> Option<&'a str> + 'a> {
    use datafusion::arrow::array::AsArray;
    match array.data_type() {
        DataType::Utf8View => {
            let a = array.as_string_view();
            Box::new(move |i| a.is_valid(i).then(|| a.value(i)))
        }
        _ => {
            let a = array.as_string::<i32>();
            Box::new(move |i| a.is_valid(i).then(|| a.value(i)))
        }
    }
}

/// What a function does with text: given each row's value (`None`: null) and the rows.
pub(super) type Each<'f> =
    dyn for<'a> Fn(&dyn Fn(usize) -> Option<&'a str>, usize) -> Result<ArrayRef> + 'f;

/// Runs `each` over a text argument: a dictionary's values once (memoised), then its rows by
/// key; any other text row by row. `each` gets a string accessor (None: null) and a length.
pub(super) fn over_text(
    arg: &ColumnarValue,
    rows: usize,
    memo: &Memo,
    key: &str,
    each: &Each<'_>,
) -> Result<ColumnarValue> {
    use datafusion::arrow::array::AsArray;
    let array = arg.to_array(rows)?;
    let out = match array.as_dictionary_opt::<datafusion::arrow::datatypes::UInt32Type>() {
        Some(dict) => {
            let values = dict.values();
            let n = values.len();
            let per_value = memo.get_or(values, key, || {
                let strings = strings_of(values)?;
                let at = string_at(&strings);
                // One more row: what a null gives.
                each(&|i| if i < n { at(i) } else { None }, n + 1)
            })?;
            by_key(dict.keys(), &per_value, n)?
        }
        None => {
            let strings = strings_of(&array)?;
            // Text read from its files as views: a value decoded from a dictionary page is
            // one view however many rows hold it, so each distinct view is worked on once.
            match strings
                .as_string_view_opt()
                .and_then(|view| Some((view, crate::views::distinct_views(view)?)))
            {
                Some((view, (index, firsts))) => {
                    let n = firsts.len();
                    let per_value = each(&|i| (i < n).then(|| view.value(firsts[i])), n + 1)?;
                    datafusion::arrow::compute::take(per_value.as_ref(), &index, None)?
                }
                None => {
                    let at = string_at(&strings);
                    each(&*at, strings.len())?
                }
            }
        }
    };
    Ok(match arg {
        ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
        ColumnarValue::Array(_) => ColumnarValue::Array(out),
    })
}

macro_rules! same_by_name {
    ($t:ty) => {
        impl PartialEq for $t {
            fn eq(&self, _other: &Self) -> bool {
                true
            }
        }
        impl Eq for $t {}
        impl std::hash::Hash for $t {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                std::any::type_name::<$t>().hash(state);
            }
        }
    };
}
pub(super) use same_by_name;

/// Text of any string type (a dictionary kept as it is), then literals.
pub(super) fn text_then(
    arg_types: &[DataType],
    rest: &[DataType],
    name: &str,
) -> Result<Vec<DataType>> {
    let Some((first, others)) = arg_types.split_first() else {
        return Err(DataFusionError::Plan(format!(
            "{name} takes {} arguments",
            rest.len() + 1
        )));
    };
    if others.len() != rest.len() {
        return Err(DataFusionError::Plan(format!(
            "{name} takes {} arguments",
            rest.len() + 1
        )));
    }
    let text = match first {
        DataType::Utf8 | DataType::Utf8View => first.clone(),
        DataType::Dictionary(k, v) if **k == DataType::UInt32 && **v == DataType::Utf8 => {
            first.clone()
        }
        _ => DataType::Utf8,
    };
    let mut out = vec![text];
    out.extend(rest.iter().cloned());
    Ok(out)
}
