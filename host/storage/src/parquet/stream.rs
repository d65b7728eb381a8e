//! A Parquet dataset read from its files at every call, instead of prepared: what serves data
//! larger than the memory budget, and a large dataset while it is being prepared.
//!
//! Each call's scan is DataFusion's Parquet scan over the files, with the call's conditions as
//! its predicate: row groups whose statistics rule the conditions out are not read, pages
//! the page index rules out are skipped, and bloom filters are asked about values compared
//! for equality, where the files have them. Only the columns the call needs are read. The
//! bytes come through [`reader::CheckedReader`], which reads positionally from the file (never a map
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
//!
//! What every call's table shares is in `shared`, the table of one call and its scans in
//! `table`, the readers of their bytes in `reader`, and the files an executor of a cluster
//! opens in `executor`.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::catalog::TableProvider;
use datafusion::common::ScalarValue;

use crate::backend::{ReadCounts, ServedFile, Streaming};
use crate::error::StorageError;
use crate::memory::Budget;
use crate::store::ROW_COL;

mod executor;
mod reader;
mod shared;
mod table;

pub(crate) use executor::reopen;
pub(crate) use shared::StreamFile;
use shared::{Col, OFFSET_COL, Shared};
pub(crate) use table::StreamTable;

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

#[cfg(test)]
mod tests;
