//! The built-in Parquet backend: one file, or a set of files (a glob, or a folder read as a
//! Hive-partitioned tree), inside the dataset folder.
//!
//! Registration reads every file's footer (schema, row count), never the data. The files of a
//! set must have the same columns; the partition keys of their folders (`year=2024/`) become
//! columns of the data (integers when every value is written as one, else text), which the
//! definition declares like any other. Conditions on partition columns are applied by the
//! backend itself: a file whose partition values cannot match is not read at all.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, new_null_array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use tally_plugin_parquet::Footer;
use tally_plugin_parquet::groups::Text;
use tally_plugin_parquet::set::{self, FileSet};
use tally_semantic::definition::{BackendKind, DatasetDef};
use tally_semantic::names::fold;

use crate::backend::{
    Backend, BackendFactory, Backends, LoadedData, Pushed, ServedFile, Test, sha256_file,
    sha256_hex,
};
use crate::error::StorageError;
use crate::memory::Meter;
use crate::object::object_error;
use crate::problem::{Problem, Refusal};

pub mod reads;
pub(crate) mod stream;
pub use reads::CallReads;
pub(crate) use stream::reopen;

/// Builds [`ParquetBackend`]s: `data_file` in the dataset folder (a file, a glob or a
/// folder), registered from the footers.
#[derive(Debug, Clone, Copy)]
pub struct ParquetFactory;

impl BackendFactory for ParquetFactory {
    fn kind(&self) -> BackendKind {
        BackendKind::Parquet
    }

    fn create(&self, def: &DatasetDef, folder: &Path) -> Result<Arc<dyn Backend>, Refusal> {
        if let Some(url) = &def.data_url {
            return Ok(Arc::new(ParquetBackend::register_objects(&def.id, url)?));
        }
        Ok(Arc::new(ParquetBackend::register(
            &def.id,
            folder,
            &def.data_file,
        )?))
    }
}

/// A partition key of a set: a column whose value every file has in its folder name.
#[derive(Debug, Clone)]
struct Key {
    name: String,
    data_type: DataType,
}

/// One file the backend reads: its footer and its partition values.
#[derive(Debug)]
struct Part {
    /// Relative to the dataset folder; for an object, its URL (`s3://bucket/key`).
    relative: String,
    footer: Footer,
    /// Where the file is an object in object storage: the object and its version.
    object: Option<Arc<crate::object::ObjectFile>>,
    values: Vec<Option<String>>,
    /// `sha256:<hex>` of the file, once hashed for a streamed read.
    hash: std::sync::OnceLock<String>,
}

/// The built-in Parquet backend.
#[derive(Debug)]
pub struct ParquetBackend {
    dataset: String,
    /// What `data_file` (or `data`) says.
    data_file: String,
    parts: Vec<Part>,
    /// The listing the objects were registered from (`None` for local files).
    listing: Option<String>,
    keys: Vec<Key>,
    /// The files' columns, then the partition columns.
    schema: SchemaRef,
}

/// A refusal at `data:` (an object-store dataset).
fn data_refusal(reason: String, fix: &str) -> Refusal {
    Refusal {
        problems: vec![Problem {
            line: None,
            key: "data".into(),
            reason,
            fix: fix.into(),
        }],
        maybe_incomplete: false,
        data_gone: false,
    }
}

/// Why the objects `data:` names could not be registered; an object that is not there
/// marks the refusal as data gone (deleted at the source, when a version was served).
fn object_refusal(e: crate::object::ObjectError) -> Refusal {
    let mut refusal = data_refusal(e.to_string(), e.fix());
    refusal.data_gone = matches!(e, crate::object::ObjectError::Missing(_));
    refusal
}

/// Why an object's footer could not be read, at `data:`.
fn object_footer_refusal(e: tally_plugin_parquet::Error, url: &str) -> Refusal {
    if let tally_plugin_parquet::Error::Io { source, .. } = &e
        && let Some(object) = source
            .get_ref()
            .and_then(|s| s.downcast_ref::<crate::object::ObjectError>())
    {
        return object_refusal(object.clone());
    }
    data_refusal(
        format!("{url}: {e}"),
        "write complete Parquet objects under the prefix (an object being uploaded is read again at the next --object-poll)",
    )
}

fn refusal(reason: String, fix: &str, maybe_incomplete: bool) -> Refusal {
    Refusal {
        problems: vec![Problem {
            line: None,
            key: "data_file".into(),
            reason,
            fix: fix.into(),
        }],
        maybe_incomplete,
        data_gone: false,
    }
}

impl ParquetBackend {
    /// Registers from the footers only.
    pub fn register(
        dataset: &str,
        folder: &Path,
        data_file: &str,
    ) -> Result<ParquetBackend, Refusal> {
        let files = files_of(folder, data_file)?;
        let mut parts = Vec::with_capacity(files.parts.len());
        for part in files.parts {
            // A file of a set may be a symbolic link; never to a place outside the folder.
            if let Some(problem) = crate::problem::outside(folder, &folder.join(&part.relative)) {
                return Err(vec![problem].into());
            }
            let footer =
                tally_plugin_parquet::read_footer(&folder.join(&part.relative)).map_err(|e| {
                    refusal(
                        e.to_string(),
                        "write a complete Parquet file",
                        matches!(e, tally_plugin_parquet::Error::Format { .. }),
                    )
                })?;
            parts.push(Part {
                relative: part.relative,
                footer,
                object: None,
                values: part.values,
                hash: std::sync::OnceLock::new(),
            });
        }
        ParquetBackend::of_parts(dataset, data_file, parts, &files.keys, None)
    }

    /// Registers the objects `url` names from their footers only (one ranged read each).
    pub fn register_objects(
        dataset: &str,
        url: &tally_semantic::definition::ObjectUrl,
    ) -> Result<ParquetBackend, Refusal> {
        let shown = url.to_string();
        let listed = crate::object::list(url).map_err(object_refusal)?;
        let listing = crate::object::stamp_of(&listed);
        let files = set::from_paths(&shown, listed.iter().map(|(r, _)| r.clone()).collect())
            .map_err(|e| {
                data_refusal(
                    e.to_string(),
                    "name the objects of one table: a narrower prefix, or one partition layout for all",
                )
            })?;
        let by_relative: std::collections::BTreeMap<String, crate::object::ObjectFile> =
            listed.into_iter().collect();
        // Footers are read a few at a time: each is a round trip to the store.
        let wanted: Vec<(set::Part, crate::object::ObjectFile)> = files
            .parts
            .into_iter()
            .filter_map(|p| by_relative.get(&p.relative).cloned().map(|o| (p, o)))
            .collect();
        let mut parts: Vec<Result<Part, Refusal>> = Vec::with_capacity(wanted.len());
        for batch in wanted.chunks(8) {
            let read: Vec<Result<Part, Refusal>> = std::thread::scope(|scope| {
                let handles: Vec<_> = batch
                    .iter()
                    .map(|(part, object)| {
                        scope.spawn(move || {
                            let footer = tally_plugin_parquet::read_footer_of(
                                &object.message_path(),
                                object,
                                object.modified,
                            )
                            .map_err(|e| object_footer_refusal(e, &object.url))?;
                            Ok(Part {
                                relative: object.url.clone(),
                                footer,
                                object: Some(Arc::new(object.clone())),
                                values: part.values.clone(),
                                hash: std::sync::OnceLock::new(),
                            })
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(refusal(
                                "reading an object's footer failed unexpectedly".into(),
                                "see the server log",
                                false,
                            ))
                        })
                    })
                    .collect()
            });
            parts.extend(read);
        }
        let parts = parts.into_iter().collect::<Result<Vec<_>, _>>()?;
        ParquetBackend::of_parts(dataset, &shown, parts, &files.keys, Some(listing)).map_err(
            |mut r| {
                for p in &mut r.problems {
                    if p.key == "data_file" {
                        p.key = "data".into();
                    }
                }
                r
            },
        )
    }

    /// The backend of registered parts: their columns checked alike, the partition keys typed.
    fn of_parts(
        dataset: &str,
        data_file: &str,
        parts: Vec<Part>,
        keys: &[String],
        listing: Option<String>,
    ) -> Result<ParquetBackend, Refusal> {
        let first = &parts[0];
        for other in &parts[1..] {
            if let Some(difference) = difference(
                (&first.relative, &first.footer.schema),
                (&other.relative, &other.footer.schema),
            ) {
                return Err(refusal(
                    format!(
                        "the files of `{data_file}` do not have the same columns: {difference}"
                    ),
                    "write every file of the set with the same columns and types, or name fewer files in `data_file`",
                    false,
                ));
            }
        }
        let keys: Vec<Key> = keys
            .iter()
            .enumerate()
            .map(|(i, name)| Key {
                name: name.clone(),
                data_type: if set::integer_values(parts.iter().map(|p| p.values[i].as_deref())) {
                    DataType::Int64
                } else {
                    DataType::Utf8
                },
            })
            .collect();
        let mut fields: Vec<Field> = first
            .footer
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for key in &keys {
            if fields.iter().any(|f| f.name() == &key.name) {
                return Err(refusal(
                    format!(
                        "`{}` is both a partition folder (`{}=…`) and a column of the files of `{data_file}`",
                        key.name, key.name
                    ),
                    "rename the partition folders or the column: a value must come from one place",
                    false,
                ));
            }
            fields.push(Field::new(&key.name, key.data_type.clone(), true));
        }
        Ok(ParquetBackend {
            dataset: dataset.to_string(),
            data_file: data_file.to_string(),
            schema: Arc::new(Schema::new_with_metadata(
                fields,
                first.footer.schema.metadata().clone(),
            )),
            parts,
            keys,
            listing,
        })
    }

    /// What the objects were registered from, for change detection (`None`: local files).
    pub fn listing(&self) -> Option<&str> {
        self.listing.as_deref()
    }

    /// Whether a file's partition values can satisfy every condition on a partition column.
    fn selected(&self, part: &Part, pushed: &[Pushed]) -> bool {
        pushed.iter().all(|p| {
            let Some(k) = self.keys.iter().position(|k| k.name == p.column) else {
                return true;
            };
            let Some(value) = &part.values[k] else {
                // A null partition value matches no equality and no range.
                return false;
            };
            match &p.test {
                Test::Range(bound) => match (&self.keys[k].data_type, value.parse::<f64>()) {
                    (DataType::Int64, Ok(v)) => bound.holds(v),
                    // Text partition values are not compared as numbers: nothing is pruned.
                    _ => true,
                },
                Test::Equals(values) => values.iter().any(|wanted| match self.keys[k].data_type {
                    DataType::Int64 => match (value.parse::<f64>(), wanted.parse::<f64>()) {
                        (Ok(a), Ok(b)) => a == b,
                        _ => true,
                    },
                    // The engine matches text equal under NFKC (and says so); fold both sides
                    // so no file it would match is left unread.
                    _ => fold(wanted) == fold(value),
                }),
            }
        })
    }

    /// The files the conditions leave, read at every call, serving `fields` in the types
    /// given. Each file is hashed once (the hash the answers cite).
    async fn streamed(
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
            files.push(stream::StreamFile::new(
                p.relative.clone(),
                p.footer.clone(),
                offsets[i],
                values,
                p.object.clone(),
            ));
        }
        let extract = self.pruned(&served, pushed);
        Ok(Arc::new(stream::ParquetStream::new(
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

    /// How the rows were read when conditions left files unread: which files, and why.
    fn pruned(&self, files: &[ServedFile], pushed: &[Pushed]) -> Option<String> {
        let skipped = self.parts.len() - files.len();
        (skipped > 0).then(|| {
            format!(
                "the Parquet backend from {} of the {} files of `{}` ({}; the other {skipped} were not read: their partition values do not satisfy {})",
                files.len(),
                self.parts.len(),
                self.data_file,
                files
                    .iter()
                    .map(|f| f.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                pushed
                    .iter()
                    .filter(|p| self.keys.iter().any(|k| k.name == p.column))
                    .map(Pushed::describe)
                    .collect::<Vec<_>>()
                    .join(" and ")
            )
        })
    }
}

/// The files `data_file` names: one file, or the set a pattern or folder names.
fn files_of(folder: &Path, data_file: &str) -> Result<FileSet, Refusal> {
    if !set::is_pattern(data_file) && !folder.join(data_file).is_dir() {
        if !folder.join(data_file).is_file() {
            // The definition may have been copied before its data; a publisher's file beside
            // it is a file to convert.
            if let Some(other) = convertible_beside(folder) {
                return Err(refusal(
                    format!(
                        "the data file `{data_file}` is not in the dataset folder, which holds `{other}`"
                    ),
                    &format!(
                        "the built-in backend reads Parquet: convert `{other}` with `tally add {} <datasets>/{}/{other}`, which writes `{data_file}` and keeps this dataset.yaml",
                        folder_name(folder),
                        folder_name(folder)
                    ),
                    true,
                ));
            }
            return Err(refusal(
                format!("the data file `{data_file}` is not in the dataset folder"),
                "put the Parquet file there, or name it with `data_file:` (a file, a glob such as `data/*.parquet`, or a folder of partitions such as `data/`)",
                true,
            ));
        }
        if let Some(kind) = convertible_kind(Path::new(data_file))
            && !starts_with_parquet_magic(&folder.join(data_file))
        {
            return Err(refusal(
                format!("`{data_file}` is a {kind} file, not Parquet"),
                &format!(
                    "the built-in backend reads Parquet: convert it with `tally add {} <datasets>/{}/{data_file}`, which writes data.parquet and keeps this dataset.yaml, then set `data_file: data.parquet` (or remove data_file)",
                    folder_name(folder),
                    folder_name(folder)
                ),
                false,
            ));
        }
        return Ok(FileSet {
            keys: Vec::new(),
            parts: vec![set::Part {
                relative: data_file.to_string(),
                values: Vec::new(),
            }],
        });
    }
    set::expand(folder, data_file).map_err(|e| {
        let empty = matches!(e, set::SetError::Empty(_));
        refusal(
            e.to_string(),
            if empty {
                "put the Parquet files there, or fix the pattern (`*` matches within a name, `**` any folders)"
            } else {
                "name the files of one table: a narrower pattern, or one partition layout for all"
            },
            // Files may still be on their way.
            empty,
        )
    })
}

/// `converted by tally add 0.1.0 on … from 20250729_….xlsx (xlsx, sheet 手続一覧, 2 header
/// rows, sha256:…) into data.parquet`, from the record `tally add` leaves in the footer.
/// Anything that does not read as such a record says nothing (the file's writer is not
/// trusted to be Tally: the words are built only from the fields, each shown as text).
fn ingest_origin(record: &str, relative: &str) -> Option<String> {
    if record.len() > 4096 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(record).ok()?;
    let text = |k: &str| {
        v.get(k).and_then(|x| x.as_str()).map(|s| {
            s.chars()
                .filter(|c| !c.is_control())
                .take(200)
                .collect::<String>()
        })
    };
    let file = text("file")?;
    let mut how = vec![text("format").unwrap_or_default()];
    if let Some(e) = text("encoding") {
        how.push(e);
    }
    if let Some(sheet) = text("sheet") {
        how.push(format!("sheet {sheet}"));
    }
    if let Some(n) = v.get("header_rows").and_then(|x| x.as_u64()) {
        how.push(format!("{n} header row{}", if n == 1 { "" } else { "s" }));
    }
    if let Some(h) = text("sha256") {
        how.push(h);
    }
    how.retain(|s| !s.is_empty());
    Some(format!(
        "`{relative}` was converted from {file} ({}) by tally add {}{}",
        how.join(", "),
        text("version").unwrap_or_default(),
        text("converted_at")
            .map(|t| format!(" at {t}"))
            .unwrap_or_default()
    ))
}

/// The kind of a file `tally add` converts, by its extension.
fn convertible_kind(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "csv" => "CSV",
        "tsv" | "tab" => "TSV",
        "txt" => "text",
        "xlsx" | "xlsm" => "Excel workbook",
        "xls" => "Excel 97-2003 workbook",
        "jsonl" | "ndjson" => "JSON Lines",
        "json" => "JSON",
        _ => return None,
    })
}

fn starts_with_parquet_magic(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"PAR1"
}

/// A file beside the definition that `tally add` would convert, if there is one.
fn convertible_beside(folder: &Path) -> Option<String> {
    let mut found: Vec<String> = std::fs::read_dir(folder)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && convertible_kind(Path::new(n)).is_some())
        .collect();
    found.sort();
    found.into_iter().next()
}

fn folder_name(folder: &Path) -> String {
    folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// How the columns of file `b` differ from those of file `a` (by name and type as served:
/// text is text however it is stored), if they do: the first difference, in words.
fn difference(a: (&str, &Schema), b: (&str, &Schema)) -> Option<String> {
    fn served(t: &DataType) -> &DataType {
        match t {
            DataType::Utf8View | DataType::LargeUtf8 => &DataType::Utf8,
            DataType::Dictionary(_, v) => served(v),
            other => other,
        }
    }
    let ((a_name, a), (b_name, b)) = (a, b);
    for f in b.fields() {
        match a.field_with_name(f.name()) {
            Ok(g) if served(g.data_type()) == served(f.data_type()) => {}
            Ok(g) => {
                return Some(format!(
                    "column `{}` is {} in `{a_name}` but {} in `{b_name}`",
                    f.name(),
                    g.data_type(),
                    f.data_type()
                ));
            }
            Err(_) => {
                return Some(format!(
                    "`{b_name}` has column `{}` ({}), which `{a_name}` lacks",
                    f.name(),
                    f.data_type()
                ));
            }
        }
    }
    a.fields()
        .iter()
        .find(|f| b.field_with_name(f.name()).is_err())
        .map(|f| {
            format!(
                "`{b_name}` lacks column `{}` ({}), which `{a_name}` has",
                f.name(),
                f.data_type()
            )
        })
}

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
}

impl ParquetBackend {
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

/// What the envelope cites of an object.
fn object_version(o: &crate::object::ObjectFile) -> crate::backend::ObjectVersion {
    crate::backend::ObjectVersion {
        url: o.url.clone(),
        etag: o.etag_text(),
        version: o.version.clone(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(fields: &[(&str, DataType)]) -> Schema {
        Schema::new(
            fields
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone(), true))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn files_that_differ_are_told_apart_in_words() {
        let a = schema(&[("id", DataType::Utf8), ("n", DataType::Int64)]);
        let same = schema(&[("id", DataType::Utf8View), ("n", DataType::Int64)]);
        assert_eq!(difference(("a", &a), ("b", &same)), None);
        let typed = schema(&[("id", DataType::Utf8), ("n", DataType::Float64)]);
        assert_eq!(
            difference(("a", &a), ("b", &typed)).as_deref(),
            Some("column `n` is Int64 in `a` but Float64 in `b`")
        );
        let more = schema(&[
            ("id", DataType::Utf8),
            ("n", DataType::Int64),
            ("x", DataType::Int64),
        ]);
        assert_eq!(
            difference(("a", &a), ("b", &more)).as_deref(),
            Some("`b` has column `x` (Int64), which `a` lacks")
        );
        assert_eq!(
            difference(("b", &more), ("a", &a)).as_deref(),
            Some("`a` lacks column `x` (Int64), which `b` has")
        );
    }
}
