//! Registration, from the footers only: the files (or objects) a definition names, their
//! columns checked alike and the partition keys typed, as a [`ParquetBackend`].

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use tally_plugin_parquet::Footer;
use tally_plugin_parquet::set;
use tally_semantic::definition::{BackendKind, DatasetDef};

use super::files::{files_of, refusal};
use crate::backend::{Backend, BackendFactory};
use crate::problem::{Problem, Refusal};

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
pub(super) struct Key {
    pub(super) name: String,
    pub(super) data_type: DataType,
}

/// One file the backend reads: its footer and its partition values.
#[derive(Debug)]
pub(super) struct Part {
    /// Relative to the dataset folder; for an object, its URL (`s3://bucket/key`).
    pub(super) relative: String,
    pub(super) footer: Footer,
    /// Where the file is an object in object storage: the object and its version.
    pub(super) object: Option<Arc<crate::object::ObjectFile>>,
    pub(super) values: Vec<Option<String>>,
    /// `sha256:<hex>` of the file, once hashed for a streamed read.
    pub(super) hash: std::sync::OnceLock<String>,
}

/// The built-in Parquet backend.
#[derive(Debug)]
pub struct ParquetBackend {
    pub(super) dataset: String,
    /// What `data_file` (or `data`) says.
    pub(super) data_file: String,
    pub(super) parts: Vec<Part>,
    /// The listing the objects were registered from (`None` for local files).
    pub(super) listing: Option<String>,
    pub(super) keys: Vec<Key>,
    /// The files' columns, then the partition columns.
    pub(super) schema: SchemaRef,
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

/// What the envelope cites of an object.
pub(super) fn object_version(o: &crate::object::ObjectFile) -> crate::backend::ObjectVersion {
    crate::backend::ObjectVersion {
        url: o.url.clone(),
        etag: o.etag_text(),
        version: o.version.clone(),
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
