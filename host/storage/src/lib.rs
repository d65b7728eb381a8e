#![recursion_limit = "256"]
//! Tally's storage layer: the catalog of dataset folders and their versions, the registry of
//! backend kinds and the `Backend` trait plugins implement, the built-in Parquet backend (local
//! files and object storage), prepared tables and their cache across restarts, the
//! server-wide memory budget, and the cluster's sendable scan.
//!
//! Architecture invariant: knows nothing of tools, requests or answers. It hands the engine
//! above it DataFusion tables of a dataset version (prepared, or read from the files at every
//! call), the version's provenance facts (files, hashes, retrieval), and its own errors
//! ([`StorageError`]), which the engine converts into its own at the boundary. No module of
//! this crate imports one that imports it back (a test reads the module graph).

pub mod backend;
pub mod cache;
pub mod catalog;
pub mod cluster;
pub mod coded;
pub mod dataset;
pub mod error;
pub mod faults;
pub mod memory;
pub(crate) mod object;
pub mod parquet;
pub mod problem;
pub(crate) mod search;
pub mod source;
pub mod stop;
pub mod store;
pub mod text;
pub mod udf;
pub mod value_counts;
mod views;
pub mod watch;

pub use backend::{Backend, BackendFactory, Backends};
pub use catalog::Catalog;
pub use dataset::{Dataset, Resources, Serving};
pub use error::StorageError;
