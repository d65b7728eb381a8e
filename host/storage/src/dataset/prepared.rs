//! The data of a dataset version as calls read it: a prepared table (held in memory or mapped
//! from the cache) or its files read at every call, with what is worked out of it once.

use std::sync::Arc;

use datafusion::arrow::array::{Array as _, AsArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::UInt32Type;
use datafusion::catalog::TableProvider;
use tally_semantic::definition::{DatasetDef, FieldId, MeasureId};

use crate::backend::{Pushed, RowSources, ServedFile};
use crate::error::StorageError;
use crate::memory::Meter;
use crate::store::{Layout, PreparedTable, Store};

/// How many text searches (and at most how many bytes of them) a prepared table keeps.
const SEARCHES_KEPT: usize = 8;
const SEARCHES_KEPT_BYTES: usize = 64 << 20;

/// Distinct values of a field with their record counts, most frequent first.
pub type ValueCounts = Arc<Vec<(String, usize)>>;

/// Distinct values of a field by their NFKC form (sorted within each form).
pub type Variants = Arc<std::collections::HashMap<String, Vec<String>>>;

/// How the data of an answer was read (said in its extract step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Prepared by this process and held in memory.
    Memory,
    /// Prepared by this process into the cache, and mapped from there.
    Written,
    /// Prepared once (by an earlier process, or for an earlier call) and mapped from the
    /// cache.
    Mapped,
    /// Read from the files at this call.
    Streamed,
}

/// Where a dataset version's data is.
#[derive(Debug)]
pub enum Data {
    /// Prepared: in memory or mapped.
    Stored(Arc<Store>),
    /// Read from its files at every call.
    Streamed(Arc<dyn crate::backend::Streaming>),
}

/// The table one call reads, and (when it reads files) what its scans read of them.
#[derive(Debug, Clone)]
pub struct CallTable {
    pub provider: Arc<dyn TableProvider>,
    pub counts: Option<Arc<crate::backend::ReadCounts>>,
}

/// The data of a dataset version as calls read it: a prepared [`Store`], or its files.
#[derive(Debug)]
pub struct Prepared {
    /// The table over a store (streamed data makes one per call).
    stored_table: Option<Arc<dyn TableProvider>>,
    pub data: Data,
    pub layout: Arc<Layout>,
    pub files: Vec<ServedFile>,
    pub rows: usize,
    /// How the rows were read, when the backend says it in its own words (plugins).
    pub extract: Option<String>,
    /// Caveats from the backend, shown with every result.
    pub notes: Vec<String>,
    /// Per row (indexed by the row column), its own source, when the backend reports one.
    pub row_sources: Option<Arc<RowSources>>,
    /// The conditions the backend applied itself to give this table (empty: all the data).
    pub pushed: Vec<Pushed>,
    /// What an executor of a cluster rebuilds the table from (data read at every call from
    /// files it can reach), if it can.
    pub cluster_source: Option<Arc<crate::source::TableSource>>,
    pub served: Served,
    /// Distinct values (parts, for multi-value fields) with their record counts, per field,
    /// computed when first needed.
    pub(super) values: std::sync::Mutex<std::collections::HashMap<FieldId, ValueCounts>>,
    /// Per text field, its distinct values grouped by their NFKC form, computed when first
    /// needed.
    pub(super) variants: std::sync::Mutex<std::collections::HashMap<FieldId, Variants>>,
    /// Per coded field, the rank of each code when the values are sorted (code 0, "",
    /// ranks first), computed when first needed.
    pub(super) ranks: std::sync::Mutex<std::collections::HashMap<FieldId, Arc<Vec<u32>>>>,
    /// Per multi-value field of a prepared table, its parts numbered, made when first needed.
    part_indexes: std::sync::Mutex<std::collections::HashMap<FieldId, Arc<crate::udf::PartIndex>>>,
    /// The last text searches of a prepared table and the records they found (a few, most
    /// recent last), so paging through one or summarising it does not search again.
    #[allow(clippy::type_complexity)]
    searches:
        std::sync::Mutex<std::collections::VecDeque<(Vec<FieldId>, String, crate::search::Found)>>,
    /// The `count_where` computed measures with a share column ([`share_column`](crate::store::share_column)).
    pub shares: Vec<MeasureId>,
    /// The table's memory, held from the server's budget while the table lives.
    #[allow(dead_code)]
    memory: Meter,
}

/// The values of a coded field's codes (code 0 is a missing value).
#[derive(Debug, Clone)]
pub struct Codes(StringArray);

impl Codes {
    pub fn of(values: StringArray) -> Codes {
        Codes(values)
    }

    /// The rank of each code in the sorted order of the values.
    pub fn ranks(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.len() as u32).collect();
        order.sort_by(|a, b| {
            self.get(*a as usize)
                .cmp(&self.get(*b as usize))
                .then(a.cmp(b))
        });
        let mut ranks = vec![0u32; self.len()];
        for (rank, code) in order.into_iter().enumerate() {
            ranks[code as usize] = rank as u32;
        }
        ranks
    }

    /// The value of a code; `None` past the end.
    pub fn get(&self, code: usize) -> Option<&str> {
        (code < self.0.len()).then(|| self.0.value(code))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Prepared {
    pub(super) fn new(
        store: Store,
        loaded: Loaded,
        pushed: Vec<Pushed>,
        served: Served,
        memory: Meter,
    ) -> Prepared {
        let store = Arc::new(store);
        Prepared {
            stored_table: Some(Arc::new(PreparedTable::new(Arc::clone(&store)))),
            rows: store.rows(),
            shares: store.layout().shares.iter().map(|s| s.measure).collect(),
            layout: Arc::clone(store.layout()),
            data: Data::Stored(store),
            files: loaded.files,
            extract: loaded.extract,
            notes: loaded.notes,
            row_sources: loaded.row_sources,
            pushed,
            served,
            cluster_source: None,
            values: Default::default(),
            variants: Default::default(),
            ranks: Default::default(),
            part_indexes: Default::default(),
            searches: Default::default(),
            memory,
        }
    }

    /// Data read from its files at every call.
    pub(super) fn streamed(
        streaming: Arc<dyn crate::backend::Streaming>,
        layout: Arc<Layout>,
        pushed: Vec<Pushed>,
        memory: Meter,
        cluster_source: Option<Arc<crate::source::TableSource>>,
    ) -> Prepared {
        Prepared {
            stored_table: None,
            rows: streaming.rows(),
            shares: layout.shares.iter().map(|s| s.measure).collect(),
            layout,
            files: streaming.files().to_vec(),
            extract: streaming.extract(),
            notes: Vec::new(),
            row_sources: None,
            pushed,
            served: Served::Streamed,
            cluster_source,
            values: Default::default(),
            variants: Default::default(),
            ranks: Default::default(),
            part_indexes: Default::default(),
            searches: Default::default(),
            memory,
            data: Data::Streamed(streaming),
        }
    }

    /// The table a call reads (a streamed one counts what the call reads of the files).
    pub fn table(&self) -> CallTable {
        match (&self.data, &self.stored_table) {
            (Data::Stored(_), Some(table)) => CallTable {
                provider: Arc::clone(table),
                counts: None,
            },
            (Data::Streamed(streaming), _) => {
                let (inner, counts) = streaming.table();
                CallTable {
                    provider: Arc::new(
                        crate::cluster::StreamedTable::new(inner, Arc::clone(&self.layout))
                            .with_source(self.cluster_source.clone()),
                    ),
                    counts: Some(counts),
                }
            }
            (Data::Stored(store), None) => CallTable {
                provider: Arc::new(PreparedTable::new(Arc::clone(store))),
                counts: None,
            },
        }
    }

    /// Whether the data is prepared (held or mapped), not read from its files at every call:
    /// what is cheap to look at again.
    pub fn is_prepared(&self) -> bool {
        self.store().is_some()
    }

    pub(super) fn store(&self) -> Option<&Arc<Store>> {
        match &self.data {
            Data::Stored(s) => Some(s),
            Data::Streamed(_) => None,
        }
    }

    /// What preparing found of each declared field's values (by field index), when the table
    /// is prepared and kept them.
    pub fn field_stats(&self) -> Option<&[crate::store::FieldStats]> {
        self.store()?.field_stats()
    }

    /// The parts of a multi-value field numbered (a prepared table's only), for exploding on
    /// codes.
    pub fn part_index(
        &self,
        def: &DatasetDef,
        field: FieldId,
    ) -> Option<Arc<crate::udf::PartIndex>> {
        let store = self.store()?;
        let separator = def.fields[field].multi_value.as_deref()?;
        if !store.layout().is_text(field.index()) {
            return None;
        }
        if let Ok(cache) = self.part_indexes.lock()
            && let Some(i) = cache.get(&field)
        {
            return Some(Arc::clone(i));
        }
        let values = store.shared_values(field).ok()?;
        let index = Arc::new(crate::udf::PartIndex::new(values, separator).ok()?);
        if let Ok(mut cache) = self.part_indexes.lock() {
            cache.insert(field, Arc::clone(&index));
        }
        Some(index)
    }

    /// The records (by row number) in which one of the text fields `fields` contains `needle`
    /// (folded already), found through the prepared table's dictionaries ([`crate::search`]);
    /// `None` when the data is read from its files or one of the fields is not text in it.
    pub fn text_search(
        &self,
        fields: &[FieldId],
        needle: &str,
        stop: &crate::stop::Stop,
    ) -> Option<Result<crate::search::Found, StorageError>> {
        let store = self.store()?;
        if fields.is_empty() || fields.iter().any(|f| !store.layout().is_text(f.index())) {
            return None;
        }
        if let Ok(kept) = self.searches.lock()
            && let Some((_, _, found)) = kept
                .iter()
                .find(|(f, n, _)| f.as_slice() == fields && n == needle)
        {
            return Some(Ok(Arc::clone(found)));
        }
        let found = match crate::search::search(store, fields, needle, stop) {
            Ok(found) => Arc::new(found),
            Err(e) => return Some(Err(e)),
        };
        if let Ok(mut kept) = self.searches.lock() {
            // A few searches, and at most 64 MiB of them.
            let most = (SEARCHES_KEPT_BYTES / found.bytes().max(1)).clamp(1, SEARCHES_KEPT);
            while kept.len() >= most {
                kept.pop_front();
            }
            kept.push_back((fields.to_vec(), needle.to_string(), Arc::clone(&found)));
        }
        Some(Ok(found))
    }

    /// How many text searches the table keeps (made through its dictionaries).
    pub fn searches_kept(&self) -> usize {
        self.searches.lock().map_or(0, |kept| kept.len())
    }

    /// The records with the given row numbers, in that order, with the fields given (named
    /// `names`), taken from a prepared table; `None` when the data is read from its files.
    pub fn take_rows(
        &self,
        rows: &[u64],
        fields: &[FieldId],
        names: &[String],
    ) -> Option<Result<RecordBatch, StorageError>> {
        let store = self.store()?;
        Some(store.take_rows(rows, fields, names))
    }

    /// Whether the table is not to be used again (its cached data did not check out).
    pub fn is_damaged(&self) -> bool {
        self.store().is_some_and(|s| s.is_damaged())
    }

    /// Whether a field read from its files is also served as a dictionary array
    /// ([`crate::store::dictionary_column`]): what a summary numbers the field's values
    /// from, once per distinct value of a column chunk instead of once per row.
    pub fn dictionary_of(&self, field: FieldId) -> bool {
        let Data::Streamed(streaming) = &self.data else {
            return false;
        };
        self.layout.dictionaries
            && self.layout.coded.contains(&field)
            && streaming.dictionary_encoded(self.layout.schema.field(field.index()).name())
    }

    /// The values of a field's code column, when it is grouped on codes.
    pub fn codes(&self, field: FieldId) -> Option<Codes> {
        let store = self.store()?;
        if !store.layout().coded.contains(&field) {
            return None;
        }
        store.values(field).ok().map(Codes)
    }

    /// Whether a declared text field has any missing value (null or ""); numbers: any null.
    /// Read from the files, a field is taken to have some (the answer is the same, found a
    /// little slower).
    pub fn has_missing(&self, field: FieldId) -> Result<bool, StorageError> {
        let Some(store) = self.store() else {
            return Ok(true);
        };
        let arrays = store.column(field)?;
        Ok(arrays.iter().any(|a| {
            a.null_count() > 0
                || a.as_dictionary_opt::<UInt32Type>()
                    .is_some_and(|d| d.keys().values().contains(&0))
        }))
    }
}

/// What a backend's load gave besides its rows.
pub(super) struct Loaded {
    pub(super) files: Vec<ServedFile>,
    pub(super) extract: Option<String>,
    pub(super) notes: Vec<String>,
    pub(super) row_sources: Option<Arc<RowSources>>,
}
