//! Writing an entry as the table is prepared: chunk by chunk under a temporary name, then the
//! dictionaries and the header, synced and renamed into place.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::writer::FileWriter;

use super::directory::Cache;
use super::format::{ALIGN, Header, MAGIC, Section, cached_files, digest, values_schema};
use crate::backend::ServedFile;
use crate::error::StorageError;

impl Cache {
    /// Starts writing the entry of a dataset version with the stored columns `stored`: under
    /// a temporary name, chunk by chunk ([`Writer`]), renamed into place by
    /// [`Writer::finish`].
    pub fn writer(&self, header: Header, stored: &SchemaRef) -> std::io::Result<Writer> {
        self.create()?;
        self.private().map_err(std::io::Error::other)?;
        let path = self.path(&header.dataset, &header.version);
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(std::io::Error::other)?;
        let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let temporary = path.with_extension(format!("arrow.{suffix}.tmp"));
        let file = File::create_new(&temporary)?;
        let mut out = Counting {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            at: 0,
        };
        let started = (|| {
            out.write_all(MAGIC)?;
            pad(&mut out)?;
            let offset = out.at;
            let ipc = FileWriter::try_new(out, stored).map_err(std::io::Error::other)?;
            Ok::<_, std::io::Error>((ipc, offset))
        })();
        match started {
            Ok((ipc, offset)) => Ok(Writer {
                cache: self.clone(),
                header,
                path,
                temporary,
                ipc: Some(ipc),
                chunks_at: offset,
                rows: 0,
                digests: Vec::new(),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&temporary);
                Err(e)
            }
        }
    }
}

/// Bytes written so far, for section offsets.
struct Counting {
    inner: std::io::BufWriter<File>,
    at: u64,
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Zeros up to the next multiple of [`ALIGN`].
fn pad(out: &mut Counting) -> std::io::Result<()> {
    let rest = (ALIGN - out.at % ALIGN) % ALIGN;
    out.write_all(&vec![0u8; rest as usize])
}

/// An entry being written: chunks as they are built, then the dictionaries and the header.
/// Dropped unfinished, its temporary file is removed.
pub struct Writer {
    cache: Cache,
    header: Header,
    path: PathBuf,
    temporary: PathBuf,
    ipc: Option<FileWriter<Counting>>,
    chunks_at: u64,
    rows: usize,
    digests: Vec<Vec<u32>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.ipc.is_some() {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

impl crate::store::ChunkSink for Writer {
    fn chunk(&mut self, batch: RecordBatch) -> Result<(), StorageError> {
        let ipc = self
            .ipc
            .as_mut()
            .ok_or_else(|| StorageError::internal("a cache entry written after its end"))?;
        self.digests
            .push(batch.columns().iter().map(|c| digest(c.as_ref())).collect());
        ipc.write(&batch).map_err(|e| {
            StorageError::internal(format!(
                "the prepared data could not be kept in the cache: {e}"
            ))
        })?;
        self.rows += batch.num_rows();
        Ok(())
    }
}

impl Writer {
    /// Ends the entry: the dictionaries of the text fields (`values`, by field index), the
    /// header (with `files`, `extract` and `notes` of the data read), synced, renamed into
    /// place; the dataset's other entries and abandoned temporary files are removed.
    pub fn finish(
        mut self,
        values: &[Option<crate::store::Dictionary>],
        stats: &[crate::store::FieldStats],
        files: &[ServedFile],
        extract: Option<String>,
        notes: Vec<String>,
    ) -> std::io::Result<PathBuf> {
        let ipc = self
            .ipc
            .take()
            .ok_or_else(|| std::io::Error::other("the entry was finished already"))?;
        let written = (|| {
            let mut ipc = ipc;
            ipc.finish().map_err(std::io::Error::other)?;
            let mut out = ipc.into_inner().map_err(std::io::Error::other)?;
            let chunks = Section {
                offset: self.chunks_at,
                len: out.at - self.chunks_at,
            };
            pad(&mut out)?;
            let values_at = out.at;
            let schema = values_schema();
            let mut text_fields = Vec::new();
            let mut value_digests = Vec::new();
            let mut folded_digests = Vec::new();
            let mut ipc = FileWriter::try_new(out, &schema).map_err(std::io::Error::other)?;
            for (f, v) in values.iter().enumerate() {
                if let Some(v) = v {
                    text_fields.push(f);
                    value_digests.push(digest(&v.values));
                    folded_digests.push(digest(&v.folded));
                    let batch = RecordBatch::try_new(
                        Arc::clone(&schema),
                        vec![
                            Arc::new(v.values.clone()) as ArrayRef,
                            Arc::new(v.folded.clone()) as ArrayRef,
                        ],
                    )
                    .map_err(std::io::Error::other)?;
                    ipc.write(&batch).map_err(std::io::Error::other)?;
                }
            }
            ipc.finish().map_err(std::io::Error::other)?;
            let mut out = ipc.into_inner().map_err(std::io::Error::other)?;
            let header = Header {
                rows: self.rows,
                files: cached_files(files),
                extract,
                notes,
                text_fields,
                chunks,
                values: Section {
                    offset: values_at,
                    len: out.at - values_at,
                },
                digests: std::mem::take(&mut self.digests),
                value_digests,
                folded_digests,
                stats: Some(stats.to_vec()),
                ..self.header.clone()
            };
            let json = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
            out.write_all(&json)?;
            out.write_all(&(json.len() as u64).to_le_bytes())?;
            out.write_all(MAGIC)?;
            out.flush()?;
            let file = out
                .inner
                .into_inner()
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            file.sync_all()?;
            std::fs::rename(&self.temporary, &self.path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&self.temporary);
            return Err(e);
        }
        self.cache.remove_stale(&self.header.dataset, &self.path);
        Ok(self.path.clone())
    }
}
