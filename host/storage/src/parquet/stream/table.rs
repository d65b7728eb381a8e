//! The table of one call over a stream: its scans planned (columns, conditions as the Parquet
//! scan's predicate, records asked for by number, text read as dictionaries), and their
//! batches shaped into the columns wanted.

use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, DataFusionError, Result as DfResult, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::parquet::arrow::RowNumber;
use datafusion::physical_plan::ExecutionPlan;
use futures::FutureExt;

use super::reader::{CheckedFactory, FileIndex, ReadAhead};
use super::shared::{Col, ROW_NUMBER_COL, Shared, dictionary_type, is_text};
use crate::backend::ReadCounts;
use crate::parquet::reads::CallReads;
use crate::store::{MapExec, ROW_COL};

/// The table of one call.
#[derive(Debug)]
pub(crate) struct StreamTable {
    pub(super) shared: Arc<Shared>,
    pub(super) counts: Arc<ReadCounts>,
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
