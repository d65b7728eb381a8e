//! A loadable library that exports something, but not `tally_native_plugin_v0`.

#![allow(unsafe_code)]

/// Not Tally's entry point.
#[unsafe(no_mangle)]
pub extern "C" fn something_else() -> u32 {
    42
}
