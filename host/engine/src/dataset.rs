//! A served dataset: its definition, its backend, and the in-memory table queries run on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, RecordBatch, StringArray, StringBuilder, UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field as ArrowField, Schema, SchemaRef};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::Expr;
use datafusion::prelude::{SessionContext, ident};
use tally_semantic::definition::{
    DataType as FieldType, DatasetDef, DateValue, Diagnostic, FieldId, MeasureId,
};
use tokio::sync::OnceCell;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::Engine;
use crate::backend::{Backend, LoadedData, Pushed, RowSources, ServedFile};
use crate::error::EngineError;
use crate::memory::{Budget, Meter, Progress};

/// Hidden column: the record's position in file order (the default order).
pub const ROW_COL: &str = "__tally_row";
/// Hidden column: every text field of the record, folded (NFKC, lower case) and joined, for
/// `q`.
pub const SEARCH_COL: &str = "__tally_search";
/// Prefix reserved for hidden columns.
pub const RESERVED_PREFIX: &str = "__tally_";
/// Joins fields in the search column; `q` never contains it (control characters are removed).
pub const SEARCH_SEPARATOR: char = '\u{1f}';

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
    prepared: PreparedCell,
    /// Prepared subsets read with conditions the backend applied itself, by condition (a
    /// few, most recent last).
    subsets: std::sync::Mutex<Vec<(Vec<Pushed>, Arc<PreparedCell>)>>,
    inspect: OnceCell<crate::results::InspectResult>,
}

/// A prepared table, built once, in the background, by a task of its own: a call waits for
/// it only until its own deadline, and the next call finds it further along (or done).
#[derive(Debug, Default)]
struct PreparedCell {
    state: std::sync::Mutex<PrepState>,
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
        futures::future::BoxFuture<'static, Result<Arc<Prepared>, EngineError>>,
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
        error: EngineError,
        free: usize,
    },
}

/// How many pushed-down subsets a dataset version keeps.
const SUBSETS_KEPT: usize = 16;

/// Distinct values of a field with their record counts, most frequent first.
pub type ValueCounts = Arc<Vec<(String, usize)>>;

/// Distinct values of a field by their NFKC form (sorted within each form).
pub type Variants = Arc<std::collections::HashMap<String, Vec<String>>>;

/// The data of a dataset in memory, with the hidden columns added.
#[derive(Debug)]
pub struct Prepared {
    pub table: Arc<MemTable>,
    /// The same data as the table (arrays are shared, not copied), for scans done in Rust.
    pub batches: Vec<RecordBatch>,
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
    /// Mapped from the cache rather than prepared by this process.
    pub from_cache: bool,
    /// Distinct values (parts, for multi-value fields) with their record counts, per field,
    /// computed when first needed.
    values: std::sync::Mutex<std::collections::HashMap<FieldId, ValueCounts>>,
    /// Per text field, its distinct values grouped by their NFKC form, computed when first
    /// needed.
    variants: std::sync::Mutex<std::collections::HashMap<FieldId, Variants>>,
    /// Per coded field, the rank of each code when the values are sorted (code 0, "",
    /// ranks first), computed when first needed.
    ranks: std::sync::Mutex<std::collections::HashMap<FieldId, Arc<Vec<u32>>>>,
    /// Groupable single-valued text fields also have an integer code column
    /// ([`code_column`]); grouping on codes hashes integers instead of strings. Code 0 is
    /// null or "" (both shown as ""); the others index this list of values.
    pub codes: std::collections::HashMap<FieldId, Arc<Vec<String>>>,
    /// The `count_where` computed measures with a prepared 0/1 column ([`share_column`]).
    pub shares: Vec<MeasureId>,
    /// The table's memory, held from the server's budget while the table lives.
    #[allow(dead_code)]
    memory: Meter,
}

/// The hidden 0/1 column of a `count_where` computed measure (1.0 where the record counts).
pub fn share_column(measure: MeasureId) -> String {
    format!("__tally_share_{measure}")
}

/// The hidden code column of a field.
pub fn code_column(field: FieldId) -> String {
    format!("__tally_code_{field}")
}

impl Prepared {
    /// A prepared table mapped from the cache.
    fn from_entry(
        entry: crate::cache::Entry,
        layout: &Layout,
        memory: Meter,
    ) -> Result<Prepared, EngineError> {
        let id = entry.header.dataset.clone();
        let batches: Vec<RecordBatch> = entry
            .batches
            .into_iter()
            .map(|b| RecordBatch::try_new(layout.schema.clone(), b.columns().to_vec()))
            .collect::<Result<_, _>>()
            .map_err(|e| EngineError::backend(&id, e))?;
        let table = MemTable::try_new(layout.schema.clone(), vec![batches.clone()])
            .map_err(|e| EngineError::computing(&id, e))?;
        let header = entry.header;
        Ok(Prepared {
            table: Arc::new(table),
            batches,
            files: entry.files,
            rows: header.rows,
            extract: header.extract,
            notes: header.notes,
            pushed: Vec::new(),
            from_cache: true,
            row_sources: None,
            values: Default::default(),
            ranks: Default::default(),
            variants: Default::default(),
            shares: header.shares.into_iter().map(MeasureId::at).collect(),
            codes: header
                .codes
                .into_iter()
                .map(|(i, values)| (FieldId::at(i), Arc::new(values)))
                .collect(),
            memory,
        })
    }

    /// What a cache entry of this table says of it.
    fn cache_header(&self, dataset: &str, version: &str) -> crate::cache::Header {
        let mut codes: Vec<(usize, Vec<String>)> = self
            .codes
            .iter()
            .map(|(f, values)| (f.index(), values.as_ref().clone()))
            .collect();
        codes.sort_by_key(|(i, _)| *i);
        crate::cache::Header {
            files: crate::cache::cached_files(&self.files),
            extract: self.extract.clone(),
            notes: self.notes.clone(),
            codes,
            shares: self.shares.iter().map(|m| m.index()).collect(),
            ..crate::cache::Header::new(dataset, version, self.rows)
        }
    }

    /// Whether a declared field has any null value.
    pub fn has_nulls(&self, field: FieldId) -> bool {
        self.batches
            .iter()
            .any(|b| b.column(field.index()).null_count() > 0)
    }

    /// Whether a declared text field has any missing value (null or "").
    pub fn has_missing(&self, field: FieldId) -> bool {
        self.has_nulls(field)
            || self.batches.iter().any(|b| {
                b.column(field.index())
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .is_some_and(|s| s.offsets().windows(2).any(|w| w[0] == w[1]))
            })
    }

    /// The distinct values of a text field grouped by their NFKC form.
    pub fn nfkc_variants(&self, def: &DatasetDef, field: FieldId) -> Variants {
        if let Ok(cache) = self.variants.lock()
            && let Some(v) = cache.get(&field)
        {
            return Arc::clone(v);
        }
        let mut map: std::collections::HashMap<String, Vec<String>> =
            std::collections::HashMap::new();
        for (value, _) in self.distinct_values(def, field).iter() {
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
        map
    }

    /// The rank of each code of a coded field in the sorted order of its values.
    pub fn code_ranks(&self, field: FieldId) -> Arc<Vec<u32>> {
        if let Ok(cache) = self.ranks.lock()
            && let Some(r) = cache.get(&field)
        {
            return Arc::clone(r);
        }
        let values = self.codes.get(&field).cloned().unwrap_or_default();
        let mut order: Vec<u32> = (0..values.len() as u32).collect();
        order.sort_by(|a, b| values[*a as usize].cmp(&values[*b as usize]).then(a.cmp(b)));
        let mut ranks = vec![0u32; values.len()];
        for (rank, code) in order.into_iter().enumerate() {
            ranks[code as usize] = rank as u32;
        }
        let ranks = Arc::new(ranks);
        if let Ok(mut cache) = self.ranks.lock() {
            cache.insert(field, Arc::clone(&ranks));
        }
        ranks
    }

    /// The distinct non-empty values of a text field with how many records have each, most
    /// frequent first (for multi-value fields: the trimmed parts).
    pub fn distinct_values(&self, def: &DatasetDef, field: FieldId) -> ValueCounts {
        if let Ok(cache) = self.values.lock()
            && let Some(v) = cache.get(&field)
        {
            return Arc::clone(v);
        }
        let separator = def.fields[field].multi_value.clone();
        let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for batch in &self.batches {
            let Some(col) = batch
                .column(field.index())
                .as_any()
                .downcast_ref::<StringArray>()
            else {
                continue;
            };
            for i in 0..col.len() {
                if !col.is_valid(i) {
                    continue;
                }
                let v = col.value(i);
                match &separator {
                    Some(sep) => {
                        let mut seen = std::collections::HashSet::new();
                        for part in v
                            .split(sep.as_str())
                            .map(str::trim)
                            .filter(|p| !p.is_empty())
                        {
                            if seen.insert(part) {
                                *counts.entry(part.to_string()).or_default() += 1;
                            }
                        }
                    }
                    None => {
                        if !v.trim().is_empty() {
                            *counts.entry(v.to_string()).or_default() += 1;
                        }
                    }
                }
            }
        }
        let mut values: Vec<(String, usize)> = counts.into_iter().collect();
        values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let values = Arc::new(values);
        if let Ok(mut cache) = self.values.lock() {
            cache.insert(field, Arc::clone(&values));
        }
        values
    }
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
        _ => Ok(Utf8),
    }
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
            prepared: PreparedCell::default(),
            subsets: std::sync::Mutex::new(Vec::new()),
            inspect: OnceCell::new(),
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
    pub fn record_count(&self) -> Option<u64> {
        self.backend
            .row_count()
            .or_else(|| match &*self.prepared.state.lock().ok()? {
                PrepState::Ready(p) => Some(p.rows as u64),
                _ => None,
            })
    }

    /// The prepared table, built on first use and kept for this dataset version.
    pub async fn prepared(&self, engine: &Engine) -> Result<Arc<Prepared>, EngineError> {
        self.prepared_in(&self.prepared, engine, &[]).await
    }

    /// Waits for the preparation of `cell`, starting it if none is running. The preparation
    /// runs on a task of its own, so a caller that stops waiting (its deadline) leaves it
    /// going, bounded by the memory budget and by [`PREPARE_TIME`].
    async fn prepared_in(
        &self,
        cell: &PreparedCell,
        engine: &Engine,
        pushed: &[Pushed],
    ) -> Result<Arc<Prepared>, EngineError> {
        let (done, generation) = {
            let mut state = cell
                .state
                .lock()
                .map_err(|_| EngineError::internal("the preparation lock is poisoned"))?;
            match &*state {
                PrepState::Ready(p) => return Ok(Arc::clone(p)),
                PrepState::Running {
                    done, generation, ..
                } => (done.clone(), *generation),
                PrepState::Failed { error, free }
                    if engine.budget().free() < free.saturating_add(64 << 20) =>
                {
                    return Err(error.clone());
                }
                _ => {
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
                    let task = tokio::spawn(job.run());
                    let future: futures::future::BoxFuture<'static, _> = Box::pin(async move {
                        match task.await {
                            Ok(result) => result,
                            Err(e) => Err(EngineError::Internal(format!(
                                "the preparation of the data failed unexpectedly: {e}"
                            ))),
                        }
                    });
                    let done = Preparing(futures::FutureExt::shared(future));
                    let generation = cell.generation.fetch_add(1, Ordering::Relaxed) + 1;
                    *state = PrepState::Running {
                        done: done.clone(),
                        progress,
                        generation,
                    };
                    (done, generation)
                }
            }
        };
        let result = done.0.await;
        if let Ok(mut state) = cell.state.lock()
            && matches!(&*state, PrepState::Running { generation: g, .. } if *g == generation)
        {
            *state = match &result {
                Ok(p) => PrepState::Ready(Arc::clone(p)),
                // Only a dataset over the memory budget fails the same way again (while the
                // budget is as full); anything else (a replaced file, an I/O error, a slow
                // plugin) is tried again by the next call.
                Err(error @ EngineError::Limit { .. }) => PrepState::Failed {
                    error: error.clone(),
                    free: engine.budget().free(),
                },
                Err(_) => PrepState::Idle,
            };
        }
        result
    }

    /// The conditions of a call that the backend can apply itself: equality on a field it
    /// declared, not multi-valued (a number as its number: `2024`, never `"2024.0"`).
    pub fn pushdown(&self, filters: &[tally_semantic::resolve::Filter]) -> Vec<Pushed> {
        use tally_semantic::request::{Op, Scalar};
        let columns = self.backend.pushdown_columns();
        if columns.is_empty() {
            return Vec::new();
        }
        let numeric = |v: &Scalar| v.number().map(|n| n.to_string());
        let mut out: Vec<Pushed> = Vec::new();
        for f in filters {
            let field = &self.def.fields[f.field];
            if field.is_multi_value() || !columns.contains(&field.name) {
                continue;
            }
            let text = |v: &Scalar| {
                if field.data_type.is_numeric() {
                    numeric(v)
                } else {
                    Some(v.text())
                }
            };
            let values: Option<Vec<String>> = match &f.op {
                Op::Eq(v) => text(v).map(|t| vec![t]),
                Op::In(vs) if !vs.is_empty() => vs.iter().map(text).collect(),
                _ => continue,
            };
            // A value that is not a number on a numeric field matches nothing the engine
            // keeps either; it is left to the engine to say so.
            let Some(values) = values else { continue };
            out.push(Pushed {
                column: field.name.clone(),
                values,
            });
        }
        out.sort_by(|a, b| a.column.cmp(&b.column).then(a.values.cmp(&b.values)));
        out
    }

    /// The prepared table for a call: the whole data, or, when the backend applies some of
    /// the call's conditions itself, the subset it returned for them (kept for later calls).
    pub async fn prepared_for(
        &self,
        engine: &Engine,
        pushed: &[Pushed],
    ) -> Result<Arc<Prepared>, EngineError> {
        // When a subset is always part of the whole table, the whole table answers every
        // condition (the engine applies them all): once it is prepared, or mapped from the
        // cache, no subset is read for a call.
        let whole_answers = self.backend.subsets_of_whole()
            && (matches!(
                self.prepared.state.lock().as_deref(),
                Ok(PrepState::Ready(_))
            ) || engine
                .cache()
                .is_some_and(|c| c.holds(&self.def.id, &self.version)));
        if pushed.is_empty() || whole_answers {
            return self.prepared(engine).await;
        }
        let cell = {
            let mut subsets = self
                .subsets
                .lock()
                .map_err(|_| EngineError::internal("the subset cache lock is poisoned"))?;
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

    /// The cached `inspect_dataset` body, computed once per version.
    pub async fn inspect_cached<F, Fut>(
        &self,
        compute: F,
    ) -> Result<crate::results::InspectResult, EngineError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<crate::results::InspectResult, EngineError>>,
    {
        self.inspect.get_or_try_init(compute).await.cloned()
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
    async fn run(self) -> Result<Arc<Prepared>, EngineError> {
        let id = self.def.id.clone();
        let (self_cache, self_id, self_version) = (
            self.cache.clone(),
            self.def.id.clone(),
            self.version.clone(),
        );
        let _slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| EngineError::internal("the preparation slots are closed"))?;
        if self.cancel.load(Ordering::Relaxed) {
            return Err(EngineError::Stale {
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
        let blocking = tokio::task::spawn_blocking(move || {
            if let Some(prepared) = self.mapped() {
                return Ok((prepared, false));
            }
            let meter = Meter::new(
                self.budget
                    .reservation(format!("reading dataset `{}`", self.def.id)),
                stop,
                Arc::clone(&self.progress),
            );
            prepare(&self, &handle, &meter).map(|p| (p, self.cacheable()))
        });
        // A backend that never returns (a native plugin stuck in its own code) is abandoned
        // past the preparation's time; the flag above stops everything that reads batches.
        let result =
            match tokio::time::timeout(PREPARE_TIME + std::time::Duration::from_secs(30), blocking)
                .await
            {
                Ok(joined) => joined.unwrap_or_else(|e| {
                    Err(EngineError::Internal(format!(
                        "the preparation of dataset `{id}` failed unexpectedly: {e}"
                    )))
                }),
                Err(_) => Err(EngineError::Limit {
                    message: format!(
                        "reading dataset `{id}` did not finish within {} s",
                        PREPARE_TIME.as_secs()
                    ),
                    hint: "the backend of this dataset is too slow for its data".into(),
                }),
            };
        watchdog.abort();
        let (prepared, store) = result?;
        let prepared = Arc::new(prepared);
        if store && let Some(cache) = &self_cache {
            // Written in the background: the answer does not wait for the disk.
            let cache = Arc::clone(cache);
            let written = Arc::clone(&prepared);
            let (id, version) = (self_id, self_version);
            tokio::task::spawn_blocking(move || {
                use datafusion::catalog::TableProvider as _;
                let header = written.cache_header(&id, &version);
                match cache.store(&header, &written.table.schema(), &written.batches) {
                    Ok(_) => tracing::info!(dataset = %id, "kept the prepared data in the cache"),
                    Err(e) => {
                        tracing::warn!(dataset = %id, "could not keep the prepared data in the cache: {e}")
                    }
                }
            });
        }
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
        let entry = match cache.load(
            id,
            &self.version,
            &layout.schema,
            &self.folder,
            &self.backend.files(),
        ) {
            Ok(Some(entry)) => entry,
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
        match Prepared::from_entry(entry, &layout, memory) {
            Ok(p) => {
                tracing::info!(
                    dataset = id,
                    rows = p.rows,
                    "mapped the prepared data from the cache"
                );
                Some(p)
            }
            Err(e) => {
                tracing::warn!(
                    dataset = id,
                    "the cached prepared data is not used ({e}); preparing anew"
                );
                None
            }
        }
    }
}

/// The bytes a column needs once cast to its canonical type, known before the cast: text is
/// its characters plus offsets, anything else 8 bytes a value.
fn canonical_bytes(array: &ArrayRef) -> usize {
    use datafusion::arrow::array::{AsArray, LargeStringArray, StringViewArray};
    let n = array.len();
    // A dictionary expands to its values, once per row that refers to them.
    if let Some(dict) = array.as_any_dictionary_opt() {
        let values = dict.values();
        let lengths: Vec<usize> = (0..values.len())
            .map(|i| {
                let one = values.slice(i, 1);
                canonical_bytes(&one).saturating_sub(4 + 64)
            })
            .collect();
        let text: usize = dict
            .normalized_keys()
            .iter()
            .map(|k| lengths.get(*k).copied().unwrap_or(0))
            .sum();
        return text + (n + 1) * 4 + n / 8 + 64;
    }
    let text = if let Some(v) = array.as_any().downcast_ref::<StringViewArray>() {
        // The low 32 bits of a view are the value's length.
        v.views()
            .iter()
            .map(|view| (*view as u32) as usize)
            .sum::<usize>()
    } else if let Some(s) = array.as_any().downcast_ref::<StringArray>() {
        s.value_data().len()
    } else if let Some(s) = array.as_any().downcast_ref::<LargeStringArray>() {
        s.value_data().len()
    } else {
        return n * 8 + n / 8 + 64;
    };
    text + (n + 1) * 4 + n / 8 + 64
}

/// Reads a dataset's data through its backend and builds the prepared table, every batch
/// accounted before it is built. Runs on a blocking thread.
fn prepare(
    job: &Job,
    handle: &tokio::runtime::Handle,
    meter: &Meter,
) -> Result<Prepared, EngineError> {
    let def = &job.def;
    let id = def.id.as_str();
    let names: Vec<String> = def.fields.iter().map(|f| f.name.clone()).collect();
    let loaded = handle.block_on(job.backend.load(&names, &job.pushed, meter))?;
    let layout = Layout::of(def, &loaded.provider.schema())?;
    let mut stream = handle
        .block_on(
            job.ctx
                .read_table(loaded.provider.clone())?
                .select(names.iter().map(ident).collect::<Vec<Expr>>())?
                .execute_stream(),
        )
        .map_err(|e| EngineError::computing(id, e))?;

    // What the prepared table holds is reserved apart from what reading held, which is
    // given back once the table is built.
    let kept = Meter::new(
        job.budget.reservation(format!("preparing dataset `{id}`")),
        Arc::new(AtomicBool::new(false)),
        Arc::new(Progress::default()),
    );
    job.progress.rows.store(0, Ordering::Relaxed);
    job.progress.preparing.store(true, Ordering::Relaxed);
    let mut dictionaries: Vec<Dictionary> =
        layout.coded.iter().map(|_| Dictionary::default()).collect();
    let mut out = Vec::new();
    let mut row = 0u64;
    while let Some(batch) = handle.block_on(futures::StreamExt::next(&mut stream)) {
        let batch = batch.map_err(|e| EngineError::computing(id, e))?;
        if meter.cancelled() {
            return Err(EngineError::Limit {
                message: format!(
                    "the preparation of dataset `{id}` was stopped: its version was replaced or it ran longer than {} s",
                    PREPARE_TIME.as_secs()
                ),
                hint: "call again; a replaced dataset is prepared anew".into(),
            });
        }
        // Reserved before anything is built.
        kept.account(layout.bytes_for(&batch), 0)?;
        job.progress
            .rows
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        let n = batch.num_rows() as u64;
        out.push(layout.build(id, batch, row, &mut dictionaries)?);
        row += n;
    }
    let rows = row as usize;
    if let Some(r) = &loaded.row_sources
        && r.index.len() != rows
    {
        return Err(EngineError::backend(
            id,
            format!(
                "the backend gave {} row sources for {rows} rows",
                r.index.len()
            ),
        ));
    }
    let LoadedData {
        provider,
        files,
        extract,
        notes,
        row_sources,
    } = loaded;
    // What reading held goes back; what the table holds is measured exactly.
    drop(stream);
    drop(provider);
    meter.resize(0)?;
    let held: usize = out
        .iter()
        .map(RecordBatch::get_array_memory_size)
        .sum::<usize>()
        + dictionaries.iter().map(Dictionary::bytes).sum::<usize>();
    kept.resize(held)?;
    tracing::info!(
        dataset = id,
        rows,
        memory_mib = held >> 20,
        "prepared the data for queries"
    );
    let table = MemTable::try_new(layout.schema.clone(), vec![out.clone()])
        .map_err(|e| EngineError::computing(id, e))?;
    Ok(Prepared {
        table: Arc::new(table),
        batches: out,
        files,
        rows,
        extract,
        notes,
        pushed: job.pushed.clone(),
        from_cache: false,
        row_sources,
        values: Default::default(),
        ranks: Default::default(),
        variants: Default::default(),
        shares: layout.shares.iter().map(|s| s.measure).collect(),
        codes: layout
            .coded
            .iter()
            .zip(dictionaries)
            .map(|(&i, d)| (i, Arc::new(d.values)))
            .collect(),
        memory: kept,
    })
}

/// The values of a code column: code 0 is the empty value, the others in order of first
/// appearance.
struct Dictionary {
    lookup: std::collections::HashMap<String, u32>,
    values: Vec<String>,
}

impl Default for Dictionary {
    fn default() -> Self {
        Dictionary {
            lookup: Default::default(),
            values: vec![String::new()],
        }
    }
}

impl Dictionary {
    /// The codes of a text column's values (0 for null and empty), new values added.
    fn encode(&mut self, column: Option<&StringArray>, n: usize) -> UInt32Array {
        (0..n)
            .map(|r| match column {
                Some(c) if c.is_valid(r) && !c.value(r).is_empty() => {
                    let v = c.value(r);
                    if let Some(&code) = self.lookup.get(v) {
                        return code;
                    }
                    self.values.push(v.to_string());
                    let code = (self.values.len() - 1) as u32;
                    self.lookup.insert(v.to_string(), code);
                    code
                }
                _ => 0,
            })
            .collect()
    }

    /// About what it holds in memory.
    fn bytes(&self) -> usize {
        self.values.iter().map(|s| s.len() * 2 + 64).sum()
    }
}

/// A `count_where` measure whose records count or not, decided once per version.
struct Share {
    measure: MeasureId,
    field: FieldId,
    separator: Option<String>,
    values: Vec<String>,
}

impl Share {
    /// 1.0 for each record that counts, else 0.0.
    fn column(&self, columns: &[ArrayRef], n: usize) -> ArrayRef {
        let col = columns[self.field.index()]
            .as_any()
            .downcast_ref::<StringArray>();
        let counts = |v: &str| match &self.separator {
            Some(sep) => v
                .split(sep.as_str())
                .any(|p| self.values.iter().any(|c| c == p.trim())),
            None => self.values.iter().any(|c| c == v),
        };
        let share: datafusion::arrow::array::Float64Array = (0..n)
            .map(|r| match col {
                Some(c) if c.is_valid(r) && counts(c.value(r)) => 1.0,
                _ => 0.0,
            })
            .collect();
        Arc::new(share)
    }
}

/// What a prepared table holds: every field cast to its canonical type, the row numbers,
/// the folded search text, a code column per coded field and a share column per
/// `count_where` measure.
struct Layout {
    targets: Vec<DataType>,
    text_fields: Vec<usize>,
    coded: Vec<FieldId>,
    shares: Vec<Share>,
    schema: SchemaRef,
}

impl Layout {
    fn of(def: &DatasetDef, source: &Schema) -> Result<Layout, EngineError> {
        let id = def.id.as_str();
        let mut targets: Vec<DataType> = Vec::with_capacity(def.fields.len());
        for f in &def.fields {
            let source_type = source
                .field_with_name(&f.name)
                .map_err(|_| {
                    EngineError::backend(id, format!("column `{}` vanished from the data", f.name))
                })?
                .data_type()
                .clone();
            targets.push(
                canonical_type(f.data_type, &source_type)
                    .map_err(|m| EngineError::backend(id, format!("`{}` {m}", f.name)))?,
            );
        }
        let text_fields: Vec<usize> = def
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.data_type.is_numeric())
            .map(|(i, _)| i)
            .collect();
        // Dimensions and coded attributes are what summaries group by; free text (names,
        // notes) is not worth a second copy.
        let coded: Vec<FieldId> = def
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                f.groupable
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
        fields.push(ArrowField::new(ROW_COL, DataType::UInt64, false));
        fields.push(ArrowField::new(SEARCH_COL, DataType::Utf8, false));
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
            text_fields,
            coded,
            shares,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// What preparing a batch holds: the cast columns, the search text (as long as the text
    /// it joins), the row numbers, codes and shares.
    fn bytes_for(&self, batch: &RecordBatch) -> usize {
        let n = batch.num_rows();
        let cast: usize = batch.columns().iter().map(canonical_bytes).sum();
        let text: usize = self
            .text_fields
            .iter()
            .map(|i| canonical_bytes(batch.column(*i)))
            .sum();
        cast + n * (8 + 4 * self.coded.len() + 8 * self.shares.len())
            + text
            + n * self.text_fields.len()
    }

    /// The prepared batch of a batch read, its first row numbered `first_row`.
    fn build(
        &self,
        id: &str,
        batch: RecordBatch,
        first_row: u64,
        dictionaries: &mut [Dictionary],
    ) -> Result<RecordBatch, EngineError> {
        let n = batch.num_rows();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for (c, target) in batch.columns().iter().zip(&self.targets) {
            columns.push(
                datafusion::arrow::compute::cast(c, target)
                    .map_err(|e| EngineError::backend(id, e))?,
            );
        }
        drop(batch);
        let search = self.search_text(&columns, n);
        let shares: Vec<ArrayRef> = self.shares.iter().map(|s| s.column(&columns, n)).collect();
        let codes: Vec<ArrayRef> = self
            .coded
            .iter()
            .zip(dictionaries.iter_mut())
            .map(|(&i, d)| {
                let col = columns[i.index()].as_any().downcast_ref::<StringArray>();
                Arc::new(d.encode(col, n)) as ArrayRef
            })
            .collect();
        columns.push(Arc::new(UInt64Array::from_iter_values(
            first_row..first_row + n as u64,
        )));
        columns.push(search);
        columns.extend(codes);
        columns.extend(shares);
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| EngineError::backend(id, e))
    }

    /// Per record, its text fields joined and folded (what `q` searches).
    fn search_text(&self, columns: &[ArrayRef], n: usize) -> ArrayRef {
        let texts: Vec<&StringArray> = self
            .text_fields
            .iter()
            .filter_map(|i| columns[*i].as_any().downcast_ref::<StringArray>())
            .collect();
        let bytes: usize = texts.iter().map(|t| t.value_data().len()).sum();
        let mut search = StringBuilder::with_capacity(n, bytes + n * texts.len());
        let mut buf = String::new();
        for r in 0..n {
            buf.clear();
            for (k, col) in texts.iter().enumerate() {
                if k > 0 {
                    buf.push(SEARCH_SEPARATOR);
                }
                if col.is_valid(r) {
                    buf.push_str(col.value(r));
                }
            }
            search.append_value(tally_semantic::names::fold(&buf));
        }
        Arc::new(search.finish())
    }
}

use datafusion::arrow::array::Array as _;
