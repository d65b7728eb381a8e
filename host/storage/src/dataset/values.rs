//! The distinct values of a field with their record counts (parts, for a multi-value field),
//! their NFKC variants and the order of codes: counted from a prepared table's dictionaries,
//! or by a scan of the files, once per table.

use std::sync::Arc;

use datafusion::arrow::array::{Array as _, AsArray, StringArray};
use datafusion::arrow::datatypes::UInt32Type;
use datafusion::prelude::{SessionContext, ident};
use tally_semantic::definition::{DatasetDef, FieldId};

use super::prepared::{Prepared, ValueCounts, Variants};
use crate::error::StorageError;
use crate::store::Store;

impl Prepared {
    /// The distinct values of a text field grouped by their NFKC form.
    pub async fn nfkc_variants(
        &self,
        ctx: &SessionContext,
        def: &DatasetDef,
        field: FieldId,
    ) -> Result<Variants, StorageError> {
        if let Ok(cache) = self.variants.lock()
            && let Some(v) = cache.get(&field)
        {
            return Ok(Arc::clone(v));
        }
        let mut map: std::collections::HashMap<String, Vec<String>> =
            std::collections::HashMap::new();
        for (value, _) in self.distinct_values(ctx, def, field).await?.iter() {
            map.entry(tally_semantic::names::nfkc_value(value))
                .or_default()
                .push(value.clone());
        }
        for values in map.values_mut() {
            values.sort();
        }
        let map = Arc::new(map);
        if let Ok(mut cache) = self.variants.lock() {
            cache.insert(field, Arc::clone(&map));
        }
        Ok(map)
    }

    /// The rank of each code of a coded field in the sorted order of its values.
    pub fn code_ranks(&self, field: FieldId) -> Arc<Vec<u32>> {
        if let Ok(cache) = self.ranks.lock()
            && let Some(r) = cache.get(&field)
        {
            return Arc::clone(r);
        }
        let Some(values) = self.codes(field) else {
            return Arc::new(Vec::new());
        };
        let ranks = Arc::new(values.ranks());
        if let Ok(mut cache) = self.ranks.lock() {
            cache.insert(field, Arc::clone(&ranks));
        }
        ranks
    }

    /// The parts of a text field's values (split at `separator`, trimmed, blanks left out)
    /// with how many times each occurs, most first (ties by part): counted from a prepared
    /// table's dictionary, once per distinct value; `None` for data read from its files.
    pub fn part_occurrences(
        &self,
        ctx: &SessionContext,
        field: FieldId,
        separator: &str,
    ) -> Option<Result<Vec<(String, usize)>, StorageError>> {
        let store = self.store()?;
        let stop = crate::stop::Stop::of(ctx);
        let counted = code_counts(store, field, &stop).map(|(dictionary, per_code)| {
            part_occurrences(
                per_code
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(code, n)| (dictionary.value(code), *n)),
                separator,
            )
        });
        Some(counted)
    }

    /// Keeps `counted` (each distinct value of a text field with the records that hold it,
    /// counted elsewhere: one pass over data read from its files for every field) as
    /// [`Prepared::distinct_values`] gives it from then on.
    pub fn keep_values(
        &self,
        ctx: &SessionContext,
        def: &DatasetDef,
        field: FieldId,
        counted: &[(String, usize)],
    ) -> Result<(), StorageError> {
        let stop = crate::stop::Stop::of(ctx);
        let values = count_values(
            &def.fields[field].multi_value,
            &stop,
            counted.iter().map(|(v, n)| (v.as_str(), *n)),
        )?;
        if let Ok(mut cache) = self.values.lock() {
            cache.insert(field, Arc::new(values));
        }
        Ok(())
    }

    /// The distinct non-empty values of a text field with how many records have each, most
    /// frequent first (for multi-value fields: the trimmed parts, each counted once per
    /// record).
    pub async fn distinct_values(
        &self,
        ctx: &SessionContext,
        def: &DatasetDef,
        field: FieldId,
    ) -> Result<ValueCounts, StorageError> {
        if let Ok(cache) = self.values.lock()
            && let Some(v) = cache.get(&field)
        {
            return Ok(Arc::clone(v));
        }
        let separator = &def.fields[field].multi_value;
        let stop = crate::stop::Stop::of(ctx);
        let values = match self.store() {
            _ if def.fields[field].data_type.is_numeric() => Vec::new(),
            Some(store) => {
                let (dictionary, per_code) = code_counts(store, field, &stop)?;
                count_values(
                    separator,
                    &stop,
                    per_code
                        .iter()
                        .enumerate()
                        .map(|(code, n)| (dictionary.value(code), *n)),
                )?
            }
            None => {
                // Read from the files: each distinct value with its records, counted by the
                // scan (within the call's memory), then split as a dictionary is.
                use datafusion::functions_aggregate::expr_fn::count;
                let name = &def.fields[field].name;
                let table = self.table();
                let batches = ctx
                    .read_table(table.provider)?
                    .aggregate(
                        vec![ident(name)],
                        vec![count(datafusion::prelude::lit(1i64)).alias("n")],
                    )?
                    .collect()
                    .await
                    .map_err(|e| StorageError::computing(&def.id, e))?;
                let mut pairs: Vec<(String, usize)> = Vec::new();
                for b in &batches {
                    let text = datafusion::arrow::compute::cast(
                        b.column(0),
                        &datafusion::arrow::datatypes::DataType::Utf8,
                    )
                    .map_err(|e| StorageError::backend(&def.id, e))?;
                    let text = text.as_string::<i32>();
                    let n = datafusion::arrow::compute::cast(
                        b.column(1),
                        &datafusion::arrow::datatypes::DataType::UInt64,
                    )
                    .map_err(|e| StorageError::backend(&def.id, e))?;
                    let n = n.as_primitive::<datafusion::arrow::datatypes::UInt64Type>();
                    for r in 0..b.num_rows() {
                        if text.is_valid(r) {
                            pairs.push((text.value(r).to_string(), n.value(r) as usize));
                        }
                    }
                }
                count_values(
                    separator,
                    &stop,
                    pairs.iter().map(|(v, n)| (v.as_str(), *n)),
                )?
            }
        };
        let values = Arc::new(values);
        if let Ok(mut cache) = self.values.lock() {
            cache.insert(field, Arc::clone(&values));
        }
        Ok(values)
    }
}

/// The parts of `values` (split at `separator`, trimmed, blanks left out) with how many times
/// each occurs (a value held by `n` records counts its parts `n` times), most first, ties by
/// part.
pub fn part_occurrences<'a>(
    values: impl Iterator<Item = (&'a str, usize)>,
    separator: &str,
) -> Vec<(String, usize)> {
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (value, n) in values {
        for part in value
            .split(separator)
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            *counts.entry(part).or_default() += n;
        }
    }
    let mut parts: Vec<(String, usize)> = counts
        .into_iter()
        .map(|(p, n)| (p.to_string(), n))
        .collect();
    parts.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    parts
}

/// A text field's dictionary and how many records hold each of its codes (a null none).
fn code_counts(
    store: &Store,
    field: FieldId,
    stop: &crate::stop::Stop,
) -> Result<(StringArray, Vec<usize>), StorageError> {
    let dictionary = store.values(field)?;
    let column = store.column(field)?;
    let codes = dictionary.len();
    // The chunks shared among a thread a core (at most four), each counting into its own
    // table, the tables then added: a field of 7.5M records is a pass over 30 MB of codes.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(column.len().max(1));
    let count = |part: usize| -> Result<Vec<usize>, StorageError> {
        let mut per_code = vec![0usize; codes];
        for array in column.iter().skip(part).step_by(threads) {
            stop.check()?;
            if let Some(d) = array.as_dictionary_opt::<UInt32Type>() {
                let keys = d.keys();
                for (r, k) in keys.values().iter().enumerate() {
                    if keys.is_valid(r)
                        && let Some(n) = per_code.get_mut(*k as usize)
                    {
                        *n += 1;
                    }
                }
            }
        }
        Ok(per_code)
    };
    let parts: Vec<Result<Vec<usize>, StorageError>> = if threads == 1 {
        vec![count(0)]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (1..threads)
                .map(|part| scope.spawn(move || count(part)))
                .collect();
            let mut parts = vec![count(0)];
            parts.extend(handles.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(StorageError::internal("a counting thread panicked")))
            }));
            parts
        })
    };
    let mut parts = parts.into_iter();
    let mut per_code = parts.next().unwrap_or_else(|| Ok(vec![0; codes]))?;
    for part in parts {
        for (total, n) in per_code.iter_mut().zip(part?) {
            *total += n;
        }
    }
    Ok((dictionary, per_code))
}

/// Distinct values with how many records hold each, most frequent first; the parts of a
/// multi-value field counted once per record that has them. Ends early (`Err`) when the
/// call it is for is given up (`stop`), so nothing partial is kept.
fn count_values<'a>(
    separator: &Option<String>,
    stop: &crate::stop::Stop,
    values: impl Iterator<Item = (&'a str, usize)>,
) -> Result<Vec<(String, usize)>, StorageError> {
    let Some(_) = separator else {
        // Whole values: each is given once already (a dictionary's, or a grouping's), so they
        // are kept as they come, without a map of millions of them.
        let mut kept: Vec<(String, usize)> = Vec::new();
        for (i, (v, n)) in values.enumerate() {
            if i.is_multiple_of(crate::stop::EVERY) {
                stop.check()?;
            }
            if n > 0 && !v.trim().is_empty() {
                kept.push((v.to_string(), n));
            }
        }
        kept.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        return Ok(kept);
    };
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, (v, n)) in values.enumerate() {
        if i.is_multiple_of(crate::stop::EVERY) {
            stop.check()?;
        }
        if n == 0 {
            continue;
        }
        match separator {
            Some(sep) => {
                let mut seen = std::collections::HashSet::new();
                for part in v
                    .split(sep.as_str())
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                {
                    if seen.insert(part) {
                        *counts.entry(part).or_default() += n;
                    }
                }
            }
            None => {
                if !v.trim().is_empty() {
                    *counts.entry(v).or_default() += n;
                }
            }
        }
    }
    let mut values: Vec<(String, usize)> = counts
        .into_iter()
        .map(|(v, n)| (v.to_string(), n))
        .collect();
    values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(values)
}
