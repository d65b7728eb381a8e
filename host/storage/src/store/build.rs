//! Building a prepared table from the batches read: each cast and interned, gathered into
//! chunks handed to a sink (memory or a cache entry), each field's statistics kept on the way.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};

use super::intern::{Dictionary, Interner, encode};
use super::layout::Layout;
use super::stats::{FieldStats, Tally};
use crate::error::StorageError;

/// Records per stored chunk: batches read are gathered into chunks about this large.
pub const CHUNK_ROWS: usize = 32 * 1024;

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
