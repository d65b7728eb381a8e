//! The prepared path: the files a load's conditions leave, hashed first (the bytes cited),
//! then read once in file order, row group by row group, partition values added.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, new_null_array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use tally_plugin_parquet::Footer;
use tally_plugin_parquet::groups::Text;

use super::register::{Key, ParquetBackend, object_version};
use crate::backend::{LoadedData, Pushed, ServedFile, sha256_file};
use crate::error::StorageError;
use crate::memory::Meter;
use crate::object::object_error;

impl ParquetBackend {
    /// The columns `columns` of the files the conditions leave, as a table that reads them
    /// once (what preparing a dataset reads), with the files it cites.
    pub(super) async fn loaded(
        &self,
        columns: &[String],
        pushed: &[Pushed],
        meter: &Meter,
    ) -> Result<LoadedData, StorageError> {
        let file_schema = self.parts[0].footer.schema.clone();
        let indices: Vec<usize> = columns
            .iter()
            .filter_map(|c| file_schema.index_of(c).ok())
            .collect();
        let (reads, key_fields) = self.reads_of(columns, pushed);
        // The bytes cited are hashed first, in blocks; reading then checks that each file is
        // still the one registered (its size, and its footer once read).
        let object_files = self.hash_objects(&reads).await?;
        let files = self.hash_local(&reads).await?;
        // A dataset is all local files or all objects.
        let files = if object_files.is_empty() {
            files
        } else {
            object_files
        };
        let decoded = match reads.first() {
            Some(r) => tally_plugin_parquet::groups::decoded_schema(&r.footer, Text::Dictionary)
                .map_err(|e| StorageError::backend(&self.dataset, e))?,
            None => file_schema.clone(),
        };
        let projected = Schema::new(
            indices
                .iter()
                .map(|i| decoded.field(*i).clone())
                .collect::<Vec<_>>(),
        );
        let schema = with_keys(&projected, &key_fields);
        let table = FilesTable {
            dataset: self.dataset.clone(),
            reads: Arc::new(reads),
            indices,
            schema,
            meter: meter.clone(),
        };
        // Files left out are said in the extract step (the envelope's transformations).
        let extract = self.pruned(&files, pushed);
        Ok(LoadedData {
            provider: Arc::new(table),
            files,
            extract,
            notes: Vec::new(),
            row_sources: None,
        })
    }

    /// Plans a load: the files the conditions leave, each with the values of the partition
    /// keys among `columns`, and those keys as fields.
    fn reads_of(&self, columns: &[String], pushed: &[Pushed]) -> (Vec<Read>, Vec<Field>) {
        let keys: Vec<usize> = (0..self.keys.len())
            .filter(|k| columns.contains(&self.keys[*k].name))
            .collect();
        let reads: Vec<Read> = self
            .parts
            .iter()
            .filter(|p| self.selected(p, pushed))
            .map(|p| Read {
                relative: p.relative.clone(),
                footer: p.footer.clone(),
                object: p.object.clone(),
                constants: keys
                    .iter()
                    .map(|k| (self.keys[*k].clone(), p.values[*k].clone()))
                    .collect(),
            })
            .collect();
        let key_fields: Vec<Field> = keys
            .iter()
            .map(|k| Field::new(&self.keys[*k].name, self.keys[*k].data_type.clone(), true))
            .collect();
        (reads, key_fields)
    }

    /// Hashes the objects of a load, as the files it cites.
    async fn hash_objects(&self, reads: &[Read]) -> Result<Vec<ServedFile>, StorageError> {
        // Objects are hashed as they stream from the store (each read pinned to the ETag
        // registered), a few at a time; nothing of them is held.
        let objects: Vec<Arc<crate::object::ObjectFile>> =
            reads.iter().filter_map(|r| r.object.clone()).collect();
        let mut object_files: Vec<ServedFile> = Vec::with_capacity(objects.len());
        for batch in objects.chunks(8) {
            let hashes =
                futures::future::join_all(batch.iter().map(|o| async move { o.sha256().await }))
                    .await;
            for (o, hash) in batch.iter().zip(hashes) {
                let sha256 = hash.map_err(|e| object_error(&self.dataset, e))?;
                object_files.push(ServedFile {
                    path: o.url.clone(),
                    size: o.size,
                    sha256,
                    modified: o.modified,
                    object: Some(object_version(o)),
                });
            }
        }
        Ok(object_files)
    }

    /// Hashes the local files of a load on a blocking thread, as the files it cites,
    /// checking first that each still has the size registered.
    async fn hash_local(&self, reads: &[Read]) -> Result<Vec<ServedFile>, StorageError> {
        let dataset = self.dataset.clone();
        let hashed: Vec<(
            String,
            std::path::PathBuf,
            u64,
            Option<std::time::SystemTime>,
        )> = reads
            .iter()
            .filter(|r| r.object.is_none())
            .map(|r| {
                (
                    r.relative.clone(),
                    r.footer.path.clone(),
                    r.footer.size,
                    r.footer.modified,
                )
            })
            .collect();
        let files = tokio::task::spawn_blocking(move || {
            hashed
                .into_iter()
                .map(|(relative, path, size, modified)| {
                    let stale = |message: &str| StorageError::Stale {
                        dataset: dataset.clone(),
                        message: format!("{message} (`{relative}`)"),
                    };
                    match std::fs::metadata(&path) {
                        Ok(m) if m.len() == size => {}
                        Ok(_) => {
                            return Err(stale(
                                "its data file changed after this version was registered",
                            ));
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            return Err(stale("its data file was removed"));
                        }
                        Err(e) => return Err(StorageError::backend(&dataset, e)),
                    }
                    let sha256 =
                        sha256_file(&path).map_err(|e| StorageError::backend(&dataset, e))?;
                    Ok(ServedFile {
                        path: relative,
                        size,
                        sha256,
                        modified,
                        object: None,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(StorageError::internal)??;
        Ok(files)
    }
}

/// One file to read, with the partition values to add to its rows.
#[derive(Debug)]
struct Read {
    relative: String,
    footer: Footer,
    object: Option<Arc<crate::object::ObjectFile>>,
    constants: Vec<(Key, Option<String>)>,
}

/// The files of a load, read once in file order, row group by row group (what preparing a
/// dataset reads): text as dictionaries, partition values added, memory accounted.
#[derive(Debug)]
struct FilesTable {
    dataset: String,
    reads: Arc<Vec<Read>>,
    /// The columns read (indices into the files' schema).
    indices: Vec<usize>,
    /// Those columns as decoded, then the partition columns.
    schema: SchemaRef,
    meter: Meter,
}

#[async_trait]
impl datafusion::catalog::TableProvider for FilesTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> datafusion::datasource::TableType {
        datafusion::datasource::TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn datafusion::catalog::Session,
        projection: Option<&Vec<usize>>,
        _filters: &[datafusion::logical_expr::Expr],
        _limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let wanted = projection.cloned().unwrap_or(all);
        let schema = Arc::new(self.schema.project(&wanted)?);
        let files = self.indices.len();
        // File columns to read (indices into the files' schema) and, per output column, where
        // it comes from: a read column or a partition value.
        // A batch decoded has the columns read in file order.
        let mut read: Vec<usize> = wanted
            .iter()
            .filter(|w| **w < files)
            .map(|w| self.indices[*w])
            .collect();
        read.sort_unstable();
        read.dedup();
        let sources: Vec<Source> = wanted
            .iter()
            .map(|&w| {
                if w < files {
                    let column = self.indices[w];
                    Source::Read(read.iter().position(|c| *c == column).unwrap_or(0))
                } else {
                    Source::Key(w - files)
                }
            })
            .collect();
        let (dataset, reads, meter) = (
            self.dataset.clone(),
            Arc::clone(&self.reads),
            self.meter.clone(),
        );
        let stream_schema = Arc::clone(&schema);
        Ok(Arc::new(crate::store::StreamPlan::new(
            "Parquet files, row group by row group",
            schema,
            move || {
                let (tx, rx) = tokio::sync::mpsc::channel(2);
                let job = ReadJob {
                    dataset: dataset.clone(),
                    reads: Arc::clone(&reads),
                    read: read.clone(),
                    sources: sources.clone(),
                    schema: Arc::clone(&stream_schema),
                    meter: meter.clone(),
                };
                tokio::task::spawn_blocking(move || job.run(tx));
                Box::pin(
                    datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                        Arc::clone(&stream_schema),
                        tokio_stream(rx),
                    ),
                )
            },
        )))
    }
}

/// An output column of a files scan.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The column at this position of the columns read.
    Read(usize),
    /// The value of this partition key (index into the read's constants).
    Key(usize),
}

/// The batches of a channel as a stream.
fn tokio_stream(
    mut rx: tokio::sync::mpsc::Receiver<datafusion::common::Result<RecordBatch>>,
) -> futures::stream::BoxStream<'static, datafusion::common::Result<RecordBatch>> {
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// Reads the files of a scan on a blocking thread, sending batches as they decode.
struct ReadJob {
    dataset: String,
    reads: Arc<Vec<Read>>,
    read: Vec<usize>,
    sources: Vec<Source>,
    schema: SchemaRef,
    meter: Meter,
}

impl ReadJob {
    fn run(self, tx: tokio::sync::mpsc::Sender<datafusion::common::Result<RecordBatch>>) {
        let external = |e: StorageError| datafusion::error::DataFusionError::External(Box::new(e));
        for read in self.reads.iter() {
            let sent = read.run(&self.dataset, &self.read, &self.meter, &mut |batch| {
                let n = batch.num_rows();
                let mut columns = Vec::with_capacity(self.sources.len());
                for source in &self.sources {
                    columns.push(match source {
                        Source::Read(at) => Arc::clone(batch.column(*at)),
                        Source::Key(k) => {
                            let (key, value) = &read.constants[*k];
                            constant(key, value, n)
                        }
                    });
                }
                let out = RecordBatch::try_new_with_options(
                    Arc::clone(&self.schema),
                    columns,
                    &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(n)),
                )
                .map_err(|e| e.to_string())?;
                tx.blocking_send(Ok(out))
                    .map_err(|_| "the reader of the data stopped".to_string())
            });
            if let Err(e) = sent {
                let _ = tx.blocking_send(Err(external(e)));
                return;
            }
        }
    }
}

impl Read {
    /// Reads the file's columns (indices into its schema) row group by row group, handing
    /// each batch on; the file must still be the one registered.
    fn run(
        &self,
        dataset: &str,
        indices: &[usize],
        meter: &Meter,
        each: &mut dyn FnMut(RecordBatch) -> Result<(), String>,
    ) -> Result<(), StorageError> {
        let stale = |message: &str| StorageError::Stale {
            dataset: dataset.to_string(),
            message: format!("{message} (`{}`)", self.relative),
        };
        let mut held = |bytes| meter.resize(bytes).map_err(|e| e.to_string());
        let read = match &self.object {
            Some(object) => tally_plugin_parquet::groups::read_groups_of(
                &self.footer,
                object.as_ref(),
                indices,
                Text::Dictionary,
                &mut held,
                each,
            ),
            None => tally_plugin_parquet::groups::read_groups(
                &self.footer,
                indices,
                Text::Dictionary,
                &mut held,
                each,
            ),
        };
        match read {
            Ok(_) => Ok(()),
            Err(tally_plugin_parquet::Error::Io { source, .. })
                if source
                    .get_ref()
                    .is_some_and(|s| s.is::<crate::object::ObjectError>()) =>
            {
                let e = source
                    .into_inner()
                    .and_then(|s| s.downcast::<crate::object::ObjectError>().ok())
                    .map(|b| *b)
                    .unwrap_or_else(|| crate::object::ObjectError::Other("a read failed".into()));
                Err(object_error(dataset, e))
            }
            Err(tally_plugin_parquet::Error::Changed { .. }) => Err(stale(
                "its data file changed after this version was registered",
            )),
            Err(tally_plugin_parquet::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Err(stale("its data file was removed"))
            }
            Err(tally_plugin_parquet::Error::Stopped(m)) => {
                Err(meter.refusal().unwrap_or(StorageError::Limit {
                    message: m,
                    hint: "see --memory-budget".into(),
                }))
            }
            Err(e) => Err(StorageError::backend(dataset, e)),
        }
    }
}

/// A decoded schema's columns, all nullable and without metadata, then the partition columns.
fn with_keys(decoded: &Schema, keys: &[Field]) -> SchemaRef {
    let mut fields: Vec<Field> = decoded
        .fields()
        .iter()
        .map(|f| Field::new(f.name(), f.data_type().clone(), true))
        .collect();
    fields.extend(keys.iter().cloned());
    Arc::new(Schema::new(fields))
}

/// A partition column's value repeated for `n` rows.
fn constant(key: &Key, value: &Option<String>, n: usize) -> ArrayRef {
    match (value, &key.data_type) {
        (None, t) => new_null_array(t, n),
        (Some(v), DataType::Int64) => match v.parse::<i64>() {
            Ok(i) => Arc::new(Int64Array::from_value(i, n)),
            Err(_) => new_null_array(&DataType::Int64, n),
        },
        (Some(v), _) => Arc::new(StringArray::from_iter_values(std::iter::repeat_n(v, n))),
    }
}
