//! The sandbox of one call: its limits (deadline, memory, output, stderr kept), the host
//! state of its store (WASI over the dataset folder read-only, nothing else), and the
//! limiter that remembers when memory was refused and how far it grew.

use std::path::Path;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store, StoreLimits};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::error::PluginError;
use crate::stderr::StderrTail;

/// How often the epoch advances: the granularity of every deadline.
pub const TICK: Duration = Duration::from_millis(10);

/// The limits of one plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginLimits {
    /// Wall-clock time one call (`describe` or `scan`) may run.
    pub deadline: Duration,
    /// Linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// Size of what one scan may return (the Arrow stream and the source table).
    pub output_bytes: usize,
    /// How much of the end of the plugin's stderr is kept for error messages (a plugin may
    /// write more: only the end is kept).
    pub stderr_bytes: usize,
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            deadline: Duration::from_secs(5),
            memory_bytes: 256 * 1024 * 1024,
            output_bytes: 64 * 1024 * 1024,
            stderr_bytes: 16 * 1024,
        }
    }
}

/// The host state of one call.
pub(super) struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) limits: Limiter,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Memory and table limits that remember when they were hit.
pub(super) struct Limiter {
    inner: StoreLimits,
    memory_bytes: usize,
    /// The size a memory asked to grow to, past the limit.
    pub(super) refused: Option<usize>,
    /// The largest size a memory grew to.
    pub(super) peak: usize,
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.peak = self.peak.max(desired);
        if desired > self.memory_bytes {
            self.refused = Some(desired);
            // Trap at once: a refused grow would make the guest's allocator abort with a
            // message that does not say why.
            wasmtime::bail!("memory limit reached");
        }
        self.inner.memory_growing(current, desired, maximum)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }
}

/// A fresh store of `engine` for one call over `folder`: WASI with the folder read-only at
/// `/` and stderr kept in `stderr`, with the memory limit and the epoch deadline of `limits`.
pub(super) fn sandbox(
    engine: &Engine,
    label: &str,
    folder: &Path,
    limits: &PluginLimits,
    stderr: &StderrTail,
) -> Result<Store<State>, PluginError> {
    let mut wasi = WasiCtxBuilder::new();
    wasi.stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    wasi.preopened_dir(folder, "/", FsPerms::ReadOnly)
        .map_err(|e| {
            PluginError::new(
                format!("the dataset folder could not be opened for {label}: {e}"),
                "check that the folder exists and is readable",
            )
        })?;
    let state = State {
        wasi: wasi.build(),
        table: ResourceTable::new(),
        limits: Limiter {
            inner: wasmtime::StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .table_elements(1_000_000)
                .instances(64)
                .build(),
            memory_bytes: limits.memory_bytes,
            refused: None,
            peak: 0,
        },
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    let ticks = (limits.deadline.as_millis() / TICK.as_millis()).max(1) as u64;
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();
    Ok(store)
}
