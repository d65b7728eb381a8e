//! Datasets whose Parquet data lies in object storage (`data: s3://bucket/prefix/`).
//!
//! A store is built per bucket from the server's environment — the usual `AWS_*` variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, …) or a named profile (`AWS_PROFILE`, read from
//! `~/.aws/credentials` and `~/.aws/config`) — never from `dataset.yaml`. Without any
//! credentials nothing is asked of the network: the instance-metadata service is used only
//! when `AWS_EC2_METADATA_DISABLED=false` says so, and a public bucket is read unsigned only
//! with `AWS_SKIP_SIGNATURE=true`.
//!
//! Every request runs on a runtime of its own (DataFusion's advice for object-store IO: a
//! query's CPU work must not starve the network, nor the other way round), with a connect
//! timeout, a request timeout and a bounded retry, so that a store that stops answering fails
//! a call well within its deadline. Every read of an object names the ETag it was registered
//! with (`If-Match`), so bytes of another version are never served under this one's name.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    ClientConfigKey, GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, RetryConfig,
};
use sha2::{Digest, Sha256};
use tally_semantic::definition::ObjectUrl;

use crate::error::StorageError;

/// Connecting to the store: a store that is not there fails fast.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// From sending a request (its retries included) to the answer's headers, and then between
/// two pieces of its body: a store that stops answering is given up within this, inside the
/// default 10 s call deadline, while a large body that keeps arriving is never cut (the
/// transport's own total timeout is long; a 300 MB object takes seconds to arrive).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(6);
/// The transport's own limit on one request, body included.
const TOTAL_TIMEOUT: Duration = Duration::from_secs(600);
/// Retries of a request that failed in a way worth retrying (5xx, a dropped connection), and
/// the time after which none is tried.
const MAX_RETRIES: usize = 2;
const RETRY_TIMEOUT: Duration = Duration::from_secs(4);
/// Requests of one read at once.
const CONCURRENT_REQUESTS: usize = 4;
/// Keys listed under a prefix, Parquet or not: a prefix of millions of other objects is not
/// paged through at every start and poll.
const MAX_LISTED: usize = 100_000;

/// `future`, or [`ObjectError::Timeout`] when it takes longer than `limit`.
async fn within<T>(
    limit: Duration,
    what: &str,
    future: impl std::future::Future<Output = Result<T, ObjectError>>,
) -> Result<T, ObjectError> {
    match tokio::time::timeout(limit, future).await {
        Ok(result) => result,
        Err(_) => Err(ObjectError::Timeout(format!(
            "the object store did not answer for {what} within {} s",
            limit.as_secs()
        ))),
    }
}
/// Objects under one prefix: more is refused (each is a footer to read).
pub const MAX_OBJECTS: usize = tally_plugin_parquet::set::MAX_FILES;

/// The runtime every object-store request runs on.
fn io() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tally-object-io")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the object-store runtime cannot start: {e}"))
    })
}

/// Runs `future` on the IO runtime and waits for it from async code.
pub async fn run<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, ObjectError> {
    /// Stops the requests when the caller stops waiting (a deadline, a cancelled call).
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let task = io().spawn(future);
    let _abort = AbortOnDrop(task.abort_handle());
    task.await
        .map_err(|e| ObjectError::Other(format!("an object-store request stopped: {e}")))
}

/// Runs `future` on the IO runtime and blocks this thread until it is done: for registration
/// and for the readers that run on blocking threads (a call that reloads does so off its
/// async worker, see `Engine::call_as`); async readers use [`run`].
pub fn wait<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, ObjectError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    io().spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv()
        .map_err(|_| ObjectError::Other("an object-store request stopped".into()))
}

/// What went wrong with an object store, in the terms of who must act. Every message is in
/// Tally's own words: what was asked for, and at most the HTTP status and the store's error
/// code (see [`Failure`]); never the store's message, body or the request's headers, which a
/// store may echo (an access key id among them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// No credentials could be found in the environment.
    #[error("{0}")]
    NoCredentials(String),
    /// The store refused the credentials, or they do not grant access.
    #[error("{0}")]
    Denied(String),
    /// The bucket does not exist.
    #[error("{0}")]
    NoBucket(String),
    /// The object (or prefix) is not there.
    #[error("{0}")]
    Missing(String),
    /// The object is no longer the version registered (its ETag changed).
    #[error("{0}")]
    Changed(String),
    /// The store was reached but did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// The store could not be reached (refused, dropped the connection, no such host).
    #[error("{0}")]
    Unreachable(String),
    /// The store asks for fewer requests (HTTP 429, 503 `SlowDown`).
    #[error("{0}")]
    Throttled(String),
    #[error("{0}")]
    Other(String),
}

impl ObjectError {
    /// The fix to say with the error.
    pub fn fix(&self) -> &'static str {
        match self {
            ObjectError::NoCredentials(_) => {
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), or AWS_PROFILE naming a profile of ~/.aws/credentials, in the server's environment; AWS_SKIP_SIGNATURE=true reads a public bucket"
            }
            ObjectError::Denied(_) => {
                "check the credentials in the server's environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE) and that they may list the prefix and read its objects"
            }
            ObjectError::NoBucket(_) => {
                "check the bucket name in `data:`, and AWS_ENDPOINT_URL / AWS_REGION for the store that holds it"
            }
            ObjectError::Missing(_) => {
                "check the key in `data:` (a prefix ending in `/` names every Parquet object under it)"
            }
            ObjectError::Changed(_) => "the dataset is read again at the next reload",
            ObjectError::Timeout(_) | ObjectError::Unreachable(_) => {
                "check that the store is up and AWS_ENDPOINT_URL points at it; the dataset is tried again at the next --object-poll"
            }
            ObjectError::Throttled(_) => {
                "the store asks for fewer requests: try again in a while, or raise the request rate the store allows for this bucket"
            }
            ObjectError::Other(_) => {
                "the dataset is tried again at the next reload; the store's own logs say more"
            }
        }
    }

    /// Whether the store may answer the same request later (it did not answer, or asked for
    /// fewer requests): not a change of the data.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ObjectError::Timeout(_) | ObjectError::Unreachable(_) | ObjectError::Throttled(_)
        )
    }

    /// As an IO error, for the Parquet readers (which turn `NotFound` into "removed").
    pub fn into_io(self) -> std::io::Error {
        use std::io::ErrorKind;
        let kind = match &self {
            ObjectError::Missing(_) => ErrorKind::NotFound,
            ObjectError::Changed(_) => ErrorKind::StaleNetworkFileHandle,
            ObjectError::Denied(_) | ObjectError::NoCredentials(_) => ErrorKind::PermissionDenied,
            ObjectError::Timeout(_) | ObjectError::Unreachable(_) => ErrorKind::TimedOut,
            _ => ErrorKind::Other,
        };
        std::io::Error::new(kind, self)
    }

    /// Reads an object-store error, `what` naming the object or prefix asked for.
    fn from_store(e: object_store::Error, what: &str) -> ObjectError {
        Failure::of(&e).reworded(what)
    }
}

/// Kinds of object-store failure, by who must act and whether trying later helps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailureKind {
    Missing,
    NoBucket,
    Denied,
    Changed,
    Timeout,
    Unreachable,
    Throttled,
    Other,
}

/// What Tally keeps of an object-store error: its kind, the HTTP status and the store's error
/// code (S3's `<Code>`), if they can be read and look like what they claim to be. Nothing else
/// of the error is kept: the store's message and body may echo the request's headers (an
/// `Authorization` header names the access key id), and the transport's text names the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    kind: FailureKind,
    status: Option<u16>,
    code: Option<String>,
}

impl Failure {
    fn of(e: &object_store::Error) -> Failure {
        // Read without the request's URL: a key holding "status code: 200" says nothing.
        let text = without_urls(&error_chain(e));
        let status = status_of(&text);
        let code = code_of(&text);
        let transport = transport_of(e);
        let by_variant = match e {
            object_store::Error::NotFound { .. } => Some(FailureKind::Missing),
            object_store::Error::Precondition { .. } | object_store::Error::NotModified { .. } => {
                Some(FailureKind::Changed)
            }
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Some(FailureKind::Denied),
            _ => None,
        };
        let kind = code
            .as_deref()
            .and_then(kind_of_code)
            // A 404 whose code says the bucket is missing is a missing bucket.
            .filter(|k| by_variant.is_none() || *k == FailureKind::NoBucket)
            .or(by_variant)
            .or_else(|| status.and_then(kind_of_status))
            .or(transport)
            .unwrap_or(FailureKind::Other);
        Failure { kind, status, code }
    }

    /// The error in Tally's words.
    fn reworded(&self, what: &str) -> ObjectError {
        let detail = self.detail();
        match self.kind {
            FailureKind::Missing => ObjectError::Missing(format!("{what} is not in the store")),
            FailureKind::NoBucket => {
                ObjectError::NoBucket(format!("the bucket of {what} does not exist"))
            }
            FailureKind::Changed => ObjectError::Changed(format!(
                "{what} changed after this version was registered (its ETag is another)"
            )),
            FailureKind::Denied => ObjectError::Denied(format!(
                "the object store refused access to {what}{detail}: the credentials were refused or do not allow reading it"
            )),
            FailureKind::Timeout => ObjectError::Timeout(format!(
                "the object store did not answer for {what} in time{detail} ({MAX_RETRIES} retries within {} s)",
                RETRY_TIMEOUT.as_secs()
            )),
            FailureKind::Unreachable => ObjectError::Unreachable(format!(
                "the object store did not answer for {what}: it could not be reached ({MAX_RETRIES} retries within {} s)",
                RETRY_TIMEOUT.as_secs()
            )),
            FailureKind::Throttled => ObjectError::Throttled(format!(
                "the object store is throttling requests for {what}{detail}"
            )),
            FailureKind::Other => {
                ObjectError::Other(format!("the object store failed for {what}{detail}"))
            }
        }
    }

    /// ` (HTTP 403, AccessDenied)`, or as much of it as is known.
    fn detail(&self) -> String {
        let mut parts = Vec::new();
        if let Some(s) = self.status {
            parts.push(format!("HTTP {s}"));
        }
        if let Some(c) = &self.code {
            parts.push(c.clone());
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        }
    }
}

/// The kind an S3 error code names, for the codes whose meaning is certain.
fn kind_of_code(code: &str) -> Option<FailureKind> {
    Some(match code {
        "NoSuchBucket" => FailureKind::NoBucket,
        "NoSuchKey" | "NotFound" => FailureKind::Missing,
        "AccessDenied"
        | "AllAccessDisabled"
        | "AccountProblem"
        | "ExpiredToken"
        | "InvalidAccessKeyId"
        | "InvalidSecurity"
        | "InvalidToken"
        | "RequestTimeTooSkewed"
        | "SignatureDoesNotMatch"
        | "TokenRefreshRequired" => FailureKind::Denied,
        "PreconditionFailed" => FailureKind::Changed,
        "RequestTimeout" => FailureKind::Timeout,
        "SlowDown"
        | "Throttling"
        | "ThrottlingException"
        | "TooManyRequests"
        | "RequestLimitExceeded" => FailureKind::Throttled,
        _ => return None,
    })
}

/// The kind an HTTP status names.
fn kind_of_status(status: u16) -> Option<FailureKind> {
    Some(match status {
        401 | 403 => FailureKind::Denied,
        404 => FailureKind::Missing,
        304 | 412 => FailureKind::Changed,
        408 | 504 => FailureKind::Timeout,
        // S3 answers 503 SlowDown when asked too fast; others answer 429.
        429 | 503 => FailureKind::Throttled,
        _ => return None,
    })
}

/// The transport's own kind of failure (no answer came), found among the error's sources.
fn transport_of(e: &object_store::Error) -> Option<FailureKind> {
    use object_store::client::{HttpError, HttpErrorKind};
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(http) = s.downcast_ref::<HttpError>() {
            return Some(match http.kind() {
                HttpErrorKind::Timeout => FailureKind::Timeout,
                HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Interrupted => {
                    FailureKind::Unreachable
                }
                _ => FailureKind::Other,
            });
        }
        source = s.source();
    }
    None
}

/// The HTTP status the store answered: the first `status code: NNN` of the error (the client
/// writes the status before the body, so a body cannot forge it).
fn status_of(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    let digits: String = text[at..].chars().take(3).collect();
    digits
        .parse::<u16>()
        .ok()
        .filter(|s| (100..600).contains(s))
}

/// The store's error code (`<Code>AccessDenied</Code>`), when it is a plain word of at most 64
/// letters that does not read like a key id (no run of four capitals, as in `AKIA…`): S3's
/// codes are CamelCase words. Anything else the store wrote is not kept.
fn code_of(text: &str) -> Option<String> {
    let from = text.find("<Code>")? + "<Code>".len();
    let to = text[from..].find("</Code>")? + from;
    let code = &text[from..to];
    let word =
        !code.is_empty() && code.len() <= 64 && code.chars().all(|c| c.is_ascii_alphabetic());
    let capitals_run = code
        .as_bytes()
        .windows(4)
        .any(|w| w.iter().all(u8::is_ascii_uppercase));
    (word && !capitals_run).then(|| code.to_string())
}

/// Text with its `http://…` and `https://…` words taken out.
fn without_urls(text: &str) -> String {
    text.split(' ')
        .filter(|w| !w.starts_with("http://") && !w.starts_with("https://"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An error and its sources, as one line (read for its status and code, never shown).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

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
    fn of(store: &Arc<dyn ObjectStore>, url: &ObjectUrl, meta: ObjectMeta) -> ObjectFile {
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

/// The store for a URL's bucket, built once per bucket from the environment.
fn store_for(url: &ObjectUrl) -> Result<Arc<dyn ObjectStore>, ObjectError> {
    static STORES: OnceLock<Mutex<BTreeMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    let stores = STORES.get_or_init(Default::default);
    let key = format!("{}://{}", url.scheme, url.bucket);
    if let Some(store) = stores.lock().ok().and_then(|s| s.get(&key).cloned()) {
        return Ok(store);
    }
    let env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AWS_"))
        .collect();
    let store: Arc<dyn ObjectStore> = Arc::new(s3_store(&url.bucket, &env, &home_files(&env))?);
    if let Ok(mut s) = stores.lock() {
        s.insert(key, Arc::clone(&store));
    }
    Ok(store)
}

/// The shared credentials and config files of the AWS tools, as the environment names them.
#[derive(Debug, Default)]
struct ProfileFiles {
    credentials: Option<String>,
    config: Option<String>,
}

fn home_files(env: &BTreeMap<String, String>) -> ProfileFiles {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let path = |var: &str, default: &str| {
        env.get(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
    };
    let read = |p: Option<PathBuf>| p.and_then(|p| crate::problem::read_small(&p, 1 << 20).ok());
    ProfileFiles {
        credentials: read(path("AWS_SHARED_CREDENTIALS_FILE", "credentials")),
        config: read(path("AWS_CONFIG_FILE", "config")),
    }
}

/// The keys of one section of an INI file (`[name]`), lower-cased, values trimmed.
fn ini_section(text: &str, section: &str) -> Option<BTreeMap<String, String>> {
    let mut current: Option<String> = None;
    let mut found: Option<BTreeMap<String, String>> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(name.trim().to_string());
            if current.as_deref() == Some(section) {
                found.get_or_insert_with(BTreeMap::new);
            }
            continue;
        }
        if current.as_deref() == Some(section)
            && let Some((k, v)) = line.split_once('=')
            && let Some(map) = found.as_mut()
        {
            map.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    found
}

/// The settings of the profile `AWS_PROFILE` names (or `default`, when the files have one and
/// the environment holds no key): credentials from the credentials file, region and endpoint
/// from the config file. Environment variables win over the profile.
fn profile_settings(
    env: &BTreeMap<String, String>,
    files: &ProfileFiles,
) -> Result<BTreeMap<String, String>, ObjectError> {
    let named = env.get("AWS_PROFILE").cloned();
    let name = named.clone().unwrap_or_else(|| "default".to_string());
    let credentials = files
        .credentials
        .as_deref()
        .and_then(|t| ini_section(t, &name));
    let config = files.config.as_deref().and_then(|t| {
        ini_section(t, &format!("profile {name}")).or_else(|| {
            (name == "default")
                .then(|| ini_section(t, "default"))
                .flatten()
        })
    });
    if named.is_some() && credentials.is_none() && config.is_none() {
        return Err(ObjectError::NoCredentials(format!(
            "AWS_PROFILE names the profile `{name}`, which neither ~/.aws/credentials nor ~/.aws/config holds"
        )));
    }
    let mut out = BTreeMap::new();
    for section in [config, credentials].into_iter().flatten() {
        for (k, v) in section {
            let key = match k.as_str() {
                "aws_access_key_id" => "aws_access_key_id",
                "aws_secret_access_key" => "aws_secret_access_key",
                "aws_session_token" => "aws_session_token",
                "region" => "aws_region",
                "endpoint_url" => "aws_endpoint_url",
                _ => continue,
            };
            out.insert(key.to_string(), v);
        }
    }
    Ok(out)
}

/// An S3 store for `bucket`: the environment's settings, then the profile's where the
/// environment is silent, then our timeouts and retries where neither says.
fn s3_store(
    bucket: &str,
    env: &BTreeMap<String, String>,
    files: &ProfileFiles,
) -> Result<object_store::aws::AmazonS3, ObjectError> {
    let mut settings: BTreeMap<String, String> = profile_settings(env, files)?;
    for (k, v) in env {
        settings.insert(k.to_ascii_lowercase(), v.clone());
    }
    let has = |k: &str| settings.get(k).is_some_and(|v| !v.is_empty());
    let truthy = |k: &str| {
        settings
            .get(k)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
    };
    let metadata_allowed = settings
        .get("aws_ec2_metadata_disabled")
        .is_some_and(|v| v.eq_ignore_ascii_case("false"));
    // The pairs the S3 client needs for each source of credentials; with anything less it
    // falls through to the instance-metadata service.
    let signed_somehow = has("aws_access_key_id")
        || truthy("aws_skip_signature")
        || (has("aws_web_identity_token_file") && has("aws_role_arn"))
        || has("aws_container_credentials_relative_uri")
        || (has("aws_container_credentials_full_uri")
            && has("aws_container_authorization_token_file"))
        || metadata_allowed;
    if !signed_somehow {
        return Err(ObjectError::NoCredentials(format!(
            "no credentials for the bucket `{bucket}` in the server's environment"
        )));
    }
    if has("aws_access_key_id") && !has("aws_secret_access_key") {
        return Err(ObjectError::NoCredentials(format!(
            "AWS_ACCESS_KEY_ID is set for the bucket `{bucket}` but AWS_SECRET_ACCESS_KEY is not"
        )));
    }
    let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
    for (k, v) in &settings {
        // Keys object_store does not know (AWS_PROFILE, AWS_EC2_METADATA_DISABLED) are ours.
        if let Ok(key) = k.parse::<AmazonS3ConfigKey>() {
            if matches!(key, AmazonS3ConfigKey::Bucket) {
                continue;
            }
            builder = builder.with_config(key, v);
        }
    }
    if !metadata_allowed {
        // Never the link-local metadata service: a discard port on loopback, refused at once.
        builder = builder.with_config(AmazonS3ConfigKey::MetadataEndpoint, "http://127.0.0.1:9");
    }
    if !has("aws_region") && !has("aws_default_region") {
        builder = builder.with_config(AmazonS3ConfigKey::Region, "us-east-1");
    }
    if !has("aws_connect_timeout") && !has("connect_timeout") {
        builder = builder.with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            format!("{}s", CONNECT_TIMEOUT.as_secs()),
        );
    }
    if !has("aws_timeout") && !has("timeout") {
        builder = builder.with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            format!("{}s", TOTAL_TIMEOUT.as_secs()),
        );
    }
    let retry = RetryConfig {
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
        ..RetryConfig::default()
    };
    // The builder's error may quote a setting's value (an endpoint URL with user
    // information), so only the name of a setting it did not know is said.
    builder.with_retry(retry).build().map_err(|e| {
        let which = match &e {
            object_store::Error::UnknownConfigurationKey { key, .. } => {
                format!(": it does not know the setting `{key}`")
            }
            _ => String::new(),
        };
        ObjectError::Other(format!(
            "the S3 store for `{bucket}` cannot be made from the server's AWS_* settings and profile{which}; check AWS_ENDPOINT_URL, AWS_REGION and the other settings"
        ))
    })
}

/// An object-store failure as the engine reports it: an object removed or rewritten since
/// it was registered is a dataset being replaced (the call reloads and retries); the
/// rest is the backend failing, said with what to do.
pub(crate) fn object_error(dataset: &str, e: ObjectError) -> StorageError {
    match e {
        ObjectError::Missing(m) | ObjectError::Changed(m) => StorageError::Stale {
            dataset: dataset.to_string(),
            message: m,
        },
        other => StorageError::backend(dataset, format!("{other} ({})", other.fix())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_credentials_is_refused_before_any_request() {
        let e = s3_store("tally-data", &env(&[]), &ProfileFiles::default()).unwrap_err();
        assert!(matches!(e, ObjectError::NoCredentials(_)), "{e:?}");
        assert!(e.fix().contains("AWS_PROFILE"));
        let half = s3_store(
            "tally-data",
            &env(&[("AWS_ACCESS_KEY_ID", "AKIA")]),
            &ProfileFiles::default(),
        )
        .unwrap_err();
        assert!(half.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{half}");
        // Half of a pair would fall through to the instance-metadata service: refused.
        for lone in [
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        ] {
            let e =
                s3_store("tally-data", &env(&[(lone, "x")]), &ProfileFiles::default()).unwrap_err();
            assert!(matches!(e, ObjectError::NoCredentials(_)), "{lone}: {e:?}");
        }
        assert!(
            s3_store(
                "tally-data",
                &env(&[
                    ("AWS_WEB_IDENTITY_TOKEN_FILE", "/run/token"),
                    ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r")
                ]),
                &ProfileFiles::default()
            )
            .is_ok()
        );
    }

    #[test]
    fn errors_are_read_without_the_request_url() {
        assert_eq!(
            without_urls("Error performing GET http://h/b/Timeout-2024/k in 3ms - 400 Bad Request"),
            "Error performing GET in 3ms - 400 Bad Request"
        );
    }

    #[test]
    fn a_named_profile_gives_credentials_region_and_endpoint() {
        let files = ProfileFiles {
            credentials: Some(
                "[default]\naws_access_key_id = A\naws_secret_access_key = B\n[tally]\naws_access_key_id=C\naws_secret_access_key = D\n"
                    .into(),
            ),
            config: Some(
                "[default]\nregion = us-west-2\n[profile tally]\nregion = ap-northeast-1\nendpoint_url = http://127.0.0.1:9000\n"
                    .into(),
            ),
        };
        let s = profile_settings(&env(&[("AWS_PROFILE", "tally")]), &files).unwrap();
        assert_eq!(s["aws_access_key_id"], "C");
        assert_eq!(s["aws_secret_access_key"], "D");
        assert_eq!(s["aws_region"], "ap-northeast-1");
        assert_eq!(s["aws_endpoint_url"], "http://127.0.0.1:9000");
        let d = profile_settings(&env(&[]), &files).unwrap();
        assert_eq!(d["aws_access_key_id"], "A");
        assert_eq!(d["aws_region"], "us-west-2");
        let missing = profile_settings(&env(&[("AWS_PROFILE", "nope")]), &files).unwrap_err();
        assert!(missing.to_string().contains("`nope`"), "{missing}");
        // A profile makes a store; the environment wins over it.
        assert!(s3_store("tally-data", &env(&[("AWS_PROFILE", "tally")]), &files).is_ok());
    }

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

    /// A store's error as the S3 client gives it: the request line, then the status and body.
    #[derive(Debug)]
    struct Said(String);
    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl std::error::Error for Said {}

    const KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
    const LETTERS_KEY_ID: &str = "AKIAQWERTYUIOPASDFGH";

    fn said(status: &str, body: &str) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(Said(format!(
            "Error performing GET http://store.invalid/b/k?X-Amz-Credential={KEY_ID} in 3ms - Server returned non-2xx status code: {status}: {body}"
        )))
    }

    /// What must never reach a caller or a log line: the key ids, the headers a store echoes,
    /// the store's own message.
    fn assert_clean(e: &ObjectError) {
        let text = format!("{e} {}", e.fix());
        for secret in [
            KEY_ID,
            LETTERS_KEY_ID,
            "Authorization",
            "Credential",
            "x-amz",
            "Signature=",
            "StringToSign",
            "secret-ish",
            "store.invalid",
            "echoed",
        ] {
            assert!(
                !text.contains(secret),
                "`{secret}` reached the error: {text}"
            );
        }
    }

    /// Regression (object-store errors passed through): a store that echoes the request's
    /// headers in its error, or puts a key id in its message or code, must not have any of it
    /// reach the caller; the error is classified by kind and said in Tally's words, with at most
    /// the HTTP status and a plain error code.
    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one table of store errors, each with the words the caller gets"
    )]
    fn store_error_text_never_reaches_the_caller() {
        let echo = format!(
            "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>echoed Authorization: AWS4-HMAC-SHA256 Credential={KEY_ID}/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc</Message><StringToSign>secret-ish</StringToSign><RequestId>1</RequestId></Error>"
        );
        let what = "s3://b/k.parquet";
        /// A store's error, the kind it must be read as, and words the error must say.
        type Case = (object_store::Error, fn(&ObjectError) -> bool, &'static str);
        let cases: Vec<Case> = vec![
            (
                object_store::Error::PermissionDenied {
                    path: "k".into(),
                    source: said("403 Forbidden", &echo),
                },
                |e| matches!(e, ObjectError::Denied(_)),
                "(HTTP 403, AccessDenied)",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "400 Bad Request",
                        &format!(
                            "<Error><Code>InvalidAccessKeyId</Code><Message>The key {KEY_ID} is unknown</Message><AWSAccessKeyId>{KEY_ID}</AWSAccessKeyId></Error>"
                        ),
                    ),
                },
                |e| matches!(e, ObjectError::Denied(_)),
                "(HTTP 400, InvalidAccessKeyId)",
            ),
            (
                // A code that is itself a key id (letters only) is not said.
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "403 Forbidden",
                        &format!(
                            "<Error><Code>{LETTERS_KEY_ID}</Code><Message>echoed</Message></Error>"
                        ),
                    ),
                },
                |e| matches!(e, ObjectError::Denied(_)),
                "(HTTP 403)",
            ),
            (
                object_store::Error::NotFound {
                    path: "k".into(),
                    source: said(
                        "404 Not Found",
                        &format!(
                            "<Error><Code>NoSuchBucket</Code><Message>echoed {KEY_ID}</Message></Error>"
                        ),
                    ),
                },
                |e| matches!(e, ObjectError::NoBucket(_)),
                "the bucket of s3://b/k.parquet does not exist",
            ),
            (
                object_store::Error::NotFound {
                    path: "k".into(),
                    source: said("404 Not Found", &echo.replace("AccessDenied", "NoSuchKey")),
                },
                |e| matches!(e, ObjectError::Missing(_)),
                "s3://b/k.parquet is not in the store",
            ),
            (
                object_store::Error::Precondition {
                    path: "k".into(),
                    source: said(
                        "412 Precondition Failed",
                        &echo.replace("AccessDenied", "PreconditionFailed"),
                    ),
                },
                |e| matches!(e, ObjectError::Changed(_)),
                "changed after this version was registered",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "503 Service Unavailable",
                        &echo.replace("AccessDenied", "SlowDown"),
                    ),
                },
                |e| matches!(e, ObjectError::Throttled(_)),
                "(HTTP 503, SlowDown)",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said("429 Too Many Requests", &format!("echoed {KEY_ID}")),
                },
                |e| matches!(e, ObjectError::Throttled(_)),
                "(HTTP 429)",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said("504 Gateway Timeout", &format!("echoed {KEY_ID}")),
                },
                |e| matches!(e, ObjectError::Timeout(_)),
                "did not answer",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "500 Internal Server Error",
                        &echo.replace("AccessDenied", "InternalError"),
                    ),
                },
                |e| matches!(e, ObjectError::Other(_)),
                "the object store failed for s3://b/k.parquet (HTTP 500, InternalError)",
            ),
            (
                // No status at all, only text: kept out entirely.
                object_store::Error::Generic {
                    store: "S3",
                    source: Box::new(Said(format!(
                        "echoed x-amz-security-token: {KEY_ID} Authorization: AWS4-HMAC-SHA256 Credential={KEY_ID}"
                    ))),
                },
                |e| matches!(e, ObjectError::Other(_)),
                "the object store failed for s3://b/k.parquet",
            ),
            (
                // A body cannot forge the status: the first one is the client's.
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "500 Internal Server Error",
                        "status code: 403 Forbidden, echoed",
                    ),
                },
                |e| matches!(e, ObjectError::Other(_)),
                "HTTP 500",
            ),
        ];
        for (error, kind, words) in cases {
            let shown = format!("{error}");
            let e = ObjectError::from_store(error, what);
            assert!(kind(&e), "{shown}\n→ {e:?}");
            assert!(e.to_string().contains(words), "{shown}\n→ {e}");
            assert_clean(&e);
        }
    }

    #[test]
    fn transport_failures_are_timeouts_or_an_unreachable_store() {
        use object_store::client::{HttpError, HttpErrorKind};
        for (kind, expected) in [
            (HttpErrorKind::Timeout, "in time"),
            (HttpErrorKind::Connect, "could not be reached"),
            (HttpErrorKind::Request, "could not be reached"),
        ] {
            let error = object_store::Error::Generic {
                store: "S3",
                source: Box::new(HttpError::new(
                    kind,
                    Said(format!(
                        "error sending request for url (http://store.invalid/?Credential={KEY_ID}): echoed"
                    )),
                )),
            };
            let e = ObjectError::from_store(error, "s3://b/k.parquet");
            assert!(e.is_transient(), "{e:?}");
            assert!(e.to_string().contains("did not answer"), "{e}");
            assert!(e.to_string().contains(expected), "{e}");
            assert_clean(&e);
        }
    }
}
