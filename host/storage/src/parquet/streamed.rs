//! The files a call's conditions leave, served as a [`ParquetStream`] read at every call:
//! each local file hashed once per version (the hash the answers cite).

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;

use super::register::{ParquetBackend, object_version};
use super::stream::{ParquetStream, StreamFile};
use crate::backend::{Pushed, ServedFile, sha256_file};
use crate::error::StorageError;

impl ParquetBackend {
    /// The files the conditions leave, read at every call, serving `fields` in the types
    /// given. Each file is hashed once (the hash the answers cite).
    pub(super) async fn streamed(
        &self,
        fields: &[(String, DataType)],
        pushed: &[Pushed],
        budget: &Arc<crate::memory::Budget>,
    ) -> Result<Arc<dyn crate::backend::Streaming>, StorageError> {
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.parts.len());
        for p in &self.parts {
            offsets.push(offset);
            offset += p.footer.num_rows;
        }
        let selected: Vec<usize> = (0..self.parts.len())
            .filter(|i| self.selected(&self.parts[*i], pushed))
            .collect();
        self.hash_selected(&selected).await?;
        let key_names: Vec<String> = self.keys.iter().map(|k| k.name.clone()).collect();
        let mut files = Vec::with_capacity(selected.len());
        let mut served = Vec::with_capacity(selected.len());
        for &i in &selected {
            let p = &self.parts[i];
            let values = self
                .keys
                .iter()
                .enumerate()
                .map(|(k, key)| {
                    let wanted = fields
                        .iter()
                        .find(|(n, _)| *n == key.name)
                        .map(|(_, t)| t.clone())
                        .unwrap_or(DataType::Utf8);
                    partition_value(p.values[k].as_deref(), &wanted)
                })
                .collect();
            served.push(ServedFile {
                path: p.relative.clone(),
                size: p.footer.size,
                sha256: p.hash.get().cloned().unwrap_or_default(),
                modified: p.footer.modified,
                object: p.object.as_deref().map(object_version),
            });
            files.push(StreamFile::new(
                p.relative.clone(),
                p.footer.clone(),
                offsets[i],
                values,
                p.object.clone(),
            ));
        }
        let extract = self.pruned(&served, pushed);
        Ok(Arc::new(ParquetStream::new(
            &self.dataset,
            fields,
            &key_names,
            files,
            served,
            extract,
            budget,
        )?))
    }

    /// Hashes the selected local files not hashed yet, each once per version, checking
    /// first that each still has the size registered.
    async fn hash_selected(&self, selected: &[usize]) -> Result<(), StorageError> {
        // Hashed in blocks, off the async workers, each file once per version.
        let unhashed: Vec<(usize, std::path::PathBuf, u64)> = selected
            .iter()
            // Objects are read by ranges, never whole: they are cited by their ETags.
            .filter(|i| self.parts[**i].hash.get().is_none() && self.parts[**i].object.is_none())
            .map(|i| {
                (
                    *i,
                    self.parts[*i].footer.path.clone(),
                    self.parts[*i].footer.size,
                )
            })
            .collect();
        let dataset = self.dataset.clone();
        let hashed = tokio::task::spawn_blocking(move || {
            unhashed
                .into_iter()
                .map(|(i, path, size)| {
                    match std::fs::metadata(&path) {
                        Ok(m) if m.len() == size => {}
                        Ok(_) => {
                            return Err((
                                i,
                                "its data file changed after this version was registered",
                            ));
                        }
                        Err(_) => return Err((i, "its data file was removed")),
                    }
                    sha256_file(&path)
                        .map(|h| (i, h))
                        .map_err(|_| (i, "its data file cannot be read"))
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(StorageError::internal)?
        .map_err(|(i, message)| StorageError::Stale {
            dataset: dataset.clone(),
            message: format!("{message} (`{}`)", self.parts[i].relative),
        })?;
        for (i, h) in hashed {
            let _ = self.parts[i].hash.set(h);
        }
        Ok(())
    }
}

/// A partition value in the type a field is served in (`None`: the null partition).
fn partition_value(value: Option<&str>, data_type: &DataType) -> datafusion::common::ScalarValue {
    use datafusion::common::ScalarValue;
    match (value, data_type) {
        (Some(v), DataType::Int64) => ScalarValue::Int64(v.parse().ok()),
        (Some(v), DataType::Float64) => ScalarValue::Float64(v.parse().ok()),
        (Some(v), DataType::Utf8View) => ScalarValue::Utf8View(Some(v.to_string())),
        (Some(v), DataType::Dictionary(k, _)) => {
            ScalarValue::Dictionary(k.clone(), Box::new(ScalarValue::Utf8(Some(v.to_string()))))
        }
        (Some(v), _) => ScalarValue::Utf8(Some(v.to_string())),
        (None, t) => ScalarValue::try_from(t).unwrap_or(ScalarValue::Null),
    }
}
