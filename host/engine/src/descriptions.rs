//! `inspect_dataset`'s description of each dataset version, kept by the engine: storage keeps
//! nothing the engine computed.

use tally_storage::dataset::Dataset;

use crate::results::InspectResult;

/// What `inspect_dataset` computes once per dataset version: the description and, when its
/// computation ran plans, where they ran.
pub(crate) type Description = (InspectResult, Option<String>);

/// The description of each dataset version served, computed by the first call that asks and
/// shared by the later ones. An entry holds its version weakly and goes once the catalog (and
/// every call) has let that version go, so a changed dataset is described afresh.
#[derive(Debug, Default)]
pub struct Descriptions {
    versions: std::sync::Mutex<Vec<Kept>>,
}

type Kept = (
    std::sync::Weak<Dataset>,
    std::sync::Arc<tokio::sync::OnceCell<Description>>,
);

impl Descriptions {
    /// The cell of `ds`'s description (made when first asked); versions no longer held by
    /// anyone are dropped on the way.
    pub(crate) fn cell(
        &self,
        ds: &std::sync::Arc<Dataset>,
    ) -> std::sync::Arc<tokio::sync::OnceCell<Description>> {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        versions.retain(|(version, _)| version.strong_count() > 0);
        // A version held weakly keeps its allocation, so no other version shares its address.
        if let Some((_, cell)) = versions
            .iter()
            .find(|(version, _)| std::ptr::eq(version.as_ptr(), std::sync::Arc::as_ptr(ds)))
        {
            return std::sync::Arc::clone(cell);
        }
        let cell = std::sync::Arc::default();
        versions.push((std::sync::Arc::downgrade(ds), std::sync::Arc::clone(&cell)));
        cell
    }

    /// Whether `ds`'s description is computed already (a call for it then is light); asked
    /// before every `inspect_dataset` call, it drops the versions no longer held on the way.
    pub(crate) fn ready(&self, ds: &std::sync::Arc<Dataset>) -> bool {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        versions.retain(|(version, _)| version.strong_count() > 0);
        versions.iter().any(|(version, cell)| {
            std::ptr::eq(version.as_ptr(), std::sync::Arc::as_ptr(ds)) && cell.initialized()
        })
    }

    /// How many versions are described and still held by someone (for tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        versions.retain(|(version, _)| version.strong_count() > 0);
        versions.len()
    }
}
