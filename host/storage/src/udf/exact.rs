//! `tally_exact`: an integer as the 128-bit decimal an exact sum adds.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

use super::text::same_by_name;

pub const EXACT: &str = "tally_exact";

/// `tally_exact(integer)`: an integer as a 128-bit decimal of scale 0, what an exact sum
/// adds. Every 64-bit integer fits 38 digits, so no value is checked against the precision,
/// as a cast checks each (a cast was a tenth of a summary's time); a float or decimal column
/// (an integer field read from one) is cast.
#[derive(Debug)]
pub(super) struct Exact {
    pub(super) signature: Signature,
}
same_by_name!(Exact);

impl ScalarUDFImpl for Exact {
    fn name(&self) -> &str {
        EXACT
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Decimal128(38, 0))
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [DataType::UInt64] => Ok(vec![DataType::UInt64]),
            [t] if t.is_integer() || t.is_null() => Ok(vec![DataType::Int64]),
            // An integer field read from floats or decimals: cast as before.
            [t] if t.is_numeric() => Ok(vec![t.clone()]),
            _ => Err(DataFusionError::Plan(format!(
                "{EXACT} takes 1 integer argument, not {arg_types:?}"
            ))),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::{AsArray, Decimal128Array};
        use datafusion::arrow::datatypes::{Int64Type, UInt64Type};
        let [value] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{EXACT} takes 1 argument"
            )));
        };
        let array = value.to_array(args.number_rows)?;
        let out: Decimal128Array = if let Some(a) = array.as_primitive_opt::<Int64Type>() {
            a.unary(i128::from)
        } else if let Some(a) = array.as_primitive_opt::<UInt64Type>() {
            a.unary(i128::from)
        } else {
            // As the logical cast did: a value that is no integer (NaN, an infinity) or
            // past 38 digits fails the call instead of leaving the sum as a null.
            let options = datafusion::arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            };
            datafusion::arrow::compute::cast_with_options(
                &array,
                &DataType::Decimal128(38, 0),
                &options,
            )?
            .as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
            .clone()
        };
        let out: ArrayRef = Arc::new(out.with_precision_and_scale(38, 0)?);
        Ok(match value {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(out),
        })
    }
}
