//! Multi-value cells split into parts: `tally_parts` and `tally_part_count` over any text, and
//! a prepared field's [`PartIndex`], whose codes stand for its parts (`tally_part_codes`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, ListBuilder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

use super::text::{
    Memo, by_key, over_text, same_by_name, scalar_bool, scalar_str, string_at, strings_of,
    text_then,
};

/// The name of the parts function.
pub const PARTS: &str = "tally_parts";
pub const PART_COUNT: &str = "tally_part_count";

/// The list type `tally_parts` returns.
pub fn parts_type() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

/// The parts of each value of a string array (`None`: null), as a list array.
pub(super) fn parts_of<'a>(
    strings: &dyn Fn(usize) -> Option<&'a str>,
    n: usize,
    sep: &str,
    keep_empty: bool,
) -> ArrayRef {
    let mut builder = ListBuilder::new(StringBuilder::new());
    for i in 0..n {
        let mut any = false;
        if let Some(v) = strings(i) {
            for part in v.split(sep) {
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
    Arc::new(builder.finish())
}

/// `tally_parts(text, separator, keep_empty)`.
#[derive(Debug)]
pub(super) struct Parts {
    pub(super) signature: Signature,
    pub(super) memo: Memo,
}

/// `tally_part_count(text, separator)`: how many parts `tally_parts` would give (0 for a
/// null or empty cell), with no list built: what a summary counts before it explodes, on
/// data read from its files and on a cluster's executors.
#[derive(Debug)]
pub(super) struct PartCount {
    pub(super) signature: Signature,
    pub(super) memo: Memo,
}

same_by_name!(Parts);
same_by_name!(PartCount);

impl ScalarUDFImpl for Parts {
    fn name(&self) -> &str {
        PARTS
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(parts_type())
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        text_then(arg_types, &[DataType::Utf8, DataType::Boolean], PARTS)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [text, sep, keep_empty] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{PARTS} takes 3 arguments"
            )));
        };
        let sep = scalar_str(sep, "separator")?;
        let keep_empty = scalar_bool(keep_empty, "keep_empty")?;
        let key = format!("{sep}\u{0}{keep_empty}");
        over_text(text, args.number_rows, &self.memo, &key, &|at, n| {
            Ok(parts_of(at, n, &sep, keep_empty))
        })
    }
}

impl ScalarUDFImpl for PartCount {
    fn name(&self) -> &str {
        PART_COUNT
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        text_then(arg_types, &[DataType::Utf8], PART_COUNT)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::Int64Array;
        let [text, sep] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{PART_COUNT} takes 2 arguments"
            )));
        };
        let sep = scalar_str(sep, "separator")?;
        over_text(text, args.number_rows, &self.memo, &sep, &|at, n| {
            let counts: Int64Array = (0..n)
                .map(|i| {
                    Some(at(i).map_or(0, |v| {
                        v.split(sep.as_str())
                            .filter(|p| !p.trim().is_empty())
                            .count() as i64
                    }))
                })
                .collect();
            Ok(Arc::new(counts) as ArrayRef)
        })
    }
}

/// The parts of a multi-value field's dictionary, numbered once per dataset version: the
/// distinct parts (code 0 is `""`, never a part), and per dictionary value the codes of its
/// parts (one more entry, empty, for a null). Exploding on codes makes one `UInt32` per part
/// instead of a copy of its text, and groups on integers.
#[derive(Debug)]
pub struct PartIndex {
    /// The field's dictionary the index was made from (a batch over another is refused).
    pub values: ArrayRef,
    /// The distinct parts.
    pub parts: datafusion::arrow::array::StringArray,
    /// The code of each part.
    lookup: std::collections::HashMap<String, u32>,
    /// Per dictionary value (then null), the codes of its parts, in order.
    lists: ArrayRef,
    /// Per dictionary value (then null), how many parts it has.
    counts: ArrayRef,
    separator: String,
}

impl PartIndex {
    /// The index of a dictionary's values split by `separator` as `tally_parts` splits them.
    pub fn new(values: ArrayRef, separator: &str) -> Result<PartIndex> {
        use datafusion::arrow::array::{Int64Builder, UInt32Builder};
        let strings = strings_of(&values)?;
        let at = string_at(&strings);
        let mut codes: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
        let mut parts = StringBuilder::new();
        parts.append_value("");
        let mut lists = ListBuilder::new(UInt32Builder::new());
        let mut counts = Int64Builder::new();
        for i in 0..=values.len() {
            let mut n = 0i64;
            if let Some(v) = if i < values.len() { at(i) } else { None } {
                for part in v.split(separator).map(str::trim).filter(|p| !p.is_empty()) {
                    let next = codes.len() as u32 + 1;
                    let code = *codes.entry(part.to_string()).or_insert_with(|| {
                        parts.append_value(part);
                        next
                    });
                    lists.values().append_value(code);
                    n += 1;
                }
            }
            lists.append(true);
            counts.append_value(n);
        }
        let parts = parts.finish();
        Ok(PartIndex {
            values,
            lookup: codes,
            parts,
            lists: Arc::new(lists.finish()),
            counts: Arc::new(counts.finish()),
            separator: separator.to_string(),
        })
    }

    /// The list type part codes come in.
    pub fn codes_type() -> DataType {
        DataType::List(Arc::new(Field::new("item", DataType::UInt32, true)))
    }

    /// Per row of a text column, its part codes (or counts): by key over the indexed
    /// dictionary; for any other text (a dictionary rebuilt by an operator, plain strings),
    /// split here and looked up.
    fn rows(
        &self,
        arg: &ColumnarValue,
        rows: usize,
        count: bool,
        separator: &str,
    ) -> Result<ColumnarValue> {
        use datafusion::arrow::array::{AsArray, Int64Builder, UInt32Builder};
        let array = arg.to_array(rows)?;
        let out = match array
            .as_dictionary_opt::<datafusion::arrow::datatypes::UInt32Type>()
            .filter(|d| Arc::ptr_eq(d.values(), &self.values))
        {
            Some(dict) => by_key(
                dict.keys(),
                if count { &self.counts } else { &self.lists },
                self.values.len(),
            )?,
            None => {
                let strings = strings_of(&array)?;
                let at = string_at(&strings);
                let mut lists = ListBuilder::new(UInt32Builder::new());
                let mut counts = Int64Builder::new();
                for i in 0..strings.len() {
                    let mut n = 0i64;
                    if let Some(v) = at(i) {
                        for part in v.split(separator).map(str::trim).filter(|p| !p.is_empty()) {
                            let code = self.lookup.get(part).copied().ok_or_else(|| {
                                DataFusionError::Internal(format!(
                                    "a part `{part}` the index lacks"
                                ))
                            })?;
                            lists.values().append_value(code);
                            n += 1;
                        }
                    }
                    lists.append(true);
                    counts.append_value(n);
                }
                if count {
                    Arc::new(counts.finish()) as ArrayRef
                } else {
                    Arc::new(lists.finish()) as ArrayRef
                }
            }
        };
        Ok(match arg {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(out),
        })
    }
}

/// `tally_part_codes(text)`: the codes of a multi-value cell's parts ([`PartIndex`]).
#[derive(Debug)]
pub(super) struct PartCodes {
    pub(super) signature: Signature,
    pub(super) index: Arc<PartIndex>,
    /// Just the number of parts (`Int64`) instead of their codes.
    pub(super) count: bool,
}
same_by_name!(PartCodes);

/// The count form's name: not [`PART_COUNT`], which an executor rebuilds by name as the
/// text-splitting [`PartCount`] (a prepared table's codes never leave the server, but a plan
/// naming one function must mean one function wherever it is read).
pub(super) const PART_CODE_COUNT: &str = "tally_part_code_count";

impl ScalarUDFImpl for PartCodes {
    fn name(&self) -> &str {
        if self.count {
            PART_CODE_COUNT
        } else {
            "tally_part_codes"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(if self.count {
            DataType::Int64
        } else {
            PartIndex::codes_type()
        })
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        Ok(arg_types.to_vec())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [text] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{} takes 1 argument",
                self.name()
            )));
        };
        self.index
            .rows(text, args.number_rows, self.count, &self.index.separator)
    }
}
