//! The catalog at one moment: the datasets served, the folders broken, disabled or still
//! being written, what each folder was at the last scan, and how one scan changed it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use crate::dataset::Dataset;
use crate::problem::Problem;

/// A dataset folder that cannot be served, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Broken {
    /// The folder name.
    pub folder: String,
    /// The file at fault, relative to the datasets directory.
    pub file: String,
    /// Each problem: line, key path, message and fix.
    pub problems: Vec<Problem>,
    /// When an earlier version of this folder was valid, it keeps serving: its version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_version: Option<String>,
}

/// What became of one folder at the last scan.
#[derive(Debug, Clone, Default)]
pub(super) struct FolderState {
    /// The folder's files (names, sizes, times) when last read; `None` reads it again.
    pub(super) stamp: Option<String>,
    /// A change not read yet: the folder's files as they were first seen so, and when. It is
    /// read once they have stayed so for [`QUIET`](super::scan::QUIET).
    pub(super) waiting: Option<(String, SystemTime)>,
    pub(super) served: Option<Arc<Dataset>>,
    pub(super) broken: Option<Broken>,
    pub(super) disabled: bool,
}

/// Every dataset of a directory, at one moment. Immutable: a change builds a new catalog,
/// swapped in whole, so a call sees one consistent snapshot from start to end.
#[derive(Debug, Default)]
pub struct Catalog {
    pub datasets: BTreeMap<String, Arc<Dataset>>,
    pub broken: Vec<Broken>,
    /// Folders switched off with `enabled: false`.
    pub disabled: Vec<String>,
    /// Folders whose files are still being written; retried when writes settle.
    pub pending: Vec<String>,
    pub(super) folders: BTreeMap<String, FolderState>,
}

impl Catalog {
    pub fn ids(&self) -> Vec<&str> {
        self.datasets.keys().map(String::as_str).collect()
    }
}

/// How a scan changed the catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    /// Folders newly reported broken (or whose problems changed).
    pub broken: Vec<String>,
    /// Folders no longer reported broken (fixed, or removed).
    pub cleared: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.updated.is_empty()
            && self.removed.is_empty()
            && self.broken.is_empty()
            && self.cleared.is_empty()
    }
}

impl Changes {
    /// What changed from one catalog to the next: datasets added, updated (a new version)
    /// and removed; folders newly broken (or broken differently) and cleared.
    pub(super) fn between(previous: &Catalog, next: &Catalog) -> Changes {
        let mut changes = Changes::default();
        for (id, ds) in &next.datasets {
            match previous.datasets.get(id) {
                None => changes.added.push(id.clone()),
                Some(old) if old.version != ds.version => changes.updated.push(id.clone()),
                Some(_) => {}
            }
        }
        for id in previous.datasets.keys() {
            if !next.datasets.contains_key(id) {
                changes.removed.push(id.clone());
            }
        }
        for b in &next.broken {
            let same = previous.broken.iter().any(|p| {
                p.folder == b.folder
                    && p.problems.len() == b.problems.len()
                    && p.problems
                        .iter()
                        .zip(&b.problems)
                        .all(|(x, y)| x.reason == y.reason)
            });
            if !same {
                changes.broken.push(b.folder.clone());
            }
        }
        for p in &previous.broken {
            if !next.broken.iter().any(|b| b.folder == p.folder) {
                changes.cleared.push(p.folder.clone());
            }
        }
        changes
    }
}
