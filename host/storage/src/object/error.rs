//! What went wrong with an object store, in the terms of who must act, and as the engine
//! reports it for a dataset.

use crate::error::StorageError;

/// What went wrong with an object store, in the terms of who must act. Every message is in
/// Tally's own words: what was asked for, and at most the HTTP status and the store's error
/// code (see [`Failure`](super::failure::Failure)); never the store's message, body or the
/// request's headers, which a store may echo (an access key id among them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
// A build without the S3 client (the `s3` feature) finds no credentials and reaches no store.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
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
    /// This build has no S3 client (tally-storage without its `s3` feature).
    #[cfg_attr(feature = "s3", allow(dead_code))]
    #[error("{0}")]
    NotInThisBuild(String),
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
            ObjectError::NotInThisBuild(_) => {
                "use a build that reads object storage: a release archive, or `cargo install --locked --path host/server --features s3` (or `--features full`); or copy the Parquet files into the dataset folder"
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
