//! What the layers above the engine (the MCP layer, the binary) use of storage, named here so
//! that they depend on the engine alone: neither declares `tally-storage` nor names it
//! (`host/engine/tests/it/modules.rs`, `layers_above_the_engine_reach_storage_only_through_it`).
//! A new need of theirs is added here, where it is seen, rather than reached for below.

use std::path::Path;
use std::sync::atomic::Ordering;

/// The backends a server may serve datasets with, by kind.
pub use tally_storage::Backends;
/// A dataset as the catalog serves it (its definition, backend and preparation).
pub use tally_storage::Dataset;
/// Where prepared tables are kept across restarts.
pub use tally_storage::cache::Cache;
/// What changed in the catalog at a reload (for `notifications/resources/list_changed`).
pub use tally_storage::catalog::Changes;
/// The definition file of a dataset folder.
pub use tally_storage::catalog::DEFINITION_FILE;
/// Dataset folders registered as the server registers them, for `tally check`: the folders
/// of a datasets directory, one folder registered (its definition checked against its data),
/// and what registration takes.
pub use tally_storage::catalog::{Options as RegisterOptions, dataset_folders, register};
/// How a scan through a cluster is split into tasks.
pub use tally_storage::cluster::Split;
/// Whether datasets are prepared, read from their files at every call, or either.
pub use tally_storage::dataset::Serving;
/// The work left in a dataset's preparation, as its progress says it.
pub use tally_storage::dataset::Work;
/// The server-wide memory budget and what one holder keeps of it.
pub use tally_storage::memory::{Budget, Reservation};
/// What is wrong with a dataset folder, at which key, and what would fix it.
pub use tally_storage::problem::Problem;
/// Control characters of a text made visible before it reaches a log or a terminal.
pub use tally_storage::text::{Lines, escape_controls};

/// The memory budget a server takes when none is given: a share of the machine's memory.
pub fn default_memory_budget() -> usize {
    tally_storage::memory::default_budget()
}

/// Says how freed memory is handed back to the system (the binary's allocator hook).
pub fn give_memory_back_with(hook: fn()) {
    tally_storage::memory::release::give_back_with(hook);
}

/// Prepared tables mapped from the cache, and those prepared anew, since the start.
pub fn cache_hits_and_misses() -> (u64, u64) {
    (
        tally_storage::cache::HITS.load(Ordering::Relaxed),
        tally_storage::cache::MISSES.load(Ordering::Relaxed),
    )
}

/// Whether the cache folder `dir` is private to this user, or why not.
pub fn check_cache_private(dir: &Path) -> Result<(), String> {
    tally_storage::cache::check_private(dir)
}

/// Plugin faults since the start, by kind (memory, deadline, panic, trap, other).
pub fn plugin_faults() -> Vec<(&'static str, u64)> {
    tally_storage::faults::faults()
}

/// A problem when `path` (a dataset folder, or a file of one) resolves, through symbolic
/// links, to a place outside `root`.
pub fn outside(root: &Path, path: &Path) -> Option<Problem> {
    tally_storage::problem::outside(root, path)
}

/// A small text file read whole, refused past `max` bytes or when it is not UTF-8.
pub use tally_storage::problem::{ReadError, read_small};

/// Decodes every page of every column of a dataset's data files within `budget` (what
/// `tally check` runs: registration reads footers only).
pub fn read_every_page(ds: &Dataset, budget: &std::sync::Arc<Budget>) -> Result<(), String> {
    tally_storage::catalog::read_every_page(ds, budget)
}
