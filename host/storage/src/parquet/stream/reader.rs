//! The bytes a scan reads, through checked readers: positional reads of a local file (never
//! a map), ranged requests of an object, page headers checked, memory held.

use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::FutureExt;
use futures::future::BoxFuture;
use tally_plugin_parquet::read_at;

use super::shared::Shared;
use crate::backend::ReadCounts;
use crate::error::StorageError;
use crate::memory::Reservation;
use crate::parquet::reads::CallReads;

/// Which file of the stream a scanned file is.
#[derive(Debug, Clone, Copy)]
pub(super) struct FileIndex(pub(super) usize);

/// A scan's read-ahead of objects ([`CallReads::read_ahead`]): run by the first of its
/// readers that needs bytes, awaited by all.
pub(super) type ReadAhead = futures::future::Shared<BoxFuture<'static, ()>>;

/// Makes the readers of a call's scan.
pub(super) struct CheckedFactory {
    pub(super) shared: Arc<Shared>,
    pub(super) counts: Arc<ReadCounts>,
    /// What the call has read of the objects (`None`: local files, or no call to keep for).
    pub(super) reads: Option<Arc<CallReads>>,
    pub(super) ahead: Option<ReadAhead>,
}

impl std::fmt::Debug for CheckedFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedFactory")
            .field("dataset", &self.shared.dataset)
            .field("reads", &self.reads)
            .field("ahead", &self.ahead.is_some())
            .finish()
    }
}

fn external(e: StorageError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl ParquetFileReaderFactory for CheckedFactory {
    fn create_reader(
        &self,
        _partition_index: usize,
        partitioned_file: PartitionedFile,
        _metadata_size_hint: Option<usize>,
        _metrics: &ExecutionPlanMetricsSet,
    ) -> DfResult<Box<dyn AsyncFileReader + Send>> {
        let index = partitioned_file
            .extensions
            .get::<FileIndex>()
            .map(|i| i.0)
            .ok_or_else(|| DataFusionError::Internal("a file the stream does not know".into()))?;
        let shared = &self.shared;
        let file = &shared.files[index];
        let stale = |message: &str| StorageError::Stale {
            dataset: shared.dataset.clone(),
            message: format!("{message} (`{}`)", file.relative),
        };
        if file.object.is_some() {
            // Every ranged read names the ETag registered (`If-Match`): bytes of another
            // version are refused by the store itself.
            return Ok(Box::new(CheckedReader {
                shared: Arc::clone(shared),
                counts: Arc::clone(&self.counts),
                index,
                file: None,
                held: shared
                    .budget
                    .reservation(format!("reading dataset `{}`", shared.dataset)),
                reads: self.reads.clone(),
                ahead: self.ahead.clone(),
            }));
        }
        let opened = match File::open(&file.footer.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(external(stale("its data file was removed")));
            }
            Err(e) => return Err(external(StorageError::backend(&shared.dataset, e))),
        };
        // The file must be the version registered: the same size and the same footer, read
        // again unless the file is known to be unchanged since it was last found to end in it
        // (`Footer::known_in`; its metadata taken before the read).
        let at = tally_plugin_parquet::clock_ns();
        let meta = opened
            .metadata()
            .map_err(|e| external(StorageError::backend(&shared.dataset, e)))?;
        let stamp = tally_plugin_parquet::Stamp::of(&opened, &meta);
        if !file.footer.known_in(stamp) {
            let size = meta.len();
            let footer = file.footer.footer_bytes.len() as u64;
            let mut tail = vec![0u8; file.footer.footer_bytes.len()];
            let same = size == file.footer.size
                && read_at(&opened, &mut tail, size.saturating_sub(footer)).is_ok()
                && *tail == *file.footer.footer_bytes;
            if !same {
                return Err(external(stale(
                    "its data file changed after this version was registered",
                )));
            }
            file.footer.seen_in(stamp, at);
        }
        Ok(Box::new(CheckedReader {
            shared: Arc::clone(shared),
            counts: Arc::clone(&self.counts),
            index,
            file: Some(opened),
            held: shared
                .budget
                .reservation(format!("reading dataset `{}`", shared.dataset)),
            reads: None,
            ahead: None,
        }))
    }
}

/// Reads one file for a scan: positional reads, page headers checked, memory held.
struct CheckedReader {
    shared: Arc<Shared>,
    counts: Arc<ReadCounts>,
    index: usize,
    /// The local file (`None`: the stream file's object).
    file: Option<File>,
    /// What the bytes of the last read hold (the scan reads a row group's chunks at a time).
    held: Reservation,
    /// What the call has read of the objects, and the scan's read-ahead.
    reads: Option<Arc<CallReads>>,
    ahead: Option<ReadAhead>,
}

impl CheckedReader {
    /// Checks the ranges asked for and holds their size from the memory budget.
    fn admit(&mut self, ranges: &[Range<u64>]) -> Result<(), ParquetError> {
        let file = &self.shared.files[self.index];
        let refuse = |e: StorageError| ParquetError::External(Box::new(e));
        let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
        if ranges
            .iter()
            .any(|r| r.end < r.start || r.end > file.footer.size)
        {
            return Err(refuse(StorageError::backend(
                &self.shared.dataset,
                format!("`{}`: a read past the end of the file", file.relative),
            )));
        }
        self.held
            .resize(usize::try_from(total).unwrap_or(usize::MAX))
            .map_err(refuse)
    }

    /// Checks the page headers of the column chunks read and counts their row groups.
    fn accept(&self, range: &Range<u64>, buf: &[u8]) -> Result<(), ParquetError> {
        let file = &self.shared.files[self.index];
        if let Some((g, c, _)) = file.chunk_of(range) {
            let column = file.footer.metadata.row_group(g).column(c);
            tally_plugin_parquet::pages::check_pages(buf, column, g).map_err(|m| {
                ParquetError::External(Box::new(StorageError::backend(
                    &self.shared.dataset,
                    format!(
                        "`{}` has a footer that cannot be trusted: {m}",
                        file.relative
                    ),
                )))
            })?;
            if let Ok(mut read) = self.counts.read.lock() {
                read.insert((self.index, g));
            }
        }
        Ok(())
    }

    fn read(&mut self, ranges: &[Range<u64>]) -> Result<Vec<Bytes>, ParquetError> {
        self.admit(ranges)?;
        let Some(opened) = &self.file else {
            return Err(ParquetError::General(
                "an object is read by ranged requests".into(),
            ));
        };
        let mut out = Vec::with_capacity(ranges.len());
        for range in ranges {
            let mut buf = vec![0u8; (range.end - range.start) as usize];
            read_at(opened, &mut buf, range.start).map_err(|e| {
                ParquetError::External(Box::new(StorageError::backend(&self.shared.dataset, e)))
            })?;
            self.accept(range, &buf)?;
            out.push(Bytes::from(buf));
        }
        Ok(out)
    }

    /// The ranges of the stream file's object: those the call read already, the rest read
    /// from the store (and kept for the call's later scans).
    async fn read_object(&mut self, ranges: Vec<Range<u64>>) -> Result<Vec<Bytes>, ParquetError> {
        self.admit(&ranges)?;
        let shared = Arc::clone(&self.shared);
        let file = &shared.files[self.index];
        let Some(object) = file.object.clone() else {
            return Err(ParquetError::General("not an object".into()));
        };
        let failed =
            |e| ParquetError::External(Box::new(crate::object::object_error(&shared.dataset, e)));
        if let Some(ahead) = &self.ahead {
            ahead.clone().await;
        }
        let mut got: Vec<Option<Bytes>> = vec![None; ranges.len()];
        if let Some(reads) = &self.reads {
            for (slot, range) in got.iter_mut().zip(&ranges) {
                let chunk = file.chunk_of(range).map(|(.., c)| c);
                match reads.get(&object, range, chunk) {
                    Some(Ok(bytes)) => *slot = Some(bytes),
                    Some(Err(e)) => return Err(failed(e)),
                    None => {}
                }
            }
        }
        let missing: Vec<Range<u64>> = ranges
            .iter()
            .zip(&got)
            .filter(|(_, g)| g.is_none())
            .map(|(r, _)| r.clone())
            .collect();
        if !missing.is_empty() {
            let mut fetched = object.ranges(missing).await.map_err(failed)?.into_iter();
            for (slot, range) in got.iter_mut().zip(&ranges) {
                if slot.is_none() {
                    let bytes = fetched.next().unwrap_or_default();
                    if let Some(reads) = &self.reads
                        && bytes.len() as u64 == range.end - range.start
                    {
                        reads.keep(&object, range, &bytes);
                    }
                    *slot = Some(bytes);
                }
            }
        }
        let got: Vec<Bytes> = got.into_iter().map(Option::unwrap_or_default).collect();
        for (range, bytes) in ranges.iter().zip(&got) {
            if bytes.len() as u64 != range.end - range.start {
                return Err(ParquetError::External(Box::new(StorageError::backend(
                    &self.shared.dataset,
                    format!("{} answered fewer bytes than asked for", object.url),
                ))));
            }
            self.accept(range, bytes)?;
        }
        Ok(got)
    }
}

impl AsyncFileReader for CheckedReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes, ParquetError>> {
        if self.file.is_none() {
            return async move {
                self.read_object(vec![range])
                    .await
                    .map(|mut v| v.pop().unwrap_or_default())
            }
            .boxed();
        }
        let read = self
            .read(std::slice::from_ref(&range))
            .map(|mut v| v.pop().unwrap_or_default());
        async move { read }.boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, Result<Vec<Bytes>, ParquetError>> {
        if self.file.is_none() {
            return async move { self.read_object(ranges).await }.boxed();
        }
        let read = self.read(&ranges);
        async move { read }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>, ParquetError>> {
        // The footer registered: the version the call reads (the page index, when the scan
        // wants it, is read through this reader).
        let metadata = Arc::clone(&self.shared.files[self.index].footer.metadata);
        async move { Ok(metadata) }.boxed()
    }
}
