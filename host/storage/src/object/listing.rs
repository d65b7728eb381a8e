//! The objects a URL names: listed at registration and at every poll (what a listing is now,
//! its stamp), and an object registered elsewhere reopened here.

use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use tally_semantic::definition::ObjectUrl;

use super::error::ObjectError;
use super::file::ObjectFile;
use super::io::{ANSWER_TIMEOUT, wait, within};
use super::store::store_for;

/// Keys listed under a prefix, Parquet or not: a prefix of millions of other objects is not
/// paged through at every start and poll.
const MAX_LISTED: usize = 100_000;
/// Objects under one prefix: more is refused (each is a footer to read).
pub const MAX_OBJECTS: usize = tally_plugin_parquet::set::MAX_FILES;

/// An object registered elsewhere (by the server, for an executor of its cluster), opened
/// here with this process's credentials: every read still names the version registered.
pub fn reopen(
    url: &str,
    etag: Option<String>,
    version: Option<String>,
    size: u64,
    modified: Option<SystemTime>,
) -> Result<ObjectFile, ObjectError> {
    let parsed = ObjectUrl::parse(url).map_err(ObjectError::Other)?;
    let store = store_for(&parsed)?;
    Ok(ObjectFile {
        store,
        location: key_path(&parsed.prefix)?,
        url: url.to_string(),
        etag,
        version,
        size,
        modified,
    })
}

/// The objects a URL names, in key order, with their keys relative to the prefix (what a
/// set of files is read from): one object when the URL names an object's key, else every
/// `.parquet` object under the prefix (hidden `.x` and `_x` parts skipped, as Spark and Hive
/// write `_SUCCESS`).
pub fn list(url: &ObjectUrl) -> Result<Vec<(String, ObjectFile)>, ObjectError> {
    let store = store_for(url)?;
    let url = url.clone();
    wait(async move { list_async(&store, &url).await })?
}

async fn list_async(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
) -> Result<Vec<(String, ObjectFile)>, ObjectError> {
    let shown = url.to_string();
    if !url.is_folder() {
        let location = key_path(&url.prefix)?;
        match within(ANSWER_TIMEOUT, &shown, async {
            Ok(store.head(&location).await)
        })
        .await?
        {
            Ok(meta) => {
                let name = url
                    .prefix
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                return Ok(vec![(name, ObjectFile::of(store, url, meta))]);
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(ObjectError::from_store(e, &shown)),
        }
    }
    let prefix = url.prefix.trim_end_matches('/');
    let location = if prefix.is_empty() {
        None
    } else {
        Some(key_path(prefix)?)
    };
    let mut listed = store.list(location.as_ref());
    let mut out = Vec::new();
    let mut seen = 0usize;
    while let Some(meta) = within(ANSWER_TIMEOUT, &shown, async { Ok(listed.next().await) }).await?
    {
        let meta = meta.map_err(|e| ObjectError::from_store(e, &shown))?;
        seen += 1;
        if seen > MAX_LISTED {
            return Err(ObjectError::Other(format!(
                "{shown} holds more than {MAX_LISTED} objects; name a narrower prefix"
            )));
        }
        let key = meta.location.as_ref().to_string();
        let relative = key
            .strip_prefix(prefix)
            .unwrap_or(&key)
            .trim_start_matches('/')
            .to_string();
        let hidden = relative
            .split('/')
            .any(|p| p.starts_with('.') || p.starts_with('_'));
        if hidden || !relative.ends_with(".parquet") {
            continue;
        }
        if out.len() >= MAX_OBJECTS {
            return Err(ObjectError::Other(format!(
                "{shown} holds more than {MAX_OBJECTS} Parquet objects"
            )));
        }
        out.push((relative, ObjectFile::of(store, url, meta)));
    }
    if out.is_empty() {
        return Err(ObjectError::Missing(format!(
            "no Parquet object (`….parquet`) is under {shown}"
        )));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// A key as the store holds it (`data:` is written as the store's keys are: nothing is
/// percent-encoded again).
fn key_path(key: &str) -> Result<ObjectPath, ObjectError> {
    ObjectPath::parse(key.trim_end_matches('/'))
        .map_err(|e| ObjectError::Other(format!("`{key}` is not a key the store can hold: {e}")))
}

/// What a listing of `url` is now: every object's key, size, ETag and version. Compared at
/// each `--object-poll` with what was registered; a difference reads the dataset again.
pub fn stamp(url: &ObjectUrl) -> Result<String, ObjectError> {
    Ok(stamp_of(&list(url)?))
}

pub fn stamp_of(objects: &[(String, ObjectFile)]) -> String {
    objects
        .iter()
        .map(|(relative, o)| {
            format!(
                "{relative}:{}:{}:{}:{}",
                o.size,
                o.etag.as_deref().unwrap_or(""),
                o.version.as_deref().unwrap_or(""),
                // Without an ETag, the time is what tells versions apart.
                o.modified
                    .filter(|_| o.etag.is_none())
                    .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos())
            )
        })
        .collect::<Vec<_>>()
        .join("|")
}
