//! Scalar functions the planner needs and DataFusion does not have in the exact form the
//! query semantics ask for.
//!
//! - `tally_parts(text, separator, keep_empty)`: the trimmed, non-empty parts of a
//!   multi-value cell as a list. With `keep_empty`, a cell without parts (null or blank) yields
//!   `[""]`, so exploding keeps the record in the empty group instead of dropping it.
//! - `tally_icontains(text, needle)`: substring under NFKC and case folding, where null counts
//!   as ""; `needle` is already folded by the caller. Written by hand because folding every
//!   value of every searched column would allocate, while most values (Japanese text) are
//!   already in folded form and are tested as they are.

use std::sync::Arc;

use std::sync::Mutex;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, BooleanBuilder, ListBuilder, StringBuilder, UInt32Array,
};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::lit;

/// The name of the parts function.
pub const PARTS: &str = "tally_parts";
pub const PART_COUNT: &str = "tally_part_count";
pub const ICONTAINS: &str = "tally_icontains";
pub const EXACT: &str = "tally_exact";

/// The list type `tally_parts` returns.
pub fn parts_type() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

fn scalar_str(v: &ColumnarValue, what: &str) -> Result<String> {
    match v {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(s))) => Ok(s.clone()),
        _ => Err(DataFusionError::Internal(format!(
            "{what} must be a string literal"
        ))),
    }
}

fn scalar_bool(v: &ColumnarValue, what: &str) -> Result<bool> {
    match v {
        ColumnarValue::Scalar(ScalarValue::Boolean(Some(b))) => Ok(*b),
        _ => Err(DataFusionError::Internal(format!(
            "{what} must be a boolean literal"
        ))),
    }
}

/// The parts of each value of a string array (`None`: null), as a list array.
fn parts_of<'a>(
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

/// What a function computed for the values of a dictionary, kept while its plan lives: a
/// dictionary shared by every batch of a table is worked on once, not once per batch.
#[derive(Debug, Default)]
struct Memo(Mutex<Vec<(ArrayRef, String, ArrayRef)>>);

impl Memo {
    fn get_or(
        &self,
        values: &ArrayRef,
        key: &str,
        make: impl FnOnce() -> Result<ArrayRef>,
    ) -> Result<ArrayRef> {
        if let Ok(memo) = self.0.lock()
            && let Some((_, _, out)) = memo
                .iter()
                .find(|(v, k, _)| Arc::ptr_eq(v, values) && k == key)
        {
            return Ok(Arc::clone(out));
        }
        let out = make()?;
        if let Ok(mut memo) = self.0.lock() {
            if memo.len() >= 4 {
                memo.remove(0);
            }
            memo.push((Arc::clone(values), key.to_string(), Arc::clone(&out)));
        }
        Ok(out)
    }
}

/// Per row of a dictionary array, the row of `per_value` (one row per dictionary value, then
/// one for a null) its key points at.
fn by_key(keys: &UInt32Array, per_value: &ArrayRef, values: usize) -> Result<ArrayRef> {
    let indices: UInt32Array = keys
        .iter()
        .map(|k| Some(k.map_or(values as u32, |k| k.min(values as u32))))
        .collect();
    Ok(datafusion::arrow::compute::take(
        per_value.as_ref(),
        &indices,
        None,
    )?)
}

/// The text of a column that is not a dictionary of `UInt32` codes, as strings.
fn strings_of(array: &ArrayRef) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::Utf8 | DataType::Utf8View => Ok(Arc::clone(array)),
        _ => Ok(datafusion::arrow::compute::cast(array, &DataType::Utf8)?),
    }
}

/// Value `i` of a string array (`Utf8` or `Utf8View`), `None` when null.
fn string_at<'a>(array: &'a ArrayRef) -> Box<dyn Fn(usize) -> Option<&'a str> + 'a> {
    use datafusion::arrow::array::AsArray;
    match array.data_type() {
        DataType::Utf8View => {
            let a = array.as_string_view();
            Box::new(move |i| a.is_valid(i).then(|| a.value(i)))
        }
        _ => {
            let a = array.as_string::<i32>();
            Box::new(move |i| a.is_valid(i).then(|| a.value(i)))
        }
    }
}

/// What a function does with text: given each row's value (`None`: null) and the rows.
type Each<'f> = dyn for<'a> Fn(&dyn Fn(usize) -> Option<&'a str>, usize) -> Result<ArrayRef> + 'f;

/// Runs `each` over a text argument: a dictionary's values once (memoised), then its rows by
/// key; any other text row by row. `each` gets a string accessor (None: null) and a length.
fn over_text(
    arg: &ColumnarValue,
    rows: usize,
    memo: &Memo,
    key: &str,
    each: &Each<'_>,
) -> Result<ColumnarValue> {
    use datafusion::arrow::array::AsArray;
    let array = arg.to_array(rows)?;
    let out = match array.as_dictionary_opt::<datafusion::arrow::datatypes::UInt32Type>() {
        Some(dict) => {
            let values = dict.values();
            let n = values.len();
            let per_value = memo.get_or(values, key, || {
                let strings = strings_of(values)?;
                let at = string_at(&strings);
                // One more row: what a null gives.
                each(&|i| if i < n { at(i) } else { None }, n + 1)
            })?;
            by_key(dict.keys(), &per_value, n)?
        }
        None => {
            let strings = strings_of(&array)?;
            // Text read from its files as views: a value decoded from a dictionary page is
            // one view however many rows hold it, so each distinct view is worked on once.
            match strings
                .as_string_view_opt()
                .and_then(|view| Some((view, crate::views::distinct_views(view)?)))
            {
                Some((view, (index, firsts))) => {
                    let n = firsts.len();
                    let per_value = each(&|i| (i < n).then(|| view.value(firsts[i])), n + 1)?;
                    datafusion::arrow::compute::take(per_value.as_ref(), &index, None)?
                }
                None => {
                    let at = string_at(&strings);
                    each(&*at, strings.len())?
                }
            }
        }
    };
    Ok(match arg {
        ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
        ColumnarValue::Array(_) => ColumnarValue::Array(out),
    })
}

/// `tally_parts(text, separator, keep_empty)`.
#[derive(Debug)]
struct Parts {
    signature: Signature,
    memo: Memo,
}

/// `tally_part_count(text, separator)`: how many parts `tally_parts` would give (0 for a
/// null or empty cell), with no list built: what a summary counts before it explodes, on
/// data read from its files and on a cluster's executors.
#[derive(Debug)]
struct PartCount {
    signature: Signature,
    memo: Memo,
}

/// `tally_icontains(text, folded needle, lowered)`.
#[derive(Debug)]
struct IContains {
    signature: Signature,
    memo: Memo,
}

macro_rules! same_by_name {
    ($t:ty) => {
        impl PartialEq for $t {
            fn eq(&self, _other: &Self) -> bool {
                true
            }
        }
        impl Eq for $t {}
        impl std::hash::Hash for $t {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                std::any::type_name::<$t>().hash(state);
            }
        }
    };
}
same_by_name!(Parts);
same_by_name!(PartCount);
same_by_name!(IContains);

/// Text of any string type (a dictionary kept as it is), then literals.
fn text_then(arg_types: &[DataType], rest: &[DataType], name: &str) -> Result<Vec<DataType>> {
    let Some((first, others)) = arg_types.split_first() else {
        return Err(DataFusionError::Plan(format!(
            "{name} takes {} arguments",
            rest.len() + 1
        )));
    };
    if others.len() != rest.len() {
        return Err(DataFusionError::Plan(format!(
            "{name} takes {} arguments",
            rest.len() + 1
        )));
    }
    let text = match first {
        DataType::Utf8 | DataType::Utf8View => first.clone(),
        DataType::Dictionary(k, v) if **k == DataType::UInt32 && **v == DataType::Utf8 => {
            first.clone()
        }
        _ => DataType::Utf8,
    };
    let mut out = vec![text];
    out.extend(rest.iter().cloned());
    Ok(out)
}

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

/// Containment under NFKC and case folding of an already folded needle
/// ([`tally_semantic::names::fold`]): `e-tax` is found in `（ｅ－Ｔａｘ）`.
pub fn icontains(haystack: &str, needle_folded: &str) -> bool {
    // Folding borrows text that is already folded (most Japanese text), so it costs a look at
    // each character and no copy. The text as it is cannot be tested first: it may hold the
    // needle where its folded form does not (`カﾞ` holds `カ`, folded it is `ガ`).
    tally_semantic::names::fold(haystack).contains(needle_folded)
}

impl ScalarUDFImpl for IContains {
    fn name(&self) -> &str {
        ICONTAINS
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        text_then(arg_types, &[DataType::Utf8, DataType::Boolean], ICONTAINS)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [text, needle, lowered] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{ICONTAINS} takes 3 arguments"
            )));
        };
        let needle = scalar_str(needle, "needle")?;
        // A column folded already: a plain substring test suffices.
        let lowered = scalar_bool(lowered, "lowered")?;
        let key = format!("{needle}\u{0}{lowered}");
        over_text(text, args.number_rows, &self.memo, &key, &|at, n| {
            let mut builder = BooleanBuilder::with_capacity(n);
            for i in 0..n {
                // Null counts as "".
                let value = at(i).unwrap_or("");
                builder.append_value(if lowered {
                    value.contains(needle.as_str())
                } else {
                    icontains(value, &needle)
                });
            }
            let out: BooleanArray = builder.finish();
            Ok(Arc::new(out) as ArrayRef)
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
struct PartCodes {
    signature: Signature,
    index: Arc<PartIndex>,
    /// Just the number of parts (`Int64`) instead of their codes.
    count: bool,
}
same_by_name!(PartCodes);

impl ScalarUDFImpl for PartCodes {
    fn name(&self) -> &str {
        if self.count {
            "tally_part_count"
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

/// The codes a call gives the text of a field read from its files, numbered as its values
/// are met (code 0: a missing value, null or `""`). A summary over data read at every call
/// groups on these integers instead of hashing and comparing every row's text, and reads the
/// values back from here once the groups are made; a row read as a view is looked up by its
/// view ([`crate::views::ViewCodes`]), so its text is hashed once per value a thread meets
/// (a short value) or once per batch (a long one). They live in this server's memory: a
/// plan sent to a cluster does not use them.
#[derive(Debug)]
pub struct StreamCodes {
    table: Mutex<CodeTable>,
    /// The last dictionaries coded ([`StreamCodes::code_dictionary`]) with their codes.
    dictionaries: Mutex<KeptDictionaries>,
    /// Names this table among those of every call (the threads' view memos are tagged with it).
    id: u64,
}

#[derive(Debug)]
struct CodeTable {
    codes: hashbrown::HashMap<String, u32>,
    values: Vec<String>,
}

impl CodeTable {
    /// The code of a present, non-empty value, numbering it if it was not met before.
    fn code_of(&mut self, v: &str) -> Result<u32> {
        if let Some(c) = self.codes.get(v) {
            return Ok(*c);
        }
        let c = u32::try_from(self.values.len())
            .map_err(|_| DataFusionError::Internal("more than 2^32 distinct values".into()))?;
        self.codes.insert(v.to_string(), c);
        self.values.push(v.to_string());
        Ok(c)
    }
}

impl Default for StreamCodes {
    fn default() -> StreamCodes {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        StreamCodes {
            table: Mutex::new(CodeTable {
                codes: hashbrown::HashMap::new(),
                values: vec![String::new()],
            }),
            dictionaries: Mutex::new(Vec::new()),
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl StreamCodes {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, CodeTable>> {
        self.table
            .lock()
            .map_err(|_| DataFusionError::Internal("the code table's lock is poisoned".into()))
    }

    /// The values numbered so far, by code (code 0 is `""`).
    pub fn values(&self) -> Result<datafusion::arrow::array::StringArray> {
        Ok(self.lock()?.values.iter().map(Some).collect())
    }

    /// The code of each value (`None`, `""`: 0), numbering the values not met before.
    fn code<'a>(&self, values: &dyn Fn(usize) -> Option<&'a str>, n: usize) -> Result<Vec<u32>> {
        let mut table = self.lock()?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(match values(i) {
                None | Some("") => 0,
                Some(v) => table.code_of(v)?,
            });
        }
        Ok(out)
    }

    /// The code of each row of `text` (any text type; null and `""`: 0).
    pub(crate) fn code_array(&self, text: &ArrayRef) -> Result<UInt32Array> {
        let views = datafusion::arrow::compute::cast(text, &DataType::Utf8View)?;
        match datafusion::arrow::array::AsArray::as_string_view_opt(&views) {
            Some(views) => self.code_views(views),
            None => Err(DataFusionError::Internal(format!(
                "codes of {} values",
                text.data_type()
            ))),
        }
    }

    /// The value of each code (null where the code is null).
    pub(crate) fn values_of(
        &self,
        codes: &UInt32Array,
    ) -> Result<datafusion::arrow::array::StringArray> {
        let table = self.lock()?;
        codes
            .iter()
            .map(|c| match c {
                None => Ok(None),
                Some(c) => table
                    .values
                    .get(c as usize)
                    .map(|v| Some(v.as_str()))
                    .ok_or_else(|| {
                        DataFusionError::Internal(format!("code {c} was never given out"))
                    }),
            })
            .collect()
    }

    /// [`StreamCodes::code`] of text read as views, looked up by view.
    fn code_views(&self, array: &datafusion::arrow::array::StringViewArray) -> Result<UInt32Array> {
        // The table is taken at the first value this thread has no code for, and held to
        // the batch's end.
        let mut held = None;
        crate::views::ViewCodes::codes(array, self.id, |v| {
            let table = match &mut held {
                Some(t) => t,
                None => held.insert(self.lock()?),
            };
            table.code_of(v)
        })
    }
}

impl StreamCodes {
    /// The code of each row of a dictionary array (null and `""`: 0). A column chunk's
    /// batches share its dictionary, so the codes of the last dictionaries met
    /// ([`DICTIONARIES_KEPT`]) are kept with them, for the call: a value is numbered once per
    /// chunk, when a row first holds it (a condition keeping few rows of a chunk numbers only
    /// theirs), and a row is then one look-up by its key.
    pub(crate) fn code_dictionary(
        &self,
        dict: &datafusion::arrow::array::DictionaryArray<datafusion::arrow::datatypes::UInt32Type>,
    ) -> Result<UInt32Array> {
        let keys = dict.keys();
        let codes = self.dictionary_codes(dict.values(), keys.values())?;
        let mut out: Vec<u32> = keys
            .values()
            .iter()
            .map(|k| codes.get(*k as usize).copied().unwrap_or(0))
            .collect();
        // A null's key is any number: its code is 0 (without a branch on each row).
        if let Some(nulls) = keys.nulls().filter(|n| n.null_count() > 0) {
            for (code, valid) in out.iter_mut().zip(nulls.iter()) {
                *code *= u32::from(valid);
            }
        }
        Ok(UInt32Array::from(out))
    }

    /// The codes of a dictionary's values, every one the keys `keys` name numbered (the
    /// others [`UNNUMBERED`]).
    fn dictionary_codes(&self, values: &ArrayRef, keys: &[u32]) -> Result<Arc<Vec<u32>>> {
        let data = values.to_data();
        let mut kept = self.lock_dictionaries()?;
        let at = match kept.iter().position(|(held, _)| held.ptr_eq(&data)) {
            Some(at) => at,
            None => {
                if kept.len() >= DICTIONARIES_KEPT {
                    kept.remove(0);
                }
                // The values are held with their codes, so their buffers are not freed and
                // reused for another dictionary while the codes are kept.
                kept.push((data.clone(), Arc::new(vec![UNNUMBERED; values.len()])));
                kept.len() - 1
            }
        };
        let codes = &mut kept[at].1;
        let numbered = |c: &Vec<u32>| {
            keys.iter()
                .all(|k| c.get(*k as usize).is_none_or(|c| *c != UNNUMBERED))
        };
        if !numbered(codes) {
            let text = datafusion::arrow::compute::cast(values, &DataType::Utf8)?;
            let text = datafusion::arrow::array::AsArray::as_string::<i32>(&text);
            let mut table = self.lock()?;
            let codes = Arc::make_mut(codes);
            for k in keys {
                let k = *k as usize;
                if codes.get(k) == Some(&UNNUMBERED) {
                    codes[k] = match text.is_valid(k).then(|| text.value(k)) {
                        None | Some("") => 0,
                        Some(v) => table.code_of(v)?,
                    };
                }
            }
        }
        Ok(Arc::clone(&kept[at].1))
    }

    fn lock_dictionaries(&self) -> Result<std::sync::MutexGuard<'_, KeptDictionaries>> {
        self.dictionaries
            .lock()
            .map_err(|_| DataFusionError::Internal("the dictionaries' lock is poisoned".into()))
    }
}

/// Dictionaries whose codes a call keeps ([`StreamCodes::code_dictionary`]): the column
/// chunks its threads read at once.
const DICTIONARIES_KEPT: usize = 16;

/// Dictionaries' values with their codes, oldest first.
type KeptDictionaries = Vec<(datafusion::arrow::array::ArrayData, Arc<Vec<u32>>)>;

/// The code of a dictionary value no row has held yet.
const UNNUMBERED: u32 = u32::MAX;
impl StreamCodes {
    /// Per value, the codes of its parts split by `separator` as `tally_parts` splits them
    /// (trimmed, non-empty), numbering the parts not met before; with `count`, just how many.
    fn parts<'a>(
        &self,
        values: &dyn Fn(usize) -> Option<&'a str>,
        n: usize,
        separator: &str,
        count: bool,
    ) -> Result<ArrayRef> {
        use datafusion::arrow::array::{Int64Builder, UInt32Builder};
        let split = |v: &'a str| v.split(separator).map(str::trim).filter(|p| !p.is_empty());
        if count {
            let mut counts = Int64Builder::with_capacity(n);
            for i in 0..n {
                counts.append_value(values(i).map_or(0, |v| split(v).count() as i64));
            }
            return Ok(Arc::new(counts.finish()));
        }
        let mut table = self.lock()?;
        let mut lists = ListBuilder::new(UInt32Builder::new());
        for i in 0..n {
            if let Some(v) = values(i) {
                for part in split(v) {
                    lists.values().append_value(table.code_of(part)?);
                }
            }
            lists.append(true);
        }
        Ok(Arc::new(lists.finish()))
    }
}

/// `tally_stream_part_codes(text)` (or `…_count`): a multi-value cell's parts as codes in a
/// call's [`StreamCodes`], for data read from its files (what [`PartIndex`] is for a prepared
/// table).
#[derive(Debug)]
struct StreamPartCodes {
    signature: Signature,
    codes: Arc<StreamCodes>,
    separator: String,
    count: bool,
}

impl PartialEq for StreamPartCodes {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.codes, &other.codes)
            && self.separator == other.separator
            && self.count == other.count
    }
}
impl Eq for StreamPartCodes {}
impl std::hash::Hash for StreamPartCodes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.codes), state);
        self.separator.hash(state);
        self.count.hash(state);
    }
}

impl ScalarUDFImpl for StreamPartCodes {
    fn name(&self) -> &str {
        if self.count {
            "tally_stream_part_count"
        } else {
            "tally_stream_part_codes"
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
        text_then(arg_types, &[], self.name())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [text] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{} takes 1 argument",
                self.name()
            )));
        };
        let memo = Memo::default();
        over_text(text, args.number_rows, &memo, "", &|at, n| {
            self.codes.parts(at, n, &self.separator, self.count)
        })
    }
}

/// `tally_code(text)`: the code of each row's text in a call's [`StreamCodes`].
#[derive(Debug)]
struct Code {
    signature: Signature,
    codes: Arc<StreamCodes>,
}

impl PartialEq for Code {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.codes, &other.codes)
    }
}
impl Eq for Code {}
impl std::hash::Hash for Code {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.codes), state);
    }
}

impl ScalarUDFImpl for Code {
    fn name(&self) -> &str {
        "tally_code"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::UInt32)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        text_then(arg_types, &[], "tally_code")
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [text] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(
                "tally_code takes 1 argument".into(),
            ));
        };
        if let ColumnarValue::Array(array) = text
            && let Some(view) = datafusion::arrow::array::AsArray::as_string_view_opt(array)
        {
            return Ok(ColumnarValue::Array(Arc::new(self.codes.code_views(view)?)));
        }
        if let ColumnarValue::Array(array) = text
            && let Some(dict) = datafusion::arrow::array::AsArray::as_dictionary_opt::<
                datafusion::arrow::datatypes::UInt32Type,
            >(array.as_ref())
        {
            return Ok(ColumnarValue::Array(Arc::new(
                self.codes.code_dictionary(dict)?,
            )));
        }
        let memo = Memo::default();
        over_text(text, args.number_rows, &memo, "", &|at, n| {
            Ok(Arc::new(UInt32Array::from(self.codes.code(at, n)?)) as ArrayRef)
        })
    }
}

/// `tally_rows_in(row)`: whether a row number is in a set found beforehand (a text search
/// through a prepared table's dictionaries, [`crate::search`]). Two calls are the same only
/// over the same set.
#[derive(Debug)]
struct RowsIn {
    signature: Signature,
    rows: crate::search::Found,
}

impl PartialEq for RowsIn {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.rows, &other.rows)
    }
}
impl Eq for RowsIn {}
impl std::hash::Hash for RowsIn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.rows), state);
    }
}

/// The name of the row-set function.
pub const ROWS_IN: &str = "tally_rows_in";

impl ScalarUDFImpl for RowsIn {
    fn name(&self) -> &str {
        ROWS_IN
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() != 1 {
            return Err(DataFusionError::Plan(format!("{ROWS_IN} takes 1 argument")));
        }
        Ok(vec![DataType::UInt64])
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::UInt64Type;
        let [row] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{ROWS_IN} takes 1 argument"
            )));
        };
        let array = row.to_array(args.number_rows)?;
        let rows = array
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| DataFusionError::Internal(format!("{ROWS_IN} reads row numbers")))?;
        let numbers = rows.values();
        let found = datafusion::arrow::buffer::BooleanBuffer::collect_bool(numbers.len(), |i| {
            usize::try_from(numbers[i]).is_ok_and(|r| self.rows.contains(r))
        });
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::new(
            found, None,
        ))))
    }
}

/// What `tally_lookup` maps: each key (a value of the key field, as text) to its parent, for
/// a field looked up through a relation or a roll-up. Built once per table read; a plan
/// holds it whole, so planning does not grow with its size (a `CASE` of one branch per key
/// did, by seconds at 100,000 keys).
#[derive(Debug)]
pub struct LookupTable {
    index: std::collections::HashMap<String, u32>,
    parents: Vec<String>,
    keys: usize,
}

impl LookupTable {
    /// The table of `pairs` (key, parent); a key given twice keeps its first parent.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> LookupTable {
        let mut index = std::collections::HashMap::new();
        let mut parents: Vec<String> = Vec::new();
        let mut at: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
        for (key, parent) in pairs {
            if index.contains_key(&key) {
                continue;
            }
            let p = *at.entry(parent.clone()).or_insert_with(|| {
                parents.push(parent);
                (parents.len() - 1) as u32
            });
            index.insert(key, p);
        }
        let keys = index.len();
        LookupTable {
            index,
            parents,
            keys,
        }
    }

    /// The parent of `key`.
    pub fn parent(&self, key: &str) -> Option<&str> {
        self.index
            .get(key)
            .map(|p| self.parents[*p as usize].as_str())
    }

    pub fn len(&self) -> usize {
        self.keys
    }

    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// The table as JSON (`[[key, parent], …]`, keys in order), how a plan sent to a cluster
    /// carries it.
    pub fn to_json(&self) -> Vec<u8> {
        let mut pairs: Vec<(&str, &str)> = self
            .index
            .iter()
            .map(|(k, p)| (k.as_str(), self.parents[*p as usize].as_str()))
            .collect();
        pairs.sort_unstable();
        serde_json::to_vec(&pairs).unwrap_or_default()
    }

    pub fn from_json(bytes: &[u8]) -> Result<LookupTable> {
        let pairs: Vec<(String, String)> = serde_json::from_slice(bytes).map_err(|e| {
            DataFusionError::Internal(format!("a lookup table that is not one: {e}"))
        })?;
        Ok(LookupTable::new(pairs))
    }
}

/// `tally_lookup(key)`: the parent of each key in a [`LookupTable`], null where it has none.
/// Two calls are the same only over the same table.
#[derive(Debug)]
struct Lookup {
    signature: Signature,
    table: Arc<LookupTable>,
    memo: Memo,
}

impl PartialEq for Lookup {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.table, &other.table)
    }
}
impl Eq for Lookup {}
impl std::hash::Hash for Lookup {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.table), state);
    }
}

/// The name of the lookup function.
pub const LOOKUP: &str = "tally_lookup";

impl ScalarUDFImpl for Lookup {
    fn name(&self) -> &str {
        LOOKUP
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        text_then(arg_types, &[], LOOKUP)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [key] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{LOOKUP} takes 1 argument"
            )));
        };
        // A dictionary's values are looked up once, then its rows by code.
        over_text(key, args.number_rows, &self.memo, "", &|at, n| {
            let parents: datafusion::arrow::array::StringArray = (0..n)
                .map(|i| at(i).and_then(|k| self.table.parent(k)))
                .collect();
            Ok(Arc::new(parents) as ArrayRef)
        })
    }
}

/// `tally_exact(integer)`: an integer as a 128-bit decimal of scale 0, what an exact sum
/// adds. Every 64-bit integer fits 38 digits, so no value is checked against the precision,
/// as a cast checks each (a cast was a tenth of a summary's time); a float or decimal column
/// (an integer field read from one) is cast.
#[derive(Debug)]
struct Exact {
    signature: Signature,
}
same_by_name!(Exact);

impl ScalarUDFImpl for Exact {
    fn name(&self) -> &str {
        EXACT
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Decimal128(38, 0))
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [DataType::UInt64] => Ok(vec![DataType::UInt64]),
            [t] if t.is_integer() || t.is_null() => Ok(vec![DataType::Int64]),
            // An integer field read from floats or decimals: cast as before.
            [t] if t.is_numeric() => Ok(vec![t.clone()]),
            _ => Err(DataFusionError::Plan(format!(
                "{EXACT} takes 1 integer argument, not {arg_types:?}"
            ))),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::{AsArray, Decimal128Array};
        use datafusion::arrow::datatypes::{Int64Type, UInt64Type};
        let [value] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{EXACT} takes 1 argument"
            )));
        };
        let array = value.to_array(args.number_rows)?;
        let out: Decimal128Array = if let Some(a) = array.as_primitive_opt::<Int64Type>() {
            a.unary(i128::from)
        } else if let Some(a) = array.as_primitive_opt::<UInt64Type>() {
            a.unary(i128::from)
        } else {
            // As the logical cast did: a value that is no integer (NaN, an infinity) or
            // past 38 digits fails the call instead of leaving the sum as a null.
            let options = datafusion::arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            };
            datafusion::arrow::compute::cast_with_options(
                &array,
                &DataType::Decimal128(38, 0),
                &options,
            )?
            .as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
            .clone()
        };
        let out: ArrayRef = Arc::new(out.with_precision_and_scale(38, 0)?);
        Ok(match value {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(out),
        })
    }
}

/// Builds the functions' expressions. Each expression gets an instance of its own, so what it
/// keeps of a dictionary lives as long as the plan that uses it.
#[derive(Debug, Clone, Default)]
pub struct Functions;

fn user_defined() -> Signature {
    Signature::user_defined(Volatility::Immutable)
}

impl Functions {
    /// Tally's own function of that name, made anew, when it carries nothing but its name
    /// (what an executor of a cluster rebuilds a plan's calls from). The part codes of a
    /// prepared table's index are not among them: they live in this server's memory.
    pub fn by_name(name: &str) -> Option<Arc<ScalarUDF>> {
        match name {
            PARTS => Some(Arc::new(ScalarUDF::new_from_impl(Parts {
                signature: user_defined(),
                memo: Memo::default(),
            }))),
            PART_COUNT => Some(Arc::new(ScalarUDF::new_from_impl(PartCount {
                signature: user_defined(),
                memo: Memo::default(),
            }))),
            ICONTAINS => Some(Arc::new(ScalarUDF::new_from_impl(IContains {
                signature: user_defined(),
                memo: Memo::default(),
            }))),
            EXACT => Some(Arc::new(ScalarUDF::new_from_impl(Exact {
                signature: user_defined(),
            }))),
            _ => None,
        }
    }

    /// Whether `name` is one of Tally's functions (those [`Functions::by_name`] does not
    /// make cannot be sent to a cluster).
    pub fn is_tally(name: &str) -> bool {
        name.starts_with("tally_")
    }

    pub fn parts(&self, text: Expr, separator: &str, keep_empty: bool) -> Expr {
        let udf = ScalarUDF::new_from_impl(Parts {
            signature: user_defined(),
            memo: Memo::default(),
        });
        udf.call(vec![text, lit(separator), lit(keep_empty)])
    }

    /// How many parts [`Functions::parts`] would give each cell (0: none), without the list.
    pub fn part_count_of(&self, text: Expr, separator: &str) -> Expr {
        ScalarUDF::new_from_impl(PartCount {
            signature: user_defined(),
            memo: Memo::default(),
        })
        .call(vec![text, lit(separator)])
    }

    /// The codes of a multi-value field's parts, from its index (prepared data only).
    pub fn part_codes(&self, text: Expr, index: &Arc<PartIndex>) -> Expr {
        ScalarUDF::new_from_impl(PartCodes {
            signature: user_defined(),
            index: Arc::clone(index),
            count: false,
        })
        .call(vec![text])
    }

    /// How many parts a multi-value cell has, from its field's index.
    pub fn part_count(&self, text: Expr, index: &Arc<PartIndex>) -> Expr {
        ScalarUDF::new_from_impl(PartCodes {
            signature: user_defined(),
            index: Arc::clone(index),
            count: true,
        })
        .call(vec![text])
    }

    /// An integer as the 128-bit decimal an exact sum adds (`tally_exact`).
    pub fn exact(&self, integer: Expr) -> Expr {
        ScalarUDF::new_from_impl(Exact {
            signature: user_defined(),
        })
        .call(vec![integer])
    }

    /// The code of each row's text in `codes` (data read from its files; not for a cluster).
    pub fn code(&self, text: Expr, codes: &Arc<StreamCodes>) -> Expr {
        ScalarUDF::new_from_impl(Code {
            signature: user_defined(),
            codes: Arc::clone(codes),
        })
        .call(vec![text])
    }

    /// The codes of a multi-value cell's parts in `codes`, split by `separator` (data read
    /// from its files; not for a cluster); with `count`, how many parts it has.
    pub fn stream_part_codes(
        &self,
        text: Expr,
        codes: &Arc<StreamCodes>,
        separator: &str,
        count: bool,
    ) -> Expr {
        ScalarUDF::new_from_impl(StreamPartCodes {
            signature: user_defined(),
            codes: Arc::clone(codes),
            separator: separator.to_string(),
            count,
        })
        .call(vec![text])
    }

    /// The parent of `key` (text) in `table`, null where it has none.
    pub fn lookup(&self, key: Expr, table: &Arc<LookupTable>) -> Expr {
        Functions::lookup_udf(table).call(vec![key])
    }

    /// The lookup function over `table` (what a plan received from a server rebuilds).
    pub fn lookup_udf(table: &Arc<LookupTable>) -> ScalarUDF {
        ScalarUDF::new_from_impl(Lookup {
            signature: user_defined(),
            table: Arc::clone(table),
            memo: Memo::default(),
        })
    }

    /// The table a lookup function maps with (to send it with a plan).
    pub fn lookup_table(udf: &ScalarUDF) -> Option<Arc<LookupTable>> {
        udf.inner()
            .downcast_ref::<Lookup>()
            .map(|l| Arc::clone(&l.table))
    }

    /// Whether a row number (the hidden row column of a prepared table) is among `rows`.
    pub fn rows_in(&self, row: Expr, rows: &crate::search::Found) -> Expr {
        ScalarUDF::new_from_impl(RowsIn {
            signature: user_defined(),
            rows: Arc::clone(rows),
        })
        .call(vec![row])
    }

    /// Substring test under NFKC and case folding; `needle` is folded here.
    pub fn icontains(&self, text: Expr, needle: &str) -> Expr {
        let folded = tally_semantic::names::fold(needle).into_owned();
        let udf = ScalarUDF::new_from_impl(IContains {
            signature: user_defined(),
            memo: Memo::default(),
        });
        udf.call(vec![text, lit(folded), lit(false)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringArray;

    #[test]
    fn icontains_ignores_case_and_handles_japanese() {
        assert!(icontains("電子メール等", "メール"));
        assert!(icontains("Electronic MAIL", "mail"));
        assert!(!icontains("電子メール", "郵送"));
        assert!(icontains("", ""));
        assert!(!icontains("", "x"));
        // Full-width text is found by its usual form (issue 15).
        assert!(icontains(
            "国税電子申告・納税システム（ｅ－Ｔａｘ）",
            "e-tax"
        ));
        assert!(icontains("押印＋印鑑証明", "押印+印鑑"));
        // A half-width voiced mark composes with the letter before it: `カﾞ` is `ガ`, which
        // does not hold `カ`.
        assert!(!icontains("カﾞ", "カ"));
        assert!(icontains("カﾞ", "ガ"));
        assert!(!icontains("e\u{301}", "e"));
    }

    /// Text read from files as views: rows holding the same view are worked on once, and the
    /// answer per row is the same as row by row (nulls, short values held in their views,
    /// long ones in a buffer).
    #[test]
    fn distinct_views_answer_as_row_by_row() {
        use datafusion::arrow::array::StringViewArray;
        let long = "手続が行われるイベント;引越し;結婚";
        let rows: Vec<Option<&str>> = (0..200)
            .map(|i| match i % 5 {
                0 => None,
                1 => Some("a; b"),
                2 => Some(long),
                3 => Some(""),
                _ => Some("結婚;死亡"),
            })
            .collect();
        // As decoded from a dictionary page: a long value is one view in every row.
        let mut builder =
            datafusion::arrow::array::StringViewBuilder::new().with_deduplicate_strings();
        builder.extend(rows.iter().copied());
        let view = builder.finish();
        let (index, firsts) = crate::views::distinct_views(&view).expect("few distinct views");
        assert_eq!(firsts.len(), 4, "{firsts:?}");
        // Each long value a view of its own (as a builder without a dictionary makes them):
        // still the same answers, through more distinct views.
        let copied = StringViewArray::from(rows.clone());
        let (index_copied, firsts_copied) =
            crate::views::distinct_views(&copied).expect("under half distinct");
        assert!(firsts_copied.len() > 4);
        for (r, want) in rows.iter().enumerate() {
            let i = index_copied.value(r) as usize;
            let got = (i < firsts_copied.len()).then(|| copied.value(firsts_copied[i]));
            assert_eq!(got, *want, "row {r}");
        }
        for (r, want) in rows.iter().enumerate() {
            let i = index.value(r) as usize;
            let got = (i < firsts.len()).then(|| view.value(firsts[i]));
            assert_eq!(got, *want, "row {r}");
        }
        // Mostly distinct: row by row instead.
        let free: Vec<String> = (0..200).map(|i| format!("value number {i}")).collect();
        assert!(
            crate::views::distinct_views(&StringViewArray::from_iter_values(free.iter())).is_none()
        );
        // Parts and codes over views agree with plain strings.
        let plain = StringArray::from(rows.clone());
        let as_parts = |a: ArrayRef| parts_rows_of(ColumnarValue::Array(a), rows.len());
        assert_eq!(
            as_parts(Arc::new(view.clone())),
            as_parts(Arc::new(plain.clone()))
        );
        let codes = Arc::new(StreamCodes::default());
        let udf = Code {
            signature: user_defined(),
            codes: Arc::clone(&codes),
        };
        let run = |a: ArrayRef| -> Vec<Option<String>> {
            let out = udf
                .invoke_with_args(ScalarFunctionArgs {
                    args: vec![ColumnarValue::Array(a)],
                    arg_fields: vec![Arc::new(Field::new("t", DataType::Utf8View, true))],
                    number_rows: rows.len(),
                    return_field: Arc::new(Field::new("c", DataType::UInt32, false)),
                    config_options: Arc::new(Default::default()),
                })
                .expect("codes")
                .to_array(rows.len())
                .expect("array");
            let values = codes.values().expect("values");
            let out = out.as_any().downcast_ref::<UInt32Array>().expect("u32");
            out.values()
                .iter()
                .map(|c| (*c != 0).then(|| values.value(*c as usize).to_string()))
                .collect()
        };
        let want: Vec<Option<String>> = rows
            .iter()
            .map(|v| v.filter(|v| !v.is_empty()).map(str::to_string))
            .collect();
        assert_eq!(run(Arc::new(view)), want);
        assert_eq!(run(Arc::new(plain)), want);
        assert_eq!(codes.values().expect("values").len(), 4);
    }

    /// Codes of dictionary arrays (text read from its files as a column chunk stores it):
    /// batches sharing a chunk's dictionary number its values once, another chunk's
    /// dictionary holding some of the same values gives them the same codes, and a null key,
    /// a null value and `""` are code 0.
    #[test]
    fn codes_of_dictionary_arrays_name_each_rows_text_and_are_made_once_per_dictionary() {
        use datafusion::arrow::array::{DictionaryArray, UInt32Array as Keys};
        use datafusion::arrow::datatypes::UInt32Type;
        let codes = StreamCodes::default();
        let first: ArrayRef = Arc::new(StringArray::from(vec![
            Some("国土交通省"),
            Some(""),
            Some("所管12"),
            None,
        ]));
        let batch = |values: &ArrayRef, keys: Vec<Option<u32>>| {
            DictionaryArray::<UInt32Type>::try_new(Keys::from(keys), Arc::clone(values))
                .expect("dictionary")
        };
        let text_of = |c: u32| -> Option<String> {
            let values = codes.values().expect("values");
            (c != 0).then(|| values.value(c as usize).to_string())
        };
        let a = codes
            .code_dictionary(&batch(
                &first,
                vec![Some(0), Some(2), None, Some(1), Some(3), Some(0)],
            ))
            .expect("codes");
        let got: Vec<Option<String>> = a.values().iter().map(|c| text_of(*c)).collect();
        let want = |v: &[Option<&str>]| v.iter().map(|t| t.map(str::to_string)).collect::<Vec<_>>();
        assert_eq!(
            got,
            want(&[
                Some("国土交通省"),
                Some("所管12"),
                None,
                None,
                None,
                Some("国土交通省")
            ])
        );
        // The next batch of the chunk: the same dictionary, no more values numbered.
        let b = codes
            .code_dictionary(&batch(&first, vec![Some(2), Some(2), Some(0)]))
            .expect("codes");
        assert_eq!(b.values().as_ref(), &[a.value(1), a.value(1), a.value(0)]);
        assert_eq!(codes.lock_dictionaries().expect("lock").len(), 1);
        // Another chunk: its own dictionary, a value met before keeps its code.
        let second: ArrayRef =
            Arc::new(StringArray::from(vec![Some("デジタル庁"), Some("所管12")]));
        let c = codes
            .code_dictionary(&batch(&second, vec![Some(1), Some(0)]))
            .expect("codes");
        assert_eq!(c.value(0), a.value(1));
        assert_eq!(text_of(c.value(1)).as_deref(), Some("デジタル庁"));
        assert_eq!(codes.lock_dictionaries().expect("lock").len(), 2);
        // More chunks than are kept: the oldest is let go, codes stay the table's.
        for k in 0..DICTIONARIES_KEPT + 3 {
            let values: ArrayRef =
                Arc::new(StringArray::from(vec![format!("値{k}"), "所管12".into()]));
            let d = codes
                .code_dictionary(&batch(&values, vec![Some(1), Some(0)]))
                .expect("codes");
            assert_eq!(d.value(0), a.value(1));
            assert_eq!(text_of(d.value(1)), Some(format!("値{k}")));
        }
        assert_eq!(
            codes.lock_dictionaries().expect("lock").len(),
            DICTIONARIES_KEPT
        );
        // A chunk of which a condition kept one row: only that row's value is numbered.
        let before = codes.values().expect("values").len();
        let wide: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..1000).map(|k| format!("法令{k}")),
        ));
        let e = codes
            .code_dictionary(&batch(&wide, vec![Some(5)]))
            .expect("codes");
        assert_eq!(text_of(e.value(0)).as_deref(), Some("法令5"));
        assert_eq!(codes.values().expect("values").len(), before + 1);
    }

    /// Codes by view, batch after batch, from more code tables than a thread keeps, each
    /// batch's views built anew (a long value's view names another buffer in each): every
    /// row's code names its own text in its own table.
    #[test]
    fn codes_by_view_name_each_rows_text_across_batches_and_tables() {
        use datafusion::arrow::array::StringViewBuilder;
        let tables: Vec<Arc<StreamCodes>> = (0..crate::views::TABLES_KEPT + 2)
            .map(|_| Arc::new(StreamCodes::default()))
            .collect();
        let value = |k: usize| match k % 4 {
            0 => format!("v{k}"),
            1 => format!("とても長い手続の名前 {k}"),
            2 => String::new(),
            _ => format!("所管{k}"),
        };
        // First as many tables as a thread keeps, batch after batch (each table's short
        // views found again, the tables' places rotating), then more than it keeps.
        let runs = (0..6usize)
            .flat_map(|batch| (0..crate::views::TABLES_KEPT).map(move |t| (batch, t)))
            .chain((6..12usize).flat_map(|batch| (0..tables.len()).map(move |t| (batch, t))))
            .chain((12..15usize).map(|batch| (batch, 1)));
        for (batch, t) in runs {
            let table = &tables[t];
            {
                let rows: Vec<Option<String>> = (0..if batch >= 12 { 8000 } else { 3000 })
                    .map(|r| {
                        // The last batches draw from more short values than a table keeps.
                        let keys = if batch >= 12 { 40_000 } else { 5000 };
                        let k = (r * 7919 + batch * 31 + t * 17) % keys;
                        (r % 13 != 0).then(|| value(k))
                    })
                    .collect();
                let mut builder = StringViewBuilder::new();
                if batch % 2 == 0 {
                    builder = builder.with_deduplicate_strings();
                }
                builder.extend(rows.iter().map(|v| v.as_deref()));
                let array = builder.finish();
                let codes = table.code_views(&array).expect("codes");
                let values = table.values().expect("values");
                for (r, want) in rows.iter().enumerate() {
                    let code = codes.value(r) as usize;
                    let got = (code != 0).then(|| values.value(code).to_string());
                    let want = want.clone().filter(|v| !v.is_empty());
                    assert_eq!(got, want, "batch {batch}, table {t}, row {r}");
                }
            }
        }
    }

    #[test]
    fn exact_integers_are_128_bit_decimals_unchecked_and_floats_cast() {
        use datafusion::arrow::array::{AsArray, Float64Array, Int64Array, UInt64Array};
        use datafusion::arrow::datatypes::Decimal128Type;
        let udf = Exact {
            signature: user_defined(),
        };
        let run = |a: ArrayRef| -> Vec<Option<i128>> {
            let n = a.len();
            let t = a.data_type().clone();
            let coerced = udf.coerce_types(std::slice::from_ref(&t)).expect("coerces");
            let a = datafusion::arrow::compute::cast(&a, &coerced[0]).expect("coerced");
            let out = udf
                .invoke_with_args(ScalarFunctionArgs {
                    args: vec![ColumnarValue::Array(a)],
                    arg_fields: vec![Arc::new(Field::new("n", coerced[0].clone(), true))],
                    number_rows: n,
                    return_field: Arc::new(Field::new("e", DataType::Decimal128(38, 0), true)),
                    config_options: Arc::new(Default::default()),
                })
                .expect("exact")
                .to_array(n)
                .expect("array");
            assert_eq!(out.data_type(), &DataType::Decimal128(38, 0));
            out.as_primitive::<Decimal128Type>().iter().collect()
        };
        assert_eq!(
            run(Arc::new(Int64Array::from(vec![
                Some(i64::MIN),
                None,
                Some(7),
                Some(i64::MAX)
            ]))),
            vec![
                Some(i128::from(i64::MIN)),
                None,
                Some(7),
                Some(i128::from(i64::MAX))
            ]
        );
        assert_eq!(
            run(Arc::new(UInt64Array::from(vec![Some(u64::MAX), None]))),
            vec![Some(i128::from(u64::MAX)), None]
        );
        assert_eq!(
            run(Arc::new(datafusion::arrow::array::Int32Array::from(vec![
                Some(-3),
                None
            ]))),
            vec![Some(-3), None]
        );
        assert_eq!(
            run(Arc::new(Float64Array::from(vec![
                Some(2.0),
                None,
                Some(-5.0)
            ]))),
            vec![Some(2), None, Some(-5)]
        );
        // A float that is no integer fails the call, as the cast it replaces did.
        let nan: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.0), Some(f64::NAN)]));
        let failed = udf.invoke_with_args(ScalarFunctionArgs {
            args: vec![ColumnarValue::Array(nan)],
            arg_fields: vec![Arc::new(Field::new("n", DataType::Float64, true))],
            number_rows: 2,
            return_field: Arc::new(Field::new("e", DataType::Decimal128(38, 0), true)),
            config_options: Arc::new(Default::default()),
        });
        assert!(failed.is_err(), "{failed:?}");
        assert!(udf.coerce_types(&[DataType::Utf8]).is_err());
        assert!(
            Functions::by_name(EXACT).is_some(),
            "sent to a cluster by name"
        );
    }

    fn parts_rows_of(text: ColumnarValue, n: usize) -> Vec<Vec<String>> {
        let memo = Memo::default();
        let out = over_text(&text, n, &memo, "k", &|at, n| {
            Ok(parts_of(at, n, ";", true))
        })
        .expect("runs");
        let ColumnarValue::Array(arr) = out else {
            panic!("array")
        };
        let list = arr
            .as_any()
            .downcast_ref::<datafusion::arrow::array::ListArray>()
            .expect("list");
        (0..list.len())
            .map(|i| {
                let v = list.value(i);
                let s = v.as_any().downcast_ref::<StringArray>().expect("strings");
                (0..s.len()).map(|j| s.value(j).to_string()).collect()
            })
            .collect()
    }

    fn parts_rows(text: ColumnarValue) -> Vec<Vec<String>> {
        let memo = Memo::default();
        let out = over_text(&text, 3, &memo, "k", &|at, n| {
            Ok(parts_of(at, n, ";", true))
        })
        .expect("runs");
        let ColumnarValue::Array(arr) = out else {
            panic!("array")
        };
        let list = arr
            .as_any()
            .downcast_ref::<datafusion::arrow::array::ListArray>()
            .expect("list");
        (0..list.len())
            .map(|i| {
                let v = list.value(i);
                let s = v
                    .as_any()
                    .downcast_ref::<datafusion::arrow::array::StringArray>()
                    .expect("strings");
                (0..s.len()).map(|j| s.value(j).to_string()).collect()
            })
            .collect()
    }

    #[test]
    fn a_lookup_maps_each_key_once_and_travels_as_json() {
        use datafusion::arrow::array::{AsArray, DictionaryArray, StringArray};
        use datafusion::arrow::datatypes::UInt32Type;
        let table = Arc::new(LookupTable::new(
            (0..100_000).map(|i| (format!("K{i}"), format!("P{}", i % 7))),
        ));
        assert_eq!(table.len(), 100_000);
        let again = LookupTable::from_json(&table.to_json()).expect("read back");
        assert_eq!(again.len(), 100_000);
        assert_eq!(again.parent("K15"), Some("P1"));
        let lookup = Lookup {
            signature: user_defined(),
            table: Arc::clone(&table),
            memo: Memo::default(),
        };
        let run = |array: ArrayRef| {
            let n = array.len();
            let out = lookup
                .invoke_with_args(ScalarFunctionArgs {
                    args: vec![ColumnarValue::Array(array)],
                    arg_fields: vec![Arc::new(Field::new("k", DataType::Utf8, true))],
                    number_rows: n,
                    return_field: Arc::new(Field::new("p", DataType::Utf8, true)),
                    config_options: Arc::new(Default::default()),
                })
                .expect("looked up")
                .to_array(n)
                .expect("array");
            out.as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect::<Vec<_>>()
        };
        let plain: ArrayRef = Arc::new(StringArray::from(vec![Some("K8"), None, Some("X")]));
        assert_eq!(run(plain), vec![Some("P1".into()), None, None]);
        let coded: DictionaryArray<UInt32Type> = vec![Some("K2"), Some("K2"), None, Some("nope")]
            .into_iter()
            .collect();
        assert_eq!(
            run(Arc::new(coded)),
            vec![Some("P2".into()), Some("P2".into()), None, None]
        );
    }

    #[test]
    fn parts_trim_and_drop_empty() {
        let plain =
            ColumnarValue::Array(Arc::new(datafusion::arrow::array::StringArray::from(vec![
                Some("a; b ;;c"),
                None,
                Some("  "),
            ])));
        let expected = vec![vec!["a", "b", "c"], vec![""], vec![""]];
        assert_eq!(parts_rows(plain), expected);
        // The same over a dictionary: its values split once, rows taken by code.
        let values = datafusion::arrow::array::StringArray::from(vec!["", "a; b ;;c", "  "]);
        let keys = UInt32Array::from(vec![Some(1), None, Some(2)]);
        let dict = datafusion::arrow::array::DictionaryArray::try_new(keys, Arc::new(values))
            .expect("dictionary");
        assert_eq!(parts_rows(ColumnarValue::Array(Arc::new(dict))), expected);
    }

    #[test]
    fn part_counts_are_the_lengths_of_the_parts() {
        use datafusion::arrow::array::{AsArray, StringViewArray};
        use datafusion::arrow::datatypes::Int64Type;
        let udf = Functions::by_name(PART_COUNT).expect("made by name, so sent to a cluster");
        let count = |text: ArrayRef| -> Vec<i64> {
            let n = text.len();
            let out = udf
                .invoke_with_args(ScalarFunctionArgs {
                    args: vec![
                        ColumnarValue::Array(text),
                        ColumnarValue::Scalar(ScalarValue::Utf8(Some(";".into()))),
                    ],
                    arg_fields: vec![
                        Arc::new(Field::new("t", DataType::Utf8, true)),
                        Arc::new(Field::new("s", DataType::Utf8, false)),
                    ],
                    number_rows: n,
                    return_field: Arc::new(Field::new("n", DataType::Int64, false)),
                    config_options: Arc::default(),
                })
                .expect("counts")
                .to_array(n)
                .expect("an array");
            out.as_primitive::<Int64Type>().values().to_vec()
        };
        let cells = vec![
            Some("a; b ;;c"),
            None,
            Some("  "),
            Some("x"),
            Some("a; b ;;c"),
        ];
        // As many as tally_parts gives without its empty marker, for plain text and for
        // views (each distinct view counted once).
        let expected = vec![3, 0, 0, 1, 3];
        let plain: ArrayRef = Arc::new(datafusion::arrow::array::StringArray::from(cells.clone()));
        assert_eq!(count(plain), expected);
        let views: ArrayRef = Arc::new(StringViewArray::from(cells));
        assert_eq!(count(views), expected);
    }
}
