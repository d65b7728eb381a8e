//! A served dataset: its definition, its backend, and the prepared table queries run on.
//!
//! A dataset version answers each call from its prepared table (prepared once, in the
//! background, or mapped from the cache) or from its files read at that call; this module
//! chooses between them. Below it: the data as calls read it (`prepared`) and the values
//! counted from it (`values`), the cell a table is prepared in (`cell`), the preparation
//! itself (`prepare`), how calls are served and routed (`serving`), and where the data
//! comes from (`provenance`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tally_semantic::definition::{DatasetDef, Diagnostic};
use tokio::sync::OnceCell;

use crate::backend::{Backend, Pushed};
use crate::error::StorageError;
use crate::memory::{Meter, Progress};
use crate::store::Layout;

mod cell;
mod prepare;
mod prepared;
mod provenance;
mod serving;
mod values;

use cell::{PrepState, PreparedCell, Preparing, Started};
use prepare::Job;
use serving::{TIMED_AFTER_ROWS, estimate};

pub use crate::store::{
    RESERVED_PREFIX, ROW_COL, canonical_type, code_column, dictionary_column, share_column,
    text_type,
};
pub use prepare::PREPARE_TIME;
pub use prepared::{CallTable, Codes, Data, Prepared, Served, ValueCounts, Variants};
pub use provenance::{RefusedChange, Retrieved};
pub use serving::{Resources, Route, STREAM_WHILE_PREPARING, Serving, Work};
pub use values::part_occurrences;

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

/// How many pushed-down subsets (and streams) a dataset version keeps.
const SUBSETS_KEPT: usize = 16;

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
