//! Periods side by side and ranks: what a summary's `compare` and `rank` add to its groups.
//!
//! They work on the groups once aggregated (all of them, before `having`, the order and the
//! page), so no arithmetic is left to the caller:
//! - `compare: {from, to}`: the plan grouped by the time field and kept the two periods; each
//!   group of the other keys becomes one row with each metric at both periods, the difference
//!   (`to − from`) and the percent change (`(to − from) / |from| × 100`, null where the earlier
//!   value is 0 or missing). A group present in one period only has nulls for the other.
//! - `compare: "previous"`: one row per period and group as grouped; each metric gets its
//!   change from the group's row of the period before it among the periods in the answer.
//! - `rank`: each group's place by the first metric, largest first, ties sharing the place
//!   (1, 2, 2, 4), within its period when the periods are rows; nulls have no rank.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, concat_batches, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::row::{RowConverter, SortField};
use tally_semantic::definition::{DatasetDef, FieldId};
use tally_semantic::resolve::{Compare, SummarizePlan};
use tally_storage::dataset::Codes;

/// Decimals of a percent change (as averages are rounded).
const PERCENT_DECIMALS: i32 = 2;

/// The groups with their metrics, collected (the groups are few: they are filtered, ordered
/// and paged here).
#[derive(Debug)]
pub struct Grouped {
    pub batches: Vec<RecordBatch>,
    pub schema: datafusion::arrow::datatypes::SchemaRef,
    /// The group keys, then the metric columns.
    pub columns: Vec<String>,
    pub group_names: Vec<String>,
    pub metric_columns: Vec<String>,
    /// Per group key, the values of its code column when grouped on codes.
    pub coded: Vec<Option<Codes>>,
    /// The fields of the group keys.
    pub keys: Vec<FieldId>,
    /// Which metric column the groups are ordered by when the call names no order (0: the
    /// first).
    pub sort_first: usize,
}

/// The group keys of the result: those grouped by, without the time field when two periods
/// are set side by side as columns.
pub fn result_keys(plan: &SummarizePlan) -> Vec<FieldId> {
    match &plan.compare {
        Some(Compare::Periods { field, .. }) => plan
            .group_by
            .iter()
            .copied()
            .filter(|g| g != field)
            .collect(),
        _ => plan.group_by.clone(),
    }
}

/// The groups with the comparison and the ranks a plan asks for (unchanged when it asks
/// neither).
pub fn apply(
    def: &DatasetDef,
    plan: &SummarizePlan,
    grouped: Grouped,
) -> Result<Grouped, ArrowError> {
    if plan.compare.is_none() && !plan.rank {
        return Ok(grouped);
    }
    let main: Vec<String> = plan.metrics.iter().map(|m| m.column(def)).collect();
    let batch = match grouped.batches.first() {
        Some(first) => concat_batches(&first.schema(), &grouped.batches)?,
        None => RecordBatch::new_empty(Arc::clone(&grouped.schema)),
    };
    let time = plan
        .compare
        .as_ref()
        .map(Compare::field)
        .or_else(|| def.time_field().filter(|t| plan.group_by.contains(t)));
    // The position of the time key among the keys, when the groups are per period.
    let time_key = time.and_then(|t| plan.group_by.iter().position(|g| *g == t));
    let periods = match time_key {
        Some(k) => Some(period_texts(
            &batch,
            &grouped.columns[k],
            grouped.coded[k].as_ref(),
        )?),
        None => None,
    };
    let mut out = match (&plan.compare, &periods, time_key) {
        (Some(c @ Compare::Periods { from, to, .. }), Some(periods), Some(k)) => side_by_side(
            &batch,
            &grouped,
            &main,
            k,
            periods,
            (&from.text(), &to.text()),
            (c, plan),
        )?,
        (Some(c @ Compare::Previous { .. }), Some(periods), Some(k)) => {
            previous(&batch, grouped, &main, k, periods, c)?
        }
        _ => Pivot::of(&batch, grouped),
    };
    if plan.rank
        && let Some(first) = main.first()
    {
        let ranked: Vec<(String, String)> = match &plan.compare {
            Some(c @ Compare::Periods { .. }) => {
                let values = c.columns(first, false);
                Compare::rank_columns(Some(c))
                    .into_iter()
                    .zip(values)
                    .collect()
            }
            _ => vec![("rank".to_string(), first.clone())],
        };
        // Within each period when the periods are rows.
        let within = match (&plan.compare, &periods) {
            (Some(Compare::Periods { .. }), _) => None,
            (_, Some(p)) => Some(p.clone()),
            _ => None,
        };
        for (name, of) in ranked {
            let values = out.column(&of)?;
            let ranks = rank(&values, within.as_deref())?;
            out.push(name, Arc::new(ranks));
        }
    }
    out.finish()
}

/// Groups being reshaped: their key columns (with their codes) and value columns.
struct Pivot {
    keys: Vec<(String, ArrayRef, Option<Codes>)>,
    values: Vec<(String, ArrayRef)>,
    key_fields: Vec<FieldId>,
    /// The value column sorted by when the call names no order (the first metric's, or its
    /// later period's).
    sort_first: usize,
}

impl Pivot {
    /// The groups as they are.
    fn of(batch: &RecordBatch, grouped: Grouped) -> Pivot {
        let n = grouped.group_names.len();
        let keys = grouped
            .columns
            .iter()
            .take(n)
            .zip(grouped.coded)
            .filter_map(|(name, coded)| {
                batch
                    .column_by_name(name)
                    .map(|c| (name.clone(), Arc::clone(c), coded))
            })
            .collect();
        let values = grouped
            .columns
            .iter()
            .skip(n)
            .filter_map(|name| {
                batch
                    .column_by_name(name)
                    .map(|c| (name.clone(), Arc::clone(c)))
            })
            .collect();
        Pivot {
            keys,
            values,
            key_fields: grouped.keys,
            sort_first: 0,
        }
    }

    fn column(&self, name: &str) -> Result<ArrayRef, ArrowError> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| Arc::clone(c))
            .ok_or_else(|| ArrowError::SchemaError(format!("no column {name}")))
    }

    fn push(&mut self, name: String, column: ArrayRef) {
        self.values.push((name, column));
    }

    /// Back into groups for `having`, the order and the page.
    fn finish(self) -> Result<Grouped, ArrowError> {
        let mut fields = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::new();
        let mut names = Vec::new();
        for (name, column, _) in &self.keys {
            fields.push(Field::new(name, column.data_type().clone(), true));
            columns.push(Arc::clone(column));
            names.push(name.clone());
        }
        let group_names = names.clone();
        let mut metric_columns = Vec::new();
        for (name, column) in &self.values {
            fields.push(Field::new(name, column.data_type().clone(), true));
            columns.push(Arc::clone(column));
            names.push(name.clone());
            metric_columns.push(name.clone());
        }
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        Ok(Grouped {
            batches: vec![batch],
            schema,
            columns: names,
            group_names,
            metric_columns,
            coded: self.keys.into_iter().map(|(_, _, c)| c).collect(),
            keys: self.key_fields,
            sort_first: self.sort_first,
        })
    }
}

/// Each row's period as text (a coded key read through its codes; a number as its digits).
fn period_texts(
    batch: &RecordBatch,
    name: &str,
    coded: Option<&Codes>,
) -> Result<Vec<Option<String>>, ArrowError> {
    let Some(column) = batch.column_by_name(name) else {
        return Err(ArrowError::SchemaError(format!("no column {name}")));
    };
    if let Some(codes) = coded {
        let as_codes = cast(column, &DataType::UInt64)?;
        let as_codes = as_codes
            .as_any()
            .downcast_ref::<datafusion::arrow::array::UInt64Array>()
            .ok_or_else(|| ArrowError::CastError(format!("codes of {name}")))?;
        return Ok(as_codes
            .iter()
            .map(|c| match c {
                None | Some(0) => None,
                Some(c) => codes.get(c as usize).map(str::to_string),
            })
            .collect());
    }
    let text = cast(column, &DataType::Utf8)?;
    let text = text
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| ArrowError::CastError(format!("text of {name}")))?;
    Ok(text.iter().map(|t| t.map(str::to_string)).collect())
}

/// Whether a period read from the data is the one asked for: as numbers when both are
/// (`2010` and `2010.0`), else as text.
fn same_period(data: &str, asked: &str) -> bool {
    match (data.trim().parse::<f64>(), asked.trim().parse::<f64>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => data.trim() == asked.trim(),
    }
}

/// The order of periods: numerically when every one is a number, else as text.
fn period_order(periods: &[Option<String>]) -> Vec<String> {
    let mut distinct: Vec<String> = periods.iter().flatten().cloned().collect();
    distinct.sort();
    distinct.dedup();
    let numbers: Option<Vec<f64>> = distinct
        .iter()
        .map(|p| p.trim().parse::<f64>().ok())
        .collect();
    if let Some(numbers) = numbers {
        let mut pairs: Vec<(f64, String)> = numbers.into_iter().zip(distinct).collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        return pairs.into_iter().map(|(_, p)| p).collect();
    }
    distinct
}

/// Identifies each row's group by its keys other than the time key (one group when there is
/// none): the group's number, in order of first appearance, and how many there are.
fn groups_without(
    batch: &RecordBatch,
    grouped_names: &[String],
    time_key: usize,
) -> Result<(Vec<usize>, usize), ArrowError> {
    let columns: Vec<ArrayRef> = grouped_names
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != time_key)
        .filter_map(|(_, name)| batch.column_by_name(name).cloned())
        .collect();
    if columns.is_empty() {
        return Ok((vec![0; batch.num_rows()], usize::from(batch.num_rows() > 0)));
    }
    let converter = RowConverter::new(
        columns
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )?;
    let rows = converter.convert_columns(&columns)?;
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut of_row = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let next = seen.len();
        let g = *seen.entry(rows.row(i).as_ref().to_vec()).or_insert(next);
        of_row.push(g);
    }
    Ok((of_row, seen.len()))
}

/// `compare: {from, to}`: one row per group of the other keys, each metric at both periods,
/// its change and percent change.
fn side_by_side(
    batch: &RecordBatch,
    grouped: &Grouped,
    main: &[String],
    time_key: usize,
    periods: &[Option<String>],
    (from, to): (&str, &str),
    (compare, plan): (&Compare, &SummarizePlan),
) -> Result<Pivot, ArrowError> {
    let n_keys = grouped.group_names.len();
    let (group_of, groups) = groups_without(batch, &grouped.group_names, time_key)?;
    let mut first: Vec<Option<u32>> = vec![None; groups];
    let mut at_from: Vec<Option<u32>> = vec![None; groups];
    let mut at_to: Vec<Option<u32>> = vec![None; groups];
    for (i, period) in periods.iter().enumerate() {
        let g = group_of[i];
        let slot = match period {
            Some(p) if same_period(p, from) => &mut at_from,
            Some(p) if same_period(p, to) => &mut at_to,
            _ => continue,
        };
        slot[g] = Some(i as u32);
        first[g].get_or_insert(i as u32);
    }
    // Groups met in neither period (none: the plan kept only these two) are left out.
    let kept: Vec<usize> = (0..groups).filter(|g| first[*g].is_some()).collect();
    let index =
        |v: &[Option<u32>]| UInt32Array::from(kept.iter().map(|g| v[*g]).collect::<Vec<_>>());
    let (first, at_from, at_to) = (index(&first), index(&at_from), index(&at_to));
    let mut keys = Vec::new();
    for (k, name) in grouped.group_names.iter().enumerate() {
        if k == time_key {
            continue;
        }
        if let Some(column) = batch.column_by_name(name) {
            keys.push((
                name.clone(),
                take(column, &first, None)?,
                grouped.coded[k].clone(),
            ));
        }
    }
    let mut values = Vec::new();
    for name in grouped.columns.iter().skip(n_keys) {
        let Some(column) = batch.column_by_name(name) else {
            continue;
        };
        let before = take(column, &at_from, None)?;
        let after = take(column, &at_to, None)?;
        let is_main = main.contains(name);
        let names = compare.columns(name, is_main);
        values.push((names[0].clone(), Arc::clone(&before)));
        values.push((names[1].clone(), Arc::clone(&after)));
        if is_main {
            values.push((names[2].clone(), difference(&after, &before)?));
            values.push((names[3].clone(), percent_change(&after, &before)?));
        }
    }
    let key_fields = result_keys(plan);
    // Sorted by default by the first metric at the later period.
    Ok(Pivot {
        keys,
        values,
        key_fields,
        sort_first: 1,
    })
}

/// `compare: "previous"`: each row's metrics beside their change from the group's row of the
/// period before.
fn previous(
    batch: &RecordBatch,
    grouped: Grouped,
    main: &[String],
    time_key: usize,
    periods: &[Option<String>],
    compare: &Compare,
) -> Result<Pivot, ArrowError> {
    let (group_of, _) = groups_without(batch, &grouped.group_names, time_key)?;
    let order = period_order(periods);
    let place: HashMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_str(), i))
        .collect();
    let mut at: HashMap<(usize, usize), u32> = HashMap::new();
    for (i, p) in periods.iter().enumerate() {
        if let Some(p) = p.as_deref().and_then(|p| place.get(p)) {
            at.insert((group_of[i], *p), i as u32);
        }
    }
    let before = UInt32Array::from(
        periods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let p = *p.as_deref().and_then(|p| place.get(p))?;
                at.get(&(group_of[i], p.checked_sub(1)?)).copied()
            })
            .collect::<Vec<_>>(),
    );
    let n_keys = grouped.group_names.len();
    let value_names: Vec<String> = grouped.columns.iter().skip(n_keys).cloned().collect();
    let mut pivot = Pivot::of(batch, grouped);
    let mut values = Vec::new();
    for name in value_names {
        let Some(column) = batch.column_by_name(&name) else {
            continue;
        };
        values.push((name.clone(), Arc::clone(column)));
        if main.contains(&name) {
            let names = compare.columns(&name, true);
            let earlier = take(column, &before, None)?;
            values.push((names[1].clone(), difference(column, &earlier)?));
            values.push((names[2].clone(), percent_change(column, &earlier)?));
        }
    }
    pivot.values = values;
    Ok(pivot)
}

/// `after − before`, exact for integers and decimals; for floats rounded to 12 significant
/// digits, so the binary noise of a subtraction (`1.27 − 1.29 = -0.020000000000000018`) is
/// not shown as a digit of the answer. Null where either is.
fn difference(after: &ArrayRef, before: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    use datafusion::arrow::compute::kernels::numeric::sub;
    match after.data_type() {
        DataType::Int64 | DataType::Decimal128(_, _) => sub(after, before),
        _ => {
            let a = cast(after, &DataType::Float64)?;
            let b = cast(before, &DataType::Float64)?;
            let d = sub(&a, &b)?;
            let rounded: Float64Array = floats(&d)?.iter().map(|v| v.map(significant)).collect();
            Ok(Arc::new(rounded))
        }
    }
}

/// `x` to 12 significant digits.
fn significant(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    format!("{x:.11e}").parse().unwrap_or(x)
}

/// `(after − before) / |before| × 100`, rounded as averages are; null where the earlier value
/// is 0 or either is missing.
fn percent_change(after: &ArrayRef, before: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    let a = cast(after, &DataType::Float64)?;
    let b = cast(before, &DataType::Float64)?;
    let (a, b) = (floats(&a)?, floats(&b)?);
    let scale = 10f64.powi(PERCENT_DECIMALS);
    let out: Float64Array = a
        .iter()
        .zip(b.iter())
        .map(|(a, b)| match (a, b) {
            (Some(a), Some(b)) if b != 0.0 && a.is_finite() && b.is_finite() => {
                Some(((a - b) / b.abs() * 100.0 * scale).round() / scale)
            }
            _ => None,
        })
        .collect();
    Ok(Arc::new(out))
}

fn floats(a: &ArrayRef) -> Result<&Float64Array, ArrowError> {
    a.as_any()
        .downcast_ref::<Float64Array>()
        .ok_or_else(|| ArrowError::CastError("not floats".into()))
}

/// Competition ranks, largest first (1, 2, 2, 4), among the rows of the same period when
/// `within` gives each row's period; null values have no rank.
fn rank(values: &ArrayRef, within: Option<&[Option<String>]>) -> Result<Int64Array, ArrowError> {
    let v = cast(values, &DataType::Float64)?;
    let v = floats(&v)?;
    let mut by_period: HashMap<Option<&str>, Vec<(f64, usize)>> = HashMap::new();
    for (i, x) in v.iter().enumerate() {
        if let Some(x) = x.filter(|x| !x.is_nan()) {
            let period = within.and_then(|w| w[i].as_deref());
            by_period.entry(period).or_default().push((x, i));
        }
    }
    let mut ranks: Vec<Option<i64>> = vec![None; v.len()];
    for (_, mut rows) in by_period {
        rows.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut place = 0i64;
        let mut last: Option<f64> = None;
        for (k, (x, i)) in rows.into_iter().enumerate() {
            if last != Some(x) {
                place = k as i64 + 1;
                last = Some(x);
            }
            ranks[i] = Some(place);
        }
    }
    Ok(Int64Array::from(ranks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_shared_by_ties_and_counted_within_each_period() {
        let values: ArrayRef = Arc::new(Float64Array::from(vec![
            Some(5.0),
            Some(9.0),
            Some(5.0),
            None,
            Some(1.0),
            Some(3.0),
        ]));
        let r = rank(&values, None).unwrap();
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![Some(2), Some(1), Some(2), None, Some(5), Some(4)]
        );
        let periods: Vec<Option<String>> = ["a", "a", "a", "b", "b", "b"]
            .iter()
            .map(|p| Some(p.to_string()))
            .collect();
        let r = rank(&values, Some(&periods)).unwrap();
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![Some(2), Some(1), Some(2), None, Some(2), Some(1)]
        );
    }

    #[test]
    fn a_percent_change_is_of_the_earlier_value_and_null_from_zero() {
        let after: ArrayRef = Arc::new(Int64Array::from(vec![Some(110), Some(5), Some(3), None]));
        let before: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(100),
            Some(0),
            Some(-6),
            Some(1),
        ]));
        let p = percent_change(&after, &before).unwrap();
        let p = floats(&p).unwrap();
        assert_eq!(
            p.iter().collect::<Vec<_>>(),
            vec![Some(10.0), None, Some(150.0), None]
        );
        let d = difference(&after, &before).unwrap();
        let d = d.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            vec![Some(10), Some(5), Some(9), None]
        );
        let after: ArrayRef = Arc::new(Float64Array::from(vec![1.27, 1.83]));
        let before: ArrayRef = Arc::new(Float64Array::from(vec![1.29, 1.82]));
        let d = difference(&after, &before).unwrap();
        assert_eq!(floats(&d).unwrap().values().to_vec(), vec![-0.02, 0.01]);
    }

    #[test]
    fn periods_are_ordered_as_numbers_when_they_are() {
        let p: Vec<Option<String>> = ["2010", "9", "2009", "2010"]
            .iter()
            .map(|s| Some(s.to_string()))
            .collect();
        assert_eq!(period_order(&p), vec!["9", "2009", "2010"]);
        assert!(same_period("2010.0", "2010"));
        assert!(!same_period("2010-04", "2010"));
    }
}
