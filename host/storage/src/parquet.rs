//! The built-in Parquet backend: one file, or a set of files (a glob, or a folder read as a
//! Hive-partitioned tree), inside the dataset folder.
//!
//! Registration reads every file's footer (schema, row count), never the data. The files of a
//! set must have the same columns; the partition keys of their folders (`year=2024/`) become
//! columns of the data (integers when every value is written as one, else text), which the
//! definition declares like any other. Conditions on partition columns are applied by the
//! backend itself: a file whose partition values cannot match is not read at all.
//!
//! One module per phase: registration from the footers (`register`, over the files
//! `data_file` names: `files`), the files a call's conditions leave (`prune`), and the two
//! ways of serving them: read once into a prepared table (`load`), or read at every call
//! (`streamed`, as a [`stream::ParquetStream`]).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use tally_plugin_parquet::groups::Text;
use tally_semantic::definition::BackendKind;

use crate::backend::{Backend, Backends, LoadedData, Pushed, ServedFile, sha256_hex};
use crate::error::StorageError;
use crate::memory::Meter;

mod files;
mod load;
mod prune;
pub mod reads;
mod register;
pub(crate) mod stream;
mod streamed;

use files::ingest_origin;
pub use reads::CallReads;
use register::object_version;
pub use register::{ParquetBackend, ParquetFactory};
pub(crate) use stream::reopen;

#[async_trait]
impl Backend for ParquetBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Parquet
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn row_count(&self) -> Option<u64> {
        Some(self.parts.iter().map(|p| p.footer.num_rows).sum())
    }

    fn files(&self) -> Vec<ServedFile> {
        self.parts
            .iter()
            .map(|p| ServedFile {
                path: p.relative.clone(),
                size: p.footer.size,
                sha256: String::new(),
                modified: p.footer.modified,
                object: p.object.as_deref().map(object_version),
            })
            .collect()
    }

    fn read_every_page(
        &self,
        held: &mut dyn FnMut(usize) -> Result<(), String>,
    ) -> Result<(), String> {
        for part in &self.parts {
            for (c, field) in part.footer.schema.fields().iter().enumerate() {
                // One column at a time, so that a page that does not decode is named by its
                // column; every page is still decoded once. What is held: the column's chunk
                // of one row group, and the largest batch decoded from it.
                let chunk = std::cell::Cell::new(0usize);
                let largest = std::cell::Cell::new(0usize);
                let held = std::cell::RefCell::new(&mut *held);
                let mut chunk_held = |bytes: usize| {
                    chunk.set(bytes);
                    if bytes == 0 {
                        largest.set(0);
                    }
                    (held.borrow_mut())(bytes + largest.get())
                };
                let mut each = |batch: RecordBatch| {
                    largest.set(largest.get().max(batch.get_array_memory_size()));
                    (held.borrow_mut())(chunk.get() + largest.get())
                };
                let read = match &part.object {
                    Some(object) => tally_plugin_parquet::groups::read_groups_of(
                        &part.footer,
                        object.as_ref(),
                        &[c],
                        Text::Dictionary,
                        &mut chunk_held,
                        &mut each,
                    ),
                    None => tally_plugin_parquet::groups::read_groups(
                        &part.footer,
                        &[c],
                        Text::Dictionary,
                        &mut chunk_held,
                        &mut each,
                    ),
                };
                read.map_err(|e| match e {
                    tally_plugin_parquet::Error::Io { source, .. }
                        if source
                            .get_ref()
                            .is_some_and(|s| s.is::<crate::object::ObjectError>()) =>
                    {
                        format!("column `{}`: {source}", field.name())
                    }
                    other => format!("column `{}`: {other}", field.name()),
                })?;
            }
        }
        held(0)
    }

    fn fingerprint(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for p in &self.parts {
            if self.parts.len() > 1 {
                out.extend_from_slice(p.relative.as_bytes());
                out.push(0);
            }
            out.extend_from_slice(&p.footer.footer_bytes);
            // An object rewritten with the same footer is still another version.
            if let Some(o) = &p.object {
                out.extend_from_slice(o.etag.as_deref().unwrap_or("").as_bytes());
                out.push(0);
                out.extend_from_slice(o.version.as_deref().unwrap_or("").as_bytes());
                out.push(0);
            }
        }
        out
    }

    fn pushdown_columns(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.name.clone()).collect()
    }

    /// Ranges on integer partition columns leave files out too (`年度` ≥ 2023).
    fn prunes_ranges(&self) -> bool {
        true
    }

    /// Conditions on partition columns only leave files out.
    fn subsets_of_whole(&self) -> bool {
        true
    }

    /// One file: its hash. Several: the hash of their `sha256sum` listing (`<hex>  <path>`
    /// per line, in path order), which anyone can recompute from the files.
    fn content_hash(&self, files: &[ServedFile]) -> Option<(String, Option<String>)> {
        match files {
            [] => None,
            // Objects read by ranges are not hashed: no hash is cited for what was not read.
            _ if files.iter().any(|f| f.sha256.is_empty()) => None,
            [one] => Some((one.sha256.clone(), None)),
            many => {
                let listing = set_listing(many);
                Some((
                    sha256_hex(listing.as_bytes()),
                    Some(format!(
                        "contentHash is the SHA-256 of the `sha256sum` listing of these {} files (one `<hex>  <path>` line each, in this order)",
                        many.len()
                    )),
                ))
            }
        }
    }

    fn streams(&self) -> bool {
        true
    }

    fn remote_listing(&self) -> Option<String> {
        self.listing.clone()
    }

    fn describe(&self) -> crate::backend::BackendDescription {
        let mut d = crate::backend::BackendDescription::of(BackendKind::Parquet);
        if self.listing.is_some() {
            d.summary = Some(format!(
                "{} Parquet object{} at {}, read through the S3 API by byte ranges (footers at registration; listed again at every --object-poll)",
                self.parts.len(),
                if self.parts.len() == 1 { "" } else { "s" },
                self.data_file
            ));
        }
        d
    }

    /// The `tally.ingest` record `tally add` writes into the footer, in words.
    fn origin(&self) -> Option<String> {
        let [part] = self.parts.as_slice() else {
            return None;
        };
        let kv = part.footer.metadata.file_metadata().key_value_metadata()?;
        let record = kv
            .iter()
            .find(|k| k.key == "tally.ingest")?
            .value
            .as_deref()?;
        ingest_origin(record, &part.relative)
    }

    async fn stream(
        &self,
        fields: &[(String, DataType)],
        pushed: &[Pushed],
        budget: &Arc<crate::memory::Budget>,
    ) -> Option<Result<Arc<dyn crate::backend::Streaming>, StorageError>> {
        Some(self.streamed(fields, pushed, budget).await)
    }

    async fn load(
        &self,
        columns: &[String],
        pushed: &[Pushed],
        meter: &Meter,
    ) -> Result<LoadedData, StorageError> {
        self.loaded(columns, pushed, meter).await
    }
}

/// The `sha256sum` listing of files: `<hex>  <path>\n` per file, in the order given.
pub fn set_listing(files: &[ServedFile]) -> String {
    files
        .iter()
        .map(|f| {
            format!(
                "{}  {}\n",
                f.sha256.strip_prefix("sha256:").unwrap_or(&f.sha256),
                f.path
            )
        })
        .collect()
}

// The built-in backends are named here, below the registry that holds them.
impl Default for Backends {
    /// The built-in backends only (Parquet).
    fn default() -> Self {
        Backends::builtin()
    }
}

impl Backends {
    /// The backends every engine has: Parquet files.
    pub fn builtin() -> Backends {
        Backends::empty().with(ParquetFactory)
    }
}
