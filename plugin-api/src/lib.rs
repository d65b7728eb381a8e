//! The boundary between Tally and its plugins.
//!
//! What crosses it is versioned from the first release: the plugin API version below, the WIT
//! package under `wit/since_vX.Y.Z/` (wasm components), and the C entry point of native
//! libraries (feature `native`). This crate holds only what both sides must agree on; the
//! host's adapters live in `tally-engine`.
//!
//! Provenance types live here because a plugin reports them per row (a law article, a
//! document section) and the host puts them into every result's envelope.

pub mod locator;
pub mod provenance;

/// The plugin API version this host speaks. A plugin built against another version is refused
/// before it is instantiated, with both versions named.
pub const PLUGIN_API_VERSION: &str = "0.1.0";

/// [`PLUGIN_API_VERSION`] as numbers (major, minor, patch), for the native descriptor.
pub const PLUGIN_API_VERSION_PARTS: [u32; 3] = [0, 1, 0];

#[cfg(feature = "guest")]
pub mod guest;

#[cfg(feature = "native")]
pub mod native;

/// The WIT package of the current API version, for hosts that generate bindings from it.
pub const WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/wit/since_v0.1.0");

/// The name of the interface a source plugin of this API version exports.
pub const SOURCE_INTERFACE: &str = "tally:plugin/source";

#[cfg(test)]
mod tests {
    #[test]
    fn version_parts_match_the_version() {
        let parts: Vec<u32> = super::PLUGIN_API_VERSION
            .split('.')
            .map(|p| p.parse().expect("numeric"))
            .collect();
        assert_eq!(parts, super::PLUGIN_API_VERSION_PARTS);
    }
}
