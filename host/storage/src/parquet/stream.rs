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
//! Objects in object storage are read by ranged requests, each naming the ETag registered;
//! within one call, what is read of them is kept for the call's later scans and a scan of
//! whole row groups reads its chunks of every object ahead ([`super::reads`]).
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
use tally_plugin_parquet::read_at;

use super::reads::CallReads;
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
    /// Its column chunks by where they lie: (start, end, row group, column), the footer's.
    chunks: Arc<[tally_plugin_parquet::ChunkAt]>,
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
        let chunks = footer.chunks();
        StreamFile {
            relative,
            footer,
            offset,
            values,
            chunks,
            object,
        }
    }

    /// The column chunk a range of bytes lies in, if any (row group, column, its bytes).
    fn chunk_of(&self, range: &Range<u64>) -> Option<(usize, usize, Range<u64>)> {
        let i = self
            .chunks
            .partition_point(|(start, ..)| *start <= range.start);
        let (start, end, g, c) = *self.chunks.get(i.checked_sub(1)?)?;
        (range.end <= end).then_some((g, c, start..end))
    }

    /// The column chunks of the columns named (top-level names: every leaf of a nested
    /// column), row group by row group: what a scan of those columns without conditions reads.
    fn chunks_of_columns(&self, names: &[&str]) -> Vec<Range<u64>> {
        let leaves: Vec<bool> = self
            .footer
            .metadata
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .map(|c| {
                c.path()
                    .parts()
                    .first()
                    .is_some_and(|p| names.contains(&p.as_str()))
            })
            .collect();
        let mut out: Vec<(usize, usize, Range<u64>)> = self
            .chunks
            .iter()
            .filter(|(.., c)| leaves.get(*c).copied().unwrap_or(false))
            .map(|(start, end, g, c)| (*g, *c, *start..*end))
            .collect();
        out.sort_by_key(|(g, c, _)| (*g, *c));
        out.into_iter().map(|(.., r)| r).collect()
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
    /// Per file column, whether it is read as dictionaries ([`Shared::dictionary_encoded`]),
    /// decided from the footers once.
    encoded: Vec<std::sync::OnceLock<bool>>,
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
                encoded: file_fields
                    .iter()
                    .map(|_| std::sync::OnceLock::new())
                    .collect(),
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
                footer_sha256: f
                    .footer
                    .digest
                    .get_or_init(|| crate::backend::sha256_hex(&f.footer.footer_bytes))
                    .clone(),
            });
            values.push(f.values.clone());
        }
        (keys, files, values)
    }
}

/// The footers an executor parsed, held for the next tasks that read the same files (each
/// task rebuilds its table, and checks the footer's bytes against the version registered).
static FOOTERS: std::sync::LazyLock<tally_plugin_parquet::Footers> =
    std::sync::LazyLock::new(|| tally_plugin_parquet::Footers::new(256 * 1024 * 1024));

/// The files of a table sent to an executor, opened here and checked against the versions
/// registered: the same size and the same footer (an object: the same ETag, named in every
/// read). Footers are read on blocking threads, a few files at a time; one whose bytes are
/// those of a footer this executor parsed before is not parsed again ([`FOOTERS`]).
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
                    let footer = FOOTERS
                        .read_of(&object.message_path(), &object, object.modified)
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
                    // The clock, then the file's stamp, then its footer's bytes: a change
                    // after the stamp gives another, so a footer is never vouched for by a
                    // stamp older than what was read (`Footer::known_in`).
                    let at = tally_plugin_parquet::clock_ns();
                    let opened = std::fs::File::open(path).and_then(|f| {
                        let meta = f.metadata()?;
                        Ok((f, meta))
                    });
                    let read = opened
                        .map_err(|source| tally_plugin_parquet::Error::Io {
                            path: path.into(),
                            source,
                        })
                        .and_then(|(f, meta)| {
                            let path = std::path::Path::new(path);
                            let stamp = tally_plugin_parquet::Stamp::of(&f, &meta);
                            let modified = meta.modified().ok();
                            if let Some(footer) = FOOTERS.known(path, stamp, modified) {
                                return Ok(footer);
                            }
                            let footer = FOOTERS.read_of(path, &f, modified)?;
                            footer.seen_in(stamp, at);
                            Ok(footer)
                        });
                    let footer = match read {
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
            && *footer
                .digest
                .get_or_init(|| crate::backend::sha256_hex(&footer.footer_bytes))
                == file.footer_sha256;
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
        other => crate::object::object_error(dataset, other),
    }
}

impl Streaming for ParquetStream {
    fn dictionary_encoded(&self, field: &str) -> bool {
        let shared = &self.shared;
        shared
            .file_schema
            .index_of(field)
            .is_ok_and(|i| shared.dictionary_encoded(i))
    }

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
pub(crate) struct StreamTable {
    shared: Arc<Shared>,
    counts: Arc<ReadCounts>,
}

impl StreamTable {
    /// The scan's schema: the file columns, the offset and keys, then (when the scan numbers
    /// its records) the row number. A scan that does not number its records leaves the row
    /// number out: the Parquet reader would number every row group it reads, and makes a map
    /// of all the file's row groups to do so each time (75M rows in 4,578 row groups: 21M
    /// entries per scan, a third of a summary's time).
    fn table_schema(&self, file_schema: &SchemaRef, row_numbers: bool) -> TableSchema {
        let builder = TableSchema::builder(Arc::clone(file_schema))
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
        let all: Vec<usize> = (0..=self.shared.sources.len()).collect();
        self.scan_with(state, projection.unwrap_or(&all), &[], filters, limit)
            .await
    }
}

impl StreamTable {
    /// [`TableProvider::scan`], with the text fields `dictionaries` (indices into the table's
    /// schema) read as dictionary arrays (`Dictionary(UInt32, Utf8)`, one dictionary per
    /// column chunk, as the file stores it) instead of views: what a summary numbering a
    /// key's values needs once per distinct value of a chunk instead of once per row. A field
    /// a condition names is read as views all the same (conditions are planned against the
    /// table's types); the scan's schema says which type each column came in.
    pub(crate) async fn scan_with(
        &self,
        state: &dyn Session,
        wanted: &[usize],
        dictionaries: &[usize],
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let shared = &self.shared;
        let (scanned, outputs) = self.columns(wanted);
        let (file_schema, as_dictionary) = self.dictionary_schema(dictionaries, filters);
        // The row number is the table schema's last column, after the files' and the partitions'.
        let row_number = shared.file_schema.fields().len() + shared.partition_fields.len();
        let table_schema = self.table_schema(&file_schema, scanned.contains(&row_number));
        // Records asked for by number: per file, a selection of just those rows (the pages
        // that hold them are read; files without any are left out).
        let mut wanted_rows: Option<Vec<u64>> = filters.iter().find_map(StreamTable::row_numbers);
        if let Some(rows) = &mut wanted_rows {
            rows.sort_unstable();
            rows.dedup();
        }
        // Objects: what the call reads of them is kept for its later scans, and a scan of
        // whole row groups (nothing prunes them, nothing stops it early) fetches its chunks
        // of every object first, a few requests at once.
        let reads = self.call_reads(state).map(|reads| {
            let whole = wanted_rows.is_none()
                && limit.is_none()
                && !filters.iter().any(|f| self.testable(f));
            let ahead = whole.then(|| self.read_ahead(&reads, &scanned)).flatten();
            (reads, ahead)
        });
        let source = self.source(state, &table_schema, filters, reads)?;
        let partitioned = self.partitioned(wanted_rows.as_deref(), &as_dictionary);
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
        let schema = Arc::new(Schema::new(
            wanted
                .iter()
                .map(|w| {
                    let field = shared.schema.field(*w);
                    match shared.sources.get(*w) {
                        Some(Col::File(i)) if as_dictionary.contains(i) => {
                            Arc::new(field.clone().with_data_type(dictionary_type()))
                        }
                        _ => Arc::new(field.clone()),
                    }
                })
                .collect::<Vec<FieldRef>>(),
        ));
        let out_schema = Arc::clone(&schema);
        // The call's stop, looked at before each batch is handed on: a call given up ends at
        // its next batch, whatever the operators above it are doing.
        let stop = state
            .config()
            .get_extension::<crate::stop::Stop>()
            .map(|s| (*s).clone())
            .unwrap_or_default();
        let map = move |batch: RecordBatch| -> DfResult<RecordBatch> {
            if stop.is_set() {
                return Err(datafusion::error::DataFusionError::External(Box::new(
                    crate::stop::stopped_error(),
                )));
            }
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

    /// The file schema of a scan reading the fields `dictionaries` as dictionary arrays, and
    /// which file columns those are: the text columns of the files among them that no
    /// condition names.
    fn dictionary_schema(
        &self,
        dictionaries: &[usize],
        filters: &[Expr],
    ) -> (SchemaRef, Vec<usize>) {
        let shared = &self.shared;
        let named: std::collections::HashSet<String> = filters
            .iter()
            .flat_map(|f| f.column_refs().into_iter().map(|c| c.name.clone()))
            .collect();
        let as_dictionary: Vec<usize> = dictionaries
            .iter()
            .filter_map(|w| match shared.sources.get(*w) {
                Some(Col::File(i)) => Some(*i),
                _ => None,
            })
            .filter(|i| {
                let field = shared.file_schema.field(*i);
                !named.contains(field.name()) && shared.dictionary_encoded(*i)
            })
            .collect();
        if as_dictionary.is_empty() {
            return (Arc::clone(&shared.file_schema), as_dictionary);
        }
        let fields: Vec<FieldRef> = shared
            .file_schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if as_dictionary.contains(&i) {
                    Arc::new(f.as_ref().clone().with_data_type(dictionary_type()))
                } else {
                    Arc::clone(f)
                }
            })
            .collect();
        (Arc::new(Schema::new(fields)), as_dictionary)
    }
}

impl Shared {
    /// Whether the file column `i` is text whose chunks are, for nine records in ten or more,
    /// dictionary-encoded on every data page: then reading it as dictionary arrays hands on
    /// each chunk's dictionary. (Of a chunk whose writer fell back to plain pages, or wrote
    /// no dictionary, the reader makes a dictionary of each batch by hashing its values:
    /// dearer than views, so worth it only for a small share of the records.) A chunk
    /// without page encoding statistics is taken at its dictionary page.
    fn dictionary_encoded(&self, i: usize) -> bool {
        self.encoded
            .get(i)
            .is_some_and(|e| *e.get_or_init(|| self.count_encoded(i)))
    }

    /// [`Shared::dictionary_encoded`], counted over every row group of every file.
    fn count_encoded(&self, i: usize) -> bool {
        let field = self.file_schema.field(i);
        if !is_text(field.data_type()) {
            return false;
        }
        let name = field.name();
        let (mut encoded, mut all) = (0u64, 0u64);
        for f in &self.files {
            let meta = &f.footer.metadata;
            let columns = meta.file_metadata().schema_descr().columns();
            let Some(c) = columns
                .iter()
                .position(|c| c.path().parts() == [name.clone()])
            else {
                return false;
            };
            // Text stored as text: a number or date served as text would be cast into a
            // dictionary batch by batch.
            if columns[c].physical_type() != datafusion::parquet::basic::Type::BYTE_ARRAY {
                return false;
            }
            for rg in meta.row_groups() {
                let rows = u64::try_from(rg.num_rows()).unwrap_or(0);
                all += rows;
                if chunk_dictionary_encoded(rg.column(c)) {
                    encoded += rows;
                }
            }
        }
        encoded * 10 >= all * 9
    }
}

/// Whether every data page of a column chunk is dictionary-encoded ([`Shared::dictionary_encoded`]).
fn chunk_dictionary_encoded(
    chunk: &datafusion::parquet::file::metadata::ColumnChunkMetaData,
) -> bool {
    use datafusion::parquet::basic::{Encoding, PageType};
    let dictionary =
        |e: Encoding| matches!(e, Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY);
    chunk.dictionary_page_offset().is_some()
        && match (
            chunk.page_encoding_stats_mask(),
            chunk.page_encoding_stats(),
        ) {
            (Some(mask), _) => {
                mask.is_only(Encoding::PLAIN_DICTIONARY) || mask.is_only(Encoding::RLE_DICTIONARY)
            }
            (None, Some(stats)) => stats
                .iter()
                .filter(|s| matches!(s.page_type, PageType::DATA_PAGE | PageType::DATA_PAGE_V2))
                .all(|s| dictionary(s.encoding)),
            (None, None) => true,
        }
}

/// The type of text read as a dictionary array.
fn dictionary_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
}

impl StreamTable {
    /// The bytes of column chunks (as stored) a scan of the columns `projection` (indices
    /// into the table's schema) reads of every file, with no condition ruling any out: the
    /// work a cluster splits it by (`crate::cluster::Split`).
    pub(crate) fn bytes_read(&self, projection: &[usize]) -> u64 {
        let shared = &self.shared;
        let (scanned, _) = self.columns(projection);
        let names: Vec<&str> = scanned
            .iter()
            .filter(|i| **i < shared.file_schema.fields().len())
            .map(|i| shared.file_schema.field(*i).name().as_str())
            .collect();
        shared
            .files
            .iter()
            .flat_map(|f| f.chunks_of_columns(&names))
            .map(|r| r.end - r.start)
            .sum()
    }

    /// The object reads of the call `state` belongs to, when this stream reads objects that
    /// together fit what the call may keep. Larger objects are read scan by scan, as local
    /// files are: a call over them would hold its share of memory for bytes it reads once.
    /// (A plan a cluster runs never polls the read-ahead: its executors read for themselves.)
    fn call_reads(&self, state: &dyn Session) -> Option<Arc<CallReads>> {
        let reads = state.config().get_extension::<CallReads>()?;
        let objects = self.shared.files.iter().filter(|f| f.object.is_some());
        let size = objects
            .clone()
            .map(|f| f.footer.size)
            .fold(0u64, u64::saturating_add);
        (objects.count() > 0 && size <= reads.limit() as u64).then_some(reads)
    }

    /// The read-ahead of a scan of the columns `scanned` (indices into its table schema):
    /// the chunks of those columns in every row group of every object.
    fn read_ahead(&self, reads: &Arc<CallReads>, scanned: &[usize]) -> Option<ReadAhead> {
        let shared = &self.shared;
        let names: Vec<&str> = scanned
            .iter()
            .filter(|i| **i < shared.file_schema.fields().len())
            .map(|i| shared.file_schema.field(*i).name().as_str())
            .collect();
        if names.is_empty() {
            return None;
        }
        let wanted: Vec<(Arc<crate::object::ObjectFile>, Vec<Range<u64>>)> = shared
            .files
            .iter()
            .filter_map(|f| Some((Arc::clone(f.object.as_ref()?), f.chunks_of_columns(&names))))
            .collect();
        Some(Arc::clone(reads).read_ahead(wanted).boxed().shared())
    }

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
        reads: Option<(Arc<CallReads>, Option<ReadAhead>)>,
    ) -> DfResult<ParquetSource> {
        let shared = &self.shared;
        let (reads, ahead) = match reads {
            Some((reads, ahead)) => (Some(reads), ahead),
            None => (None, None),
        };
        let mut source = ParquetSource::new(table_schema.clone())
            .with_parquet_file_reader_factory(Arc::new(CheckedFactory {
                shared: Arc::clone(shared),
                counts: Arc::clone(&self.counts),
                reads,
                ahead,
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
    fn partitioned(
        &self,
        wanted_rows: Option<&[u64]>,
        as_dictionary: &[usize],
    ) -> Vec<PartitionedFile> {
        let shared = &self.shared;
        let names: Vec<&str> = as_dictionary
            .iter()
            .map(|i| shared.file_schema.field(*i).name().as_str())
            .collect();
        let mut partitioned: Vec<PartitionedFile> = Vec::with_capacity(shared.files.len());
        for (i, f) in shared.files.iter().enumerate() {
            let mut pf =
                PartitionedFile::new(format!("tally/{}/{i}", shared.dataset), f.footer.size);
            // The Parquet reader reads a column in the type the file's schema it is handed
            // says: a text column as a dictionary array keeps the chunk's dictionary.
            if !names.is_empty() {
                let fields: Vec<FieldRef> = f
                    .footer
                    .schema
                    .fields()
                    .iter()
                    .map(|field| {
                        if names.contains(&field.name().as_str()) && is_text(field.data_type()) {
                            Arc::new(field.as_ref().clone().with_data_type(dictionary_type()))
                        } else {
                            Arc::clone(field)
                        }
                    })
                    .collect();
                pf = pf.with_arrow_schema(Arc::new(Schema::new_with_metadata(
                    fields,
                    f.footer.schema.metadata().clone(),
                )));
            }
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

/// A scan's read-ahead of objects ([`CallReads::read_ahead`]): run by the first of its
/// readers that needs bytes, awaited by all.
type ReadAhead = futures::future::Shared<BoxFuture<'static, ()>>;

/// Makes the readers of a call's scan.
struct CheckedFactory {
    shared: Arc<Shared>,
    counts: Arc<ReadCounts>,
    /// What the call has read of the objects (`None`: local files, or no call to keep for).
    reads: Option<Arc<CallReads>>,
    ahead: Option<ReadAhead>,
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

#[cfg(test)]
mod tests {
    //! What a call reads of objects ([`CallReads`]), counted at the store.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::properties::WriterProperties;
    use datafusion::prelude::{SessionConfig, SessionContext};
    use futures::stream::BoxStream;
    use object_store::memory::InMemory;
    use object_store::path::Path as ObjectPath;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    };

    use super::*;
    use crate::object::ObjectFile;

    /// An object store in memory that counts the reads asked of it (each a request to a
    /// real store).
    #[derive(Debug, Default)]
    struct Counted {
        inner: InMemory,
        gets: AtomicUsize,
    }

    impl std::fmt::Display for Counted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "counted {}", self.inner)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Counted {
        async fn put_opts(
            &self,
            location: &ObjectPath,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }

        async fn put_multipart_opts(
            &self,
            location: &ObjectPath,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }

        async fn get_opts(
            &self,
            location: &ObjectPath,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            self.gets.fetch_add(1, Ordering::Relaxed);
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<ObjectPath>>,
        ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&ObjectPath>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }

        async fn list_with_delimiter(
            &self,
            prefix: Option<&ObjectPath>,
        ) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }

        async fn copy_opts(
            &self,
            from: &ObjectPath,
            to: &ObjectPath,
            options: CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    const OBJECTS: usize = 3;
    const GROUPS: usize = 3;

    /// A Parquet file of `GROUPS` row groups: a ministry, a kind (some null) and a count.
    fn parquet(seed: usize) -> Vec<u8> {
        let rows = 40 * GROUPS;
        let schema = Arc::new(Schema::new(vec![
            Field::new("ministry", DataType::Utf8, true),
            Field::new("kind", DataType::Utf8, true),
            Field::new("count", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|r| format!("省{}", (r + seed) % 7)),
                )),
                Arc::new(StringArray::from_iter(
                    (0..rows).map(|r| (r % 5 != 0).then(|| format!("kind {}", r % 3))),
                )),
                Arc::new(Int64Array::from_iter(
                    (0..rows).map(|r| (r % 4 != 0).then_some((r * seed) as i64)),
                )),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(40))
            .build();
        let mut writer = ArrowWriter::try_new(&mut out, schema, Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        out
    }

    /// Objects in a counting store, registered (footers read) as a stream of the dataset.
    fn objects() -> (Arc<Counted>, ParquetStream, usize) {
        let store = Arc::new(Counted::default());
        let dyn_store: Arc<dyn ObjectStore> = Arc::clone(&store) as Arc<dyn ObjectStore>;
        let mut files = Vec::new();
        let mut offset = 0;
        let mut size = 0;
        for i in 0..OBJECTS {
            let location = ObjectPath::from(format!("tree/part-{i}.parquet"));
            let meta = crate::object::wait({
                let store = Arc::clone(&dyn_store);
                let location = location.clone();
                async move {
                    store.put(&location, parquet(i + 1).into()).await?;
                    store.head(&location).await
                }
            })
            .unwrap()
            .unwrap();
            let object = ObjectFile {
                store: Arc::clone(&dyn_store),
                url: format!("s3://bucket/{location}"),
                location,
                etag: meta.e_tag,
                version: meta.version,
                size: meta.size,
                modified: Some(meta.last_modified.into()),
            };
            let footer = tally_plugin_parquet::read_footer_of(
                &object.message_path(),
                &object,
                object.modified,
            )
            .unwrap();
            assert_eq!(footer.metadata.num_row_groups(), GROUPS);
            let rows = footer.num_rows;
            size += footer.size as usize;
            files.push(StreamFile::new(
                object.url.clone(),
                footer,
                offset,
                Vec::new(),
                Some(Arc::new(object)),
            ));
            offset += rows;
        }
        let fields = vec![
            ("ministry".to_string(), DataType::Utf8),
            ("kind".to_string(), DataType::Utf8),
            ("count".to_string(), DataType::Int64),
        ];
        let budget = crate::memory::Budget::new(1 << 30);
        let stream =
            ParquetStream::new("survey", &fields, &[], files, Vec::new(), None, &budget).unwrap();
        (store, stream, size)
    }

    /// A call's context, keeping what it reads of objects when `call_memory` is given.
    fn call(call_memory: Option<usize>) -> SessionContext {
        let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
        let mut config = SessionConfig::new().with_target_partitions(1);
        if let Some(memory) = call_memory {
            config = config.with_extension(Arc::new(CallReads::new(&runtime.memory_pool, memory)));
        }
        SessionContext::new_with_config_rt(config, runtime)
    }

    /// What an inspection asks: one pass for every field's fill and statistics, then each
    /// field's values, the last with a condition (which a scan tests against statistics and
    /// page indexes).
    async fn inspect_like(ctx: &SessionContext, stream: &ParquetStream) -> Vec<String> {
        let mut out = Vec::new();
        for sql in [
            "SELECT count(*), count(ministry), count(kind), count(count), sum(count), min(count), max(count) FROM t",
            "SELECT ministry, count(*) FROM t GROUP BY ministry ORDER BY ministry",
            "SELECT kind, count(*) FROM t GROUP BY kind ORDER BY kind",
            "SELECT kind, count(*) FROM t WHERE kind IS NOT NULL AND kind <> '' GROUP BY kind ORDER BY kind",
        ] {
            // A table per scan, as each of an inspection's plans takes one.
            let _ = ctx.deregister_table("t");
            ctx.register_table("t", stream.table().0).unwrap();
            let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            out.push(
                datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                    .unwrap()
                    .to_string(),
            );
        }
        out
    }

    /// A chunk counts as dictionary-encoded only with a dictionary page and every data page
    /// so: a column written without a dictionary does not.
    #[test]
    fn a_chunk_is_dictionary_encoded_only_when_every_data_page_is() {
        use datafusion::parquet::file::metadata::ParquetMetaDataReader;
        use datafusion::parquet::schema::types::ColumnPath;
        let schema = Arc::new(Schema::new(vec![
            Field::new("coded", DataType::Utf8, true),
            Field::new("plain", DataType::Utf8, true),
        ]));
        let values = || StringArray::from_iter_values((0..100).map(|r| format!("省{}", r % 7)));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(values()), Arc::new(values())],
        )
        .unwrap();
        let mut out = Vec::new();
        let properties = WriterProperties::builder()
            .set_column_dictionary_enabled(ColumnPath::from("plain"), false)
            .build();
        let mut writer = ArrowWriter::try_new(&mut out, schema, Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes::Bytes::from(out))
            .unwrap();
        let group = meta.row_group(0);
        assert!(chunk_dictionary_encoded(group.column(0)));
        assert!(!chunk_dictionary_encoded(group.column(1)));
    }

    /// Text fields asked for as dictionaries come as dictionary arrays with the same values
    /// as the views a plain scan gives; a field a condition names is read as views all the
    /// same, and the other text field as a dictionary beside it.
    #[test]
    fn text_fields_read_as_dictionaries_hold_the_values_views_hold() {
        use datafusion::arrow::array::AsArray;
        let (_, stream, _) = objects();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (table, _) = stream.table();
        let table = (table.as_ref() as &dyn std::any::Any)
            .downcast_ref::<StreamTable>()
            .expect("a Parquet stream's table");
        // Batches of 10 rows: each row group of 40 comes in four.
        let ctx = SessionContext::new_with_config(
            SessionConfig::new()
                .with_target_partitions(1)
                .with_batch_size(10),
        );
        let state = ctx.state();
        let run = |dictionaries: &[usize], filters: Vec<Expr>| {
            runtime.block_on(async {
                let plan = table
                    .scan_with(&state, &[0, 1, 2], dictionaries, &filters, None)
                    .await
                    .unwrap();
                let schema = plan.schema();
                let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
                    .await
                    .unwrap();
                let text: Vec<Vec<Option<String>>> = (0..2)
                    .map(|c| {
                        batches
                            .iter()
                            .flat_map(|b| {
                                let column =
                                    datafusion::arrow::compute::cast(b.column(c), &DataType::Utf8)
                                        .unwrap();
                                column
                                    .as_string::<i32>()
                                    .iter()
                                    .map(|v| v.map(str::to_string))
                                    .collect::<Vec<_>>()
                            })
                            .collect()
                    })
                    .collect();
                let types: Vec<DataType> = schema
                    .fields()
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect();
                for b in &batches {
                    for (column, want) in b.columns().iter().zip(&types) {
                        assert_eq!(column.data_type(), want, "a batch in its scan's type");
                    }
                }
                // Read as the chunk's dictionary, not cast batch by batch: the batches of a
                // row group share one dictionary's values.
                if types[0] == dictionary_type() {
                    assert!(batches.len() >= 8, "{} batches", batches.len());
                    for pair in batches.chunks(4) {
                        let values: Vec<_> = pair
                            .iter()
                            .map(|b| {
                                b.column(0)
                                    .as_dictionary::<datafusion::arrow::datatypes::UInt32Type>()
                                    .values()
                                    .to_data()
                            })
                            .collect();
                        assert!(
                            values.windows(2).all(|w| w[0].ptr_eq(&w[1])),
                            "the batches of one row group hold one dictionary"
                        );
                    }
                }
                (types, text)
            })
        };
        let (plain_types, plain) = run(&[], Vec::new());
        assert_eq!(plain_types[0], DataType::Utf8);
        let (types, both) = run(&[0, 1], Vec::new());
        assert_eq!(types[0], dictionary_type());
        assert_eq!(types[1], dictionary_type());
        assert_eq!(types[2], DataType::Int64);
        assert_eq!(both, plain);
        // A condition on `kind`: read as text, tested on the text; `ministry` a dictionary.
        let named = datafusion::prelude::col("kind").is_not_null();
        let (types, filtered) = run(&[0, 1], vec![named]);
        assert_eq!(types[0], dictionary_type());
        assert_eq!(types[1], DataType::Utf8);
        assert_eq!(filtered, plain, "the condition prunes nothing here");
    }

    #[test]
    fn a_call_reads_each_chunk_of_an_object_once_whatever_its_scans() {
        let (store, stream, _) = objects();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let gets = || store.gets.load(Ordering::Relaxed);

        // Without keeping: every scan reads every row group of every object again.
        let start = gets();
        let plain = runtime.block_on(inspect_like(&call(None), &stream));
        let per_scan = gets() - start;
        assert!(per_scan >= 4 * OBJECTS * GROUPS, "{per_scan} requests");

        // Kept: the first scan reads each object's chunks ahead, by one request; the other
        // scans (a condition among them) read nothing more, nor does the same series again.
        let ctx = call(Some(512 << 20));
        let start = gets();
        let kept = runtime.block_on(inspect_like(&ctx, &stream));
        let first = gets() - start;
        assert_eq!(kept, plain, "the same answers");
        assert!(
            first <= 2 * OBJECTS,
            "{first} requests for {OBJECTS} objects (page indexes at most once each)"
        );
        let again = runtime.block_on(inspect_like(&ctx, &stream));
        assert_eq!(again, plain);
        assert_eq!(gets() - start, first, "nothing read twice in one call");
        let reads = ctx.state().config().get_extension::<CallReads>().unwrap();
        assert!(reads.held() > 0);

        // A call that may keep nothing reads as before, with the same answers.
        let start = gets();
        assert_eq!(
            runtime.block_on(inspect_like(&call(Some(0)), &stream)),
            plain
        );
        assert_eq!(gets() - start, per_scan);
    }

    #[test]
    fn what_a_call_keeps_is_held_from_its_memory_and_given_back_with_it() {
        let (store, stream, size) = objects();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let gets = || store.gets.load(Ordering::Relaxed);
        let start = gets();
        let plain = runtime.block_on(inspect_like(&call(None), &stream));
        let per_scan = gets() - start;

        let ctx = call(Some(8 * size));
        assert_eq!(runtime.block_on(inspect_like(&ctx, &stream)), plain);
        let reads = ctx.state().config().get_extension::<CallReads>().unwrap();
        assert!(reads.held() > 0 && reads.held() <= size, "{}", reads.held());
        let pool = Arc::clone(&ctx.runtime_env().memory_pool);
        assert_eq!(pool.reserved(), reads.held(), "held from the call's memory");
        drop(reads);
        drop(ctx);
        assert_eq!(pool.reserved(), 0, "given back with the call");

        // Objects larger than what the call may keep (an eighth of its memory): read scan by
        // scan as before, nothing held.
        let ctx = call(Some(8 * size - 8));
        let start = gets();
        assert_eq!(runtime.block_on(inspect_like(&ctx, &stream)), plain);
        assert_eq!(gets() - start, per_scan);
        let reads = ctx.state().config().get_extension::<CallReads>().unwrap();
        assert_eq!(reads.held(), 0);
    }

    #[test]
    fn an_object_replaced_under_a_call_fails_its_read_ahead_as_its_own_read_would() {
        let (store, stream, _) = objects();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let location = ObjectPath::from("tree/part-1.parquet");
        runtime
            .block_on(store.inner.put(&location, parquet(9).into()))
            .unwrap();
        let error = |ctx: SessionContext| {
            runtime.block_on(async {
                ctx.register_table("t", stream.table().0).unwrap();
                let df = ctx.sql("SELECT sum(count) FROM t").await.unwrap();
                df.collect().await.unwrap_err().to_string()
            })
        };
        let plain = error(call(None));
        assert!(
            plain.contains("part-1.parquet") && plain.contains("changed"),
            "{plain}"
        );
        assert_eq!(error(call(Some(512 << 20))), plain);
    }
}
