//! A served dataset: its definition, its backend, and the prepared table queries run on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::UInt32Type;
use datafusion::catalog::TableProvider;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::Expr;
use datafusion::prelude::{SessionContext, ident};
use tally_semantic::definition::{DatasetDef, DateValue, Diagnostic, FieldId, MeasureId};
use tokio::sync::OnceCell;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::{Backend, LoadedData, Pushed, RowSources, ServedFile};
use crate::error::StorageError;
use crate::memory::{Budget, Meter, Progress};
use crate::store::{Builder, ChunkSink, InMemory, Layout, PreparedTable, Store};

pub use crate::store::{
    RESERVED_PREFIX, ROW_COL, canonical_type, code_column, dictionary_column, share_column,
    text_type,
};

/// What a dataset's preparation draws on, owned by the layer that serves calls (the engine):
/// the server-wide memory budget, the cache of prepared tables, the shared session, the slots
/// preparations take, and whether datasets are prepared or read at every call.
pub trait Resources: Send + Sync {
    fn budget(&self) -> &Arc<crate::memory::Budget>;
    fn cache(&self) -> Option<&Arc<crate::cache::Cache>>;
    fn context(&self) -> &SessionContext;
    fn preparations(&self) -> &Arc<tokio::sync::Semaphore>;
    fn serving(&self) -> Serving;
}

/// Where the retrieval date of a dataset comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retrieved {
    /// `.fetch.json` beside the data (`fetched_at`).
    FetchRecord(DateValue),
    /// `retrieved_at` in dataset.yaml.
    Definition(DateValue),
    /// Neither: the data file's modification time (said in a warning).
    FileModified(String),
    Unknown,
}

impl Retrieved {
    pub fn value(&self) -> Option<&str> {
        match self {
            Retrieved::FetchRecord(d) | Retrieved::Definition(d) => Some(d.as_str()),
            Retrieved::FileModified(s) => Some(s),
            Retrieved::Unknown => None,
        }
    }
}

/// A dataset the catalog serves.
#[derive(Debug)]
pub struct Dataset {
    pub def: DatasetDef,
    pub folder: PathBuf,
    /// The definition file, as named in messages (`datasets/<folder>/dataset.yaml`).
    pub definition_file: String,
    pub warnings: Vec<Diagnostic>,
    pub backend: Arc<dyn Backend>,
    /// Columns of the data that the definition does not declare (not served).
    pub undeclared_columns: Vec<String>,
    pub retrieved: Retrieved,
    /// The URL `.fetch.json` says the data was fetched from, if any.
    pub fetched_from: Option<String>,
    /// Identifies this version of definition + data (changes when either changes).
    pub version: String,
    /// The definition file's text, as registered (sent with plans a cluster runs).
    pub definition_text: Arc<str>,
    prepared: PreparedCell,
    /// Prepared subsets read with conditions the backend applied itself, by condition (a
    /// few, most recent last).
    subsets: std::sync::Mutex<Vec<(Vec<Pushed>, Arc<PreparedCell>)>>,
    /// The files read at every call, by condition set (a few, most recent last).
    #[allow(clippy::type_complexity)]
    streams: std::sync::Mutex<Vec<(Vec<Pushed>, Arc<OnceCell<Arc<Prepared>>>)>>,
    /// A change of this dataset's folder or source that could not be served, while this
    /// version goes on serving (the catalog records it: see [`Dataset::note_refused`]).
    refused: std::sync::Mutex<Option<RefusedChange>>,
}

/// A change of a served dataset's folder or source that could not be served: this version
/// goes on serving, and each answer from it says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedChange {
    /// When the change was first seen (RFC 3339).
    pub since: String,
    /// The problems, in words (`data: no Parquet object … is under s3://…`).
    pub reason: String,
    /// The data this version was read from is no longer at its source (deleted or moved).
    pub data_gone: bool,
}

/// A prepared table, built once, in the background, by a task of its own: a call waits for
/// it only until its own deadline, and the next call finds it further along (or done).
#[derive(Debug, Default)]
struct PreparedCell {
    /// Shared with the task preparing it, which records its outcome.
    state: Arc<std::sync::Mutex<PrepState>>,
    /// Set when the cell is dropped (its dataset version replaced, or a subset evicted): a
    /// preparation still running for it stops at its next batch.
    cancel: Arc<AtomicBool>,
    /// Numbers the preparations of this cell, so a late waiter of one never records its
    /// outcome over a newer one's.
    generation: std::sync::atomic::AtomicU64,
}

impl Drop for PreparedCell {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// The preparation running for a cell, awaited by every call that needs it.
#[derive(Clone)]
struct Preparing(
    futures::future::Shared<
        futures::future::BoxFuture<'static, Result<Arc<Prepared>, StorageError>>,
    >,
);

impl std::fmt::Debug for Preparing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Preparing")
    }
}

#[derive(Debug, Default)]
enum PrepState {
    #[default]
    Idle,
    Running {
        done: Preparing,
        progress: Arc<Progress>,
        generation: u64,
    },
    Ready(Arc<Prepared>),
    /// A failure that would repeat: the same bytes fail the same way, and a dataset over
    /// the memory budget stays over it while the budget is as full (`free` bytes then).
    Failed {
        error: StorageError,
        free: usize,
    },
}

/// How many pushed-down subsets (and streams) a dataset version keeps.
const SUBSETS_KEPT: usize = 16;

/// How many text searches (and at most how many bytes of them) a prepared table keeps.
const SEARCHES_KEPT: usize = 8;
const SEARCHES_KEPT_BYTES: usize = 64 << 20;

/// Records from which a dataset still being prepared is answered from its files meanwhile
/// (`--streaming auto`); a smaller one is prepared within a call's wait.
pub const STREAM_WHILE_PREPARING: u64 = 1_000_000;

/// What a call reads, for weighing its files against a preparation under way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Fields whose every value the call reads (its conditions, groups, measures, order).
    pub fields: usize,
    /// Of those, the text fields searched for a substring (`q`, `$contains`): each value is
    /// also folded and scanned.
    pub searched: usize,
}

/// How a call was answered while its dataset's whole table was being prepared: the path
/// taken and the estimates that chose it (said in the answer's provenance).
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Read from the files, estimated sooner than the preparation's end; both estimates
    /// are unknown (`None`) until the preparation has prepared enough rows to time it.
    Files {
        estimate: Option<(std::time::Duration, std::time::Duration)>,
    },
    /// Waited for the preparation, estimated sooner than reading the files; answered from
    /// the prepared table.
    Waited {
        waited: std::time::Duration,
        /// The files' and the preparation's estimates, when the table was large enough
        /// to be read from its files meanwhile.
        estimate: Option<(std::time::Duration, std::time::Duration)>,
    },
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |d: &std::time::Duration| format!("{:.1} s", d.as_secs_f64());
        match self {
            Route::Files {
                estimate: Some((files, left)),
            } => write!(
                f,
                "while the table was being prepared: reading the files was estimated at {}, sooner than the {} the preparation had left",
                s(files),
                s(left)
            ),
            Route::Files { estimate: None } => write!(
                f,
                "while the table was being prepared (too early in the preparation to time it)"
            ),
            Route::Waited {
                waited,
                estimate: Some((files, left)),
            } => write!(
                f,
                "after waiting {} for the table's preparation, estimated at {} left, sooner than the {} estimated for reading the files",
                s(waited),
                s(left),
                s(files)
            ),
            Route::Waited {
                waited,
                estimate: None,
            } => write!(f, "after waiting {} for the table's preparation", s(waited)),
        }
    }
}

/// Weighing the files against a preparation under way, as shares of the time the
/// preparation takes per field value (measured on the preparation itself, so the estimate
/// follows the machine's load): a full read of one field from the files, a substring
/// search of one more (folding and scanning each value), and the preparation's last step
/// (dictionaries finished, the cache entry written) per record. Measured on the 7.5M-row
/// survey: preparing 38 fields 18 s, `q` over its 35 text fields from the file 11 s, a
/// summary reading two fields 0.3 s.
const FILE_READ_SHARE: f64 = 0.3;
const FILE_SEARCH_SHARE: f64 = 0.3;
const PREPARATION_TAIL: f64 = 0.1;

/// Rows a preparation has prepared before its rate is trusted.
const TIMED_AFTER_ROWS: u64 = 50_000;

/// The time reading the files of `records` records of `fields` fields for `work` would take,
/// and the time a preparation that has prepared `rows` of them in `took` has left: both from
/// the preparation's own rate (see [`FILE_READ_SHARE`]).
fn estimate(
    records: u64,
    fields: usize,
    rows: u64,
    took: std::time::Duration,
    work: Work,
) -> (std::time::Duration, std::time::Duration) {
    let per_record = took.as_secs_f64() / rows.max(1) as f64;
    let per_value = per_record / fields.max(1) as f64;
    let files = records as f64
        * per_value
        * (FILE_READ_SHARE * work.fields.max(1) as f64 + FILE_SEARCH_SHARE * work.searched as f64);
    let left = records.saturating_sub(rows) as f64 * per_record
        + PREPARATION_TAIL * records as f64 * per_record;
    (
        std::time::Duration::from_secs_f64(files),
        std::time::Duration::from_secs_f64(left),
    )
}

/// How a server serves datasets whose backend can read its files at every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Serving {
    /// Prepared when the table fits the memory budget (or the cache); read at every call when
    /// it does not, and while a large one is being prepared.
    #[default]
    Auto,
    /// Always prepared (a dataset over the budget is refused).
    Prepared,
    /// Always read from the files at every call.
    Streaming,
}

/// What starting a preparation found.
enum Started {
    Ready(Arc<Prepared>),
    Running(Preparing),
}

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
    values: std::sync::Mutex<std::collections::HashMap<FieldId, ValueCounts>>,
    /// Per text field, its distinct values grouped by their NFKC form, computed when first
    /// needed.
    variants: std::sync::Mutex<std::collections::HashMap<FieldId, Variants>>,
    /// Per coded field, the rank of each code when the values are sorted (code 0, "",
    /// ranks first), computed when first needed.
    ranks: std::sync::Mutex<std::collections::HashMap<FieldId, Arc<Vec<u32>>>>,
    /// Per multi-value field of a prepared table, its parts numbered, made when first needed.
    part_indexes: std::sync::Mutex<std::collections::HashMap<FieldId, Arc<crate::udf::PartIndex>>>,
    /// The last text searches of a prepared table and the records they found (a few, most
    /// recent last), so paging through one or summarising it does not search again.
    #[allow(clippy::type_complexity)]
    searches:
        std::sync::Mutex<std::collections::VecDeque<(Vec<FieldId>, String, crate::search::Found)>>,
    /// The `count_where` computed measures with a share column ([`share_column`]).
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
    fn new(
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
    fn streamed(
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

    fn store(&self) -> Option<&Arc<Store>> {
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

    /// The distinct values of a text field grouped by their NFKC form.
    pub async fn nfkc_variants(
        &self,
        ctx: &SessionContext,
        def: &DatasetDef,
        field: FieldId,
    ) -> Result<Variants, StorageError> {
        if let Ok(cache) = self.variants.lock()
            && let Some(v) = cache.get(&field)
        {
            return Ok(Arc::clone(v));
        }
        let mut map: std::collections::HashMap<String, Vec<String>> =
            std::collections::HashMap::new();
        for (value, _) in self.distinct_values(ctx, def, field).await?.iter() {
            map.entry(tally_semantic::names::nfkc_value(value))
                .or_default()
                .push(value.clone());
        }
        for values in map.values_mut() {
            values.sort();
        }
        let map = Arc::new(map);
        if let Ok(mut cache) = self.variants.lock() {
            cache.insert(field, Arc::clone(&map));
        }
        Ok(map)
    }

    /// The rank of each code of a coded field in the sorted order of its values.
    pub fn code_ranks(&self, field: FieldId) -> Arc<Vec<u32>> {
        if let Ok(cache) = self.ranks.lock()
            && let Some(r) = cache.get(&field)
        {
            return Arc::clone(r);
        }
        let Some(values) = self.codes(field) else {
            return Arc::new(Vec::new());
        };
        let ranks = Arc::new(values.ranks());
        if let Ok(mut cache) = self.ranks.lock() {
            cache.insert(field, Arc::clone(&ranks));
        }
        ranks
    }

    /// The parts of a text field's values (split at `separator`, trimmed, blanks left out)
    /// with how many times each occurs, most first (ties by part): counted from a prepared
    /// table's dictionary, once per distinct value; `None` for data read from its files.
    pub fn part_occurrences(
        &self,
        ctx: &SessionContext,
        field: FieldId,
        separator: &str,
    ) -> Option<Result<Vec<(String, usize)>, StorageError>> {
        let store = self.store()?;
        let stop = crate::stop::Stop::of(ctx);
        let counted = code_counts(store, field, &stop).map(|(dictionary, per_code)| {
            part_occurrences(
                per_code
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(code, n)| (dictionary.value(code), *n)),
                separator,
            )
        });
        Some(counted)
    }

    /// Keeps `counted` (each distinct value of a text field with the records that hold it,
    /// counted elsewhere: one pass over data read from its files for every field) as
    /// [`Prepared::distinct_values`] gives it from then on.
    pub fn keep_values(
        &self,
        ctx: &SessionContext,
        def: &DatasetDef,
        field: FieldId,
        counted: &[(String, usize)],
    ) -> Result<(), StorageError> {
        let stop = crate::stop::Stop::of(ctx);
        let values = count_values(
            &def.fields[field].multi_value,
            &stop,
            counted.iter().map(|(v, n)| (v.as_str(), *n)),
        )?;
        if let Ok(mut cache) = self.values.lock() {
            cache.insert(field, Arc::new(values));
        }
        Ok(())
    }

    /// The distinct non-empty values of a text field with how many records have each, most
    /// frequent first (for multi-value fields: the trimmed parts, each counted once per
    /// record).
    pub async fn distinct_values(
        &self,
        ctx: &SessionContext,
        def: &DatasetDef,
        field: FieldId,
    ) -> Result<ValueCounts, StorageError> {
        if let Ok(cache) = self.values.lock()
            && let Some(v) = cache.get(&field)
        {
            return Ok(Arc::clone(v));
        }
        let separator = &def.fields[field].multi_value;
        let stop = crate::stop::Stop::of(ctx);
        let values = match self.store() {
            _ if def.fields[field].data_type.is_numeric() => Vec::new(),
            Some(store) => {
                let (dictionary, per_code) = code_counts(store, field, &stop)?;
                count_values(
                    separator,
                    &stop,
                    per_code
                        .iter()
                        .enumerate()
                        .map(|(code, n)| (dictionary.value(code), *n)),
                )?
            }
            None => {
                // Read from the files: each distinct value with its records, counted by the
                // scan (within the call's memory), then split as a dictionary is.
                use datafusion::functions_aggregate::expr_fn::count;
                let name = &def.fields[field].name;
                let table = self.table();
                let batches = ctx
                    .read_table(table.provider)?
                    .aggregate(
                        vec![ident(name)],
                        vec![count(datafusion::prelude::lit(1i64)).alias("n")],
                    )?
                    .collect()
                    .await
                    .map_err(|e| StorageError::computing(&def.id, e))?;
                let mut pairs: Vec<(String, usize)> = Vec::new();
                for b in &batches {
                    let text = datafusion::arrow::compute::cast(
                        b.column(0),
                        &datafusion::arrow::datatypes::DataType::Utf8,
                    )
                    .map_err(|e| StorageError::backend(&def.id, e))?;
                    let text = text.as_string::<i32>();
                    let n = datafusion::arrow::compute::cast(
                        b.column(1),
                        &datafusion::arrow::datatypes::DataType::UInt64,
                    )
                    .map_err(|e| StorageError::backend(&def.id, e))?;
                    let n = n.as_primitive::<datafusion::arrow::datatypes::UInt64Type>();
                    for r in 0..b.num_rows() {
                        if text.is_valid(r) {
                            pairs.push((text.value(r).to_string(), n.value(r) as usize));
                        }
                    }
                }
                count_values(
                    separator,
                    &stop,
                    pairs.iter().map(|(v, n)| (v.as_str(), *n)),
                )?
            }
        };
        let values = Arc::new(values);
        if let Ok(mut cache) = self.values.lock() {
            cache.insert(field, Arc::clone(&values));
        }
        Ok(values)
    }
}

/// The parts of `values` (split at `separator`, trimmed, blanks left out) with how many times
/// each occurs (a value held by `n` records counts its parts `n` times), most first, ties by
/// part.
pub fn part_occurrences<'a>(
    values: impl Iterator<Item = (&'a str, usize)>,
    separator: &str,
) -> Vec<(String, usize)> {
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (value, n) in values {
        for part in value
            .split(separator)
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            *counts.entry(part).or_default() += n;
        }
    }
    let mut parts: Vec<(String, usize)> = counts
        .into_iter()
        .map(|(p, n)| (p.to_string(), n))
        .collect();
    parts.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    parts
}

/// A text field's dictionary and how many records hold each of its codes (a null none).
fn code_counts(
    store: &Store,
    field: FieldId,
    stop: &crate::stop::Stop,
) -> Result<(StringArray, Vec<usize>), StorageError> {
    let dictionary = store.values(field)?;
    let column = store.column(field)?;
    let codes = dictionary.len();
    // The chunks shared among a thread a core (at most four), each counting into its own
    // table, the tables then added: a field of 7.5M records is a pass over 30 MB of codes.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(column.len().max(1));
    let count = |part: usize| -> Result<Vec<usize>, StorageError> {
        let mut per_code = vec![0usize; codes];
        for array in column.iter().skip(part).step_by(threads) {
            stop.check()?;
            if let Some(d) = array.as_dictionary_opt::<UInt32Type>() {
                let keys = d.keys();
                for (r, k) in keys.values().iter().enumerate() {
                    if keys.is_valid(r)
                        && let Some(n) = per_code.get_mut(*k as usize)
                    {
                        *n += 1;
                    }
                }
            }
        }
        Ok(per_code)
    };
    let parts: Vec<Result<Vec<usize>, StorageError>> = if threads == 1 {
        vec![count(0)]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (1..threads)
                .map(|part| scope.spawn(move || count(part)))
                .collect();
            let mut parts = vec![count(0)];
            parts.extend(handles.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(StorageError::internal("a counting thread panicked")))
            }));
            parts
        })
    };
    let mut parts = parts.into_iter();
    let mut per_code = parts.next().unwrap_or_else(|| Ok(vec![0; codes]))?;
    for part in parts {
        for (total, n) in per_code.iter_mut().zip(part?) {
            *total += n;
        }
    }
    Ok((dictionary, per_code))
}

/// Distinct values with how many records hold each, most frequent first; the parts of a
/// multi-value field counted once per record that has them. Ends early (`Err`) when the
/// call it is for is given up (`stop`), so nothing partial is kept.
fn count_values<'a>(
    separator: &Option<String>,
    stop: &crate::stop::Stop,
    values: impl Iterator<Item = (&'a str, usize)>,
) -> Result<Vec<(String, usize)>, StorageError> {
    let Some(_) = separator else {
        // Whole values: each is given once already (a dictionary's, or a grouping's), so they
        // are kept as they come, without a map of millions of them.
        let mut kept: Vec<(String, usize)> = Vec::new();
        for (i, (v, n)) in values.enumerate() {
            if i.is_multiple_of(crate::stop::EVERY) {
                stop.check()?;
            }
            if n > 0 && !v.trim().is_empty() {
                kept.push((v.to_string(), n));
            }
        }
        kept.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        return Ok(kept);
    };
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, (v, n)) in values.enumerate() {
        if i.is_multiple_of(crate::stop::EVERY) {
            stop.check()?;
        }
        if n == 0 {
            continue;
        }
        match separator {
            Some(sep) => {
                let mut seen = std::collections::HashSet::new();
                for part in v
                    .split(sep.as_str())
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                {
                    if seen.insert(part) {
                        *counts.entry(part).or_default() += n;
                    }
                }
            }
            None => {
                if !v.trim().is_empty() {
                    *counts.entry(v).or_default() += n;
                }
            }
        }
    }
    let mut values: Vec<(String, usize)> = counts
        .into_iter()
        .map(|(v, n)| (v.to_string(), n))
        .collect();
    values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(values)
}

/// What a backend's load gave besides its rows.
struct Loaded {
    files: Vec<ServedFile>,
    extract: Option<String>,
    notes: Vec<String>,
    row_sources: Option<Arc<RowSources>>,
}

impl Dataset {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        def: DatasetDef,
        folder: PathBuf,
        definition_file: String,
        warnings: Vec<Diagnostic>,
        backend: Arc<dyn Backend>,
        undeclared_columns: Vec<String>,
        retrieved: Retrieved,
        fetched_from: Option<String>,
        version: String,
        definition_text: Arc<str>,
    ) -> Dataset {
        Dataset {
            def,
            folder,
            definition_file,
            warnings,
            backend,
            undeclared_columns,
            retrieved,
            fetched_from,
            version,
            definition_text,
            prepared: PreparedCell::default(),
            subsets: std::sync::Mutex::new(Vec::new()),
            streams: std::sync::Mutex::new(Vec::new()),
            refused: std::sync::Mutex::new(None),
        }
    }

    /// How far a preparation still running has come, if one is: rows, and whether they are
    /// being prepared (else read).
    pub fn preparing(&self) -> Option<(u64, bool)> {
        match &*self.prepared.state.lock().ok()? {
            PrepState::Running { progress, .. } => Some((
                progress.rows.load(Ordering::Relaxed),
                progress.preparing.load(Ordering::Relaxed),
            )),
            _ => None,
        }
    }

    pub fn id(&self) -> &str {
        &self.def.id
    }

    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The number of records: from the metadata (Parquet), else once the data has been read
    /// (plugins); `None` until then.
    /// Records that the folder's or source's current state could not be served while this
    /// version goes on serving; the first time seen is kept while the reason stays the same.
    pub fn note_refused(&self, problems: &[crate::problem::Problem], data_gone: bool) {
        let reason = problems
            .iter()
            .map(|p| {
                if p.key.is_empty() {
                    p.reason.clone()
                } else {
                    format!("{}: {}", p.key, p.reason)
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.as_ref().is_some_and(|r| r.reason == reason) {
            return;
        }
        *refused = Some(RefusedChange {
            since: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            reason,
            data_gone,
        });
    }

    /// The change of this dataset's folder or source that could not be served, if any.
    pub fn refused_change(&self) -> Option<RefusedChange> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn record_count(&self) -> Option<u64> {
        self.backend
            .row_count()
            .or_else(|| match &*self.prepared.state.lock().ok()? {
                PrepState::Ready(p) => Some(p.rows as u64),
                _ => None,
            })
    }

    /// The data of this dataset version for a call without conditions the backend applies:
    /// the prepared table, or the files read at this call (see [`Dataset::prepared_for`]).
    pub async fn prepared(&self, engine: &dyn Resources) -> Result<Arc<Prepared>, StorageError> {
        self.prepared_for(engine, &[]).await
    }

    /// The data for a call that reads every value of every field (`inspect_dataset`: fill
    /// rates, statistics, the values of each field), where the server prepares tables
    /// (`--streaming auto`): the whole prepared table when it fits the memory budget, waited
    /// for up to the caller's deadline when it is being prepared, never the files read
    /// meanwhile. A page of `query_records` reads a few batches of the files; every value of
    /// every field read from them is decoded in full at every call (the text of a
    /// decompression bomb expanded row by row, while its preparation reads the same files
    /// once, keeping each value once). A table that does not fit the budget is read from its
    /// files, as every call over it is (bounded by the call's deadline and memory): a dataset
    /// larger than memory is described as it is queried.
    pub async fn prepared_for_every_value(
        &self,
        engine: &dyn Resources,
    ) -> Result<Arc<Prepared>, StorageError> {
        if !self.backend.streams() || engine.serving() != Serving::Auto {
            return self.prepared(engine).await;
        }
        if let Some(p) = self.ready() {
            return Ok(p);
        }
        let cached = engine
            .cache()
            .is_some_and(|c| c.holds(&self.def.id, &self.version));
        if !cached && (!self.fits(engine) || self.over_budget(engine)) {
            return self.prepared(engine).await;
        }
        self.prepared_whole(engine).await
    }

    /// The whole prepared table, built on first use and kept for this dataset version
    /// (waiting for its preparation, up to the caller's deadline).
    pub async fn prepared_whole(
        &self,
        engine: &dyn Resources,
    ) -> Result<Arc<Prepared>, StorageError> {
        self.prepared_in(&self.prepared, engine, &[]).await
    }

    /// The preparation of the whole table, while one runs.
    pub fn running_preparation(
        &self,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static + use<>> {
        match &*self.prepared.state.lock().ok()? {
            PrepState::Running { done, .. } => {
                let done = done.clone();
                Some(async move {
                    let _ = done.0.await;
                })
            }
            _ => None,
        }
    }

    /// The whole table, when it is prepared and sound.
    pub fn ready(&self) -> Option<Arc<Prepared>> {
        match &*self.prepared.state.lock().ok()? {
            PrepState::Ready(p) if !p.is_damaged() => Some(Arc::clone(p)),
            _ => None,
        }
    }

    /// Whether preparing the whole table failed for the memory budget, and would again.
    fn over_budget(&self, engine: &dyn Resources) -> bool {
        match self.prepared.state.lock().as_deref() {
            Ok(PrepState::Failed {
                error: StorageError::Limit { .. },
                free,
            }) => engine.budget().free() < free.saturating_add(64 << 20),
            _ => false,
        }
    }

    /// Whether the prepared table would fit the memory budget: what is free of it now, or,
    /// with a cache (the table is written to disk as it is prepared, then mapped), the whole
    /// budget. A table larger than the budget is read from its files at every call, with or
    /// without a cache, so no cache entry grows past the budget.
    fn fits(&self, engine: &dyn Resources) -> bool {
        let room = if engine.cache().is_some() {
            engine.budget().limit()
        } else {
            engine.budget().free()
        };
        self.prepared_estimate().is_none_or(|n| n <= room)
    }

    /// Whether calls are answered from the files, whatever their conditions: the server
    /// reads the files at every call, or the table is not prepared, not in the cache and
    /// would not fit the budget (a large table being prepared is read from its files too,
    /// meanwhile: see [`Dataset::prepared_for`]).
    pub fn read_from_files(&self, engine: &dyn Resources) -> bool {
        if !self.backend.streams() {
            return false;
        }
        match engine.serving() {
            Serving::Streaming => true,
            Serving::Prepared => false,
            Serving::Auto => {
                self.ready().is_none()
                    && !engine
                        .cache()
                        .is_some_and(|c| c.holds(&self.def.id, &self.version))
                    && (!self.fits(engine) || self.over_budget(engine))
            }
        }
    }

    /// About what the prepared table would hold in memory (numbers 8 bytes a record, text
    /// 4, the rest small), when the number of records is known; the dictionaries come on
    /// top and are accounted as they are built.
    fn prepared_estimate(&self) -> Option<usize> {
        let rows = self.backend.row_count()? as usize;
        let per_row: usize = self
            .def
            .fields
            .iter()
            .map(|f| if f.data_type.is_numeric() { 9 } else { 5 })
            .sum();
        Some(rows.saturating_mul(per_row + 1))
    }

    /// Waits for the preparation of `cell`, starting it if none is running. The preparation
    /// runs on a task of its own, so a caller that stops waiting (its deadline) leaves it
    /// going, bounded by the memory budget and by [`PREPARE_TIME`].
    async fn prepared_in(
        &self,
        cell: &PreparedCell,
        engine: &dyn Resources,
        pushed: &[Pushed],
    ) -> Result<Arc<Prepared>, StorageError> {
        match self.start(cell, engine, pushed)? {
            Started::Ready(p) => Ok(p),
            Started::Running(done) => done.0.await,
        }
    }

    /// The prepared table of `cell`, or its preparation running (started now if none is).
    /// The task that prepares records the outcome in the cell, whoever waits for it.
    fn start(
        &self,
        cell: &PreparedCell,
        engine: &dyn Resources,
        pushed: &[Pushed],
    ) -> Result<Started, StorageError> {
        let mut state = cell
            .state
            .lock()
            .map_err(|_| StorageError::internal("the preparation lock is poisoned"))?;
        match &*state {
            PrepState::Ready(p) if !p.is_damaged() => return Ok(Started::Ready(Arc::clone(p))),
            PrepState::Running { done, .. } => return Ok(Started::Running(done.clone())),
            PrepState::Failed { error, free }
                if engine.budget().free() < free.saturating_add(64 << 20) =>
            {
                return Err(error.clone());
            }
            _ => {}
        }
        let progress = Arc::new(Progress::default());
        let job = Job {
            def: self.def.clone(),
            folder: self.folder.clone(),
            version: self.version.clone(),
            cache: engine.cache().cloned(),
            backend: Arc::clone(&self.backend),
            ctx: engine.context().clone(),
            budget: Arc::clone(engine.budget()),
            pushed: pushed.to_vec(),
            progress: Arc::clone(&progress),
            cancel: Arc::clone(&cell.cancel),
            slots: Arc::clone(engine.preparations()),
        };
        let generation = cell.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let record = Arc::clone(&cell.state);
        let budget = Arc::clone(engine.budget());
        let task = tokio::spawn(async move {
            let result = job.run().await;
            if let Ok(mut state) = record.lock()
                && matches!(&*state, PrepState::Running { generation: g, .. } if *g == generation)
            {
                *state = match &result {
                    Ok(p) => PrepState::Ready(Arc::clone(p)),
                    // Only a dataset over the memory budget fails the same way again (while
                    // the budget is as full); anything else (a replaced file, an I/O error, a
                    // slow plugin) is tried again by the next call.
                    Err(error @ StorageError::Limit { .. }) => PrepState::Failed {
                        error: error.clone(),
                        free: budget.free(),
                    },
                    Err(_) => PrepState::Idle,
                };
            }
            result
        });
        let future: futures::future::BoxFuture<'static, _> = Box::pin(async move {
            match task.await {
                Ok(result) => result,
                Err(e) => Err(StorageError::Internal(format!(
                    "the preparation of the data failed unexpectedly: {e}"
                ))),
            }
        });
        let done = Preparing(futures::FutureExt::shared(future));
        *state = PrepState::Running {
            done: done.clone(),
            progress,
            generation,
        };
        Ok(Started::Running(done))
    }

    /// The files read at every call, for the conditions `pushed` (kept per condition set).
    async fn streamed(
        &self,
        engine: &dyn Resources,
        pushed: &[Pushed],
    ) -> Result<Arc<Prepared>, StorageError> {
        let cell = {
            let mut streams = self
                .streams
                .lock()
                .map_err(|_| StorageError::internal("the stream cache lock is poisoned"))?;
            match streams.iter().position(|(k, _)| k.as_slice() == pushed) {
                Some(i) => {
                    let entry = streams.remove(i);
                    let cell = Arc::clone(&entry.1);
                    streams.push(entry);
                    cell
                }
                None => {
                    if streams.len() >= SUBSETS_KEPT {
                        streams.remove(0);
                    }
                    let cell = Arc::new(OnceCell::new());
                    streams.push((pushed.to_vec(), Arc::clone(&cell)));
                    cell
                }
            }
        };
        let made = cell
            .get_or_try_init(|| async {
                let layout = Arc::new(Layout::streamed(&self.def, &self.backend.schema())?);
                let fields: Vec<(String, datafusion::arrow::datatypes::DataType)> = self
                    .def
                    .fields
                    .iter()
                    .zip(&layout.targets)
                    .map(|(f, t)| (f.name.clone(), t.clone()))
                    .collect();
                let streaming = self
                    .backend
                    .stream(&fields, pushed, engine.budget())
                    .await
                    .ok_or_else(|| {
                        StorageError::internal("the dataset's backend cannot read it at every call")
                    })??;
                let memory = Meter::new(
                    engine
                        .budget()
                        .reservation(format!("streamed dataset `{}`", self.def.id)),
                    Arc::new(AtomicBool::new(false)),
                    Arc::new(Progress::default()),
                );
                let cluster_source = streaming.source_files().map(|(keys, files, values)| {
                    Arc::new(crate::source::TableSource {
                        dataset: self.def.id.clone(),
                        definition: Arc::clone(&self.definition_text),
                        source_schema: self.backend.schema(),
                        keys,
                        files,
                        values,
                    })
                });
                Ok::<_, StorageError>(Arc::new(Prepared::streamed(
                    streaming,
                    layout,
                    pushed.to_vec(),
                    memory,
                    cluster_source,
                )))
            })
            .await?;
        Ok(Arc::clone(made))
    }

    /// While the whole table is being prepared: `Some(estimate)`, where the estimate is
    /// (once enough rows are prepared to time the preparation) the time reading the files
    /// for `work` would take and the time the preparation has left. `None` when no
    /// preparation runs or the number of records is unknown.
    #[allow(clippy::type_complexity)]
    pub fn weigh(&self, work: Work) -> Option<Option<(std::time::Duration, std::time::Duration)>> {
        let records = self.backend.row_count()?;
        let fields = self.def.fields.len();
        let progress = match &*self.prepared.state.lock().ok()? {
            PrepState::Running { progress, .. } => Arc::clone(progress),
            _ => return None,
        };
        let (rows, took) = match progress.prepared_so_far() {
            Some((rows, took)) if rows >= TIMED_AFTER_ROWS.min(records.max(1)) => (rows, took),
            // Not timed yet: the files are read (a preparation waiting for its turn, or
            // reading its first batches, says nothing of its rate).
            _ => return Some(None),
        };
        Some(Some(estimate(records, fields, rows, took, work)))
    }

    /// [`Dataset::prepared_for`] for a call that reads `work`, with the route it took when the
    /// dataset's table was being prepared: a large table is read from its files meanwhile,
    /// unless the preparation is estimated to end sooner than the files would be read, when
    /// the call waits for it (and is answered from the prepared table).
    pub async fn prepared_for_work(
        &self,
        engine: &dyn Resources,
        pushed: &[Pushed],
        work: Work,
    ) -> Result<(Arc<Prepared>, Option<Route>), StorageError> {
        if self.backend.streams()
            && engine.serving() == Serving::Auto
            && self.ready().is_none()
            && !self.read_from_files(engine)
            && !engine
                .cache()
                .is_some_and(|c| c.holds(&self.def.id, &self.version))
            && self
                .backend
                .row_count()
                .is_some_and(|n| n >= STREAM_WHILE_PREPARING)
        {
            // Started if none runs, not awaited: this and the next calls read the files
            // until it is ready, unless it is estimated to end sooner (its outcome is
            // recorded by its task; one that cannot start leaves the files to answer).
            let _ = self.start(&self.prepared, engine, &[]);
            match self.weigh(work) {
                Some(Some((files, left))) if left < files => {
                    let started = std::time::Instant::now();
                    let prepared = match self.prepared_whole(engine).await {
                        Ok(p) => p,
                        // It failed (out of budget): the files answer, as they will from now.
                        Err(_) if self.read_from_files(engine) => {
                            return Ok((self.streamed(engine, pushed).await?, None));
                        }
                        Err(e) => return Err(e),
                    };
                    let waited = started.elapsed();
                    let estimate = Some((files, left));
                    return Ok((prepared, Some(Route::Waited { waited, estimate })));
                }
                Some(estimate) => {
                    let prepared = self.streamed(engine, pushed).await?;
                    return Ok((prepared, Some(Route::Files { estimate })));
                }
                // Prepared meanwhile; else one that could not start leaves the files to
                // answer.
                None => {
                    let prepared = match self.ready() {
                        Some(p) => p,
                        None => self.streamed(engine, pushed).await?,
                    };
                    return Ok((prepared, None));
                }
            }
        }
        // A table being prepared (or to be) that the call waits for: how long it waited.
        let unready = self.ready().is_none();
        let started = std::time::Instant::now();
        let prepared = self.prepared_settled(engine, pushed).await?;
        let waited = started.elapsed();
        let route = (unready
            && waited >= std::time::Duration::from_millis(100)
            && self
                .ready()
                .is_some_and(|whole| Arc::ptr_eq(&whole, &prepared)))
        .then_some(Route::Waited {
            waited,
            estimate: None,
        });
        Ok((prepared, route))
    }

    /// The data for a call: the prepared table (the whole data, or, when the backend applies
    /// some of the call's conditions itself, the subset it returned for them, kept for later
    /// calls), or the files read at this call.
    ///
    /// A backend that streams ([`Backend::streams`], the Parquet files) is read at every call
    /// when the server serves so (`--streaming always`), and otherwise (`auto`) when its
    /// prepared table would not fit the memory budget (nor be kept in the cache), when
    /// preparing it ran out of budget, and while a large dataset is being prepared in the
    /// background: its first answers do not wait for the preparation.
    pub async fn prepared_for(
        &self,
        engine: &dyn Resources,
        pushed: &[Pushed],
    ) -> Result<Arc<Prepared>, StorageError> {
        Ok(self
            .prepared_for_work(engine, pushed, Work::default())
            .await?
            .0)
    }

    /// [`Dataset::prepared_for`] once the preparation of a large table under way has been
    /// weighed (by [`Dataset::prepared_for_work`]).
    async fn prepared_settled(
        &self,
        engine: &dyn Resources,
        pushed: &[Pushed],
    ) -> Result<Arc<Prepared>, StorageError> {
        if self.read_from_files(engine) {
            return self.streamed(engine, pushed).await;
        }
        if self.backend.streams()
            && engine.serving() == Serving::Auto
            && let Some(p) = self.ready()
        {
            return Ok(p);
        }
        // When a subset is always part of the whole table, the whole table answers every
        // condition (the engine applies them all): once it is prepared, or mapped from the
        // cache, no subset is read for a call.
        let whole_answers = self.backend.subsets_of_whole()
            && (matches!(
                self.prepared.state.lock().as_deref(),
                Ok(PrepState::Ready(p)) if !p.is_damaged()
            ) || engine
                .cache()
                .is_some_and(|c| c.holds(&self.def.id, &self.version)));
        if pushed.is_empty() || whole_answers {
            return self.prepared_whole(engine).await;
        }
        let cell = {
            let mut subsets = self
                .subsets
                .lock()
                .map_err(|_| StorageError::internal("the subset cache lock is poisoned"))?;
            match subsets.iter().position(|(k, _)| k.as_slice() == pushed) {
                Some(i) => {
                    let entry = subsets.remove(i);
                    let cell = Arc::clone(&entry.1);
                    subsets.push(entry);
                    cell
                }
                None => {
                    if subsets.len() >= SUBSETS_KEPT {
                        subsets.remove(0);
                    }
                    let cell = Arc::new(PreparedCell::default());
                    subsets.push((pushed.to_vec(), Arc::clone(&cell)));
                    cell
                }
            }
        };
        self.prepared_in(&cell, engine, pushed).await
    }
}

/// How long a preparation may run in the background before it is stopped.
pub const PREPARE_TIME: std::time::Duration = std::time::Duration::from_secs(600);

/// Everything a preparation needs, owned, so it can run on a task of its own.
struct Job {
    def: DatasetDef,
    folder: PathBuf,
    version: String,
    /// Where prepared tables are kept across restarts (the Parquet backend's, whole).
    cache: Option<Arc<crate::cache::Cache>>,
    backend: Arc<dyn Backend>,
    ctx: SessionContext,
    budget: Arc<Budget>,
    pushed: Vec<Pushed>,
    progress: Arc<Progress>,
    cancel: Arc<AtomicBool>,
    /// Preparations run a few at a time: each is CPU and memory heavy, and many at once
    /// would only divide the machine between them.
    slots: Arc<tokio::sync::Semaphore>,
}

impl Job {
    async fn run(self) -> Result<Arc<Prepared>, StorageError> {
        let id = self.def.id.clone();
        let _slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| StorageError::internal("the preparation slots are closed"))?;
        if self.cancel.load(Ordering::Relaxed) {
            return Err(StorageError::Stale {
                dataset: id,
                message: "the dataset version was replaced before its data was prepared".into(),
            });
        }
        // Stopped when its time is up or its dataset version is dropped; the flag is read at
        // every batch.
        let stop = Arc::new(AtomicBool::new(false));
        let cancel = Arc::clone(&self.cancel);
        let watch = Arc::clone(&stop);
        let watchdog = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            while started.elapsed() < PREPARE_TIME && !cancel.load(Ordering::Relaxed) {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            watch.store(true, Ordering::Relaxed);
        });
        let handle = tokio::runtime::Handle::current();
        // Reading and preparing is CPU work: on a blocking thread, so the runtime's workers
        // keep answering other calls (and timing this one out) meanwhile.
        // The preparation's work (a plugin's scan among it) is traced within the call that
        // started it.
        let span = tracing::Span::current();
        let blocking = tokio::task::spawn_blocking(move || {
            let _traced = span.enter();
            if let Some(prepared) = self.mapped() {
                return Ok(prepared);
            }
            let meter = Meter::new(
                self.budget
                    .reservation(format!("reading dataset `{}`", self.def.id)),
                stop,
                Arc::clone(&self.progress),
            );
            let prepared = match prepare(&self, &handle, &meter, self.cacheable()) {
                Ok(p) => Ok(p),
                Err(Failed::Engine(e)) => Err(e),
                // Served all the same, from memory; the next version tries the cache again.
                Err(Failed::Cache(why)) => {
                    tracing::warn!(dataset = %self.def.id, "could not keep the prepared data in the cache ({why}); preparing it in memory");
                    let _ = meter.resize(0);
                    prepare(&self, &handle, &meter, false).map_err(|e| match e {
                        Failed::Engine(e) => e,
                        Failed::Cache(why) => StorageError::internal(why),
                    })
                }
            };
            // What reading and preparing held is freed: handed back to the system, whatever
            // the budget counted of it (the batches read, the dictionaries being built and
            // the allocator's own slack are more than it sees).
            drop(meter);
            crate::memory::release::wake();
            prepared
        });
        // A backend that never returns (a native plugin stuck in its own code) is abandoned
        // past the preparation's time; the flag above stops everything that reads batches.
        let result =
            match tokio::time::timeout(PREPARE_TIME + std::time::Duration::from_secs(30), blocking)
                .await
            {
                Ok(joined) => joined.unwrap_or_else(|e| {
                    Err(StorageError::Internal(format!(
                        "the preparation of dataset `{id}` failed unexpectedly: {e}"
                    )))
                }),
                Err(_) => Err(StorageError::Limit {
                    message: format!(
                        "reading dataset `{id}` did not finish within {} s",
                        PREPARE_TIME.as_secs()
                    ),
                    hint: "the backend of this dataset is too slow for its data".into(),
                }),
            };
        watchdog.abort();
        let prepared = Arc::new(result?);
        Ok(prepared)
    }

    /// Whether this preparation's table is kept in the cache: the Parquet backend's whole
    /// table (a plugin's rows come with what the plugin says at each read).
    fn cacheable(&self) -> bool {
        self.cache.is_some()
            && self.pushed.is_empty()
            && self.backend.kind() == tally_semantic::definition::BackendKind::Parquet
    }

    /// The prepared table from the cache, when it holds this version's and it checks out;
    /// a miss is logged and the entry removed.
    fn mapped(&self) -> Option<Prepared> {
        if !self.cacheable() {
            return None;
        }
        let cache = self.cache.as_ref()?;
        let id = self.def.id.as_str();
        let layout = match Layout::of(&self.def, &self.backend.schema()) {
            Ok(l) => l,
            Err(_) => return None,
        };
        let mapped = match cache.load(
            id,
            &self.version,
            &layout.stored,
            &self.folder,
            &self.backend.files(),
        ) {
            Ok(Some(mapped)) => mapped,
            Ok(None) => return None,
            Err(why) => {
                tracing::warn!(
                    dataset = id,
                    "the cached prepared data is not used ({why}); preparing anew"
                );
                return None;
            }
        };
        let memory = Meter::new(
            self.budget.reservation(format!("mapped dataset `{id}`")),
            Arc::new(AtomicBool::new(false)),
            Arc::new(Progress::default()),
        );
        let header = mapped.header;
        let store = Store::lazy(
            id,
            Arc::new(layout),
            mapped.chunks,
            mapped.entry,
            header.stats.clone(),
        );
        tracing::info!(
            dataset = id,
            rows = store.rows(),
            "mapped the prepared data from the cache"
        );
        Some(Prepared::new(
            store,
            Loaded {
                files: mapped.files,
                extract: header.extract,
                notes: header.notes,
                row_sources: None,
            },
            Vec::new(),
            Served::Mapped,
            memory,
        ))
    }
}

/// Where a preparation puts its chunks: the cache (written as they are built, then mapped)
/// or memory.
enum Sink {
    Memory(InMemory),
    Cache(Box<crate::cache::Writer>),
}

impl ChunkSink for Sink {
    fn chunk(&mut self, batch: RecordBatch) -> Result<(), StorageError> {
        match self {
            Sink::Memory(m) => m.chunk(batch),
            Sink::Cache(w) => w.chunk(batch),
        }
    }
}

impl Sink {
    /// What it holds in memory.
    fn bytes(&self) -> usize {
        match self {
            Sink::Memory(m) => m.bytes,
            Sink::Cache(_) => 0,
        }
    }
}

/// Why a preparation did not give a table.
enum Failed {
    /// The cache entry could not be written (the disk, its permissions): prepare in memory.
    Cache(String),
    Engine(StorageError),
}

impl From<StorageError> for Failed {
    fn from(e: StorageError) -> Failed {
        Failed::Engine(e)
    }
}

impl From<datafusion::error::DataFusionError> for Failed {
    fn from(e: datafusion::error::DataFusionError) -> Failed {
        Failed::Engine(e.into())
    }
}

/// Reads a dataset's data through its backend and builds the prepared table, every batch
/// accounted before it is built: into the cache when `to_cache` (then mapped, so what the
/// table holds is file-backed), else into memory. Runs on a blocking thread.
fn prepare(
    job: &Job,
    handle: &tokio::runtime::Handle,
    meter: &Meter,
    to_cache: bool,
) -> Result<Prepared, Failed> {
    let run = Preparation { job, handle, meter };
    let id = job.def.id.as_str();
    let (loaded, layout, mut stream) = run.open()?;

    // What the prepared table holds is reserved apart from what reading held, which is
    // given back once the table is built.
    let kept = Meter::new(
        job.budget.reservation(format!("preparing dataset `{id}`")),
        Arc::new(AtomicBool::new(false)),
        Arc::new(Progress::default()),
    );
    job.progress.preparing_from_now();
    let mut sink = run.sink(&layout, to_cache)?;
    let mut builder = Builder::new(id, Arc::clone(&layout));
    run.build(&mut stream, &mut builder, &mut sink, &kept)?;
    let rows = builder.rows as usize;
    run.check_row_sources(&loaded, rows)?;
    let LoadedData {
        provider,
        files,
        extract,
        notes,
        row_sources,
    } = loaded;
    // What reading held goes back.
    drop(stream);
    drop(provider);
    meter.resize(0)?;
    let (values, stats) = match builder.finish(&mut sink) {
        Ok(v) => v,
        Err(e) if matches!(sink, Sink::Cache(_)) => return Err(Failed::Cache(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    // What text search reads beside the dictionaries (said in the log; the benchmark reads it).
    let dictionary_bytes: usize = values
        .iter()
        .flatten()
        .map(|d| d.values.get_buffer_memory_size())
        .sum();
    let search_index_bytes: usize = values
        .iter()
        .flatten()
        .map(|d| d.folded.get_buffer_memory_size())
        .sum();
    let loaded = Loaded {
        files,
        extract,
        notes,
        row_sources,
    };
    match sink {
        Sink::Cache(writer) => {
            writer
                .finish(
                    &values,
                    &stats,
                    &loaded.files,
                    loaded.extract.clone(),
                    loaded.notes.clone(),
                )
                .map_err(|e| Failed::Cache(e.to_string()))?;
            drop(values);
            drop(kept);
            tracing::info!(
                dataset = id,
                rows,
                dictionary_bytes,
                search_index_bytes,
                "prepared the data into the cache"
            );
            // Served as a later start serves it: mapped, through the same checks.
            let mut prepared = job
                .mapped()
                .ok_or_else(|| Failed::Cache("the entry just written does not map".into()))?;
            prepared.served = Served::Written;
            Ok(prepared)
        }
        Sink::Memory(memory) => {
            let store = Store::in_memory(id, layout, memory.chunks, values, stats)?;
            kept.resize(store.memory_bytes())?;
            tracing::info!(
                dataset = id,
                rows,
                memory_mib = store.memory_bytes() >> 20,
                dictionary_bytes,
                search_index_bytes,
                "prepared the data for queries"
            );
            Ok(Prepared::new(
                store,
                loaded,
                job.pushed.clone(),
                Served::Memory,
                kept,
            ))
        }
    }
}

/// What the phases of one preparation share: its job, the runtime it blocks on, and the
/// meter of what reading holds.
struct Preparation<'a> {
    job: &'a Job,
    handle: &'a tokio::runtime::Handle,
    meter: &'a Meter,
}

impl Preparation<'_> {
    /// Loads the data through the backend and opens the stream of its fields' batches,
    /// with the layout of the table they build.
    fn open(&self) -> Result<(LoadedData, Arc<Layout>, SendableRecordBatchStream), Failed> {
        let (job, handle) = (self.job, self.handle);
        let def = &job.def;
        let id = def.id.as_str();
        let names: Vec<String> = def.column_fields().iter().map(|f| f.name.clone()).collect();
        let loaded = handle.block_on(job.backend.load(&names, &job.pushed, self.meter))?;
        let layout = Arc::new(Layout::of(def, &loaded.provider.schema())?);
        let stream = handle
            .block_on(
                job.ctx
                    .read_table(loaded.provider.clone())?
                    .select(names.iter().map(ident).collect::<Vec<Expr>>())?
                    .execute_stream(),
            )
            .map_err(|e| StorageError::computing(id, e))?;
        Ok((loaded, layout, stream))
    }

    /// Opens where the chunks go: a cache entry when `to_cache` and there is a cache, else
    /// memory.
    fn sink(&self, layout: &Layout, to_cache: bool) -> Result<Sink, Failed> {
        let job = self.job;
        let id = job.def.id.as_str();
        let cache = job.cache.as_ref().filter(|_| to_cache);
        let sink = match cache {
            Some(cache) => {
                match cache.writer(crate::cache::Header::new(id, &job.version), &layout.stored) {
                    Ok(w) => Sink::Cache(Box::new(w)),
                    Err(e) => return Err(Failed::Cache(e.to_string())),
                }
            }
            None => Sink::Memory(InMemory::default()),
        };
        Ok(sink)
    }

    /// Builds every batch of the stream into the sink, reserving in `kept` what each adds
    /// before it is built, and stopping when the preparation is cancelled.
    fn build(
        &self,
        stream: &mut SendableRecordBatchStream,
        builder: &mut Builder,
        sink: &mut Sink,
        kept: &Meter,
    ) -> Result<(), Failed> {
        let (job, meter) = (self.job, self.meter);
        let id = job.def.id.as_str();
        while let Some(batch) = self.handle.block_on(futures::StreamExt::next(stream)) {
            let batch = batch.map_err(|e| StorageError::computing(id, e))?;
            if meter.cancelled() {
                return Err(StorageError::Limit {
                    message: format!(
                        "the preparation of dataset `{id}` was stopped: its version was replaced or it ran longer than {} s",
                        PREPARE_TIME.as_secs()
                    ),
                    hint: "call again; a replaced dataset is prepared anew".into(),
                }
                .into());
            }
            // Reserved before anything is built: what the batch adds in memory (nothing but its
            // new dictionary values when the chunks go to the cache).
            let adds = match sink {
                Sink::Memory(_) => builder.stored_bytes(batch.num_rows()),
                Sink::Cache(_) => 0,
            };
            kept.resize(builder.bytes() + sink.bytes() + adds + batch.get_array_memory_size())?;
            job.progress
                .rows
                .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
            match builder.push(&batch, sink) {
                Ok(()) => {}
                Err(e) if matches!(sink, Sink::Cache(_)) => {
                    return Err(Failed::Cache(e.to_string()));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Checks that the backend gave one row source per row built, when it gave any.
    fn check_row_sources(&self, loaded: &LoadedData, rows: usize) -> Result<(), Failed> {
        let id = self.job.def.id.as_str();
        if let Some(r) = &loaded.row_sources
            && r.index.len() != rows
        {
            return Err(StorageError::backend(
                id,
                format!(
                    "the backend gave {} row sources for {rows} rows",
                    r.index.len()
                ),
            )
            .into());
        }
        Ok(())
    }
}

use datafusion::arrow::array::Array as _;

#[cfg(test)]
mod tests {
    #[test]
    fn the_files_are_weighed_against_the_preparation_left() {
        use super::{Work, estimate};
        use std::time::Duration;
        let secs = |d: Duration| (d.as_secs_f64() * 100.0).round() / 100.0;
        // The 7.5M-row survey (38 fields) a quarter prepared in 4.5 s: 18 s in all.
        let (records, fields, rows, took) =
            (7_500_000, 38, 1_875_000, Duration::from_secs_f64(4.5));
        // Left: three quarters (13.5 s) and the last step (a tenth of the whole, 1.8 s).
        let count = Work {
            fields: 1,
            searched: 0,
        };
        let (files, left) = estimate(records, fields, rows, took, count);
        assert_eq!(secs(left), 15.3);
        // A count reads one field: 0.3 of a field's share of the 18 s.
        assert_eq!(
            secs(files),
            secs(Duration::from_secs_f64(18.0 * 0.3 / 38.0))
        );
        // `q` over the 35 text fields: read and searched, 0.6 of 35 shares: 9.95 s, sooner
        // than the preparation here, later once it is further along.
        let q = Work {
            fields: 35,
            searched: 35,
        };
        let (files, left) = estimate(records, fields, rows, took, q);
        assert_eq!(secs(files), 9.95);
        assert!(files < left);
        let (files, left) = estimate(records, fields, 6_000_000, Duration::from_secs_f64(14.4), q);
        assert_eq!(secs(left), 5.4);
        assert!(left < files);
        // Nothing prepared yet measured: no division by zero.
        let (files, left) = estimate(records, fields, 0, Duration::ZERO, q);
        assert_eq!((files, left), (Duration::ZERO, Duration::ZERO));
    }
}
