//! `tally_rows_in`: whether a row is among those a text search found beforehand.

use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

/// `tally_rows_in(row)`: whether a row number is in a set found beforehand (a text search
/// through a prepared table's dictionaries, [`crate::search`]). Two calls are the same only
/// over the same set.
#[derive(Debug)]
pub(super) struct RowsIn {
    pub(super) signature: Signature,
    pub(super) rows: crate::search::Found,
}

impl PartialEq for RowsIn {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.rows, &other.rows)
    }
}
impl Eq for RowsIn {}
impl std::hash::Hash for RowsIn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.rows), state);
    }
}

/// The name of the row-set function.
pub const ROWS_IN: &str = "tally_rows_in";

impl ScalarUDFImpl for RowsIn {
    fn name(&self) -> &str {
        ROWS_IN
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() != 1 {
            return Err(DataFusionError::Plan(format!("{ROWS_IN} takes 1 argument")));
        }
        Ok(vec![DataType::UInt64])
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::UInt64Type;
        let [row] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{ROWS_IN} takes 1 argument"
            )));
        };
        let array = row.to_array(args.number_rows)?;
        let rows = array
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| DataFusionError::Internal(format!("{ROWS_IN} reads row numbers")))?;
        let numbers = rows.values();
        let found = datafusion::arrow::buffer::BooleanBuffer::collect_bool(numbers.len(), |i| {
            usize::try_from(numbers[i]).is_ok_and(|r| self.rows.contains(r))
        });
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::new(
            found, None,
        ))))
    }
}
