//! Scalar functions the planner needs and DataFusion does not have in the exact form the
//! query semantics ask for.
//!
//! - `tally_parts(text, separator, keep_empty)`: the trimmed, non-empty parts of a
//!   multi-value cell as a list. With `keep_empty`, a cell without parts (null or blank) yields
//!   `[""]`, so exploding keeps the record in the empty group instead of dropping it.
//! - `tally_icontains(text, needle)`: substring under NFKC and case folding, where null counts
//!   as ""; `needle` is already folded by the caller. Written by hand because folding every
//!   value of every searched column would allocate, while most values (Japanese text) are
//!   already in folded form and are tested as they are.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, BooleanBuilder, ListBuilder, StringArray, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{DataFusionError, Result, ScalarValue, cast::as_string_array};
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarUDF, Volatility, create_udf};
use datafusion::prelude::lit;

/// The name of the parts function.
pub const PARTS: &str = "tally_parts";
pub const ICONTAINS: &str = "tally_icontains";

/// The list type `tally_parts` returns.
pub fn parts_type() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

fn scalar_str(v: &ColumnarValue, what: &str) -> Result<String> {
    match v {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(s))) => Ok(s.clone()),
        _ => Err(DataFusionError::Internal(format!(
            "{what} must be a string literal"
        ))),
    }
}

fn scalar_bool(v: &ColumnarValue, what: &str) -> Result<bool> {
    match v {
        ColumnarValue::Scalar(ScalarValue::Boolean(Some(b))) => Ok(*b),
        _ => Err(DataFusionError::Internal(format!(
            "{what} must be a boolean literal"
        ))),
    }
}

fn text_array(v: &ColumnarValue, rows: usize) -> Result<ArrayRef> {
    v.to_array(rows)
}

fn rows_of(args: &[ColumnarValue]) -> usize {
    args.iter()
        .find_map(|a| match a {
            ColumnarValue::Array(arr) => Some(arr.len()),
            ColumnarValue::Scalar(_) => None,
        })
        .unwrap_or(1)
}

fn parts_impl(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let [text, sep, keep_empty] = args else {
        return Err(DataFusionError::Internal(format!(
            "{PARTS} takes 3 arguments"
        )));
    };
    let sep = scalar_str(sep, "separator")?;
    let keep_empty = scalar_bool(keep_empty, "keep_empty")?;
    let rows = rows_of(args);
    let array = text_array(text, rows)?;
    let strings: &StringArray = as_string_array(&array)?;
    let mut builder = ListBuilder::new(StringBuilder::new());
    for i in 0..strings.len() {
        let mut any = false;
        if strings.is_valid(i) {
            for part in strings.value(i).split(sep.as_str()) {
                let part = part.trim();
                if !part.is_empty() {
                    builder.values().append_value(part);
                    any = true;
                }
            }
        }
        if !any && keep_empty {
            builder.values().append_value("");
        }
        builder.append(true);
    }
    let out: ArrayRef = Arc::new(builder.finish());
    Ok(match text {
        ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
        ColumnarValue::Array(_) => ColumnarValue::Array(out),
    })
}

/// Containment under NFKC and case folding of an already folded needle
/// ([`tally_semantic::names::fold`]): `e-tax` is found in `（ｅ－Ｔａｘ）`.
pub fn icontains(haystack: &str, needle_folded: &str) -> bool {
    if haystack.contains(needle_folded) {
        return true;
    }
    // Folding borrows text that is already folded (most Japanese text): then the plain test
    // above was the whole answer.
    match tally_semantic::names::fold(haystack) {
        std::borrow::Cow::Borrowed(_) => false,
        std::borrow::Cow::Owned(folded) => folded.contains(needle_folded),
    }
}

fn icontains_impl(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let [text, needle, lowered] = args else {
        return Err(DataFusionError::Internal(format!(
            "{ICONTAINS} takes 3 arguments"
        )));
    };
    let needle = scalar_str(needle, "needle")?;
    // The prepared search column is lower-cased already: a plain substring test suffices.
    let lowered = scalar_bool(lowered, "lowered")?;
    let rows = rows_of(args);
    let array = text_array(text, rows)?;
    let strings: &StringArray = as_string_array(&array)?;
    let mut builder = BooleanBuilder::with_capacity(strings.len());
    for i in 0..strings.len() {
        let value = if strings.is_valid(i) {
            strings.value(i)
        } else {
            ""
        };
        builder.append_value(if lowered {
            value.contains(needle.as_str())
        } else {
            icontains(value, &needle)
        });
    }
    let out: BooleanArray = builder.finish();
    Ok(match text {
        ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
        ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(out)),
    })
}

/// The functions, built once per engine.
#[derive(Debug, Clone)]
pub struct Functions {
    parts: Arc<ScalarUDF>,
    icontains: Arc<ScalarUDF>,
}

impl Default for Functions {
    fn default() -> Self {
        Functions {
            parts: Arc::new(create_udf(
                PARTS,
                vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
                parts_type(),
                Volatility::Immutable,
                Arc::new(parts_impl),
            )),
            icontains: Arc::new(create_udf(
                ICONTAINS,
                vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
                DataType::Boolean,
                Volatility::Immutable,
                Arc::new(icontains_impl),
            )),
        }
    }
}

impl Functions {
    pub fn parts(&self, text: Expr, separator: &str, keep_empty: bool) -> Expr {
        self.parts.call(vec![text, lit(separator), lit(keep_empty)])
    }

    /// Substring test under NFKC and case folding; `needle` is folded here.
    pub fn icontains(&self, text: Expr, needle: &str) -> Expr {
        let folded = tally_semantic::names::fold(needle).into_owned();
        self.icontains.call(vec![text, lit(folded), lit(false)])
    }

    /// Substring test on a column that is folded already (the prepared search column).
    pub fn contains_lowered(&self, text: Expr, needle: &str) -> Expr {
        let folded = tally_semantic::names::fold(needle).into_owned();
        self.icontains.call(vec![text, lit(folded), lit(true)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icontains_ignores_case_and_handles_japanese() {
        assert!(icontains("電子メール等", "メール"));
        assert!(icontains("Electronic MAIL", "mail"));
        assert!(!icontains("電子メール", "郵送"));
        assert!(icontains("", ""));
        assert!(!icontains("", "x"));
        // Full-width text is found by its usual form (issue 15).
        assert!(icontains(
            "国税電子申告・納税システム（ｅ－Ｔａｘ）",
            "e-tax"
        ));
        assert!(icontains("押印＋印鑑証明", "押印+印鑑"));
    }

    #[test]
    fn parts_trim_and_drop_empty() {
        let text = ColumnarValue::Array(Arc::new(StringArray::from(vec![
            Some("a; b ;;c"),
            None,
            Some("  "),
        ])));
        let out = parts_impl(&[
            text,
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(";".into()))),
            ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))),
        ])
        .expect("runs");
        let ColumnarValue::Array(arr) = out else {
            panic!("array")
        };
        let list = arr
            .as_any()
            .downcast_ref::<datafusion::arrow::array::ListArray>()
            .expect("list");
        let row = |i: usize| {
            let v = list.value(i);
            let s = v.as_any().downcast_ref::<StringArray>().expect("strings");
            (0..s.len())
                .map(|j| s.value(j).to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(row(0), ["a", "b", "c"]);
        assert_eq!(row(1), [""]);
        assert_eq!(row(2), [""]);
    }
}
