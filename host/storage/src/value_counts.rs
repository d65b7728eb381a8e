//! `tally_value_counts(text)`: every distinct value of a column with how many rows hold it,
//! as one aggregate. Many of them go in one plan beside other aggregates, so a description
//! of every field of data read from its files is one pass over the data (one job on a
//! cluster, whose executors each count the rows they read and send their counts to be
//! added), where a grouping per field is a pass and a job each.
//!
//! The value of the aggregate is a list of `{value, records}` (nulls left out, in the order
//! the values were first met); its state between a partial and a final aggregation has the
//! same form.

use std::cell::RefCell;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, StructArray, UInt64Array};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::{cast, filter, is_not_null};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, UInt64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Expr, Signature, Volatility,
};
use datafusion::physical_expr_common::binary_map::OutputType;
use datafusion::physical_expr_common::binary_view_map::ArrowBytesViewMap;

/// The name of the aggregate in plans (what a cluster's executors rebuild it from).
pub const VALUE_COUNTS: &str = "tally_value_counts";

/// `tally_value_counts(text)`.
pub fn value_counts(text: Expr) -> Expr {
    value_counts_udaf().call(vec![text])
}

/// The aggregate itself: it carries nothing but its name.
pub fn value_counts_udaf() -> AggregateUDF {
    AggregateUDF::from(ValueCounts {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

fn entry_fields() -> Fields {
    Fields::from(vec![
        Field::new("value", DataType::Utf8, false),
        Field::new("records", DataType::UInt64, false),
    ])
}

/// The type of the aggregate's value and of its state.
fn counts_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "item",
        DataType::Struct(entry_fields()),
        true,
    )))
}

/// The values and counts of one row of a `tally_value_counts` column (no value twice).
pub fn counts_at(column: &ArrayRef, row: usize) -> Result<Vec<(String, usize)>> {
    let list = column
        .as_list_opt::<i32>()
        .ok_or_else(|| DataFusionError::Internal(format!("{VALUE_COUNTS} gives a list")))?;
    if list.is_null(row) {
        return Ok(Vec::new());
    }
    let (values, records) = entries(&list.value(row))?;
    let values = values.as_string_view();
    Ok((0..values.len())
        .filter(|&i| values.is_valid(i))
        .map(|i| (values.value(i).to_string(), records.value(i) as usize))
        .collect())
}

/// The values (as a string view array) and counts of a list's entries.
fn entries(entries: &ArrayRef) -> Result<(ArrayRef, UInt64Array)> {
    let entries = entries
        .as_struct_opt()
        .ok_or_else(|| DataFusionError::Internal(format!("{VALUE_COUNTS} lists structs")))?;
    let values = cast(entries.column(0), &DataType::Utf8View)?;
    let records = cast(entries.column(1), &DataType::UInt64)?;
    Ok((values, records.as_primitive::<UInt64Type>().clone()))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ValueCounts {
    signature: Signature,
}

impl AggregateUDFImpl for ValueCounts {
    fn name(&self) -> &str {
        VALUE_COUNTS
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(counts_type())
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(Counter::new()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "counts"),
            counts_type(),
            true,
        ))])
    }
}

/// The distinct values met (null among them, once met) and the rows of each, by the order
/// they were met in.
struct Counter {
    map: ArrowBytesViewMap<usize>,
    records: Vec<u64>,
    /// The map's values, once given out by [`Counter::evaluate`] (which must leave the
    /// accumulator as it was): put back before anything else is counted.
    given: Option<ArrayRef>,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counter")
            .field("values", &self.records.len())
            .finish_non_exhaustive()
    }
}

impl Counter {
    fn new() -> Counter {
        Counter {
            map: ArrowBytesViewMap::new(OutputType::Utf8View),
            records: Vec::new(),
            given: None,
        }
    }

    /// Adds `values` (a string view array), the `i`-th counted `records(i)` times.
    fn add(&mut self, values: &ArrayRef, records: impl Fn(usize) -> u64) {
        self.put_back();
        let counts = RefCell::new(&mut self.records);
        let mut at = 0usize;
        self.map.insert_if_new(
            values,
            |_| {
                let mut counts = counts.borrow_mut();
                counts.push(0);
                counts.len() - 1
            },
            |i| {
                counts.borrow_mut()[i] += records(at);
                at += 1;
            },
        );
    }

    /// The values given out, in the map again, each with its own index (as they were).
    fn put_back(&mut self) {
        if let Some(values) = self.given.take() {
            let mut next = 0usize;
            self.map.insert_if_new(
                &values,
                |_| {
                    next += 1;
                    next - 1
                },
                |_| {},
            );
        }
    }

    /// The list of `{value, records}`, nulls left out.
    fn list(&mut self) -> Result<ScalarValue> {
        let values = match &self.given {
            Some(values) => Arc::clone(values),
            None => {
                let values = self.map.take().into_state();
                self.given = Some(Arc::clone(&values));
                values
            }
        };
        let kept = is_not_null(&values)?;
        let text = cast(&filter(&values, &kept)?, &DataType::Utf8)?;
        let records: ArrayRef = Arc::new(UInt64Array::from(self.records.clone()));
        let records = filter(&records, &kept)?;
        let entries = StructArray::try_new(entry_fields(), vec![text, records], None)?;
        let list = ListArray::try_new(
            Arc::new(Field::new("item", DataType::Struct(entry_fields()), true)),
            OffsetBuffer::from_lengths([entries.len()]),
            Arc::new(entries),
            None,
        )?;
        Ok(ScalarValue::List(Arc::new(list)))
    }
}

impl Accumulator for Counter {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(values) = values.first() else {
            return Err(DataFusionError::Internal(format!(
                "{VALUE_COUNTS} takes 1 argument"
            )));
        };
        let text = cast(values, &DataType::Utf8View)?;
        self.add(&text, |_| 1);
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(list) = states.first().and_then(|s| s.as_list_opt::<i32>()) else {
            return Err(DataFusionError::Internal(format!(
                "{VALUE_COUNTS}'s state is a list"
            )));
        };
        for row in (0..list.len()).filter(|&r| list.is_valid(r)) {
            let (values, records) = entries(&list.value(row))?;
            self.add(&values, |i| records.value(i));
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
            + self.map.size()
            + self.records.capacity() * std::mem::size_of::<u64>()
            + self.given.as_ref().map_or(0, |g| g.get_array_memory_size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[Option<&str>]) -> ArrayRef {
        Arc::new(datafusion::arrow::array::StringArray::from(values.to_vec()))
    }

    fn counted(acc: &mut Counter) -> Vec<(String, usize)> {
        let ScalarValue::List(list) = acc.evaluate().unwrap() else {
            panic!("a list")
        };
        let column: ArrayRef = list;
        let mut counts = counts_at(&column, 0).unwrap();
        counts.sort();
        counts
    }

    fn pairs(expected: &[(&str, usize)]) -> Vec<(String, usize)> {
        let mut v: Vec<(String, usize)> =
            expected.iter().map(|(s, n)| (s.to_string(), *n)).collect();
        v.sort();
        v
    }

    #[test]
    fn values_are_counted_nulls_left_out_and_partial_counts_added() {
        let long = "a value longer than twelve bytes, kept out of line";
        let mut a = Counter::new();
        a.update_batch(&[strings(&[Some("x"), None, Some(long), Some("x"), Some("")])])
            .unwrap();
        let mut b = Counter::new();
        b.update_batch(&[strings(&[Some(long), Some("y"), None])])
            .unwrap();
        // Evaluating leaves the accumulator as it was: counting goes on after it.
        assert_eq!(counted(&mut b), pairs(&[(long, 1), ("y", 1)]));
        b.update_batch(&[strings(&[Some("y"), Some("x")])]).unwrap();
        assert_eq!(counted(&mut b), pairs(&[(long, 1), ("y", 2), ("x", 1)]));

        let mut total = Counter::new();
        let states: Vec<ScalarValue> = [&mut a, &mut b]
            .into_iter()
            .map(|acc| acc.state().unwrap().remove(0))
            .collect();
        let state = ScalarValue::iter_to_array(states).unwrap();
        total.merge_batch(&[state]).unwrap();
        assert_eq!(
            counted(&mut total),
            pairs(&[("x", 3), ("", 1), (long, 2), ("y", 2)])
        );
    }

    #[test]
    fn other_text_types_are_counted_alike() {
        let dictionary: ArrayRef = Arc::new(
            vec![Some("b"), Some("a"), Some("b"), None]
                .into_iter()
                .collect::<datafusion::arrow::array::DictionaryArray<
                    datafusion::arrow::datatypes::Int32Type,
                >>(),
        );
        let mut acc = Counter::new();
        acc.update_batch(&[dictionary]).unwrap();
        acc.update_batch(&[cast(&strings(&[Some("a")]), &DataType::Utf8View).unwrap()])
            .unwrap();
        assert_eq!(counted(&mut acc), pairs(&[("a", 2), ("b", 2)]));
    }
}
