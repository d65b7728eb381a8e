//! `tally_icontains`: substring under NFKC and case folding, null counting as "".

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, BooleanBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

use super::text::{Memo, over_text, same_by_name, scalar_bool, scalar_str, text_then};

pub const ICONTAINS: &str = "tally_icontains";

/// `tally_icontains(text, folded needle, lowered)`.
#[derive(Debug)]
pub(super) struct IContains {
    pub(super) signature: Signature,
    pub(super) memo: Memo,
}

same_by_name!(IContains);

/// Containment under NFKC and case folding of an already folded needle
/// ([`tally_semantic::names::fold`]): `e-tax` is found in `（ｅ－Ｔａｘ）`.
pub fn icontains(haystack: &str, needle_folded: &str) -> bool {
    // Folding borrows text that is already folded (most Japanese text), so it costs a look at
    // each character and no copy. The text as it is cannot be tested first: it may hold the
    // needle where its folded form does not (`カﾞ` holds `カ`, folded it is `ガ`).
    tally_semantic::names::fold(haystack).contains(needle_folded)
}

impl ScalarUDFImpl for IContains {
    fn name(&self) -> &str {
        ICONTAINS
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        text_then(arg_types, &[DataType::Utf8, DataType::Boolean], ICONTAINS)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [text, needle, lowered] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{ICONTAINS} takes 3 arguments"
            )));
        };
        let needle = scalar_str(needle, "needle")?;
        // A column folded already: a plain substring test suffices.
        let lowered = scalar_bool(lowered, "lowered")?;
        let key = format!("{needle}\u{0}{lowered}");
        over_text(text, args.number_rows, &self.memo, &key, &|at, n| {
            let mut builder = BooleanBuilder::with_capacity(n);
            for i in 0..n {
                // Null counts as "".
                let value = at(i).unwrap_or("");
                builder.append_value(if lowered {
                    value.contains(needle.as_str())
                } else {
                    icontains(value, &needle)
                });
            }
            let out: BooleanArray = builder.finish();
            Ok(Arc::new(out) as ArrayRef)
        })
    }
}
