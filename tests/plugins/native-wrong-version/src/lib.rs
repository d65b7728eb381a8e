//! Says it was built for native plugin ABI 9.0 and DataFusion 54: the host must refuse it, naming
//! both versions, before calling anything in it.

#![allow(unsafe_code)]

use tally_plugin_api::native::{
    Descriptor, FFI_LogicalExtensionCodec, FFI_TableProvider, MAGIC, padded,
};

unsafe extern "C" fn create(
    _config: *const u8,
    _config_len: usize,
    _codec: *const FFI_LogicalExtensionCodec,
    _out: *mut FFI_TableProvider,
    _error: *mut u8,
    _error_capacity: usize,
    _error_len: *mut usize,
) -> i32 {
    std::process::abort()
}

static DESCRIPTOR: Descriptor = Descriptor {
    magic: MAGIC,
    abi_version: [9, 0, 0],
    datafusion_major: 54,
    name: padded("from-the-future"),
    version: padded("9.0.0"),
    create,
};

/// The entry point, with another version inside.
#[unsafe(no_mangle)]
pub extern "C" fn tally_native_plugin_v0() -> *const Descriptor {
    &DESCRIPTOR
}
