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
//! The S3 client is the `s3` feature (object_store's `aws`: an HTTP client stack of its own).
//! A build without it refuses an `s3://` dataset with [`ObjectError::NotInThisBuild`], which
//! says how to get a build that reads it; nothing else changes.
//!
//! Every request runs on a runtime of its own (DataFusion's advice for object-store IO: a
//! query's CPU work must not starve the network, nor the other way round), with a connect
//! timeout, a request timeout and a bounded retry, so that a store that stops answering fails
//! a call well within its deadline. Every read of an object names the ETag it was registered
//! with (`If-Match`), so bytes of another version are never served under this one's name.

mod error;
mod failure;
mod file;
mod io;
mod listing;
#[cfg(feature = "s3")]
mod s3;
mod store;

pub use error::ObjectError;
pub(crate) use error::object_error;
pub use file::ObjectFile;
pub(crate) use file::coalesce;
#[cfg(test)]
pub(crate) use io::wait;
pub use listing::{list, reopen, stamp, stamp_of};
