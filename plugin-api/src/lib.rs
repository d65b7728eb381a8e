//! The boundary between Tally and its plugins.
//!
//! What crosses it is versioned from the first release: the plugin API version below, the WIT
//! package under `wit/since_vX.Y.Z/` (wasm components), and the C entry point of native
//! libraries (feature `native`). This crate holds only what both sides must agree on; the
//! host's adapters live in `tally-plugin-host`.
//!
//! Provenance types live here because a plugin reports them per row (a law article, a
//! document section) and the host puts them into every result's envelope.

pub mod locator;
pub mod provenance;

/// The plugin API version this host speaks: the version of the WIT package wasm plugins are
/// built against. A wasm plugin built against another version is refused before it is
/// instantiated, with both versions named. Native plugins have an ABI version of their own
/// (`native::NATIVE_ABI_VERSION`), so a WIT addition does not refuse them.
pub const PLUGIN_API_VERSION: &str = "0.1.0";

#[cfg(feature = "guest")]
pub mod guest;

#[cfg(feature = "native")]
pub mod native;

/// How the guest helper begins an error that is the plugin's own fault (rows that do not
/// match what it described), so the host tells the user it is not their files.
pub const PLUGIN_FAULT: &str = "the plugin broke its own description: ";

/// The name of the interface a source plugin of this API version exports.
pub const SOURCE_INTERFACE: &str = "tally:plugin/source";

#[cfg(test)]
mod tests {
    /// Guests are built against the WIT of the current version, from its own directory.
    #[test]
    fn guests_bind_the_current_version() {
        let wanted = format!("path: \"wit/since_v{}\"", super::PLUGIN_API_VERSION);
        assert!(
            include_str!("guest.rs").contains(&wanted),
            "guest.rs must bind {wanted}"
        );
    }
}
