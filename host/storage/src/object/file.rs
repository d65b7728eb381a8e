//! One object of a dataset, read at the version registered: ranges close to each other read
//! by one request, a few requests at once, the whole object hashed as it streams.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};
use sha2::{Digest, Sha256};
use tally_semantic::definition::ObjectUrl;

use super::error::ObjectError;
use super::io::{ANSWER_TIMEOUT, CONCURRENT_REQUESTS, run, wait, within};

/// One object of a dataset: where it is and the version registered.
#[derive(Debug, Clone)]
pub struct ObjectFile {
    pub store: Arc<dyn ObjectStore>,
    pub location: ObjectPath,
    /// `s3://bucket/key`: what the envelope cites.
    pub url: String,
    /// As the store gives it (S3 quotes it).
    pub etag: Option<String>,
    /// The store's version id, where the bucket keeps versions.
    pub version: Option<String>,
    pub size: u64,
    pub modified: Option<SystemTime>,
}

impl ObjectFile {
    pub(super) fn of(
        store: &Arc<dyn ObjectStore>,
        url: &ObjectUrl,
        meta: ObjectMeta,
    ) -> ObjectFile {
        ObjectFile {
            store: Arc::clone(store),
            url: format!("{}://{}/{}", url.scheme, url.bucket, meta.location),
            location: meta.location,
            etag: meta.e_tag,
            version: meta.version,
            size: meta.size,
            modified: Some(SystemTime::from(meta.last_modified)),
        }
    }

    /// The ETag without the quotes S3 puts around it.
    pub fn etag_text(&self) -> Option<String> {
        self.etag.as_ref().map(|e| e.trim_matches('"').to_string())
    }

    /// A path for messages (the Parquet reader names files by their last part).
    pub fn message_path(&self) -> PathBuf {
        PathBuf::from(self.location.as_ref())
    }

    fn options(&self, range: Option<Range<u64>>) -> GetOptions {
        GetOptions {
            if_match: self.etag.clone(),
            // A store that gives no ETag is held to the time registered instead.
            if_unmodified_since: self
                .etag
                .is_none()
                .then(|| self.modified.map(chrono::DateTime::<chrono::Utc>::from))
                .flatten(),
            version: self.version.clone(),
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        }
    }

    /// A request's answer, once its headers arrived within [`ANSWER_TIMEOUT`].
    async fn open(
        &self,
        range: Option<Range<u64>>,
    ) -> Result<futures::stream::BoxStream<'static, object_store::Result<Bytes>>, ObjectError> {
        // What `tests/e2e/bench_object_store.py` counts: one line per request to the store.
        tracing::debug!(url = %self.url, range = ?range, "object request");
        let got = within(ANSWER_TIMEOUT, &self.url, async {
            self.store
                .get_opts(&self.location, self.options(range))
                .await
                .map_err(|e| ObjectError::from_store(e, &self.url))
        })
        .await?;
        Ok(got.into_stream())
    }

    /// The next piece of an answer's body, within [`ANSWER_TIMEOUT`] (`None` at its end).
    async fn next(
        &self,
        body: &mut futures::stream::BoxStream<'static, object_store::Result<Bytes>>,
    ) -> Result<Option<Bytes>, ObjectError> {
        within(ANSWER_TIMEOUT, &self.url, async { Ok(body.next().await) })
            .await?
            .transpose()
            .map_err(|e| ObjectError::from_store(e, &self.url))
    }

    /// One request's body, piece by piece.
    async fn get(&self, range: Option<Range<u64>>) -> Result<Vec<Bytes>, ObjectError> {
        let mut body = self.open(range).await?;
        let mut pieces = Vec::new();
        while let Some(piece) = self.next(&mut body).await? {
            pieces.push(piece);
        }
        Ok(pieces)
    }

    /// The bytes of `ranges`, read with `If-Match` on the registered ETag: ranges close to
    /// each other are read by one request (a row group's column chunks are adjacent), a few
    /// requests at once. What a merged request read between the ranges is not kept.
    pub async fn ranges(&self, ranges: Vec<Range<u64>>) -> Result<Vec<Bytes>, ObjectError> {
        let merged = coalesce(&ranges);
        let this = self.clone();
        let requests: Vec<Range<u64>> = merged.clone();
        let got: Vec<Bytes> = run(async move {
            let reads = requests.into_iter().map(|r| {
                let this = &this;
                async move {
                    let pieces = this.get(Some(r)).await?;
                    let mut whole =
                        bytes::BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
                    for p in pieces {
                        whole.extend_from_slice(&p);
                    }
                    Ok::<Bytes, ObjectError>(whole.freeze())
                }
            });
            futures::stream::iter(reads)
                .buffered(CONCURRENT_REQUESTS)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
        })
        .await??;
        Ok(ranges
            .iter()
            .map(|r| {
                merged
                    .iter()
                    .zip(&got)
                    .find(|(m, _)| m.start <= r.start && r.end <= m.end)
                    .map(|(m, bytes)| {
                        let from = (r.start - m.start) as usize;
                        let to = ((r.end - m.start) as usize).min(bytes.len());
                        if m == r {
                            bytes.slice(from.min(to)..to)
                        } else {
                            // A copy: a slice would keep the whole merged request alive.
                            Bytes::copy_from_slice(&bytes[from.min(to)..to])
                        }
                    })
                    .unwrap_or_default()
            })
            .collect())
    }

    /// The SHA-256 of the whole object (`sha256:<hex>`), read as a stream: each piece is
    /// hashed as it arrives, on a blocking thread, and let go.
    pub async fn sha256(&self) -> Result<String, ObjectError> {
        let this = self.clone();
        run(async move {
            let mut body = this.open(None).await?;
            let mut hasher = Sha256::new();
            let mut read = 0u64;
            while let Some(piece) = this.next(&mut body).await? {
                read += piece.len() as u64;
                hasher = tokio::task::spawn_blocking(move || {
                    hasher.update(&piece);
                    hasher
                })
                .await
                .map_err(|e| ObjectError::Other(format!("hashing {} stopped: {e}", this.url)))?;
            }
            if read != this.size {
                return Err(ObjectError::Changed(format!(
                    "{} is {read} bytes, not the {} registered",
                    this.url, this.size
                )));
            }
            Ok(crate::backend::hex_digest(hasher.finalize().as_slice()))
        })
        .await?
    }
}

/// Ranges less than this apart are read by one request: a round trip costs more than the
/// bytes between them.
const COALESCE_GAP: u64 = 256 << 10;
/// No request reads more than this (a row group of a wide file stays several requests).
const MAX_REQUEST: u64 = 16 << 20;

/// The requests that read `ranges`: sorted, and merged where they are close.
pub(crate) fn coalesce(ranges: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match out.last_mut() {
            Some(last)
                if r.start <= last.end.saturating_add(COALESCE_GAP)
                    && r.end.max(last.end) - last.start <= MAX_REQUEST =>
            {
                last.end = last.end.max(r.end);
            }
            _ => out.push(r),
        }
    }
    out
}

/// Blocking reads, for the readers that run on blocking threads (registration, preparing).
impl tally_plugin_parquet::Blob for ObjectFile {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.size)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let range = offset..offset + buf.len() as u64;
        let this = self.clone();
        let got = wait(async move { this.ranges(vec![range]).await })
            .and_then(|r| r)
            .map_err(ObjectError::into_io)?;
        let bytes = got.into_iter().next().unwrap_or_default();
        if bytes.len() != buf.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "{} answered {} bytes where {} were asked for",
                    self.url,
                    bytes.len(),
                    buf.len()
                ),
            ));
        }
        buf.copy_from_slice(&bytes);
        Ok(())
    }

    fn read_ranges(&self, ranges: &[Range<u64>]) -> std::io::Result<Vec<Bytes>> {
        let this = self.clone();
        let asked = ranges.to_vec();
        let got = wait(async move { this.ranges(asked).await })
            .and_then(|r| r)
            .map_err(ObjectError::into_io)?;
        for (r, b) in ranges.iter().zip(&got) {
            if b.len() as u64 != r.end - r.start {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{} answered fewer bytes than asked for", self.url),
                ));
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_ranges_are_read_by_one_request() {
        assert_eq!(coalesce(&[10..20, 0..5, 30..40]), vec![0..40]);
        let far = (COALESCE_GAP + 100)..(COALESCE_GAP + 200);
        assert_eq!(coalesce(&[0..10, far.clone()]), vec![0..10, far]);
        assert_eq!(
            coalesce(&[0..MAX_REQUEST, MAX_REQUEST..MAX_REQUEST + 1]).len(),
            2
        );
    }
}
