//! Reading an entry: mapped read-only, its frame, header, schema, chunks and data files
//! checked before it is served, and each column checked against its checksum when first read.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::ipc::convert::fb_to_schema;
use datafusion::arrow::ipc::reader::{FileDecoder, read_footer_length};
use datafusion::arrow::ipc::{Block, MetadataVersion, root_as_footer};

use super::directory::Cache;
use super::format::{
    ALIGN, FORMAT, Header, MAGIC, MAX_HEADER, Miss, Section, digest, miss, nanos, values_schema,
};
use crate::backend::{ServedFile, sha256_file};
use crate::store::{Columns, Damage};

/// Entries found and used by [`Cache::load`], in this process (for `/metrics`).
pub static HITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Entries looked for by [`Cache::load`] and not there, or not usable, in this process.
pub static MISSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Cache {
    /// The entry of a dataset version, checked against what the definition asks for
    /// (`stored`: the stored schema, `text_fields`: the fields with dictionaries) and the data
    /// files as they are now (`files`, relative to `folder`). A miss removes the entry.
    pub fn load(
        &self,
        dataset: &str,
        version: &str,
        stored: &Schema,
        folder: &Path,
        files: &[ServedFile],
    ) -> Result<Option<Mapped>, Miss> {
        if let Err(why) = self.private() {
            return Err(miss(why));
        }
        let path = self.path(dataset, version);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                MISSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(miss(format!("cannot open it: {e}"))),
        };
        let checked = map(&file).and_then(|buffer| {
            let header = frame(&buffer)?;
            check(&header, dataset, version)?;
            let files = check_files(&header, folder, files)?;
            let entry = Entry::open(buffer, &header, stored, path.clone())?;
            let chunks = entry.chunk_rows()?;
            let rows: usize = chunks.iter().sum();
            if rows != header.rows {
                return Err(miss(format!(
                    "{rows} rows where its header says {}",
                    header.rows
                )));
            }
            Ok(Mapped {
                header,
                files,
                chunks,
                entry: Arc::new(entry),
            })
        });
        let counter = if checked.is_ok() { &HITS } else { &MISSES };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match checked {
            Ok(mapped) => Ok(Some(mapped)),
            Err(why) => {
                let _ = std::fs::remove_file(&path);
                Err(why)
            }
        }
    }
}

/// A mapped entry, its frame checked: what it says, the data files as they are now, the rows
/// of each chunk, and the columns, read when first asked for.
#[derive(Debug)]
pub struct Mapped {
    pub header: Header,
    /// The data files as they are now (their hashes those of the bytes the entry was built
    /// from, checked).
    pub files: Vec<ServedFile>,
    pub chunks: Vec<usize>,
    pub entry: Arc<Entry>,
}

/// The sections of a mapped entry.
pub struct Entry {
    buffer: Buffer,
    path: PathBuf,
    stored: SchemaRef,
    version: MetadataVersion,
    blocks: Vec<Block>,
    chunks_at: usize,
    values_schema: SchemaRef,
    values_version: MetadataVersion,
    values_blocks: Vec<Block>,
    values_at: usize,
    /// Per field, its block in the values section.
    text: std::collections::HashMap<usize, usize>,
    digests: Vec<Vec<u32>>,
    value_digests: Vec<u32>,
    folded_digests: Vec<u32>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("bytes", &self.buffer.len())
            .field("chunks", &self.blocks.len())
            .finish_non_exhaustive()
    }
}

/// An Arrow IPC file inside the entry: its schema, version and blocks, all inside it.
fn ipc_section(
    buffer: &Buffer,
    section: Section,
    what: &str,
) -> Result<(usize, SchemaRef, MetadataVersion, Vec<Block>), Miss> {
    let bad =
        |e: &dyn std::fmt::Display| miss(format!("its {what} are not a readable Arrow file: {e}"));
    let start = usize::try_from(section.offset).map_err(|_| miss("a section past the end"))?;
    let len = usize::try_from(section.len).map_err(|_| miss("a section past the end"))?;
    if start % ALIGN as usize != 0
        || start.checked_add(len).is_none_or(|e| e > buffer.len())
        || len < 16
    {
        return Err(miss(format!("its {what} lie outside the file")));
    }
    let bytes = &buffer[start..start + len];
    if &bytes[..6] != b"ARROW1" {
        return Err(miss(format!("its {what} are not an Arrow file")));
    }
    let trailer = len - 10;
    let tail: [u8; 10] = bytes[trailer..].try_into().map_err(|_| miss("too short"))?;
    let footer_len = read_footer_length(tail).map_err(|e| bad(&e))?;
    if footer_len > trailer {
        return Err(miss(format!(
            "the footer of its {what} is longer than they are"
        )));
    }
    let footer = root_as_footer(&bytes[trailer - footer_len..trailer]).map_err(|e| bad(&e))?;
    let fb_schema = footer
        .schema()
        .ok_or_else(|| miss(format!("its {what} have no schema")))?;
    let schema = Arc::new(fb_to_schema(fb_schema));
    let mut blocks = Vec::new();
    for block in footer.recordBatches().into_iter().flatten() {
        let at = usize::try_from(block.offset()).map_err(|_| miss("a negative offset"))?;
        let n = usize::try_from(block.bodyLength())
            .ok()
            .and_then(|b| b.checked_add(usize::try_from(block.metaDataLength()).ok()?))
            .ok_or_else(|| miss("a block of impossible length"))?;
        if at.checked_add(n).is_none_or(|end| end > len) {
            return Err(miss(format!("a block past the end of its {what}")));
        }
        blocks.push(*block);
    }
    Ok((start, schema, footer.version(), blocks))
}

impl Entry {
    fn open(
        buffer: Buffer,
        header: &Header,
        stored: &Schema,
        path: PathBuf,
    ) -> Result<Entry, Miss> {
        let (chunks_at, schema, version, blocks) = ipc_section(&buffer, header.chunks, "chunks")?;
        let same_fields = schema.fields().len() == stored.fields().len()
            && schema
                .fields()
                .iter()
                .zip(stored.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !same_fields {
            return Err(miss("its columns are not the ones the definition asks for"));
        }
        let (values_at, values_schema, values_version, values_blocks) =
            ipc_section(&buffer, header.values, "dictionaries")?;
        if values_schema.fields() != self::values_schema().fields()
            || values_blocks.len() != header.text_fields.len()
        {
            return Err(miss("its dictionaries are not the ones its header lists"));
        }
        let expected_text: Vec<usize> = stored
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| f.data_type() == &DataType::UInt32)
            .map(|(i, _)| i)
            .collect();
        if header.text_fields != expected_text {
            return Err(miss("its text fields are not the definition's"));
        }
        if header.digests.len() != blocks.len()
            || header
                .digests
                .iter()
                .any(|d| d.len() != stored.fields().len())
            || header.value_digests.len() != header.text_fields.len()
            || header.folded_digests.len() != header.text_fields.len()
        {
            return Err(miss("its checksums do not cover its columns"));
        }
        Ok(Entry {
            digests: header.digests.clone(),
            value_digests: header.value_digests.clone(),
            folded_digests: header.folded_digests.clone(),
            text: header
                .text_fields
                .iter()
                .enumerate()
                .map(|(b, f)| (*f, b))
                .collect(),
            buffer,
            path,
            stored: Arc::new(stored.clone()),
            version,
            blocks,
            chunks_at,
            values_schema,
            values_version,
            values_blocks,
            values_at,
        })
    }

    /// Decodes one block of a section with a projection; a panic in the decoder (a hostile
    /// file) is an error like any other.
    fn decode(
        &self,
        at: usize,
        schema: &SchemaRef,
        version: MetadataVersion,
        block: &Block,
        projection: Vec<usize>,
    ) -> Result<RecordBatch, Damage> {
        let start = at + block.offset() as usize;
        let len = block.bodyLength() as usize + block.metaDataLength() as usize;
        let data = self.buffer.slice_with_length(start, len);
        let decoder = FileDecoder::new(Arc::clone(schema), version).with_projection(projection);
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decoder.read_record_batch(block, &data)
        }));
        match decoded {
            Ok(Ok(Some(batch))) => Ok(batch),
            Ok(Ok(None)) => Err(Damage::EmptyBlock),
            Ok(Err(e)) => Err(Damage::Arrow(e)),
            Err(_) => Err(Damage::Undecodable),
        }
    }

    /// The rows of each chunk (no column is decoded).
    fn chunk_rows(&self) -> Result<Vec<usize>, Miss> {
        self.blocks
            .iter()
            .map(|b| {
                self.decode(self.chunks_at, &self.stored, self.version, b, Vec::new())
                    .map(|batch| batch.num_rows())
                    .map_err(|e| miss(format!("a chunk does not decode: {e}")))
            })
            .collect()
    }
}

impl Columns for Entry {
    fn column(&self, field: usize) -> Result<Vec<ArrayRef>, Damage> {
        self.blocks
            .iter()
            .enumerate()
            .map(|(c, b)| {
                let batch =
                    self.decode(self.chunks_at, &self.stored, self.version, b, vec![field])?;
                let array = Arc::clone(batch.column(0));
                if self.digests.get(c).and_then(|d| d.get(field)) != Some(&digest(array.as_ref())) {
                    return Err(Damage::ChunkChecksum(c));
                }
                Ok(array)
            })
            .collect()
    }

    fn values(&self, field: usize) -> Result<StringArray, Damage> {
        let (at, values) = self.values_column(field, 0)?;
        if self.value_digests.get(at) != Some(&digest(&values)) {
            return Err(Damage::DictionaryChecksum);
        }
        if values.is_empty() || !values.value(0).is_empty() || values.null_count() > 0 {
            return Err(Damage::NoEmptyValue);
        }
        Ok(values)
    }

    fn folded(&self, field: usize) -> Result<StringArray, Damage> {
        let (at, folded) = self.values_column(field, 1)?;
        if self.folded_digests.get(at) != Some(&digest(&folded)) {
            return Err(Damage::FoldedChecksum);
        }
        Ok(folded)
    }

    fn damaged(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Entry {
    /// Column `column` of text field `field`'s block in the values section, with the block's
    /// place (its checksums' index).
    fn values_column(&self, field: usize, column: usize) -> Result<(usize, StringArray), Damage> {
        let at = *self.text.get(&field).ok_or(Damage::NoDictionary(field))?;
        let block = self
            .values_blocks
            .get(at)
            .ok_or(Damage::NoDictionary(field))?;
        let batch = self.decode(
            self.values_at,
            &self.values_schema,
            self.values_version,
            block,
            vec![column],
        )?;
        let values = batch
            .column(0)
            .as_string_opt::<i32>()
            .ok_or(Damage::NotText)?
            .clone();
        Ok((at, values))
    }
}

/// The header of a mapped entry, its frame checked: magic at both ends, a header that fits.
fn frame(buffer: &Buffer) -> Result<Header, Miss> {
    let len = buffer.len();
    if len < 32 || &buffer[..8] != MAGIC {
        return Err(miss("not a Tally cache entry (no leading magic)"));
    }
    if &buffer[len - 8..] != MAGIC {
        return Err(miss("cut short (no trailing magic)"));
    }
    let header_len = u64::from_le_bytes(
        buffer[len - 16..len - 8]
            .try_into()
            .map_err(|_| miss("too short"))?,
    );
    if header_len > MAX_HEADER || header_len as usize > len - 24 {
        return Err(miss("a header longer than the file"));
    }
    let start = len - 16 - header_len as usize;
    serde_json::from_slice(&buffer[start..len - 16])
        .map_err(|e| miss(format!("a broken header: {e}")))
}

/// The header is this Tally's, for this dataset version.
fn check(header: &Header, dataset: &str, version: &str) -> Result<(), Miss> {
    if header.format != FORMAT {
        return Err(miss(format!(
            "format {} (this Tally reads {FORMAT})",
            header.format
        )));
    }
    if header.tally != env!("CARGO_PKG_VERSION") {
        return Err(miss(format!("written by Tally {}", header.tally)));
    }
    if header.dataset != dataset || header.version != version {
        return Err(miss(format!(
            "it holds {} version {}",
            header.dataset, header.version
        )));
    }
    Ok(())
}

/// The file, mapped read-only. Entries are written once under another name and renamed
/// into place, never changed after, and removed only by unlinking, so a mapped entry's
/// bytes do not change under the map.
#[allow(unsafe_code)]
fn map(file: &File) -> Result<Buffer, Miss> {
    // SAFETY: the bytes of a cache entry never change after it is renamed into place (see
    // above); the map is read-only, and what is read is checked before it is trusted.
    let mapped =
        unsafe { memmap2::Mmap::map(file) }.map_err(|e| miss(format!("cannot map it: {e}")))?;
    Ok(Buffer::from(bytes::Bytes::from_owner(mapped)))
}

/// The data files are the ones the entry was built from: the same paths and sizes, and the
/// same time or, when the time moved, the same bytes (hashed again).
fn check_files(
    header: &Header,
    folder: &Path,
    now: &[ServedFile],
) -> Result<Vec<ServedFile>, Miss> {
    if header.files.len() != now.len() {
        return Err(miss("it was built from other files"));
    }
    let mut files = Vec::with_capacity(now.len());
    for (cached, current) in header.files.iter().zip(now) {
        if cached.path != current.path || cached.size != current.size {
            return Err(miss(format!("`{}` changed", current.path)));
        }
        let same_time =
            cached.modified.is_some() && cached.modified == current.modified.and_then(nanos);
        if !same_time {
            let hash = sha256_file(&folder.join(&current.path))
                .map_err(|e| miss(format!("cannot read `{}`: {e}", current.path)))?;
            if hash != cached.sha256 {
                return Err(miss(format!("the bytes of `{}` changed", current.path)));
            }
        }
        files.push(ServedFile {
            path: current.path.clone(),
            size: current.size,
            sha256: cached.sha256.clone(),
            modified: current.modified,
            object: current.object.clone(),
        });
    }
    Ok(files)
}
