//! Text read from files as views (`Utf8View`): the distinct values of a batch, found by
//! their views, so what is computed per value is computed once per distinct view.

use datafusion::arrow::array::Array;

/// The distinct views of a `Utf8View` array: per row, the number of its view among the
/// distinct ones (a null row: the number of distinct views), and the first row of each.
/// A value decoded from a Parquet dictionary page is the same view (buffer, offset, length)
/// in every row that holds it, and a short value is held in its view, so rows with the same
/// view hold the same text (the converse need not hold: the same text may be two views).
/// `None` when most rows are distinct (free text), where working row by row is cheaper.
pub(crate) fn distinct_views(
    array: &datafusion::arrow::array::StringViewArray,
) -> Option<(datafusion::arrow::array::UInt32Array, Vec<usize>)> {
    let n = array.len();
    let most = (n / 2).max(64);
    let views = array.views();
    let mut seen: hashbrown::HashMap<u128, u32> = hashbrown::HashMap::with_capacity(256);
    // A direct-mapped cache of the views last met in front of the map: a batch of a column
    // read from a dictionary has few distinct views over many rows, so nearly every row is a
    // hit that costs one multiply and one compare (the map's lookup was a fifth of a summary
    // read from the files). A slot holds a view and its number (`u32::MAX`: empty).
    let mut cache = [(0u128, u32::MAX); SLOTS];
    let mut firsts: Vec<usize> = Vec::new();
    let mut index: Vec<u32> = Vec::with_capacity(n);
    let nulls = array.nulls().filter(|n| n.null_count() > 0);
    let any_null = nulls.is_some();
    for (r, view) in views.iter().enumerate() {
        if nulls.is_some_and(|n| n.is_null(r)) {
            index.push(u32::MAX);
            continue;
        }
        let slot = &mut cache[slot_of(*view)];
        if slot.0 == *view && slot.1 != u32::MAX {
            index.push(slot.1);
            continue;
        }
        let next = firsts.len() as u32;
        let i = *seen.entry(*view).or_insert_with(|| {
            firsts.push(r);
            next
        });
        if firsts.len() > most {
            return None;
        }
        *slot = (*view, i);
        index.push(i);
    }
    if any_null {
        let null = firsts.len() as u32;
        for i in &mut index {
            if *i == u32::MAX {
                *i = null;
            }
        }
    }
    Some((datafusion::arrow::array::UInt32Array::from(index), firsts))
}

/// Slots of [`distinct_views`]'s cache.
const SLOTS: usize = 256;

/// A view's slot: its two halves folded and mixed by a multiply, the top 8 bits (a long
/// value's view differs from another's in its offset, a short one's in its bytes).
fn slot_of(view: u128) -> usize {
    let folded = (view as u64) ^ ((view >> 64) as u64);
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringViewBuilder;

    /// Many distinct values (more than the cache has slots, so slots are shared and
    /// overwritten), short and long, nulls and `""`, in an order that revisits them: every
    /// row's number names its own text.
    #[test]
    fn every_row_names_its_own_value_whatever_the_cache_holds() {
        let values: Vec<String> = (0..600)
            .map(|i| match i % 3 {
                0 => format!("v{i}"),
                1 => format!("手続の名前がとても長い値 {i}"),
                _ => String::new(),
            })
            .collect();
        let rows: Vec<Option<&str>> = (0..5000usize)
            .map(|r| {
                let k = (r * 7919 + r / 13) % values.len();
                (r % 17 != 0).then(|| values[k].as_str())
            })
            .collect();
        let mut builder = StringViewBuilder::new().with_deduplicate_strings();
        builder.extend(rows.iter().copied());
        let array = builder.finish();
        let (index, firsts) = super::distinct_views(&array).expect("under half distinct");
        assert!(
            firsts.len() > super::SLOTS,
            "{} distinct views",
            firsts.len()
        );
        assert_eq!(index.len(), rows.len());
        for (r, want) in rows.iter().enumerate() {
            let i = index.value(r) as usize;
            let got = (i < firsts.len()).then(|| array.value(firsts[i]));
            assert_eq!(got, *want, "row {r}");
        }
        // Each distinct view once among the firsts.
        let mut seen = std::collections::HashSet::new();
        for f in &firsts {
            assert!(seen.insert(array.views()[*f]), "view of row {f} twice");
        }
    }
}
