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
/// The codes of a call's [`crate::udf::StreamCodes`] for the views a thread met: a short
/// value (up to 12 bytes) is held in its view, so its view names its text in any batch and is
/// kept for the calls' next batches on this thread; a long value's view points into its
/// batch's buffers, so it is kept for that batch only. A row is then one lookup of 16 bytes
/// instead of a hash and a compare of its text (a summary by a column of 2,000 values spent a
/// third of its time numbering each batch's distinct views and looking them up by text).
pub(crate) struct ViewCodes {
    /// The short views' codes, per code table (the last few a thread used: a summary by two
    /// fields read from the files numbers each in a table of its own, batch after batch).
    short: Vec<(u64, hashbrown::HashMap<u128, u32, ViewHash>)>,
    long: hashbrown::HashMap<u128, u32, ViewHash>,
}

/// Code tables whose short views a thread keeps.
pub(crate) const TABLES_KEPT: usize = 4;

/// Short views kept per code table at most: a map of 4,096 views and codes takes about
/// 270 KiB (32 bytes an entry, in 8,192 buckets), so a thread holds about 1.1 MiB for its
/// [`TABLES_KEPT`] tables, and up to 540 KiB more for a batch's long views (a batch of 8,192
/// rows). Past it a table's new short values are kept for their batch, as long ones are.
const SHORT_KEPT: usize = 4096;

/// The longest value held in its view.
const INLINE: u32 = 12;

thread_local! {
    static VIEW_CODES: std::cell::RefCell<ViewCodes> = std::cell::RefCell::new(ViewCodes {
        short: Vec::new(),
        long: hashbrown::HashMap::default(),
    });
}

impl ViewCodes {
    /// Each row's code in the table `table` names (null and `""`: 0); `code_of` gives a
    /// value's code from the table itself, for a value this thread has none for.
    pub(crate) fn codes(
        array: &datafusion::arrow::array::StringViewArray,
        table: u64,
        mut code_of: impl FnMut(&str) -> datafusion::common::Result<u32>,
    ) -> datafusion::common::Result<datafusion::arrow::array::UInt32Array> {
        VIEW_CODES.with(|memo| {
            let mut memo = memo.borrow_mut();
            let memo = &mut *memo;
            // The table's short views first; a table not met lately takes the place of the
            // one used longest ago (its memory given back when it held many).
            match memo.short.iter().position(|(t, _)| *t == table) {
                Some(0) => {}
                Some(i) => memo.short[..=i].rotate_right(1),
                None => {
                    if memo.short.len() < TABLES_KEPT {
                        memo.short.push((table, hashbrown::HashMap::default()));
                    }
                    let last = memo.short.len() - 1;
                    let (t, kept) = &mut memo.short[last];
                    *t = table;
                    if kept.capacity() > 4 * 1024 {
                        *kept = hashbrown::HashMap::default();
                    } else {
                        kept.clear();
                    }
                    memo.short.rotate_right(1);
                }
            }
            memo.long.clear();
            let short = &mut memo.short[0].1;
            let nulls = array.nulls().filter(|n| n.null_count() > 0);
            let mut out = Vec::with_capacity(array.len());
            for (r, view) in array.views().iter().enumerate() {
                let len = *view as u32;
                if len == 0 || nulls.is_some_and(|n| n.is_null(r)) {
                    out.push(0);
                    continue;
                }
                if len <= INLINE
                    && let Some(code) = short.get(view)
                {
                    out.push(*code);
                    continue;
                }
                // Long views, and short ones past what a table keeps: for this batch.
                if let Some(code) = memo.long.get(view) {
                    out.push(*code);
                    continue;
                }
                let code = code_of(array.value(r))?;
                if len <= INLINE && short.len() < SHORT_KEPT {
                    short.insert(*view, code);
                } else {
                    memo.long.insert(*view, code);
                }
                out.push(code);
            }
            Ok(datafusion::arrow::array::UInt32Array::from(out))
        })
    }
}

/// Hashes a view: its halves folded by a wide multiply (a view is 16 bytes of text, or a
/// length, a prefix and where the rest lies; it needs no keyed hash).
#[derive(Default, Clone, Copy)]
struct ViewHash;

struct ViewHasher(u64);

impl std::hash::BuildHasher for ViewHash {
    type Hasher = ViewHasher;
    fn build_hasher(&self) -> ViewHasher {
        ViewHasher(0)
    }
}

impl std::hash::Hasher for ViewHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u128(&mut self, v: u128) {
        let folded = (v as u64) ^ ((v >> 64) as u64).rotate_left(29);
        let wide = u128::from(folded ^ self.0) * 0x9E37_79B9_7F4A_7C15;
        self.0 = (wide as u64) ^ ((wide >> 64) as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
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
