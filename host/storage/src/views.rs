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
    let mut firsts: Vec<usize> = Vec::new();
    let mut index: Vec<u32> = Vec::with_capacity(n);
    let nulls = array.nulls().filter(|n| n.null_count() > 0);
    let any_null = nulls.is_some();
    for (r, view) in views.iter().enumerate() {
        if nulls.is_some_and(|n| n.is_null(r)) {
            index.push(u32::MAX);
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
