//! The codes a call gives the text of fields read from its files ([`StreamCodes`]), and the
//! functions that hand them out: `tally_code` and `tally_stream_part_codes`.

use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, ListBuilder, UInt32Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

use super::parts::PartIndex;
use super::text::{Memo, over_text, text_then};

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
    pub(super) fn code_views(
        &self,
        array: &datafusion::arrow::array::StringViewArray,
    ) -> Result<UInt32Array> {
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

    pub(super) fn lock_dictionaries(&self) -> Result<std::sync::MutexGuard<'_, KeptDictionaries>> {
        self.dictionaries
            .lock()
            .map_err(|_| DataFusionError::Internal("the dictionaries' lock is poisoned".into()))
    }
}

/// Dictionaries whose codes a call keeps ([`StreamCodes::code_dictionary`]): the column
/// chunks its threads read at once.
pub(super) const DICTIONARIES_KEPT: usize = 16;

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
pub(super) struct StreamPartCodes {
    pub(super) signature: Signature,
    pub(super) codes: Arc<StreamCodes>,
    pub(super) separator: String,
    pub(super) count: bool,
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
pub(super) struct Code {
    pub(super) signature: Signature,
    pub(super) codes: Arc<StreamCodes>,
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
