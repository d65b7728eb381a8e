//! What an executor rebuilds a table read from its files from: the dataset's definition, its
//! source schema, and each file (path or object version, size, position, footer hash). Plain
//! data, sent with a cluster's plans.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use serde::{Deserialize, Serialize};

/// Where a file of a streamed dataset is, as an executor opens it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceFile {
    /// As messages name it (relative to the dataset folder, or the object's URL).
    pub relative: String,
    /// The local path (absolute), when it is a file.
    pub path: Option<String>,
    /// The object, when it is one in object storage.
    pub object: Option<SourceObject>,
    pub size: u64,
    /// The position of its first record among all the files of the dataset.
    pub offset: u64,
    pub rows: u64,
    /// SHA-256 of its footer as registered: an executor refuses another version.
    pub footer_sha256: String,
}

/// An object's version, as registered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceObject {
    pub url: String,
    pub etag: Option<String>,
    pub version: Option<String>,
    /// Milliseconds since the epoch.
    pub modified_ms: Option<i64>,
}

/// What an executor rebuilds a streamed table from: the dataset's definition and source
/// schema (its layout follows), the fields read and their types, and the files.
#[derive(Debug, Clone)]
pub struct TableSource {
    pub dataset: String,
    /// The definition file's text, as registered.
    pub definition: Arc<str>,
    /// The columns of the data, as the backend reads them.
    pub source_schema: SchemaRef,
    /// The partition keys the files carry values of, in the order of `values`.
    pub keys: Vec<String>,
    pub files: Vec<SourceFile>,
    /// Per file, its partition key values (in the order of `keys`).
    pub values: Vec<Vec<ScalarValue>>,
}
