//! This workspace's wasm plugins, built for `wasm32-wasip2` by this crate's build script.
//!
//! The built-in ones are embedded in Tally, so a dataset naming `builtin:<name>` loads
//! wherever its folder is copied; the others (the plugin template, the test suite's hostile
//! plugins) are left in [`BUILT_DIR`] for the tests.

include!(concat!(env!("OUT_DIR"), "/builtin.rs"));

/// The folder holding every component this workspace built (`<stem>.wasm`).
pub const BUILT_DIR: &str = env!("TALLY_WASM_PLUGIN_DIR");

/// The component of a built-in plugin.
pub fn builtin(name: &str) -> Option<&'static [u8]> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// The names of the built-in plugins.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// The path of a component this workspace built, by package file stem
/// (e.g. `tally_test_plugin_hostile`).
pub fn built(stem: &str) -> std::path::PathBuf {
    std::path::Path::new(BUILT_DIR).join(format!("{stem}.wasm"))
}
