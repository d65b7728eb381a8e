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
    // read from the files). A slot holds a view, its number and the batch it was set in: the
    // cache is the thread's, kept from one batch to the next, so its 4,096 slots are not
    // cleared for every batch, and a column of a few thousand values still finds most of its
    // rows in it (with 256 slots, a column of 2,000 values missed nearly every time).
    CACHE
        .with(|cache| {
            let mut cache = cache.borrow_mut();
            let cache = &mut *cache;
            cache.batch = cache.batch.wrapping_add(1);
            if cache.batch == 0 {
                cache.slots.fill((0, 0, 0));
                cache.batch = 1;
            }
            let batch = cache.batch;
            let mut firsts: Vec<usize> = Vec::new();
            let mut index: Vec<u32> = Vec::with_capacity(n);
            let nulls = array.nulls().filter(|n| n.null_count() > 0);
            for (r, view) in views.iter().enumerate() {
                if nulls.is_some_and(|n| n.is_null(r)) {
                    index.push(u32::MAX);
                    continue;
                }
                let slot = &mut cache.slots[slot_of(*view)];
                if slot.2 == batch && slot.0 == *view {
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
                *slot = (*view, i, batch);
                index.push(i);
            }
            Some((index, firsts))
        })
        .map(|(mut index, firsts)| {
            if nulls_in(array) {
                let null = firsts.len() as u32;
                for i in &mut index {
                    if *i == u32::MAX {
                        *i = null;
                    }
                }
            }
            (datafusion::arrow::array::UInt32Array::from(index), firsts)
        })
}

fn nulls_in(array: &datafusion::arrow::array::StringViewArray) -> bool {
    array.nulls().is_some_and(|n| n.null_count() > 0)
}

/// The cache of [`distinct_views`], one a thread.
struct Cache {
    /// The batch being worked on (a slot set in another is empty).
    batch: u32,
    /// A view, its number in its batch, the batch.
    slots: Vec<(u128, u32, u32)>,
}

thread_local! {
    static CACHE: std::cell::RefCell<Cache> = std::cell::RefCell::new(Cache {
        batch: 0,
        slots: vec![(0, 0, 0); SLOTS],
    });
}

/// Slots of [`distinct_views`]'s cache.
const SLOTS: usize = 4096;

/// A view's slot: its two halves folded and mixed by a multiply, the top 12 bits (a long
/// value's view differs from another's in its offset, a short one's in its bytes).
fn slot_of(view: u128) -> usize {
    let folded = (view as u64) ^ ((view >> 64) as u64);
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}
#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringViewBuilder;

    /// Many distinct values (more than the cache has slots, so slots are shared and
    /// overwritten), short and long, nulls and `""`, in an order that revisits them: every
    /// row's number names its own text.
    #[test]
    fn every_row_names_its_own_value_whatever_the_cache_holds() {
        let values: Vec<String> = (0..9000)
            .map(|i| match i % 3 {
                0 => format!("v{i}"),
                1 => format!("手続の名前がとても長い値 {i}"),
                _ => String::new(),
            })
            .collect();
        let rows: Vec<Option<&str>> = (0..30000usize)
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
        // The next batch on this thread, the same short values in another order (the same
        // views, numbered otherwise): the slots the first batch set are not read as its own.
        let reversed: Vec<Option<&str>> = rows.iter().rev().copied().collect();
        let mut builder = StringViewBuilder::new();
        builder.extend(reversed.iter().copied());
        let again = builder.finish();
        let (index, firsts) = super::distinct_views(&again).expect("under half distinct");
        for (r, want) in reversed.iter().enumerate() {
            let i = index.value(r) as usize;
            let got = (i < firsts.len()).then(|| again.value(firsts[i]));
            assert_eq!(got, *want, "row {r} of the next batch");
        }
    }
}
