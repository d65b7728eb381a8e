//! Text search over a prepared table: `q` and `$contains` answered from each text field's
//! dictionary instead of every record's text.
//!
//! A prepared table holds each text field as 4-byte codes into one dictionary per field, and
//! the dictionary keeps, beside each value, its folded form (NFKC and lower case) where folding
//! changes it ([`crate::store::Dictionary`]), worked out once while the table was prepared and
//! kept with it in the cache. A search for a (folded) needle then takes two passes:
//!
//! 1. **The dictionary:** one substring scan (`memchr::memmem`, SIMD) over the bytes of all
//!    the values that are their own folded form, and one over the folded forms of the others.
//!    A hit is the value it lies in (found by the value offsets), kept only when it ends inside
//!    that value; the scan then resumes at the next value. This is substring semantics on the
//!    text as stored, so Japanese without spaces, mixed scripts, and full- and half-width
//!    forms match exactly as the row-by-row test (`tally_icontains`) matches them.
//! 2. **The records:** the codes of each field with at least one matching value are read
//!    once, in parallel over chunks, and every record holding a matching code is marked in a
//!    bitmap of the table's rows (one bit per record). A field with no matching value costs
//!    nothing. The plan then filters on the bitmap (`tally_rows_in` on the row number).
//!
//! The cost is therefore the dictionary's bytes once plus the codes of the fields that match,
//! never folding or testing a record's text, and the index is the folded side-table alone
//! (null where a value is its own folded form). Why not word postings or an n-gram index such
//! as a full-text library keeps: Japanese has no spaces, so words would break substring
//! semantics; n-gram postings per record would cost several times the data (a posting per
//! character per record); and the survey's text repeats, so its dictionaries are far smaller
//! than its records.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, StringArray};
use datafusion::arrow::datatypes::UInt32Type;
use tally_semantic::definition::FieldId;

use crate::error::StorageError;
use crate::store::Store;

/// A set of numbers below a bound (a table's rows, a dictionary's codes), one bit each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bits {
    words: Vec<u64>,
    len: usize,
}

impl Bits {
    /// No number below `len`.
    pub fn empty(len: usize) -> Bits {
        Bits {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// Every number below `len`.
    pub fn full(len: usize) -> Bits {
        let mut bits = Bits {
            words: vec![u64::MAX; len.div_ceil(64)],
            len,
        };
        if !len.is_multiple_of(64)
            && let Some(last) = bits.words.last_mut()
        {
            *last = (1u64 << (len % 64)) - 1;
        }
        bits
    }

    /// The bound.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn insert(&mut self, i: usize) {
        if i < self.len {
            self.words[i / 64] |= 1 << (i % 64);
        }
    }

    pub fn contains(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// How many numbers it holds.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether it holds none.
    pub fn none(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// Adds those of `other` (of the same bound).
    pub fn union_with(&mut self, other: &Bits) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= *b;
        }
    }

    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// Dictionaries of at least this many values are scanned on several threads.
const PARALLEL_VALUES: usize = 1 << 16;

/// The threads a search uses: one a core, at most eight.
fn threads() -> usize {
    std::thread::available_parallelism()
        .map(std::num::NonZeroUsize::get)
        .unwrap_or(1)
        .clamp(1, 8)
}

/// Calls `take` with each value of a string array (by its offsets into `data`) that holds
/// `finder`'s needle, once per value, in order; a value whose slot in `valid` is unset is
/// skipped.
fn values_holding(
    data: &[u8],
    offsets: &[i32],
    finder: &memchr::memmem::Finder<'_>,
    valid: &dyn Fn(usize) -> bool,
    take: &mut dyn FnMut(usize),
) {
    let n = offsets.len().saturating_sub(1);
    if n == 0 {
        return;
    }
    let (start, end) = (offsets[0] as usize, offsets[n] as usize);
    let len = finder.needle().len();
    let mut at = start;
    while at < end {
        let Some(found) = finder.find(&data[at..end]) else {
            break;
        };
        let pos = at + found;
        // The value the hit starts in: the last one starting at or before it (empty values
        // share their start with the next one).
        let c = offsets.partition_point(|o| *o as usize <= pos) - 1;
        let value_end = offsets[c + 1] as usize;
        if pos + len <= value_end {
            if valid(c) {
                take(c);
            }
            at = value_end;
        } else {
            // The hit runs into the next value: none in this one from here on.
            at = pos + 1;
        }
    }
}

/// The codes of a dictionary whose folded value contains `needle` (folded already: see
/// [`tally_semantic::names::fold`]); `folded` holds each value's folded form, null where the
/// value is its own. An empty needle is in every value.
pub fn matching_codes(
    values: &StringArray,
    folded: &StringArray,
    needle: &str,
) -> Result<Bits, StorageError> {
    let threads = if values.len() >= PARALLEL_VALUES {
        threads()
    } else {
        1
    };
    matching_codes_on(values, folded, needle, threads)
}

/// [`matching_codes`] on `threads` threads.
fn matching_codes_on(
    values: &StringArray,
    folded: &StringArray,
    needle: &str,
    threads: usize,
) -> Result<Bits, StorageError> {
    let n = values.len();
    if folded.len() != n {
        return Err(StorageError::internal(
            "a dictionary whose folded forms do not match its values",
        ));
    }
    if needle.is_empty() {
        return Ok(Bits::full(n));
    }
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    // Large dictionaries in contiguous ranges of codes, one a thread.
    let threads = threads.clamp(1, n.max(1));
    let ranges: Vec<(usize, usize)> = (0..threads)
        .map(|t| (n * t / threads, n * (t + 1) / threads))
        .collect();
    let scan = |(from, to): (usize, usize)| -> Vec<usize> {
        let mut found = Vec::new();
        // Values that are their own folded form, as they are.
        values_holding(
            values.value_data(),
            &values.value_offsets()[from..=to],
            &finder,
            &|c| folded.is_null(from + c),
            &mut |c| found.push(from + c),
        );
        // The others by their folded form.
        if folded.null_count() < n {
            values_holding(
                folded.value_data(),
                &folded.value_offsets()[from..=to],
                &finder,
                &|c| folded.is_valid(from + c),
                &mut |c| found.push(from + c),
            );
        }
        found
    };
    let found: Vec<Vec<usize>> = if ranges.len() == 1 {
        vec![scan(ranges[0])]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = ranges
                .iter()
                .map(|r| {
                    let scan = &scan;
                    s.spawn(move || scan(*r))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .map_err(|_| StorageError::internal("a search thread panicked"))
                })
                .collect::<Result<_, _>>()
        })?
    };
    let mut codes = Bits::empty(n);
    for c in found.iter().flatten() {
        codes.insert(*c);
    }
    Ok(codes)
}

/// Marks in `rows` every record of `store` whose text field `field` holds one of `codes`,
/// reading the field's chunks on up to `threads` threads.
fn mark_rows(
    store: &Store,
    field: FieldId,
    codes: &Bits,
    rows: &mut Bits,
    threads: usize,
    stop: &crate::stop::Stop,
) -> Result<(), StorageError> {
    let arrays = store.column(field)?;
    let chunks = store.chunks();
    if arrays.len() != chunks.len() {
        return Err(StorageError::internal(
            "a column whose chunks are not the table's",
        ));
    }
    let mark = |part: usize, into: &mut Bits| -> Result<(), StorageError> {
        for (c, (first, n)) in chunks.iter().enumerate().skip(part).step_by(threads) {
            stop.check()?;
            let dict = arrays[c]
                .as_dictionary_opt::<UInt32Type>()
                .ok_or_else(|| StorageError::internal("a text column that is not coded"))?;
            // A null keeps code 0 (`""`), which a needle matches only when it is empty.
            let keys = dict.keys().values();
            let first = *first as usize;
            for (i, k) in keys.iter().take(*n).enumerate() {
                if codes.contains(*k as usize) {
                    into.insert(first + i);
                }
            }
        }
        Ok(())
    };
    if threads <= 1 || chunks.len() < 2 {
        return mark(0, rows);
    }
    let parts: Vec<Result<Bits, StorageError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|part| {
                s.spawn(move || {
                    let mut own = Bits::empty(store.rows());
                    mark(part, &mut own).map(|()| own)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(StorageError::internal("a search thread panicked")))
            })
            .collect()
    });
    for part in parts {
        rows.union_with(&part?);
    }
    Ok(())
}

/// The records of `store` in which one of the text fields `fields` contains `needle` (folded
/// already), under the semantics of `tally_icontains` (null counts as `""`).
pub fn search(
    store: &Store,
    fields: &[FieldId],
    needle: &str,
    stop: &crate::stop::Stop,
) -> Result<Bits, StorageError> {
    let rows = store.rows();
    let threads = threads();
    let mut found = Bits::empty(rows);
    for field in fields {
        if !store.layout().is_text(field.index()) {
            return Err(StorageError::internal(format!(
                "field {} is not text in the prepared table",
                field.index()
            )));
        }
        let values = store.values(*field)?;
        let folded = store.folded(*field)?;
        let codes = matching_codes(&values, &folded, needle)?;
        if codes.none() {
            continue;
        }
        if codes.count() == codes.len() {
            return Ok(Bits::full(rows));
        }
        stop.check()?;
        mark_rows(store, *field, &codes, &mut found, threads, stop)?;
    }
    Ok(found)
}

/// A search's result kept for the calls that repeat it (paging through a `q`, a summary of
/// the same search).
pub type Found = Arc<Bits>;

#[cfg(test)]
mod tests {
    use super::*;

    fn dictionary(values: &[&str]) -> (StringArray, StringArray) {
        let values = StringArray::from(values.to_vec());
        let d = crate::store::Dictionary::of(values);
        (d.values, d.folded)
    }

    fn codes(values: &[&str], needle: &str) -> Vec<usize> {
        let (v, f) = dictionary(values);
        let needle = tally_semantic::names::fold(needle).into_owned();
        let bits = matching_codes(&v, &f, &needle).expect("codes");
        // Split among threads, the same codes.
        for threads in [2, 3, 7] {
            assert_eq!(
                matching_codes_on(&v, &f, &needle, threads).expect("codes"),
                bits,
                "{needle} on {threads} threads"
            );
        }
        (0..v.len()).filter(|c| bits.contains(*c)).collect()
    }

    #[test]
    fn a_needle_is_found_in_each_value_that_holds_it_and_only_there() {
        let values = ["", "電子申請", "申請", "電子", "子電", "電子メール電子"];
        assert_eq!(codes(&values, "電子"), vec![1, 3, 5]);
        // A hit across two values' boundary is not a hit: "請電" spans values 1 and 2 only
        // as bytes laid side by side.
        assert_eq!(codes(&["申請", "電子"], "請電"), Vec::<usize>::new());
        assert_eq!(codes(&values, ""), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(codes(&values, "x"), Vec::<usize>::new());
    }

    #[test]
    fn folded_values_match_by_their_folded_form_only() {
        // Full-width Latin, half-width kana, upper case: found by the usual form.
        let values = ["", "（ｅ－Ｔａｘ）", "ｶﾀｶﾅ", "E-TAX", "e-tax", "Ｅ"];
        assert_eq!(codes(&values, "e-tax"), vec![1, 3, 4]);
        assert_eq!(codes(&values, "カタカナ"), vec![2]);
        assert_eq!(codes(&values, "ｶﾀ"), vec![2]);
        // The raw bytes of a value that folds differently never match on their own.
        assert_eq!(codes(&values, "Ｔａｘ"), vec![1, 3, 4]);
        assert_eq!(codes(&values, "E"), vec![1, 3, 4, 5]);
    }

    /// Random text over pieces that fold in every way the survey's text does (and a few
    /// more), in a table of several chunks (two threads mark rows), against the row-by-row
    /// test's definition on every record (written out here: this module does not import the
    /// functions').
    #[test]
    fn a_search_finds_the_records_the_row_by_row_test_finds() {
        use crate::store::{Builder, CHUNK_ROWS, InMemory, Layout};
        use datafusion::arrow::array::RecordBatch;
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        const PIECES: &[&str] = &[
            "ア", "ｶ", "ｶﾞ", "ガ", "ﾞ", "電", "子", "申請", "A", "a", "Ｂ", "b", "１", "1", "（",
            "(", "）", " ", "\u{3000}", "Ⅻ", "xii", "㈱", "(株)", "ﬁ", "İ", "i",
        ];
        let seed = std::cell::Cell::new(0x39u64);
        let below = |n: usize| {
            let mut x = seed.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            seed.set(x);
            (x % n as u64) as usize
        };
        let text = |max: usize| -> String {
            let k = below(max);
            (0..k).map(|_| PIECES[below(PIECES.len())]).collect()
        };
        let def = tally_semantic::definition::load_definition(
            "d.yaml",
            "d",
            "title: t\nfields:\n- {name: a, role: attr}\n- {name: b, role: dim}\n",
        )
        .expect("definition")
        .dataset;
        let source = Schema::new(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("b", DataType::Utf8, true),
        ]);
        let layout = Arc::new(Layout::of(&def, &source).expect("layout"));
        let mut builder = Builder::new("d", Arc::clone(&layout));
        let mut sink = InMemory::default();
        let pool: Vec<String> = (0..300).map(|_| text(6)).collect();
        let mut cells: Vec<[Option<String>; 2]> = Vec::new();
        for _ in 0..3 {
            let batch: Vec<[Option<String>; 2]> = (0..CHUNK_ROWS + 777)
                .map(|r| {
                    let a = (r % 5 != 0).then(|| pool[below(pool.len())].clone());
                    let b = (r % 3 != 0).then(|| text(4));
                    [a, b]
                })
                .collect();
            let columns: Vec<datafusion::arrow::array::ArrayRef> = (0..2)
                .map(|c| {
                    Arc::new(batch.iter().map(|r| r[c].clone()).collect::<StringArray>())
                        as datafusion::arrow::array::ArrayRef
                })
                .collect();
            let rb = RecordBatch::try_new(Arc::new(source.clone()), columns).expect("batch");
            builder.push(&rb, &mut sink).expect("pushed");
            cells.extend(batch);
        }
        let (dictionaries, stats) = builder.finish(&mut sink).expect("finished");
        let store = Store::in_memory("d", layout, sink.chunks, dictionaries, stats).expect("store");
        assert!(store.chunks().len() > 2);
        let fields = [FieldId::at(0), FieldId::at(1)];
        for case in 0..200 {
            let typed = if case % 3 == 0 {
                text(3)
            } else {
                let v: Vec<char> = pool[below(pool.len())].chars().collect();
                let start = below(v.len().max(1));
                v.iter().skip(start).take(1 + below(3)).collect()
            };
            let needle = tally_semantic::names::fold(&typed).into_owned();
            for searched in [&fields[..], &fields[..1], &fields[1..]] {
                let found =
                    search(&store, searched, &needle, &crate::stop::Stop::new()).expect("searched");
                for (r, row) in cells.iter().enumerate() {
                    let want = searched.iter().any(|f| {
                        // As `tally_icontains` tests a record: null as "", folded first.
                        tally_semantic::names::fold(row[f.index()].as_deref().unwrap_or(""))
                            .contains(needle.as_str())
                    });
                    assert_eq!(found.contains(r), want, "{typed:?} in record {r}: {row:?}");
                }
            }
        }
    }

    #[test]
    fn bits_hold_what_was_put_in() {
        let mut b = Bits::empty(130);
        for i in [0, 63, 64, 129, 500] {
            b.insert(i);
        }
        assert_eq!(b.count(), 4);
        assert!(b.contains(129) && !b.contains(128) && !b.contains(500));
        let full = Bits::full(130);
        assert_eq!(full.count(), 130);
        assert!(!full.contains(130));
        let mut u = Bits::empty(130);
        u.union_with(&b);
        assert_eq!(u, b);
    }
}
