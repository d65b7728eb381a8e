//! The prepared table itself: its chunks and each field's column, held in memory or read
//! from a mapped cache entry the first time a call needs them (and checked then).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, RecordBatch, RecordBatchOptions, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field as ArrowField, Schema, UInt32Type};
use datafusion::arrow::error::ArrowError;
use tally_semantic::definition::FieldId;

use super::intern::Dictionary;
use super::layout::Layout;
use super::stats::FieldStats;
use crate::error::StorageError;

/// A slot filled on first use.
type Slot<T> = Mutex<Option<T>>;

/// Where a store's columns are read from when first used.
pub trait Columns: Send + Sync + fmt::Debug {
    /// The stored column `field` of every chunk (text as its codes), checked.
    fn column(&self, field: usize) -> Result<Vec<ArrayRef>, Damage>;
    /// The dictionary of text field `field`, checked.
    fn values(&self, field: usize) -> Result<StringArray, Damage>;
    /// The folded forms of that dictionary's values ([`Dictionary::folded`]), checked.
    fn folded(&self, field: usize) -> Result<StringArray, Damage>;
    /// Called when something read does not check out: the source is not to be used again.
    fn damaged(&self) {}
}

/// Why what a store read from its source (a mapped cache entry) does not check out: said in
/// the log, and the store is not used again. Codes stored in memory are checked alike.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// Arrow could not decode or validate what was read.
    #[error("{0}")]
    Arrow(#[from] ArrowError),
    #[error("an empty block")]
    EmptyBlock,
    /// The decoder panicked on the block.
    #[error("a block the decoder cannot read")]
    Undecodable,
    #[error("chunk {0} does not match its checksum")]
    ChunkChecksum(usize),
    #[error("the dictionary does not match its checksum")]
    DictionaryChecksum,
    #[error("the folded values do not match their checksum")]
    FoldedChecksum,
    #[error("a dictionary that does not start with the empty value")]
    NoEmptyValue,
    #[error("no dictionary for field {0}")]
    NoDictionary(usize),
    #[error("a dictionary that is not text")]
    NotText,
    #[error("codes stored as {0}")]
    CodesStoredAs(DataType),
    #[error("a code past the end of its dictionary")]
    CodePastEnd,
    #[error("its chunks do not have the rows of the table")]
    ChunkRows,
    /// A number column of another type than the layout's.
    #[error("it holds {0}")]
    Holds(DataType),
    /// Folded forms not as many as the dictionary's values.
    #[error("they are not as many as its values")]
    FoldedCount,
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
    /// A store over chunks held in memory and the dictionaries
    /// [`Builder::finish`](crate::store::Builder::finish) gave.
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

    fn damage(&self, what: &str, why: Damage) -> StorageError {
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
            return Err(self.damage(&what, Damage::FoldedCount));
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
            return Err(self.damage(&what, Damage::ChunkRows));
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
                    return Err(self.damage(&what, Damage::Holds(bad.data_type().clone())));
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
    pub(super) fn mask(&self, share: usize) -> Result<Arc<Vec<bool>>, StorageError> {
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
fn dictionary(keys: ArrayRef, values: &ArrayRef) -> Result<ArrayRef, Damage> {
    let keys = keys
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| Damage::CodesStoredAs(keys.data_type().clone()))?
        .clone();
    let n = values.len() as u32;
    if keys.values().iter().any(|k| *k >= n) {
        return Err(Damage::CodePastEnd);
    }
    let array = DictionaryArray::<UInt32Type>::try_new(keys, Arc::clone(values))?;
    Ok(Arc::new(array))
}
