//! On an executor of a cluster: the files of a table sent to it, opened here and checked
//! against the versions the server registered.

use std::sync::Arc;

use super::shared::StreamFile;
use crate::error::StorageError;

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
