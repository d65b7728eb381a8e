//! A Parquet dataset read from its files at every call, instead of prepared: what serves data
//! larger than the memory budget, and a large dataset while it is being prepared.
//!
//! Each call's scan is DataFusion's Parquet scan over the files, with the call's conditions as
//! its predicate: row groups whose statistics rule the conditions out are not read, pages
//! the page index rules out are skipped, and bloom filters are asked about values compared
//! for equality, where the files have them. Only the columns the call needs are read. The
//! bytes come through [`CheckedReader`], which reads positionally from the file (never a map
//! of a file someone else may rewrite), checks the page headers of every column chunk it
//! reads as the prepared path does, holds what it reads from the memory budget, and refuses a
//! file that is no longer the one registered (its size and footer).
//!
//! Records are numbered by their position in the files (in path order), exactly as a
//! prepared table numbers them, so the default order, ties and cursor pages are the same on
//! both paths.

use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, DataFusionError, Result as DfResult, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfigBuilder, ParquetFileReaderFactory, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::parquet::arrow::RowNumber;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::parquet::errors::ParquetError;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::FutureExt;
use futures::future::BoxFuture;
use tally_plugin_parquet::Footer;
use tally_plugin_parquet::groups::read_at;

use crate::backend::{ReadCounts, ServedFile, Streaming};
use crate::error::StorageError;
use crate::memory::{Budget, Reservation};
use crate::store::{MapExec, ROW_COL};

/// Partition column: the position of a file's first record in the whole set.
const OFFSET_COL: &str = "__tally_file_offset";
/// Virtual column: a record's position in its file.
const ROW_NUMBER_COL: &str = "__tally_file_row";

/// One file a stream reads.
#[derive(Debug)]
pub(crate) struct StreamFile {
    pub relative: String,
    pub footer: Footer,
    /// The position of its first record among all the files of the dataset.
    pub offset: u64,
    /// Its partition values, one per key column the stream serves.
    pub values: Vec<ScalarValue>,
    /// Its column chunks by where they lie: (start, end, row group, column).
    chunks: Vec<(u64, u64, usize, usize)>,
    /// Where it is an object in object storage (read by ranged requests).
    object: Option<Arc<crate::object::ObjectFile>>,
}

impl StreamFile {
    pub fn new(
        relative: String,
        footer: Footer,
        offset: u64,
        values: Vec<ScalarValue>,
        object: Option<Arc<crate::object::ObjectFile>>,
    ) -> StreamFile {
        let mut chunks = Vec::new();
        for (g, group) in footer.metadata.row_groups().iter().enumerate() {
            for (c, column) in group.columns().iter().enumerate() {
                if let Ok((start, len)) = tally_plugin_parquet::pages::chunk_range(column, g) {
                    chunks.push((start as u64, (start + len) as u64, g, c));
                }
            }
        }
        chunks.sort_unstable();
        StreamFile {
            relative,
            footer,
            offset,
            values,
            chunks,
            object,
        }
    }

    /// The column chunk a range of bytes lies in, if any (row group, column).
    fn chunk_of(&self, range: &Range<u64>) -> Option<(usize, usize, u64)> {
        let i = self
            .chunks
            .partition_point(|(start, ..)| *start <= range.start);
        let (start, end, g, c) = *self.chunks.get(i.checked_sub(1)?)?;
        (range.end <= end).then_some((g, c, start))
    }
}

/// Where an output column of the stream comes from.
#[derive(Debug, Clone, Copy)]
enum Col {
    /// A column of the files (index into the scan's file schema).
    File(usize),
    /// A partition key (index among the keys served).
    Key(usize),
}

/// What every call's table over the stream shares.
#[derive(Debug)]
struct Shared {
    dataset: String,
    files: Vec<StreamFile>,
    served: Vec<ServedFile>,
    extract: Option<String>,
    /// The files' columns served, in the types asked for.
    file_schema: SchemaRef,
    /// The offset column, then the keys served.
    partition_fields: Vec<FieldRef>,
    /// The fields asked for, then [`ROW_COL`].
    schema: SchemaRef,
    sources: Vec<Col>,
    budget: Arc<Budget>,
    rows: usize,
}

/// A Parquet dataset's files, read at every call.
#[derive(Debug)]
pub struct ParquetStream {
    shared: Arc<Shared>,
}

impl ParquetStream {
    /// A stream over `files` serving `fields` (name and type; a file column or a key),
    /// `keys` naming the partition keys whose values the files carry (in order).
    pub(crate) fn new(
        dataset: &str,
        fields: &[(String, DataType)],
        keys: &[String],
        files: Vec<StreamFile>,
        served: Vec<ServedFile>,
        extract: Option<String>,
        budget: &Arc<Budget>,
    ) -> Result<ParquetStream, StorageError> {
        let mut file_fields: Vec<Field> = Vec::new();
        let mut key_fields: Vec<(usize, Field)> = Vec::new();
        let mut sources = Vec::with_capacity(fields.len());
        for (name, data_type) in fields {
            match keys.iter().position(|k| k == name) {
                Some(k) => {
                    sources.push(Col::Key(key_fields.len()));
                    key_fields.push((k, Field::new(name, data_type.clone(), true)));
                }
                None => {
                    sources.push(Col::File(file_fields.len()));
                    file_fields.push(Field::new(name, data_type.clone(), true));
                }
            }
        }
        // The files carry every key's value; keep those of the keys served, in their order.
        let files = files
            .into_iter()
            .map(|mut f| {
                f.values = key_fields
                    .iter()
                    .map(|(k, _)| f.values.get(*k).cloned().unwrap_or(ScalarValue::Null))
                    .collect();
                f
            })
            .collect::<Vec<_>>();
        let mut partition_fields: Vec<FieldRef> =
            vec![Arc::new(Field::new(OFFSET_COL, DataType::UInt64, false))];
        partition_fields.extend(key_fields.into_iter().map(|(_, f)| Arc::new(f)));
        let mut out: Vec<Field> = fields
            .iter()
            .map(|(n, t)| Field::new(n, t.clone(), true))
            .collect();
        out.push(Field::new(ROW_COL, DataType::UInt64, false));
        let rows = files.iter().map(|f| f.footer.num_rows as usize).sum();
        Ok(ParquetStream {
            shared: Arc::new(Shared {
                dataset: dataset.to_string(),
                files,
                served,
                extract,
                file_schema: Arc::new(Schema::new(file_fields)),
                partition_fields,
                schema: Arc::new(Schema::new(out)),
                sources,
                budget: Arc::clone(budget),
                rows,
            }),
        })
    }
}

impl ParquetStream {
    /// The files as an executor of a cluster opens them ([`crate::source::TableSource`]):
    /// the keys served (in the order of each file's values), then per file where it is, the
    /// version registered and its partition values.
    pub(crate) fn source_files(
        &self,
    ) -> (
        Vec<String>,
        Vec<crate::source::SourceFile>,
        Vec<Vec<ScalarValue>>,
    ) {
        let keys = self.shared.partition_fields[1..]
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let mut files = Vec::with_capacity(self.shared.files.len());
        let mut values = Vec::with_capacity(self.shared.files.len());
        for f in &self.shared.files {
            let object = f.object.as_ref().map(|o| crate::source::SourceObject {
                url: o.url.clone(),
                etag: o.etag.clone(),
                version: o.version.clone(),
                modified_ms: o.modified.and_then(|m| {
                    m.duration_since(std::time::UNIX_EPOCH)
                        .ok()
                        .map(|d| d.as_millis() as i64)
                }),
            });
            let path = object.is_none().then(|| {
                std::path::absolute(&f.footer.path)
                    .unwrap_or_else(|_| f.footer.path.clone())
                    .to_string_lossy()
                    .into_owned()
            });
            files.push(crate::source::SourceFile {
                relative: f.relative.clone(),
                path,
                object,
                size: f.footer.size,
                offset: f.offset,
                rows: f.footer.num_rows,
                footer_sha256: crate::backend::sha256_hex(&f.footer.footer_bytes),
            });
            values.push(f.values.clone());
        }
        (keys, files, values)
    }
}

/// The files of a table sent to an executor, opened here and checked against the versions
/// registered: the same size and the same footer (an object: the same ETag, named in every
/// read). Footers are read on blocking threads, a few files at a time.
pub(crate) async fn reopen(
    source: &crate::source::TableSource,
) -> Result<Vec<StreamFile>, StorageError> {
    let dataset = source.dataset.clone();
    let mut out = Vec::with_capacity(source.files.len());
    for (file, values) in source.files.iter().zip(&source.values) {
        let file = file.clone();
        let dataset = dataset.clone();
        let stale = {
            let dataset = dataset.clone();
            let relative = file.relative.clone();
            move |message: &str| StorageError::Stale {
                dataset: dataset.clone(),
                message: format!("{message} (`{relative}`)"),
            }
        };
        let opened = tokio::task::spawn_blocking(move || -> Result<_, StorageError> {
            match (&file.object, &file.path) {
                (Some(o), _) => {
                    let object = crate::object::reopen(
                        &o.url,
                        o.etag.clone(),
                        o.version.clone(),
                        file.size,
                        o.modified_ms.map(|ms| {
                            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64)
                        }),
                    )
                    .map_err(|e| executor_object_error(&dataset, e))?;
                    let footer = tally_plugin_parquet::read_footer_of(
                        &object.message_path(),
                        &object,
                        object.modified,
                    )
                    .map_err(|e| {
                        // The store's own refusal (an object replaced: its ETag is another),
                        // said as such, not as a file that cannot be read.
                        let object = match &e {
                            tally_plugin_parquet::Error::Io { source, .. } => source
                                .get_ref()
                                .and_then(|s| s.downcast_ref::<crate::object::ObjectError>()),
                            _ => None,
                        };
                        match object {
                            Some(object) => executor_object_error(&dataset, object.clone()),
                            None => StorageError::backend(&dataset, e),
                        }
                    })?;
                    Ok((footer, Some(Arc::new(object)), file))
                }
                (None, Some(path)) => {
                    let footer = match tally_plugin_parquet::read_footer(std::path::Path::new(path)) {
                        Ok(f) => f,
                        Err(e) if !std::path::Path::new(path).exists() => {
                            return Err(StorageError::Stale {
                                dataset: dataset.clone(),
                                message: format!(
                                    "its data file is not at {path} on this executor ({e}); executors must reach the server's files at the same paths, or read the data from object storage"
                                ),
                            });
                        }
                        Err(e) => return Err(StorageError::backend(&dataset, e)),
                    };
                    Ok((footer, None, file))
                }
                (None, None) => Err(StorageError::internal("a file with neither path nor object")),
            }
        })
        .await
        .map_err(StorageError::internal)??;
        let (footer, object, file) = opened;
        let same = footer.size == file.size
            && footer.num_rows == file.rows
            && crate::backend::sha256_hex(&footer.footer_bytes) == file.footer_sha256;
        if !same {
            return Err(stale(
                "the data file an executor opened is not the version the server registered",
            ));
        }
        out.push(StreamFile::new(
            file.relative.clone(),
            footer,
            file.offset,
            values.clone(),
            object,
        ));
    }
    Ok(out)
}

/// An object-store failure met by an executor: the credentials it reads with are its own,
/// from its environment, so what to fix is said of the executors, not of the server (whose
/// environment may well hold the right ones).
fn executor_object_error(dataset: &str, e: crate::object::ObjectError) -> StorageError {
    use crate::object::ObjectError;
    const EXECUTORS: &str = "executors read objects with their own credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment of every tally-executor, as for the server (docs/cluster.md)";
    match e {
        ObjectError::NoCredentials(m) => StorageError::backend(
            dataset,
            format!(
                "{} ({EXECUTORS})",
                m.replace(
                    "in the server's environment",
                    "in this executor's environment"
                )
            ),
        ),
        ObjectError::Denied(m) => StorageError::backend(
            dataset,
            format!("{m}, on an executor ({EXECUTORS}; check that they may read the objects)"),
        ),
        other => super::object_error(dataset, other),
    }
}

impl Streaming for ParquetStream {
    fn table(&self) -> (Arc<dyn TableProvider>, Arc<ReadCounts>) {
        let counts = Arc::new(ReadCounts::default());
        counts.row_groups.store(
            self.shared
                .files
                .iter()
                .map(|f| f.footer.metadata.num_row_groups())
                .sum(),
            std::sync::atomic::Ordering::Relaxed,
        );
        (
            Arc::new(StreamTable {
                shared: Arc::clone(&self.shared),
                counts: Arc::clone(&counts),
            }),
            counts,
        )
    }

    fn files(&self) -> &[ServedFile] {
        &self.shared.served
    }

    fn extract(&self) -> Option<String> {
        self.shared.extract.clone()
    }

    fn rows(&self) -> usize {
        self.shared.rows
    }

    fn source_files(
        &self,
    ) -> Option<(
        Vec<String>,
        Vec<crate::source::SourceFile>,
        Vec<Vec<ScalarValue>>,
    )> {
        Some(ParquetStream::source_files(self))
    }
}

/// The table of one call.
#[derive(Debug)]
struct StreamTable {
    shared: Arc<Shared>,
    counts: Arc<ReadCounts>,
}

impl StreamTable {
    /// The scan's schema: the file columns, the offset and keys, then (when the scan numbers
    /// its records) the row number. A scan that does not number its records leaves the row
    /// number out: the Parquet reader would number every row group it reads, and makes a map
    /// of all the file's row groups to do so each time (75M rows in 4,578 row groups: 21M
    /// entries per scan, a third of a summary's time).
    fn table_schema(&self, row_numbers: bool) -> TableSchema {
        let builder = TableSchema::builder(Arc::clone(&self.shared.file_schema))
            .with_table_partition_cols(self.shared.partition_fields.clone());
        if !row_numbers {
            return builder.build();
        }
        let row_number: FieldRef = Arc::new(
            Field::new(ROW_NUMBER_COL, DataType::Int64, false).with_extension_type(RowNumber),
        );
        builder.with_virtual_columns(vec![row_number]).build()
    }

    /// The row numbers a condition `__tally_row IN (…)` names (how a page's records are
    /// fetched): then only the pages that hold them are read.
    fn row_numbers(e: &Expr) -> Option<Vec<u64>> {
        use datafusion::logical_expr::expr::InList;
        let Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) = e
        else {
            return None;
        };
        if !matches!(expr.as_ref(), Expr::Column(c) if c.name == ROW_COL) {
            return None;
        }
        list.iter()
            .map(|v| match v {
                Expr::Literal(ScalarValue::UInt64(Some(n)), _) => Some(*n),
                _ => None,
            })
            .collect()
    }

    /// Whether a condition names only columns the scan can test (not the row number).
    fn testable(&self, e: &Expr) -> bool {
        e.column_refs()
            .iter()
            .all(|c| c.name != ROW_COL && self.shared.schema.index_of(&c.name).is_ok())
    }
}

#[async_trait::async_trait]
impl TableProvider for StreamTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.shared.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Conditions prune what is read; every record read is still tested above the scan.
        Ok(filters
            .iter()
            .map(|f| {
                if self.testable(f) || StreamTable::row_numbers(f).is_some() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let shared = &self.shared;
        let all: Vec<usize> = (0..=shared.sources.len()).collect();
        let wanted = projection.unwrap_or(&all);
        let (scanned, outputs) = self.columns(wanted);
        // The row number is the table schema's last column, after the files' and the partitions'.
        let row_number = shared.file_schema.fields().len() + shared.partition_fields.len();
        let table_schema = self.table_schema(scanned.contains(&row_number));
        let source = self.source(state, &table_schema, filters)?;
        // Records asked for by number: per file, a selection of just those rows (the pages
        // that hold them are read; files without any are left out).
        let mut wanted_rows: Option<Vec<u64>> = filters.iter().find_map(StreamTable::row_numbers);
        if let Some(rows) = &mut wanted_rows {
            rows.sort_unstable();
            rows.dedup();
        }
        let partitioned = self.partitioned(wanted_rows.as_deref());
        let config =
            FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
                .with_file_group(FileGroup::new(partitioned))
                .with_projection_indices(Some(scanned.clone()))?
                .with_limit(limit)
                .build();
        let mut scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
        // A call over a large table splits the files by byte ranges, one run of row groups a
        // partition (the call decided the table is large: the files' size does not matter).
        let partitions = state.config().target_partitions();
        if partitions > 1 && wanted_rows.is_none() {
            let mut options = state.config_options().clone();
            options.optimizer.repartition_file_min_size = 0;
            if let Some(split) = scan.repartitioned(partitions, &options)? {
                scan = split;
            }
        }
        let schema = Arc::new(shared.schema.project(wanted)?);
        let out_schema = Arc::clone(&schema);
        let map = move |batch: RecordBatch| -> DfResult<RecordBatch> {
            shape(&outputs, &out_schema, batch)
        };
        Ok(Arc::new(MapExec::new(
            format!(
                "ParquetStream: {} files of `{}`",
                shared.files.len(),
                shared.dataset
            ),
            scan,
            schema,
            Arc::new(map),
        )))
    }
}

impl StreamTable {
    /// Plans the columns of a scan: which it reads (indices into its table schema) and,
    /// per output wanted, their places among those read.
    fn columns(&self, wanted: &[usize]) -> (Vec<usize>, Vec<Output>) {
        let shared = &self.shared;
        let files = shared.file_schema.fields().len();
        let keys = shared.partition_fields.len() - 1;
        let fields = shared.sources.len();
        // Columns of the scan (indices into its table schema) and, per output, their places.
        let mut scanned: Vec<usize> = Vec::new();
        let place = |i: usize, scanned: &mut Vec<usize>| match scanned.iter().position(|s| *s == i)
        {
            Some(p) => p,
            None => {
                scanned.push(i);
                scanned.len() - 1
            }
        };
        let mut outputs: Vec<Output> = Vec::with_capacity(wanted.len());
        for &w in wanted {
            outputs.push(if w < fields {
                Output::Column(match shared.sources[w] {
                    Col::File(i) => place(i, &mut scanned),
                    Col::Key(k) => place(files + 1 + k, &mut scanned),
                })
            } else {
                Output::Row {
                    offset: place(files, &mut scanned),
                    row: place(files + 1 + keys, &mut scanned),
                }
            });
        }
        (scanned, outputs)
    }

    /// Makes the Parquet source of a scan: its checked readers, and the conditions it can
    /// test as its predicate.
    fn source(
        &self,
        state: &dyn Session,
        table_schema: &TableSchema,
        filters: &[Expr],
    ) -> DfResult<ParquetSource> {
        let shared = &self.shared;
        let mut source = ParquetSource::new(table_schema.clone())
            .with_parquet_file_reader_factory(Arc::new(CheckedFactory {
                shared: Arc::clone(shared),
                counts: Arc::clone(&self.counts),
            }))
            .with_enable_page_index(true)
            .with_bloom_filter_on_read(true)
            .with_pushdown_filters(false);
        let testable: Vec<Expr> = filters
            .iter()
            .filter(|f| self.testable(f))
            .cloned()
            .collect();
        if let Some(condition) = testable.into_iter().reduce(Expr::and) {
            let df_schema =
                DFSchema::try_from(Arc::clone(table_schema.schema_without_virtual_columns()))?;
            let predicate = state.create_physical_expr(condition, &df_schema)?;
            source = source.with_predicate(predicate);
        }
        Ok(source)
    }

    /// Lists the files a scan reads, each with its partition values and, when records are
    /// asked for by number (sorted, distinct), the selection of just those rows.
    fn partitioned(&self, wanted_rows: Option<&[u64]>) -> Vec<PartitionedFile> {
        let shared = &self.shared;
        let mut partitioned: Vec<PartitionedFile> = Vec::with_capacity(shared.files.len());
        for (i, f) in shared.files.iter().enumerate() {
            let mut pf =
                PartitionedFile::new(format!("tally/{}/{i}", shared.dataset), f.footer.size);
            pf.partition_values = std::iter::once(ScalarValue::UInt64(Some(f.offset)))
                .chain(f.values.iter().cloned())
                .collect();
            pf.extensions.insert(FileIndex(i));
            if let Some(rows) = wanted_rows {
                let n = f.footer.num_rows;
                let local: Vec<u64> = rows
                    .iter()
                    .filter(|r| **r >= f.offset && **r < f.offset + n)
                    .map(|r| r - f.offset)
                    .collect();
                if local.is_empty() {
                    continue;
                }
                pf.extensions.insert(
                    datafusion::datasource::physical_plan::parquet::ParquetRowSelection::new(
                        selection_of(&local, n),
                    ),
                );
            }
            partitioned.push(pf);
        }
        partitioned
    }
}

/// Shapes a batch of a scan into the columns wanted: each a column scanned, or the record
/// number made of a file's offset and the row's position in it.
fn shape(outputs: &[Output], schema: &SchemaRef, batch: RecordBatch) -> DfResult<RecordBatch> {
    let n = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(outputs.len());
    for o in outputs {
        columns.push(match *o {
            Output::Column(p) => Arc::clone(batch.column(p)),
            Output::Row { offset, row } => {
                let offsets =
                    datafusion::arrow::compute::cast(batch.column(offset), &DataType::UInt64)?;
                let offsets = offsets.as_primitive::<datafusion::arrow::datatypes::UInt64Type>();
                let rows = batch.column(row).as_primitive::<Int64Type>();
                Arc::new(UInt64Array::from_iter_values(
                    (0..n).map(|r| offsets.value(r) + rows.value(r).max(0) as u64),
                ))
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

/// A selection of the given (sorted, distinct) rows of a file of `rows` rows.
fn selection_of(
    local: &[u64],
    rows: u64,
) -> datafusion::parquet::arrow::arrow_reader::RowSelection {
    use datafusion::parquet::arrow::arrow_reader::{RowSelection, RowSelector};
    let mut selectors = Vec::new();
    let mut at = 0u64;
    for &r in local {
        if r > at {
            selectors.push(RowSelector::skip((r - at) as usize));
        }
        selectors.push(RowSelector::select(1));
        at = r + 1;
    }
    if at < rows {
        selectors.push(RowSelector::skip((rows - at) as usize));
    }
    RowSelection::from(selectors)
}

/// An output column of a scan: a column of it, or the record number made of two of them.
#[derive(Debug, Clone, Copy)]
enum Output {
    Column(usize),
    Row { offset: usize, row: usize },
}

/// Which file of the stream a scanned file is.
#[derive(Debug, Clone, Copy)]
struct FileIndex(usize);

/// Makes the readers of a call's scan.
#[derive(Debug)]
struct CheckedFactory {
    shared: Arc<Shared>,
    counts: Arc<ReadCounts>,
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
            }));
        }
        let opened = match File::open(&file.footer.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(external(stale("its data file was removed")));
            }
            Err(e) => return Err(external(StorageError::backend(&shared.dataset, e))),
        };
        // The file must be the version registered: the same size and the same footer.
        let size = opened
            .metadata()
            .map_err(|e| external(StorageError::backend(&shared.dataset, e)))?
            .len();
        let footer = file.footer.footer_bytes.len() as u64;
        let mut tail = vec![0u8; file.footer.footer_bytes.len()];
        let same = size == file.footer.size
            && read_at(&opened, &mut tail, size.saturating_sub(footer)).is_ok()
            && tail == file.footer.footer_bytes;
        if !same {
            return Err(external(stale(
                "its data file changed after this version was registered",
            )));
        }
        Ok(Box::new(CheckedReader {
            shared: Arc::clone(shared),
            counts: Arc::clone(&self.counts),
            index,
            file: Some(opened),
            held: shared
                .budget
                .reservation(format!("reading dataset `{}`", shared.dataset)),
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

    /// The ranges of the stream file's object, read from the store.
    async fn read_object(&mut self, ranges: Vec<Range<u64>>) -> Result<Vec<Bytes>, ParquetError> {
        self.admit(&ranges)?;
        let Some(object) = self.shared.files[self.index].object.clone() else {
            return Err(ParquetError::General("not an object".into()));
        };
        let got = object.ranges(ranges.clone()).await.map_err(|e| {
            ParquetError::External(Box::new(super::object_error(&self.shared.dataset, e)))
        })?;
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
