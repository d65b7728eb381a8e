//! Preparing a table, on a task of its own: the job and its watchdog, the cache's entry mapped
//! when it checks out, else the data read through the backend and built into the cache or
//! memory, every batch accounted against the budget first.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{Array as _, RecordBatch};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::Expr;
use datafusion::prelude::{SessionContext, ident};
use tally_semantic::definition::DatasetDef;

use super::prepared::{Loaded, Prepared, Served};
use crate::backend::{Backend, LoadedData, Pushed};
use crate::error::StorageError;
use crate::memory::{Budget, Meter, Progress};
use crate::store::{Builder, ChunkSink, InMemory, Layout, Store};

/// How long a preparation may run in the background before it is stopped.
pub const PREPARE_TIME: std::time::Duration = std::time::Duration::from_secs(600);

/// Everything a preparation needs, owned, so it can run on a task of its own.
pub(super) struct Job {
    pub(super) def: DatasetDef,
    pub(super) folder: PathBuf,
    pub(super) version: String,
    /// Where prepared tables are kept across restarts (the Parquet backend's, whole).
    pub(super) cache: Option<Arc<crate::cache::Cache>>,
    pub(super) backend: Arc<dyn Backend>,
    pub(super) ctx: SessionContext,
    pub(super) budget: Arc<Budget>,
    pub(super) pushed: Vec<Pushed>,
    pub(super) progress: Arc<Progress>,
    pub(super) cancel: Arc<AtomicBool>,
    /// Preparations run a few at a time: each is CPU and memory heavy, and many at once
    /// would only divide the machine between them.
    pub(super) slots: Arc<tokio::sync::Semaphore>,
}

impl Job {
    pub(super) async fn run(self) -> Result<Arc<Prepared>, StorageError> {
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
