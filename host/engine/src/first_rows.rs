//! `tally_first_rows(key…, row)`: the first `n` rows in the order of their keys, as one
//! aggregate. A page of `query_records` is the matching records counted and the first of
//! them in order kept; as an aggregate beside a count, each partition keeps its own first
//! `n` (on a cluster, each executor's task keeps those of the rows it reads) and only those
//! travel to be merged, where a plan of every matching record's keys would bring them all to
//! one place to keep `n` of them.
//!
//! The value, and the state between a partial and a final aggregation, is a list of structs
//! `{k0, k1, …, row}` in order. The keys are compared in order, each ascending or descending
//! with nulls last; the last argument, the row number, breaks every tie (ascending), so the
//! rows kept are the same however the input was split.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, StructArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::{SortColumn, SortOptions, concat, lexsort_to_indices, take};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Expr, Signature, Volatility,
};

/// The name of the aggregate in plans (what a cluster's executors rebuild it from).
pub const FIRST_ROWS: &str = "tally_first_rows";

/// What a `tally_first_rows` keeps: how many rows, and for each key but the row number,
/// whether it orders descending.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Order {
    pub n: usize,
    pub descending: Vec<bool>,
}

impl Order {
    /// The options of each sort column: the keys (nulls last), then the row number.
    fn options(&self) -> Vec<SortOptions> {
        self.descending
            .iter()
            .map(|&descending| SortOptions {
                descending,
                nulls_first: false,
            })
            .chain(std::iter::once(SortOptions::default()))
            .collect()
    }

    /// The order as bytes (what travels with the aggregate to a cluster's executors).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = (self.n as u64).to_le_bytes().to_vec();
        out.extend(self.descending.iter().map(|&d| u8::from(d)));
        out
    }

    /// The order [`Order::to_bytes`] wrote, if `bytes` is one.
    pub fn from_bytes(bytes: &[u8]) -> Option<Order> {
        let (n, flags) = bytes.split_first_chunk::<8>()?;
        let descending = flags
            .iter()
            .map(|&b| match b {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            })
            .collect::<Option<Vec<bool>>>()?;
        Some(Order {
            n: usize::try_from(u64::from_le_bytes(*n)).ok()?,
            descending,
        })
    }
}

/// `tally_first_rows(keys…, row)` keeping what `order` says.
pub fn first_rows(order: Order, keys: Vec<Expr>) -> Expr {
    first_rows_udaf(order).call(keys)
}

/// The aggregate itself.
pub fn first_rows_udaf(order: Order) -> AggregateUDF {
    AggregateUDF::from(FirstRows {
        signature: Signature::variadic_any(Volatility::Immutable),
        order,
    })
}

/// The order of a `tally_first_rows`, when `udaf` is one.
pub fn order_of(udaf: &AggregateUDF) -> Option<&Order> {
    udaf.inner()
        .as_ref()
        .downcast_ref::<FirstRows>()
        .map(|f| &f.order)
}

/// The rows of a `tally_first_rows` value at `row` of `column`, as the struct's columns
/// (`k0…, row`), in order; none when the value is null.
pub fn rows_at(column: &ArrayRef, row: usize) -> Result<Option<StructArray>> {
    let list = column
        .as_list_opt::<i32>()
        .ok_or_else(|| DataFusionError::Internal(format!("{FIRST_ROWS} gives a list")))?;
    if list.is_null(row) {
        return Ok(None);
    }
    let value = list.value(row);
    let rows = value
        .as_struct_opt()
        .ok_or_else(|| DataFusionError::Internal(format!("{FIRST_ROWS} lists structs")))?;
    Ok(Some(rows.clone()))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FirstRows {
    signature: Signature,
    order: Order,
}

/// The struct of one kept row: each argument's type, nullable.
fn row_fields(arg_types: &[DataType]) -> Fields {
    arg_types
        .iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("k{i}"), t.clone(), true))
        .collect()
}

fn list_type(fields: Fields) -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Struct(fields), true)))
}

impl AggregateUDFImpl for FirstRows {
    fn name(&self) -> &str {
        FIRST_ROWS
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if arg_types.len() != self.order.descending.len() + 1 {
            return Err(DataFusionError::Plan(format!(
                "{FIRST_ROWS} orders by {} keys and the row number, and was given {} arguments",
                self.order.descending.len(),
                arg_types.len()
            )));
        }
        Ok(list_type(row_fields(arg_types)))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let types = args
            .exprs
            .iter()
            .map(|e| e.data_type(args.schema))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(Kept {
            order: self.order.clone(),
            options: self.order.options(),
            fields: row_fields(&types),
            rows: None,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let types: Vec<DataType> = args
            .input_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "rows"),
            list_type(row_fields(&types)),
            true,
        ))])
    }
}

/// The first rows met so far, in order.
#[derive(Debug)]
struct Kept {
    order: Order,
    options: Vec<SortOptions>,
    fields: Fields,
    rows: Option<Vec<ArrayRef>>,
}

impl Kept {
    /// Keeps the first `n` of the rows kept and `columns`.
    fn add(&mut self, columns: Vec<ArrayRef>) -> Result<()> {
        if columns.len() != self.fields.len() {
            return Err(DataFusionError::Internal(format!(
                "{FIRST_ROWS} was given {} columns for {} keys",
                columns.len(),
                self.fields.len()
            )));
        }
        if columns.first().is_none_or(|c| c.is_empty()) {
            return Ok(());
        }
        let merged: Vec<ArrayRef> = match self.rows.take() {
            Some(kept) => kept
                .iter()
                .zip(&columns)
                .map(|(a, b)| concat(&[a.as_ref(), b.as_ref()]))
                .collect::<std::result::Result<_, _>>()?,
            None => columns,
        };
        let sort: Vec<SortColumn> = merged
            .iter()
            .zip(&self.options)
            .map(|(values, o)| SortColumn {
                values: Arc::clone(values),
                options: Some(*o),
            })
            .collect();
        let n = self.order.n.min(merged[0].len());
        let indices = lexsort_to_indices(&sort, Some(n))?;
        self.rows = Some(
            merged
                .iter()
                .map(|c| take(c.as_ref(), &indices, None).map(compact))
                .collect::<std::result::Result<_, _>>()?,
        );
        Ok(())
    }

    /// The rows kept as a list of one entry.
    fn list(&self) -> Result<ScalarValue> {
        let columns = match &self.rows {
            Some(rows) => rows.clone(),
            None => self
                .fields
                .iter()
                .map(|f| datafusion::arrow::array::new_empty_array(f.data_type()))
                .collect(),
        };
        let rows = StructArray::try_new(self.fields.clone(), columns, None)?;
        let list = ListArray::try_new(
            Arc::new(Field::new(
                "item",
                DataType::Struct(self.fields.clone()),
                true,
            )),
            OffsetBuffer::from_lengths([rows.len()]),
            Arc::new(rows),
            None,
        )?;
        Ok(ScalarValue::List(Arc::new(list)))
    }
}

/// `column` holding only the bytes of its own rows. Text read as views points into the
/// buffers of the batches it came from, and taking rows of a view array keeps every buffer:
/// the rows kept would hold (and a partial aggregation's state would carry) the text of every
/// batch met.
fn compact(column: ArrayRef) -> ArrayRef {
    match column.as_string_view_opt() {
        Some(views) if !views.data_buffers().is_empty() => Arc::new(views.gc()),
        _ => column,
    }
}

impl Accumulator for Kept {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(values.to_vec())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(list) = states.first().and_then(|s| s.as_list_opt::<i32>()) else {
            return Err(DataFusionError::Internal(format!(
                "{FIRST_ROWS}'s state is a list"
            )));
        };
        for row in (0..list.len()).filter(|&r| list.is_valid(r)) {
            let value = list.value(row);
            let Some(rows) = value.as_struct_opt() else {
                return Err(DataFusionError::Internal(format!(
                    "{FIRST_ROWS}'s state lists structs"
                )));
            };
            self.add(rows.columns().to_vec())?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.list()?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.list()
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.rows.as_ref().map_or(0, |rows| {
                rows.iter()
                    .map(|c| c.get_array_memory_size())
                    .sum::<usize>()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, UInt64Array};
    use datafusion::arrow::datatypes::UInt64Type;

    fn kept(order: &Order, types: &[DataType]) -> Kept {
        Kept {
            order: order.clone(),
            options: order.options(),
            fields: row_fields(types),
            rows: None,
        }
    }

    fn column(values: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(values.to_vec()))
    }

    fn rows(values: &[u64]) -> ArrayRef {
        Arc::new(UInt64Array::from(values.to_vec()))
    }

    fn row_numbers(acc: &mut Kept) -> Vec<u64> {
        let ScalarValue::List(list) = acc.evaluate().unwrap() else {
            panic!("a list")
        };
        let column: ArrayRef = list;
        let rows = rows_at(&column, 0).unwrap().unwrap();
        rows.column(rows.num_columns() - 1)
            .as_primitive::<UInt64Type>()
            .values()
            .to_vec()
    }

    #[test]
    fn the_first_rows_in_order_are_kept_ties_broken_by_row_and_nulls_last_whatever_the_split() {
        // Descending by a key with nulls and ties: 9 (rows 4, 7), 5 (2), 3 (1, 8), 1 (5),
        // then the nulls (3, 6).
        let keys = [
            Some(3),
            Some(5),
            None,
            Some(9),
            Some(1),
            None,
            Some(9),
            Some(3),
        ];
        let numbers = [1u64, 2, 3, 4, 5, 6, 7, 8];
        let order = Order {
            n: 4,
            descending: vec![true],
        };
        let types = [DataType::Int64, DataType::UInt64];
        let mut whole = kept(&order, &types);
        whole
            .update_batch(&[column(&keys), rows(&numbers)])
            .unwrap();
        assert_eq!(row_numbers(&mut whole), vec![4, 7, 2, 1]);

        // Split in two parts, each kept apart then merged (a partial then a final
        // aggregation): the same rows in the same order.
        let mut parts: Vec<Kept> = [(0, 3), (3, 8)]
            .iter()
            .map(|&(from, to)| {
                let mut part = kept(&order, &types);
                part.update_batch(&[column(&keys[from..to]), rows(&numbers[from..to])])
                    .unwrap();
                part
            })
            .collect();
        let states: Vec<ScalarValue> = parts
            .iter_mut()
            .map(|p| p.state().unwrap().remove(0))
            .collect();
        let mut merged = kept(&order, &types);
        merged
            .merge_batch(&[ScalarValue::iter_to_array(states).unwrap()])
            .unwrap();
        assert_eq!(row_numbers(&mut merged), vec![4, 7, 2, 1]);

        // More wanted than there are: every row, the nulls last.
        let all = Order {
            n: 100,
            descending: vec![false],
        };
        let mut every = kept(&all, &types);
        every
            .update_batch(&[column(&keys), rows(&numbers)])
            .unwrap();
        assert_eq!(row_numbers(&mut every), vec![5, 1, 8, 2, 4, 7, 3, 6]);

        // Nothing read: an empty list, not an error.
        let mut none = kept(&order, &types);
        assert!(row_numbers(&mut none).is_empty());
    }

    #[test]
    fn text_kept_holds_its_own_bytes_not_those_of_every_batch_met() {
        let order = Order {
            n: 2,
            descending: vec![false],
        };
        let types = [DataType::Utf8View, DataType::UInt64];
        let mut acc = kept(&order, &types);
        for b in 0..50u64 {
            // Each batch's long values in a buffer of its own (about 4 KB).
            let text: ArrayRef =
                Arc::new(datafusion::arrow::array::StringViewArray::from_iter_values(
                    (0..100).map(|i| format!("value {b:03} {i:03}, longer than a view holds")),
                ));
            let numbers: Vec<u64> = (0..100).map(|i| b * 100 + i).collect();
            acc.update_batch(&[text, rows(&numbers)]).unwrap();
        }
        assert_eq!(row_numbers(&mut acc), vec![0, 1]);
        assert!(
            acc.size() < 16 * 1024,
            "{} bytes kept for two rows",
            acc.size()
        );
    }

    #[test]
    fn the_order_travels_as_bytes_and_nothing_else_is_taken_for_one() {
        let order = Order {
            n: 1234,
            descending: vec![true, false, true],
        };
        assert_eq!(Order::from_bytes(&order.to_bytes()), Some(order));
        assert_eq!(Order::from_bytes(&[1, 2, 3]), None);
        let mut bad = (20u64).to_le_bytes().to_vec();
        bad.push(7);
        assert_eq!(Order::from_bytes(&bad), None);
    }
}
