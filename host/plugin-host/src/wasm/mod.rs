//! Wasm source plugins: WebAssembly components run in wasmtime, trusted with nothing.
//!
//! One wasmtime engine per process, created when the first wasm dataset registers. A
//! component is compiled once (cached by the SHA-256 of its bytes) and its imports are
//! resolved once; every call (`describe`, `scan`) gets a fresh store and instance, so no
//! state survives between calls and an old instance finishes its calls while a new version
//! of the component registers beside it.
//!
//! The sandbox of every call:
//! - WASI with the dataset's own folder pre-opened read-only at `/`, nothing else: no
//!   network (TCP, UDP and name lookup are off), no environment variables, no arguments, no
//!   stdin; stdout is discarded and the end of stderr is kept (its last
//!   [`PluginLimits::stderr_bytes`]) to explain a failure, whatever the plugin returned;
//! - an epoch deadline ([`PluginLimits::deadline`]): a ticker thread advances the epoch
//!   every [`TICK`], and a call past its deadline traps;
//! - a memory limit ([`PluginLimits::memory_bytes`]) on every linear memory and table;
//! - an output cap ([`PluginLimits::output_bytes`]) on what a scan returns.
//!
//! Traps, timeouts and limit hits become [`PluginError`]s naming the plugin, the limit and
//! what to do; the server keeps serving.
//!
//! The runtime and its calls (`runtime`), over the sandbox of one call (`sandbox`), the
//! bindings of each plugin API version (`bindings`), what a plugin returns escaped as it
//! enters (`escape`), and how a failed call is told (`faults`).

mod bindings;
mod escape;
mod faults;
mod runtime;
mod sandbox;

pub use crate::error::PluginError;
pub use bindings::{
    Column, ColumnType, Description, Filter, FilterCapability, FilterOp, SUPPORTED_VERSIONS,
    ScanRequest, ScanResult, Source, Value,
};
pub use runtime::{CallStats, Compiled, Runtime, last_call_stats, runtime};
pub use sandbox::{PluginLimits, TICK};

#[cfg(test)]
mod tests;
