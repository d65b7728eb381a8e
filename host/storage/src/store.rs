//! The prepared table of a dataset version: every declared field in its canonical type, text
//! dictionary-encoded with one dictionary per field for the whole table, held in memory or
//! mapped from the cache, and the table provider queries run on.
//!
//! What is stored is only the declared fields: numbers as `Int64`/`Float64`, text as `UInt32`
//! codes into its field's dictionary (code 0 is always `""`; a null keeps code 0 and its null
//! bit). A repeated value is one dictionary entry however many records hold it, so a survey of
//! 7.5 million records whose text fields repeat a few thousand values takes a few bytes per
//! field and record. Everything else a query needs is derived when the table is scanned, batch
//! by batch: the row number (file order), the integer code column of a groupable field (its
//! dictionary codes as they are, no copy), and the 0/1 column of a `count_where` measure (one
//! test per dictionary value, then a lookup per record).
//!
//! A mapped store decodes and checks a column the first time a call needs it (Arrow's
//! validation of its buffers, every code against its dictionary), so a start with a large
//! cached table costs the columns the first call touches, not all of them.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, Float64Array, RecordBatch, RecordBatchOptions,
    StringArray, StringBuilder, UInt32Array, UInt64Array,
};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{
    DataType, Field as ArrowField, Int32Type, Schema, SchemaRef, UInt32Type,
};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use tally_semantic::definition::{DataType as FieldType, DatasetDef, FieldId, MeasureId};

use crate::error::StorageError;

/// Hidden column: the record's position in file order (the default order).
pub const ROW_COL: &str = "__tally_row";
/// Prefix reserved for hidden columns.
pub const RESERVED_PREFIX: &str = "__tally_";

/// Records per stored chunk: batches read are gathered into chunks about this large.
pub const CHUNK_ROWS: usize = 32 * 1024;

/// The type of a text field in the prepared table.
pub fn text_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
}

/// The hidden 0/1 column of a `count_where` computed measure (1.0 where the record counts).
pub fn share_column(measure: MeasureId) -> String {
    format!("__tally_share_{measure}")
}

/// The hidden code column of a field.
pub fn code_column(field: FieldId) -> String {
    format!("__tally_code_{field}")
}

/// The hidden column of a field read from its files as a dictionary array (a
/// `Dictionary(UInt32, Utf8)`, one dictionary per column chunk): what a summary over data read
/// at every call numbers a key's values from, once per distinct value of a chunk.
pub fn dictionary_column(field: FieldId) -> String {
    format!("__tally_dict_{field}")
}

/// The type a declared field has in the prepared table.
pub fn canonical_type(field_type: FieldType, source: &DataType) -> Result<DataType, String> {
    use DataType::*;
    if field_type.is_numeric() {
        return match source {
            Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Ok(Int64),
            Float16
            | Float32
            | Float64
            | Decimal32(_, _)
            | Decimal64(_, _)
            | Decimal128(_, _)
            | Decimal256(_, _) => Ok(Float64),
            Null => Ok(Int64),
            Dictionary(_, value) => canonical_type(field_type, value),
            other => Err(format!(
                "is declared {} but the data column has type {other}",
                field_type.as_str()
            )),
        };
    }
    match source {
        List(_)
        | LargeList(_)
        | FixedSizeList(_, _)
        | Struct(_)
        | Map(_, _)
        | Union(_, _)
        | Binary
        | LargeBinary
        | FixedSizeBinary(_)
        | BinaryView
        | ListView(_)
        | LargeListView(_) => Err(format!(
            "has type {source} in the data, which cannot be served as text"
        )),
        Dictionary(_, value) => canonical_type(field_type, value),
        _ => Ok(text_type()),
    }
}

/// Counted values a share compares each row's view with; with more, each distinct view of a
/// batch is decided once instead ([`Share::column`]).
const VIEWS_COMPARED: usize = 16;

/// A `count_where` measure whose records count or not, decided once per dictionary value.
#[derive(Debug, Clone)]
pub struct Share {
    pub measure: MeasureId,
    pub field: FieldId,
    pub separator: Option<String>,
    pub values: Vec<String>,
}

impl Share {
    /// Whether a record with this (present) value counts.
    pub fn counts(&self, v: &str) -> bool {
        match &self.separator {
            Some(sep) => v
                .split(sep.as_str())
                .any(|p| self.values.iter().any(|c| c == p.trim())),
            None => self.values.iter().any(|c| c == v),
        }
    }

    /// [`Share::column`] of a single-value field read as views, each row's view compared
    /// with the values' own: a value of up to 12 bytes is its view, so a row holds it when
    /// their views are equal; a longer one's view starts with its length and first 4 bytes,
    /// and only a row whose view starts so has its bytes compared. No text is hashed (deciding
    /// each batch's distinct views was a fifth of a summary with a computed rate).
    fn column_of_views(&self, view: &datafusion::arrow::array::StringViewArray) -> Float64Array {
        use datafusion::arrow::array::builder::make_view;
        let short: Vec<u128> = self
            .values
            .iter()
            .filter(|v| v.len() <= 12)
            .map(|v| make_view(v.as_bytes(), 0, 0))
            .collect();
        let long: Vec<(u64, &str)> = self
            .values
            .iter()
            .filter(|v| v.len() > 12)
            .map(|v| (make_view(v.as_bytes(), 0, 0) as u64, v.as_str()))
            .collect();
        let nulls = view.nulls().filter(|n| n.null_count() > 0);
        let mut out = vec![0.0f64; view.len()];
        // Without branches on the row's value (the values of a column come in no order, and a
        // branch on each was mispredicted half the time): a short value's view can equal no
        // long value's first 8 bytes, which start with a length over 12.
        for (r, (v, o)) in view.views().iter().zip(out.iter_mut()).enumerate() {
            let mut holds = short.iter().fold(false, |h, s| h | (s == v));
            let head = *v as u64;
            if long.iter().fold(false, |h, (l, _)| h | (*l == head)) {
                holds = long
                    .iter()
                    .any(|(l, text)| *l == head && view.value(r) == *text);
            }
            let valid = nulls.is_none_or(|n| n.is_valid(r));
            *o = f64::from(u8::from(holds & valid));
        }
        Float64Array::from(out)
    }

    /// 1.0 for each record of a text column that counts, else 0.0 (a null never counts).
    pub fn column(&self, text: &dyn Array) -> Result<ArrayRef, StorageError> {
        let n = text.len();
        let out: Float64Array = if let Some(dict) = text.as_dictionary_opt::<UInt32Type>() {
            let values = dict.values().as_string::<i32>();
            let mask: Vec<bool> = if values.len() <= dict.len() {
                (0..values.len())
                    .map(|i| self.counts(values.value(i)))
                    .collect()
            } else {
                // A dictionary larger than the batch (a chunk's, of which a condition kept
                // few rows): only the values the rows hold are decided.
                let mut decided: Vec<Option<bool>> = vec![None; values.len()];
                for k in dict.keys().values() {
                    if let Some(slot @ None) = decided.get_mut(*k as usize) {
                        *slot = Some(self.counts(values.value(*k as usize)));
                    }
                }
                decided.into_iter().map(|d| d.unwrap_or(false)).collect()
            };
            share_of_codes(dict, &mask)
        } else if let Some(view) = text.as_string_view_opt()
            && self.separator.is_none()
            && self.values.len() <= VIEWS_COMPARED
        {
            self.column_of_views(view)
        } else if let Some(view) = text.as_string_view_opt() {
            // Read from the files: each distinct view decided once when values repeat.
            match crate::views::distinct_views(view) {
                Some((index, firsts)) => {
                    // Per distinct view its share, then one more for a null (which never
                    // counts).
                    let shares: Vec<f64> = firsts
                        .iter()
                        .map(|r| f64::from(u8::from(self.counts(view.value(*r)))))
                        .chain(std::iter::once(0.0))
                        .collect();
                    index
                        .values()
                        .iter()
                        .map(|i| shares.get(*i as usize).copied().unwrap_or(0.0))
                        .collect()
                }
                None => (0..n)
                    .map(|r| {
                        if view.is_valid(r) && self.counts(view.value(r)) {
                            1.0
                        } else {
                            0.0
                        }
                    })
                    .collect(),
            }
        } else {
            let text = datafusion::arrow::compute::cast(text, &DataType::Utf8)
                .map_err(|e| StorageError::internal(format!("a share column: {e}")))?;
            let strings = text.as_string::<i32>();
            (0..n)
                .map(|r| {
                    if strings.is_valid(r) && self.counts(strings.value(r)) {
                        1.0
                    } else {
                        0.0
                    }
                })
                .collect()
        };
        Ok(Arc::new(out))
    }
}

/// The share column of a dictionary column, given whether each value counts.
/// Without a branch on the row's value (the values come in no order, and a branch on each
/// was mispredicted often: a sixth of a summary with a computed rate over dictionaries).
fn share_of_codes(dict: &DictionaryArray<UInt32Type>, mask: &[bool]) -> Float64Array {
    let shares: Vec<f64> = mask.iter().map(|m| f64::from(u8::from(*m))).collect();
    let keys = dict.keys();
    let mut values: Vec<f64> = keys
        .values()
        .iter()
        .map(|k| shares.get(*k as usize).copied().unwrap_or(0.0))
        .collect();
    if let Some(nulls) = keys.nulls().filter(|n| n.null_count() > 0) {
        for (v, valid) in values.iter_mut().zip(nulls.iter()) {
            *v *= f64::from(u8::from(valid));
        }
    }
    Float64Array::from(values)
}

/// What a prepared table holds: every declared field in its canonical type, then the hidden
/// columns derived on scan (the row number, a code column per coded field, a share column per
/// `count_where` measure).
#[derive(Debug)]
pub struct Layout {
    /// Per declared field, its type in the table.
    pub targets: Vec<DataType>,
    /// The groupable single-valued text fields, grouped on their codes.
    pub coded: Vec<FieldId>,
    pub shares: Vec<Share>,
    /// The table's columns.
    pub schema: SchemaRef,
    /// The columns as stored (text as its codes).
    pub stored: SchemaRef,
    /// Whether the hidden column of each coded field is its text as a dictionary array
    /// ([`dictionary_column`], data read from its files) instead of its codes.
    pub dictionaries: bool,
}

/// A column of the table, as the scan makes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Out {
    Field(usize),
    Row,
    Code(usize),
    /// A field's text as a dictionary array (data read from its files).
    Dict(usize),
    Share(usize),
}

impl Layout {
    /// The layout of data read from its files at every call: text as `Utf8View` (there is no
    /// dictionary for the whole table; a view decoded from a dictionary page points into the
    /// page's dictionary instead of copying each value); in place of code columns, each coded
    /// field's text as a dictionary array ([`dictionary_column`]).
    pub fn streamed(def: &DatasetDef, source: &Schema) -> Result<Layout, StorageError> {
        let mut layout = Layout::of(def, source)?;
        for t in &mut layout.targets {
            if matches!(t, DataType::Dictionary(_, _)) {
                *t = DataType::Utf8View;
            }
        }
        layout.dictionaries = true;
        let mut fields: Vec<ArrowField> = def
            .fields
            .iter()
            .zip(&layout.targets)
            .map(|(f, t)| ArrowField::new(&f.name, t.clone(), true))
            .collect();
        fields.push(ArrowField::new(ROW_COL, DataType::UInt64, false));
        for &i in &layout.coded {
            fields.push(ArrowField::new(dictionary_column(i), text_type(), true));
        }
        for s in &layout.shares {
            fields.push(ArrowField::new(
                share_column(s.measure),
                DataType::Float64,
                false,
            ));
        }
        layout.schema = Arc::new(Schema::new(fields));
        Ok(layout)
    }

    /// The layout of `def` over data whose columns have the types of `source`.
    pub fn of(def: &DatasetDef, source: &Schema) -> Result<Layout, StorageError> {
        let id = def.id.as_str();
        let mut targets: Vec<DataType> = Vec::with_capacity(def.fields.len());
        for f in def.column_fields() {
            let source_type = source
                .field_with_name(&f.name)
                .map_err(|_| {
                    StorageError::backend(id, format!("column `{}` vanished from the data", f.name))
                })?
                .data_type()
                .clone();
            targets.push(
                canonical_type(f.data_type, &source_type)
                    .map_err(|m| StorageError::backend(id, format!("`{}` {m}", f.name)))?,
            );
        }
        // Dimensions and coded attributes are what summaries group by.
        let coded: Vec<FieldId> = def
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                f.is_column()
                    && f.groupable
                    && !f.data_type.is_numeric()
                    && !f.is_multi_value()
                    && (f.role == tally_semantic::definition::Role::Dim || f.codelist.is_some())
            })
            .map(|(i, _)| FieldId::at(i))
            .collect();
        let shares: Vec<Share> = def
            .computed_measures
            .iter()
            .enumerate()
            .filter_map(|(k, m)| match &m.formula {
                tally_semantic::definition::Formula::CountWhere {
                    condition_field,
                    condition_values,
                } => Some(Share {
                    measure: MeasureId::at(k),
                    field: *condition_field,
                    separator: def.fields[*condition_field].multi_value.clone(),
                    values: condition_values.clone(),
                }),
                _ => None,
            })
            .filter(|s| !def.fields[s.field].data_type.is_numeric())
            .collect();
        let mut fields: Vec<ArrowField> = def
            .fields
            .iter()
            .zip(&targets)
            .map(|(f, t)| ArrowField::new(&f.name, t.clone(), true))
            .collect();
        let stored: Vec<ArrowField> = fields
            .iter()
            .map(|f| match f.data_type() {
                DataType::Dictionary(_, _) => ArrowField::new(f.name(), DataType::UInt32, true),
                _ => f.clone(),
            })
            .collect();
        fields.push(ArrowField::new(ROW_COL, DataType::UInt64, false));
        for &i in &coded {
            fields.push(ArrowField::new(code_column(i), DataType::UInt32, false));
        }
        for s in &shares {
            fields.push(ArrowField::new(
                share_column(s.measure),
                DataType::Float64,
                false,
            ));
        }
        Ok(Layout {
            targets,
            coded,
            shares,
            schema: Arc::new(Schema::new(fields)),
            stored: Arc::new(Schema::new(stored)),
            dictionaries: false,
        })
    }

    /// Whether a field is stored as codes into a dictionary.
    pub fn is_text(&self, field: usize) -> bool {
        // A field past the stored ones (one looked up through a relation) is no column here.
        matches!(self.targets.get(field), Some(DataType::Dictionary(_, _)))
    }

    /// The indices of the text fields.
    pub fn text_fields(&self) -> Vec<usize> {
        (0..self.targets.len())
            .filter(|i| self.is_text(*i))
            .collect()
    }

    pub(crate) fn out(&self, column: usize) -> Option<Out> {
        let fields = self.targets.len();
        let codes = self.coded.len();
        match column {
            c if c < fields => Some(Out::Field(c)),
            c if c == fields => Some(Out::Row),
            c if c <= fields + codes => {
                let field = self.coded[c - fields - 1].index();
                Some(if self.dictionaries {
                    Out::Dict(field)
                } else {
                    Out::Code(field)
                })
            }
            c if c <= fields + codes + self.shares.len() => {
                Some(Out::Share(c - fields - 1 - codes))
            }
            _ => None,
        }
    }
}

/// Interns a field's text values: each distinct value once, numbered in order of first
/// appearance (0 is `""`). Values are kept in one buffer and the table holds 4-byte numbers,
/// so a field of millions of distinct values costs their bytes and a few bytes each.
struct Interner {
    table: hashbrown::HashTable<u32>,
    state: hashbrown::DefaultHashBuilder,
    offsets: Vec<i32>,
    data: Vec<u8>,
    /// Per value, its folded form (NFKC, lower case) where folding changes it, else null:
    /// what text search reads instead of folding every value at every call.
    folded: StringBuilder,
    folded_bytes: usize,
}

/// A text field's dictionary: its values (code 0 is `""`) and, per value, its folded form
/// ([`tally_semantic::names::fold`]) where folding changes it, null where the value is its own
/// folded form (most Japanese text).
#[derive(Debug, Clone)]
pub struct Dictionary {
    pub values: StringArray,
    pub folded: StringArray,
}

impl Dictionary {
    /// The dictionary of `values`, each folded here.
    pub fn of(values: StringArray) -> Dictionary {
        let folded: StringArray = (0..values.len())
            .map(|i| match tally_semantic::names::fold(values.value(i)) {
                std::borrow::Cow::Borrowed(_) => None,
                std::borrow::Cow::Owned(f) => Some(f),
            })
            .collect();
        Dictionary { values, folded }
    }
}

impl Interner {
    fn new() -> Interner {
        let mut interner = Interner {
            table: hashbrown::HashTable::new(),
            state: Default::default(),
            offsets: vec![0],
            data: Vec::new(),
            folded: StringBuilder::new(),
            folded_bytes: 0,
        };
        let _ = interner.intern("");
        interner
    }

    fn intern(&mut self, s: &str) -> Result<u32, String> {
        use std::hash::BuildHasher;
        let bytes = s.as_bytes();
        let hash = self.state.hash_one(bytes);
        let Interner {
            table,
            state,
            offsets,
            data,
            folded,
            folded_bytes,
        } = self;
        let value = |code: u32| {
            let i = code as usize;
            &data[offsets[i] as usize..offsets[i + 1] as usize]
        };
        if let Some(code) = table.find(hash, |c| value(*c) == bytes) {
            return Ok(*code);
        }
        let end = data.len() + bytes.len();
        if end > i32::MAX as usize || offsets.len() > u32::MAX as usize - 1 {
            return Err("its distinct values hold more than 2 GiB of text".into());
        }
        let code = (offsets.len() - 1) as u32;
        match tally_semantic::names::fold(s) {
            std::borrow::Cow::Borrowed(_) => folded.append_null(),
            std::borrow::Cow::Owned(f) => {
                *folded_bytes += f.len();
                if *folded_bytes > i32::MAX as usize {
                    return Err("its distinct values hold more than 2 GiB of folded text".into());
                }
                folded.append_value(f);
            }
        }
        data.extend_from_slice(bytes);
        offsets.push(end as i32);
        let (offsets, data) = (&*offsets, &*data);
        table.insert_unique(hash, code, |c| {
            let i = *c as usize;
            state.hash_one(&data[offsets[i] as usize..offsets[i + 1] as usize])
        });
        Ok(code)
    }

    /// About what it holds.
    fn bytes(&self) -> usize {
        self.data.capacity()
            + self.offsets.capacity() * 4
            + self.table.capacity() * 5
            + self.folded_bytes
            + self.offsets.len() * 4
    }

    fn finish(mut self) -> Dictionary {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(self.offsets));
        // Every value was a `&str`: the bytes are UTF-8 (checked once more by `new`).
        Dictionary {
            values: StringArray::new(offsets, Buffer::from_vec(self.data), None),
            folded: self.folded.finish(),
        }
    }
}

/// The codes of a batch's text column, new values interned.
fn encode(interner: &mut Interner, column: &ArrayRef) -> Result<UInt32Array, String> {
    let n = column.len();
    let nulls = column.logical_nulls();
    // A dictionary (Parquet pages read as such): each distinct value of the batch once.
    if let Some(dict) = column.as_dictionary_opt::<Int32Type>() {
        let values = datafusion::arrow::compute::cast(dict.values(), &DataType::Utf8)
            .map_err(|e| e.to_string())?;
        let values = values.as_string::<i32>();
        let mut codes = Vec::with_capacity(values.len());
        for i in 0..values.len() {
            codes.push(if values.is_valid(i) {
                interner.intern(values.value(i))?
            } else {
                0
            });
        }
        let keys = dict.keys();
        let out: Vec<u32> = keys
            .values()
            .iter()
            .enumerate()
            .map(|(r, k)| {
                if keys.is_valid(r) {
                    codes.get(*k as usize).copied().unwrap_or(0)
                } else {
                    0
                }
            })
            .collect();
        return Ok(UInt32Array::new(ScalarBuffer::from(out), nulls));
    }
    let mut out = Vec::with_capacity(n);
    match column.data_type() {
        DataType::Utf8View => {
            let views = column.as_string_view();
            for r in 0..n {
                out.push(if views.is_valid(r) {
                    interner.intern(views.value(r))?
                } else {
                    0
                });
            }
        }
        _ => {
            let text = datafusion::arrow::compute::cast(column, &DataType::Utf8)
                .map_err(|e| e.to_string())?;
            let strings = text.as_string::<i32>();
            for r in 0..n {
                out.push(if strings.is_valid(r) {
                    interner.intern(strings.value(r))?
                } else {
                    0
                });
            }
        }
    }
    Ok(UInt32Array::new(ScalarBuffer::from(out), nulls))
}

/// Where a finished chunk goes.
pub trait ChunkSink {
    /// Takes a chunk of stored columns (the layout's `stored` schema).
    fn chunk(&mut self, batch: RecordBatch) -> Result<(), StorageError>;
}

/// Chunks kept in memory.
#[derive(Debug, Default)]
pub struct InMemory {
    pub chunks: Vec<RecordBatch>,
    pub bytes: usize,
}

impl ChunkSink for InMemory {
    fn chunk(&mut self, batch: RecordBatch) -> Result<(), StorageError> {
        self.bytes += batch.get_array_memory_size();
        self.chunks.push(batch);
        Ok(())
    }
}

/// What preparing found of one field's values, for `inspect_dataset`: how many are filled
/// (null and blank count as empty; blank as DataFusion's `btrim` reads it, spaces only), and
/// of a number its least and greatest value, its sum and how many are zero. Worked out while
/// the table is prepared, batch by batch, and kept with it (in the cache entry's header too),
/// so describing 7.5M records reads no record again.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FieldStats {
    pub filled: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<serde_json::Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sum: Option<f64>,
    #[serde(default)]
    pub zeros: u64,
}

impl FieldStats {
    /// The mean of a number's values (`None` for text, or with no value).
    pub fn mean(&self) -> Option<f64> {
        self.sum
            .filter(|_| self.filled > 0)
            .map(|s| s / self.filled as f64)
    }
}

/// A field's statistics as its batches go by.
#[derive(Debug)]
enum Tally {
    /// Records per code of the field's dictionary.
    Text(Vec<u64>),
    Int(Option<(i64, i64)>, f64, u64, u64),
    Float(Option<(f64, f64)>, f64, u64, u64),
}

impl Tally {
    fn of(target: &DataType) -> Tally {
        match target {
            DataType::Dictionary(_, _) => Tally::Text(Vec::new()),
            DataType::Int64 => Tally::Int(None, 0.0, 0, 0),
            _ => Tally::Float(None, 0.0, 0, 0),
        }
    }

    fn add(&mut self, column: &ArrayRef) {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::{Float64Type, Int64Type};
        match self {
            Tally::Text(counts) => {
                if let Some(codes) =
                    column.as_primitive_opt::<datafusion::arrow::datatypes::UInt32Type>()
                {
                    for (r, k) in codes.values().iter().enumerate() {
                        if codes.is_valid(r) {
                            let k = *k as usize;
                            if k >= counts.len() {
                                counts.resize(k + 1, 0);
                            }
                            counts[k] += 1;
                        }
                    }
                }
            }
            Tally::Int(range, sum, n, zeros) => {
                if let Some(a) = column.as_primitive_opt::<Int64Type>() {
                    for v in a.iter().flatten() {
                        *range = Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                        *sum += v as f64;
                        *n += 1;
                        *zeros += u64::from(v == 0);
                    }
                }
            }
            Tally::Float(range, sum, n, zeros) => {
                if let Some(a) = column.as_primitive_opt::<Float64Type>() {
                    for v in a.iter().flatten() {
                        // NaN is no least or greatest value (as DataFusion's min and max).
                        if !v.is_nan() {
                            *range = Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                        }
                        *sum += v;
                        *n += 1;
                        *zeros += u64::from(v == 0.0);
                    }
                }
            }
        }
    }

    fn finish(self, values: Option<&Dictionary>) -> FieldStats {
        match self {
            Tally::Text(counts) => FieldStats {
                filled: values.map_or(0, |d| {
                    counts
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| {
                            *k < d.values.len() && !d.values.value(*k).trim_matches(' ').is_empty()
                        })
                        .map(|(_, n)| *n)
                        .sum()
                }),
                ..FieldStats::default()
            },
            Tally::Int(range, sum, n, zeros) => FieldStats {
                filled: n,
                min: range.map(|(lo, _)| lo.into()),
                max: range.map(|(_, hi)| hi.into()),
                sum: (n > 0).then_some(sum),
                zeros,
            },
            Tally::Float(range, sum, n, zeros) => FieldStats {
                filled: n,
                min: range.and_then(|(lo, _)| serde_json::Number::from_f64(lo)),
                max: range.and_then(|(_, hi)| serde_json::Number::from_f64(hi)),
                sum: (n > 0).then_some(sum),
                zeros,
            },
        }
    }
}

/// Builds a prepared table from batches read: casts, interns, gathers chunks.
pub struct Builder {
    dataset: String,
    layout: Arc<Layout>,
    interners: Vec<Option<Interner>>,
    tallies: Vec<Tally>,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pub rows: u64,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("dataset", &self.dataset)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl Builder {
    pub fn new(dataset: &str, layout: Arc<Layout>) -> Builder {
        let interners = (0..layout.targets.len())
            .map(|i| layout.is_text(i).then(Interner::new))
            .collect();
        let tallies = layout.targets.iter().map(Tally::of).collect();
        Builder {
            dataset: dataset.to_string(),
            layout,
            interners,
            tallies,
            pending: Vec::new(),
            pending_rows: 0,
            rows: 0,
        }
    }

    /// What the dictionaries and the chunk being gathered hold.
    pub fn bytes(&self) -> usize {
        self.interners
            .iter()
            .flatten()
            .map(Interner::bytes)
            .sum::<usize>()
            + self
                .pending
                .iter()
                .map(RecordBatch::get_array_memory_size)
                .sum::<usize>()
    }

    /// About what a batch read becomes once stored (for reserving it first).
    pub fn stored_bytes(&self, rows: usize) -> usize {
        rows * (self.layout.targets.len() * 8 + self.layout.targets.len().div_ceil(8)) + 1024
    }

    /// Adds a batch of the declared fields (in field order, as read).
    pub fn push(
        &mut self,
        batch: &RecordBatch,
        sink: &mut dyn ChunkSink,
    ) -> Result<(), StorageError> {
        let id = self.dataset.clone();
        let n = batch.num_rows();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.layout.targets.len());
        for (i, (c, target)) in batch.columns().iter().zip(&self.layout.targets).enumerate() {
            match &mut self.interners[i] {
                Some(interner) => {
                    let codes = encode(interner, c).map_err(|m| {
                        StorageError::backend(
                            &id,
                            format!(
                                "`{}` cannot be prepared: {m}",
                                self.layout.stored.field(i).name()
                            ),
                        )
                    })?;
                    columns.push(Arc::new(codes));
                }
                None => columns.push(
                    datafusion::arrow::compute::cast(c, target)
                        .map_err(|e| StorageError::backend(&id, e))?,
                ),
            }
        }
        for (tally, column) in self.tallies.iter_mut().zip(&columns) {
            tally.add(column);
        }
        let stored = RecordBatch::try_new_with_options(
            Arc::clone(&self.layout.stored),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )
        .map_err(|e| StorageError::backend(&id, e))?;
        self.rows += n as u64;
        self.pending_rows += n;
        self.pending.push(stored);
        if self.pending_rows >= CHUNK_ROWS {
            self.flush(sink)?;
        }
        Ok(())
    }

    fn flush(&mut self, sink: &mut dyn ChunkSink) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let chunk = if batches.len() == 1 {
            batches.into_iter().next().unwrap_or_else(|| unreachable!())
        } else {
            datafusion::arrow::compute::concat_batches(&self.layout.stored, &batches)
                .map_err(|e| StorageError::backend(&self.dataset, e))?
        };
        sink.chunk(chunk)
    }

    /// The last chunk to the sink, the dictionary of every text field (by field index;
    /// `None` for numbers) and the statistics of every field.
    pub fn finish(
        mut self,
        sink: &mut dyn ChunkSink,
    ) -> Result<(Vec<Option<Dictionary>>, Vec<FieldStats>), StorageError> {
        self.flush(sink)?;
        let dictionaries: Vec<Option<Dictionary>> = self
            .interners
            .into_iter()
            .map(|i| i.map(Interner::finish))
            .collect();
        let stats = self
            .tallies
            .into_iter()
            .zip(&dictionaries)
            .map(|(t, d)| t.finish(d.as_ref()))
            .collect();
        Ok((dictionaries, stats))
    }
}

/// A slot filled on first use.
type Slot<T> = Mutex<Option<T>>;

/// Where a store's columns are read from when first used.
pub trait Columns: Send + Sync + fmt::Debug {
    /// The stored column `field` of every chunk (text as its codes), checked.
    fn column(&self, field: usize) -> Result<Vec<ArrayRef>, String>;
    /// The dictionary of text field `field`, checked.
    fn values(&self, field: usize) -> Result<StringArray, String>;
    /// The folded forms of that dictionary's values ([`Dictionary::folded`]), checked.
    fn folded(&self, field: usize) -> Result<StringArray, String>;
    /// Called when something read does not check out: the source is not to be used again.
    fn damaged(&self) {}
}

/// The prepared table.
pub struct Store {
    dataset: String,
    layout: Arc<Layout>,
    rows: usize,
    /// Per chunk, its first row and its rows.
    chunks: Vec<(u64, usize)>,
    /// Per declared field, its column in every chunk (text: dictionary arrays).
    columns: Vec<Slot<Arc<Vec<ArrayRef>>>>,
    /// Per text field, its dictionary values (one array every chunk's dictionary shares, so
    /// what is worked out per value is worked out once).
    values: Vec<Slot<ArrayRef>>,
    /// Per text field, the folded forms of its dictionary's values (what search reads).
    folded: Vec<Slot<Arc<StringArray>>>,
    /// Per share, whether each value of its field's dictionary counts.
    masks: Vec<Slot<Arc<Vec<bool>>>>,
    source: Option<Arc<dyn Columns>>,
    damaged: AtomicBool,
    /// Per declared field, what preparing found of its values (none for an entry of the cache
    /// written before they were kept).
    stats: Option<Vec<FieldStats>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("dataset", &self.dataset)
            .field("rows", &self.rows)
            .field("chunks", &self.chunks.len())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store over chunks held in memory and the dictionaries [`Builder::finish`] gave.
    pub fn in_memory(
        dataset: &str,
        layout: Arc<Layout>,
        chunks: Vec<RecordBatch>,
        dictionaries: Vec<Option<Dictionary>>,
        stats: Vec<FieldStats>,
    ) -> Result<Store, StorageError> {
        let fields = layout.targets.len();
        let mut shared: Vec<Option<ArrayRef>> = Vec::with_capacity(dictionaries.len());
        let mut folded = Vec::with_capacity(dictionaries.len());
        for d in dictionaries {
            match d {
                Some(d) => {
                    if d.folded.len() != d.values.len() {
                        return Err(StorageError::internal(
                            "a dictionary whose folded forms do not match its values",
                        ));
                    }
                    shared.push(Some(Arc::new(d.values) as ArrayRef));
                    folded.push(Mutex::new(Some(Arc::new(d.folded))));
                }
                None => {
                    shared.push(None);
                    folded.push(Mutex::new(None));
                }
            }
        }
        let mut columns: Vec<Vec<ArrayRef>> = vec![Vec::with_capacity(chunks.len()); fields];
        let mut spans = Vec::with_capacity(chunks.len());
        let mut row = 0u64;
        for chunk in &chunks {
            spans.push((row, chunk.num_rows()));
            row += chunk.num_rows() as u64;
            for (f, column) in columns.iter_mut().enumerate() {
                let stored = Arc::clone(chunk.column(f));
                column.push(match &shared[f] {
                    Some(v) => {
                        dictionary(stored, v).map_err(|m| StorageError::backend(dataset, m))?
                    }
                    None => stored,
                });
            }
        }
        Ok(Store {
            dataset: dataset.to_string(),
            rows: row as usize,
            chunks: spans,
            columns: columns
                .into_iter()
                .map(|c| Mutex::new(Some(Arc::new(c))))
                .collect(),
            masks: layout.shares.iter().map(|_| Mutex::new(None)).collect(),
            values: shared.into_iter().map(Mutex::new).collect(),
            folded,
            layout,
            source: None,
            damaged: AtomicBool::new(false),
            stats: Some(stats),
        })
    }

    /// A store whose columns are read from `source` when first used.
    pub fn lazy(
        dataset: &str,
        layout: Arc<Layout>,
        chunks: Vec<usize>,
        source: Arc<dyn Columns>,
        stats: Option<Vec<FieldStats>>,
    ) -> Store {
        let mut spans = Vec::with_capacity(chunks.len());
        let mut row = 0u64;
        for n in chunks {
            spans.push((row, n));
            row += n as u64;
        }
        let fields = layout.targets.len();
        Store {
            dataset: dataset.to_string(),
            rows: row as usize,
            chunks: spans,
            columns: (0..fields).map(|_| Mutex::new(None)).collect(),
            values: (0..fields).map(|_| Mutex::new(None)).collect(),
            folded: (0..fields).map(|_| Mutex::new(None)).collect(),
            masks: layout.shares.iter().map(|_| Mutex::new(None)).collect(),
            layout,
            source: Some(source),
            damaged: AtomicBool::new(false),
            stats: stats.filter(|s| s.len() == fields),
        }
    }

    /// What preparing found of each declared field's values (by field index), when kept.
    pub fn field_stats(&self) -> Option<&[FieldStats]> {
        self.stats.as_deref()
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    /// Whether something read from its source did not check out (then the store is not used
    /// again: its dataset is prepared anew).
    pub fn is_damaged(&self) -> bool {
        self.damaged.load(Ordering::Relaxed)
    }

    fn damage(&self, what: &str, why: String) -> StorageError {
        self.damaged.store(true, Ordering::Relaxed);
        if let Some(source) = &self.source {
            source.damaged();
        }
        tracing::warn!(dataset = %self.dataset, "the cached prepared data is damaged ({what}: {why}); it is prepared anew");
        StorageError::Stale {
            dataset: self.dataset.clone(),
            message: format!("its cached prepared data is damaged ({what}); it is prepared anew"),
        }
    }

    /// The dictionary values of a text field (code 0 is `""`).
    pub fn values(&self, field: FieldId) -> Result<StringArray, StorageError> {
        let shared = self.shared_values(field)?;
        shared
            .as_string_opt::<i32>()
            .cloned()
            .ok_or_else(|| StorageError::internal("a dictionary that is not text"))
    }

    /// The array every chunk's dictionary of a text field shares.
    pub fn shared_values(&self, field: FieldId) -> Result<ArrayRef, StorageError> {
        let f = field.index();
        let mut slot = self.values[f]
            .lock()
            .map_err(|_| StorageError::internal("a dictionary lock is poisoned"))?;
        if let Some(v) = &*slot {
            return Ok(Arc::clone(v));
        }
        let Some(source) = &self.source else {
            return Err(StorageError::internal(format!(
                "field {f} has no dictionary in the prepared table"
            )));
        };
        let values: ArrayRef = Arc::new(
            source
                .values(f)
                .map_err(|why| self.damage(&format!("the values of field {f}"), why))?,
        );
        *slot = Some(Arc::clone(&values));
        Ok(values)
    }

    /// The folded forms of a text field's dictionary values ([`Dictionary::folded`]: null
    /// where a value is its own folded form), as long as its values.
    pub fn folded(&self, field: FieldId) -> Result<Arc<StringArray>, StorageError> {
        let f = field.index();
        let slot = self
            .folded
            .get(f)
            .ok_or_else(|| StorageError::internal(format!("no field {f} in the table")))?;
        let mut slot = slot
            .lock()
            .map_err(|_| StorageError::internal("a dictionary lock is poisoned"))?;
        if let Some(v) = &*slot {
            return Ok(Arc::clone(v));
        }
        let Some(source) = &self.source else {
            return Err(StorageError::internal(format!(
                "field {f} has no dictionary in the prepared table"
            )));
        };
        let values = self.shared_values(field)?;
        let what = format!("the folded values of field {f}");
        let folded = source.folded(f).map_err(|why| self.damage(&what, why))?;
        if folded.len() != values.len() {
            return Err(self.damage(&what, "they are not as many as its values".into()));
        }
        let folded = Arc::new(folded);
        *slot = Some(Arc::clone(&folded));
        Ok(folded)
    }

    /// The chunks of the table: per chunk, its first row and its rows.
    pub fn chunks(&self) -> &[(u64, usize)] {
        &self.chunks
    }

    /// A declared field's column in every chunk (text: dictionary arrays).
    pub fn column(&self, field: FieldId) -> Result<Arc<Vec<ArrayRef>>, StorageError> {
        let f = field.index();
        if let Some(c) = &*self.columns[f]
            .lock()
            .map_err(|_| StorageError::internal("a column lock is poisoned"))?
        {
            return Ok(Arc::clone(c));
        }
        let values = if self.layout.is_text(f) {
            Some(self.shared_values(field)?)
        } else {
            None
        };
        let mut slot = self.columns[f]
            .lock()
            .map_err(|_| StorageError::internal("a column lock is poisoned"))?;
        if let Some(c) = &*slot {
            return Ok(Arc::clone(c));
        }
        let Some(source) = &self.source else {
            return Err(StorageError::internal(format!(
                "field {f} is missing from the prepared table"
            )));
        };
        let what = format!("column {f}");
        let stored = source.column(f).map_err(|why| self.damage(&what, why))?;
        if stored.len() != self.chunks.len()
            || stored
                .iter()
                .zip(&self.chunks)
                .any(|(a, (_, n))| a.len() != *n)
        {
            return Err(self.damage(&what, "its chunks do not have the rows of the table".into()));
        }
        let arrays: Vec<ArrayRef> = match &values {
            Some(v) => stored
                .into_iter()
                .map(|keys| dictionary(keys, v))
                .collect::<Result<_, _>>()
                .map_err(|why| self.damage(&what, why))?,
            None => {
                let want = &self.layout.targets[f];
                if let Some(bad) = stored.iter().find(|a| a.data_type() != want) {
                    return Err(self.damage(&what, format!("it holds {}", bad.data_type())));
                }
                stored
            }
        };
        let arrays = Arc::new(arrays);
        *slot = Some(Arc::clone(&arrays));
        Ok(arrays)
    }

    /// The records with the given row numbers (in that order) and the given fields, as a
    /// batch with columns named `names`.
    pub fn take_rows(
        &self,
        rows: &[u64],
        fields: &[FieldId],
        names: &[String],
    ) -> Result<RecordBatch, StorageError> {
        let mut at: Vec<(usize, usize)> = Vec::with_capacity(rows.len());
        for &r in rows {
            let c = self.chunks.partition_point(|(first, _)| *first <= r);
            let (first, n) = c
                .checked_sub(1)
                .and_then(|c| self.chunks.get(c))
                .copied()
                .ok_or_else(|| StorageError::internal(format!("no record {r} in the table")))?;
            if r >= first + n as u64 {
                return Err(StorageError::internal(format!(
                    "no record {r} in the table"
                )));
            }
            at.push((c - 1, (r - first) as usize));
        }
        if rows.is_empty() {
            let schema: Vec<ArrowField> = fields
                .iter()
                .zip(names)
                .map(|(f, n)| ArrowField::new(n, self.layout.targets[f.index()].clone(), true))
                .collect();
            return Ok(RecordBatch::new_empty(Arc::new(Schema::new(schema))));
        }
        // Only the chunks the rows lie in, each once.
        let mut used: Vec<usize> = at.iter().map(|(c, _)| *c).collect();
        used.sort_unstable();
        used.dedup();
        // Each chunk's place among the used ones (every chunk of `at` is one of them).
        let mut slot = vec![usize::MAX; self.chunks.len()];
        for (k, c) in used.iter().enumerate() {
            slot[*c] = k;
        }
        let at: Vec<(usize, usize)> = at.iter().map(|(c, r)| (slot[*c], *r)).collect();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(fields.len());
        let mut schema: Vec<ArrowField> = Vec::with_capacity(fields.len());
        for (f, name) in fields.iter().zip(names) {
            let arrays = self.column(*f)?;
            let taken: ArrayRef = if self.layout.is_text(f.index()) {
                // The codes taken, over the one dictionary every chunk shares (interleaving
                // the dictionary arrays themselves would copy their values once per chunk).
                let keys: Vec<&dyn Array> = used
                    .iter()
                    .filter_map(|c| arrays[*c].as_dictionary_opt::<UInt32Type>())
                    .map(|d| d.keys() as &dyn Array)
                    .collect();
                let keys = datafusion::arrow::compute::interleave(&keys, &at)
                    .map_err(|e| StorageError::backend(&self.dataset, e))?;
                dictionary(keys, &self.shared_values(*f)?)
                    .map_err(|m| StorageError::backend(&self.dataset, m))?
            } else {
                let refs: Vec<&dyn Array> = used.iter().map(|c| arrays[*c].as_ref()).collect();
                datafusion::arrow::compute::interleave(&refs, &at)
                    .map_err(|e| StorageError::backend(&self.dataset, e))?
            };
            schema.push(ArrowField::new(name, taken.data_type().clone(), true));
            columns.push(taken);
        }
        RecordBatch::try_new_with_options(
            Arc::new(Schema::new(schema)),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )
        .map_err(|e| StorageError::backend(&self.dataset, e))
    }

    /// Whether each value of a share's field counts.
    fn mask(&self, share: usize) -> Result<Arc<Vec<bool>>, StorageError> {
        let mut slot = self.masks[share]
            .lock()
            .map_err(|_| StorageError::internal("a share lock is poisoned"))?;
        if let Some(m) = &*slot {
            return Ok(Arc::clone(m));
        }
        let s = &self.layout.shares[share];
        let values = self.values(s.field)?;
        let mask = Arc::new(
            (0..values.len())
                .map(|i| s.counts(values.value(i)))
                .collect::<Vec<_>>(),
        );
        *slot = Some(Arc::clone(&mask));
        Ok(mask)
    }

    /// The bytes its columns hold in memory (a mapped store: what it copied out of the map).
    pub fn memory_bytes(&self) -> usize {
        if self.source.is_some() {
            return 0;
        }
        self.columns
            .iter()
            .filter_map(|c| c.lock().ok().and_then(|c| c.clone()))
            .map(|c| {
                c.iter()
                    .map(|a| match a.as_dictionary_opt::<UInt32Type>() {
                        Some(d) => d.keys().get_array_memory_size(),
                        None => a.get_array_memory_size(),
                    })
                    .sum::<usize>()
            })
            .sum::<usize>()
            + self
                .values
                .iter()
                .filter_map(|v| v.lock().ok().and_then(|v| v.clone()))
                .map(|v| v.get_array_memory_size())
                .sum::<usize>()
            + self
                .folded
                .iter()
                .filter_map(|v| v.lock().ok().and_then(|v| v.clone()))
                .map(|v| v.get_array_memory_size())
                .sum::<usize>()
    }
}

/// A dictionary array of stored codes over a field's values; every present code is checked
/// against the values.
fn dictionary(keys: ArrayRef, values: &ArrayRef) -> Result<ArrayRef, String> {
    let keys = keys
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| format!("codes stored as {}", keys.data_type()))?
        .clone();
    let n = values.len() as u32;
    if keys.values().iter().any(|k| *k >= n) {
        return Err("a code past the end of its dictionary".into());
    }
    let array = DictionaryArray::<UInt32Type>::try_new(keys, Arc::clone(values))
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(array))
}

/// The table provider over a [`Store`]: the layout's columns, hidden ones derived on scan.
#[derive(Debug)]
pub struct PreparedTable {
    store: Arc<Store>,
}

impl PreparedTable {
    pub fn new(store: Arc<Store>) -> PreparedTable {
        PreparedTable { store }
    }
}

#[async_trait]
impl TableProvider for PreparedTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.store.layout.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let layout = &self.store.layout;
        let all: Vec<usize> = (0..layout.schema.fields().len()).collect();
        let indices = projection.unwrap_or(&all);
        let schema = Arc::new(
            layout
                .schema
                .project(indices)
                .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))?,
        );
        let mut outs = Vec::with_capacity(indices.len());
        for &c in indices {
            let out = layout.out(c).ok_or_else(|| {
                DataFusionError::Internal(format!("no column {c} in the prepared table"))
            })?;
            let loaded = match out {
                Out::Field(f) | Out::Code(f) => Loaded::Arrays(self.column(f)?),
                Out::Dict(_) => {
                    return Err(DataFusionError::Internal(
                        "a prepared table has code columns, not dictionary columns".into(),
                    ));
                }
                Out::Share(s) => Loaded::Share(
                    self.column(layout.shares[s].field.index())?,
                    self.store.mask(s).map_err(external)?,
                ),
                Out::Row => Loaded::Row,
            };
            outs.push((out, loaded));
        }
        // The chunks split between the call's partitions (one unless the table is large).
        let partitions = state.config().target_partitions().max(1);
        Ok(Arc::new(PreparedExec::new(
            Arc::clone(&self.store),
            schema,
            Arc::new(outs),
            limit,
            partitions,
        )))
    }
}

impl PreparedTable {
    fn column(&self, f: usize) -> DfResult<Arc<Vec<ArrayRef>>> {
        self.store.column(FieldId::at(f)).map_err(external)
    }
}

pub(crate) fn external(e: StorageError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// What a scan reads for one output column.
#[derive(Debug)]
enum Loaded {
    Arrays(Arc<Vec<ArrayRef>>),
    Share(Arc<Vec<ArrayRef>>, Arc<Vec<bool>>),
    Row,
}

/// A scan of a [`Store`]: a batch per chunk, hidden columns made per batch; the chunks split
/// into contiguous runs, one a partition.
struct PreparedExec {
    store: Arc<Store>,
    schema: SchemaRef,
    outs: Arc<Vec<(Out, Loaded)>>,
    limit: Option<usize>,
    partitions: usize,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for PreparedExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedExec")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl PreparedExec {
    fn new(
        store: Arc<Store>,
        schema: SchemaRef,
        outs: Arc<Vec<(Out, Loaded)>>,
        limit: Option<usize>,
        partitions: usize,
    ) -> PreparedExec {
        let partitions = partitions.clamp(1, store.chunks.len().max(1));
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        PreparedExec {
            store,
            schema,
            outs,
            limit,
            partitions,
            properties,
        }
    }

    /// The chunks of a partition.
    fn chunks_of(&self, partition: usize) -> std::ops::Range<usize> {
        let n = self.store.chunks.len();
        let each = n.div_ceil(self.partitions);
        (partition * each).min(n)..((partition + 1) * each).min(n)
    }
}

impl DisplayAs for PreparedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PreparedExec: {} rows in {} chunks",
            self.store.rows,
            self.store.chunks.len()
        )
    }
}

/// The batch of chunk `c` with the columns `outs` asks for.
fn chunk_batch(
    store: &Store,
    schema: &SchemaRef,
    outs: &[(Out, Loaded)],
    c: usize,
) -> DfResult<RecordBatch> {
    let (first, n) = store.chunks[c];
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(outs.len());
    for (out, loaded) in outs {
        columns.push(match (out, loaded) {
            (Out::Field(_), Loaded::Arrays(a)) => Arc::clone(&a[c]),
            (Out::Code(_), Loaded::Arrays(a)) => {
                let dict = a[c].as_dictionary_opt::<UInt32Type>().ok_or_else(|| {
                    DataFusionError::Internal("a code column of a field without codes".into())
                })?;
                // The codes as they are: a null has code 0, which is also "".
                Arc::new(UInt32Array::new(dict.keys().values().clone(), None))
            }
            (Out::Share(_), Loaded::Share(a, mask)) => {
                let dict = a[c].as_dictionary_opt::<UInt32Type>().ok_or_else(|| {
                    DataFusionError::Internal("a share of a field without codes".into())
                })?;
                Arc::new(share_of_codes(dict, mask))
            }
            (Out::Row, _) => Arc::new(UInt64Array::from_iter_values(first..first + n as u64)),
            _ => {
                return Err(DataFusionError::Internal(
                    "a scan column read the wrong way".into(),
                ));
            }
        });
    }
    RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(n)),
    )
    .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
}

#[allow(deprecated)]
impl ExecutionPlan for PreparedExec {
    fn name(&self) -> &str {
        "PreparedExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition >= self.partitions {
            return Err(DataFusionError::Internal(format!(
                "PreparedExec has {} partitions, not {partition}",
                self.partitions
            )));
        }
        let store = Arc::clone(&self.store);
        let schema = Arc::clone(&self.schema);
        let outs = Arc::clone(&self.outs);
        let mut left = self.limit.unwrap_or(usize::MAX);
        let range = self.chunks_of(partition);
        let chunks = range.end;
        let stream_schema = Arc::clone(&schema);
        let mut c = range.start;
        // The batches are at hand and never awaited, so an abort of the call's task would not
        // reach a plan draining them: the call's stop is looked at before each one.
        let stop = crate::stop::Stop::of_task(&context);
        let batches = std::iter::from_fn(move || {
            if left == 0 || c >= chunks {
                return None;
            }
            if stop.is_set() {
                c = chunks;
                return Some(Err(DataFusionError::External(Box::new(
                    crate::stop::stopped_error(),
                ))));
            }
            let batch = chunk_batch(&store, &schema, &outs, c).map(|b| {
                if b.num_rows() > left {
                    let cut = b.slice(0, left);
                    left = 0;
                    cut
                } else {
                    left -= b.num_rows();
                    b
                }
            });
            c += 1;
            Some(batch)
        });
        let stream = futures::stream::iter(batches);
        Ok(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                stream_schema,
                futures::StreamExt::boxed(stream),
            ),
        ))
    }
}

/// A leaf plan whose batches come from a stream made when it is executed (one partition).
pub struct StreamPlan {
    label: String,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    make: Box<dyn Fn() -> SendableRecordBatchStream + Send + Sync>,
}

impl fmt::Debug for StreamPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPlan")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl StreamPlan {
    pub fn new(
        label: impl Into<String>,
        schema: SchemaRef,
        make: impl Fn() -> SendableRecordBatchStream + Send + Sync + 'static,
    ) -> StreamPlan {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        StreamPlan {
            label: label.into(),
            schema,
            properties,
            make: Box::new(make),
        }
    }
}

impl DisplayAs for StreamPlan {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.label)
    }
}

#[allow(deprecated)]
impl ExecutionPlan for StreamPlan {
    fn name(&self) -> &str {
        &self.label
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "{} has one partition, not {partition}",
                self.label
            )));
        }
        let _ = &self.schema;
        Ok((self.make)())
    }
}

/// What a [`MapExec`] does to each batch.
pub type BatchMap = dyn Fn(RecordBatch) -> DfResult<RecordBatch> + Send + Sync;

/// A plan that turns each batch of its input into another of `schema` (columns derived,
/// reordered or left out), partition by partition.
pub struct MapExec {
    label: String,
    input: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    map: Arc<BatchMap>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for MapExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapExec")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl MapExec {
    pub fn new(
        label: impl Into<String>,
        input: Arc<dyn ExecutionPlan>,
        schema: SchemaRef,
        map: Arc<BatchMap>,
    ) -> MapExec {
        let partitions = input.properties().partitioning.partition_count();
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        MapExec {
            label: label.into(),
            input,
            schema,
            map,
            properties,
        }
    }
}

impl DisplayAs for MapExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.label)
    }
}

#[allow(deprecated)]
impl ExecutionPlan for MapExec {
    fn name(&self) -> &str {
        &self.label
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children
            .into_iter()
            .next()
            .ok_or_else(|| DataFusionError::Internal(format!("{} takes one input", self.label)))?;
        Ok(Arc::new(MapExec::new(
            self.label.clone(),
            input,
            Arc::clone(&self.schema),
            Arc::clone(&self.map),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let map = Arc::clone(&self.map);
        let stream = futures::StreamExt::map(input, move |batch| batch.and_then(|b| map(b)));
        Ok(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                stream,
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    /// A store of `chunks` chunks over one text and one number field.
    fn store(chunks: usize) -> Store {
        let def = tally_semantic::definition::load_definition(
            "d.yaml",
            "d",
            "title: t\nfields:\n- {name: s, role: attr}\n- {name: n, role: measure, data_type: integer}\n",
        )
        .expect("definition")
        .dataset;
        let source = Schema::new(vec![
            ArrowField::new("s", DataType::Utf8, true),
            ArrowField::new("n", DataType::Int64, true),
        ]);
        let layout = Arc::new(Layout::of(&def, &source).expect("layout"));
        let mut builder = Builder::new("d", Arc::clone(&layout));
        let mut sink = InMemory::default();
        for c in 0..chunks {
            let text: StringArray = (0..CHUNK_ROWS)
                .map(|r| Some(format!("value {}", (c * CHUNK_ROWS + r) % 1000)))
                .collect();
            let numbers =
                Int64Array::from_iter_values((0..CHUNK_ROWS as i64).map(|r| r + c as i64));
            let batch = RecordBatch::try_new(
                Arc::new(source.clone()),
                vec![Arc::new(text), Arc::new(numbers)],
            )
            .expect("batch");
            builder.push(&batch, &mut sink).expect("pushed");
        }
        let (values, stats) = builder.finish(&mut sink).expect("finished");
        Store::in_memory("d", layout, sink.chunks, values, stats).expect("store")
    }

    #[test]
    fn preparing_counts_each_fields_fill_and_numbers_as_inspect_does() {
        let def = tally_semantic::definition::load_definition(
            "d.yaml",
            "d",
            "title: t\nfields:\n- {name: s, role: attr}\n- {name: n, role: measure, data_type: integer}\n- {name: x, role: measure, data_type: number}\n",
        )
        .expect("definition")
        .dataset;
        let source = Schema::new(vec![
            ArrowField::new("s", DataType::Utf8, true),
            ArrowField::new("n", DataType::Int32, true),
            ArrowField::new("x", DataType::Float64, true),
        ]);
        let layout = Arc::new(Layout::of(&def, &source).expect("layout"));
        let mut builder = Builder::new("d", Arc::clone(&layout));
        let mut sink = InMemory::default();
        // Blank is spaces only (as `btrim`): a full-width space or a tab is a value.
        type Batch<'a> = (Vec<Option<&'a str>>, Vec<Option<i32>>, Vec<Option<f64>>);
        let batches: [Batch<'_>; 2] = [
            (
                vec![Some("a"), None, Some(""), Some("  ")],
                vec![Some(3), None, Some(0), Some(-7)],
                vec![Some(0.5), Some(f64::NAN), None, Some(0.0)],
            ),
            (
                vec![Some("\u{3000}"), Some("a"), Some("\t"), None],
                vec![Some(0), Some(12), None, None],
                vec![None, Some(-2.0), Some(4.0), None],
            ),
        ];
        for (text, ints, floats) in batches {
            let batch = RecordBatch::try_new(
                Arc::new(source.clone()),
                vec![
                    Arc::new(StringArray::from(text)),
                    Arc::new(datafusion::arrow::array::Int32Array::from(ints)),
                    Arc::new(datafusion::arrow::array::Float64Array::from(floats)),
                ],
            )
            .expect("batch");
            builder.push(&batch, &mut sink).expect("pushed");
        }
        let (_, stats) = builder.finish(&mut sink).expect("finished");
        assert_eq!(stats[0].filled, 4, "a, a, the full-width space and the tab");
        assert_eq!(stats[0].min, None);
        let n = &stats[1];
        assert_eq!((n.filled, n.zeros), (5, 2));
        assert_eq!(
            (n.min.clone(), n.max.clone()),
            (Some((-7).into()), Some(12.into()))
        );
        assert_eq!(n.mean(), Some(8.0 / 5.0));
        let x = &stats[2];
        assert_eq!((x.filled, x.zeros), (5, 1));
        assert_eq!(x.min, serde_json::Number::from_f64(-2.0));
        assert_eq!(x.max, serde_json::Number::from_f64(4.0));
        assert!(
            x.mean().is_some_and(f64::is_nan),
            "a NaN makes the mean NaN, as avg does"
        );
    }

    /// A share over views (short and long values, nulls, `""`, a long value that only
    /// starts like a counted one, views built with and without a shared buffer) is the share
    /// decided on the text itself.
    #[test]
    fn a_share_over_views_is_the_share_over_the_text() {
        use datafusion::arrow::array::{StringArray, StringViewBuilder};
        let counted = "オンライン化の実施済の手続";
        let share = |separator: Option<&str>| Share {
            measure: MeasureId::at(0),
            field: FieldId::at(0),
            separator: separator.map(str::to_string),
            values: vec!["1 実施済".into(), counted.into(), "abc".into()],
        };
        let values = [
            Some("1 実施済"),
            Some("2 未実施"),
            Some(counted),
            Some("オンライン化の実施済の手続でない"),
            Some("オンライン化の未実施の手続"),
            None,
            Some(""),
            Some("abc"),
            Some("abcd"),
            Some("1 実施済; abc"),
        ];
        let rows: Vec<Option<&str>> = (0..500).map(|i| values[(i * 7) % values.len()]).collect();
        for separator in [None, Some(";")] {
            let share = share(separator);
            let want: Vec<f64> = rows
                .iter()
                .map(|v| f64::from(u8::from(v.is_some_and(|v| share.counts(v)))))
                .collect();
            for dedup in [false, true] {
                let mut builder = StringViewBuilder::new();
                if dedup {
                    builder = builder.with_deduplicate_strings();
                }
                builder.extend(rows.iter().copied());
                let got = share.column(&builder.finish()).expect("share");
                let got = got.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
                assert_eq!(got.values().to_vec(), want, "{separator:?}, dedup {dedup}");
            }
            let plain = share
                .column(&StringArray::from(rows.clone()))
                .expect("share");
            let plain = plain.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
            assert_eq!(plain.values().to_vec(), want);
        }
    }

    #[test]
    fn rows_taken_across_chunks_share_the_one_dictionary() {
        let store = store(4);
        let rows: Vec<u64> = vec![5, (CHUNK_ROWS * 3 + 7) as u64, (CHUNK_ROWS + 1) as u64];
        let names = vec!["s".to_string(), "n".to_string()];
        let batch = store
            .take_rows(&rows, &[FieldId::at(0), FieldId::at(1)], &names)
            .expect("taken");
        let text = batch
            .column(0)
            .as_dictionary_opt::<UInt32Type>()
            .expect("dictionary");
        // The values are not copied per chunk: the page refers to the table's dictionary.
        assert!(Arc::ptr_eq(
            text.values(),
            &store.shared_values(FieldId::at(0)).expect("values")
        ));
        let shown: Vec<String> = (0..3)
            .map(|i| {
                text.values()
                    .as_string::<i32>()
                    .value(text.keys().value(i) as usize)
                    .to_string()
            })
            .collect();
        assert_eq!(shown, ["value 5", "value 311", "value 769"]);
        let numbers = batch
            .column(1)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(numbers.values().to_vec(), vec![5, 10, 2]);
    }
}
