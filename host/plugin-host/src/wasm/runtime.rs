//! The process's runtime: one wasmtime engine with its epoch ticker and the resolved WASI
//! imports, components compiled once (checked, cached by their SHA-256, kept on disk when
//! asked), and each call run in a fresh sandbox (`describe`, `scan` with its output cap).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store};

use tally_storage::text::{Lines, escape_controls};

use super::bindings::{Description, Instance, Pre, ScanRequest, ScanResult, check_api_version};
use super::escape::FromPlugin;
use super::faults::{Call, mib, root_cause};
use super::sandbox::{PluginLimits, State, TICK, sandbox};
use crate::code_cache::CodeCache;
use crate::error::PluginError;
use crate::stderr::StderrTail;

/// The process's wasmtime engine, the resolved WASI imports and the compiled components.
pub struct Runtime {
    engine: Engine,
    linker: Linker<State>,
    compiled: Mutex<HashMap<String, Arc<Compiled>>>,
    /// Held while a component is compiled (or loaded from the code cache): folders register
    /// several at once, and four folders of one plugin must compile it once, not four times
    /// side by side (wasmtime spreads one compilation over the cores already).
    compiling: Mutex<()>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.compiled.lock().map(|c| c.len()).unwrap_or(0);
        f.debug_struct("Runtime").field("compiled", &n).finish()
    }
}

/// A compiled component with its imports resolved, ready to instantiate.
pub struct Compiled {
    pre: Pre,
    /// The plugin API version the component speaks.
    pub api_version: &'static str,
    /// `sha256:<hex>` of the component's bytes.
    pub sha256: String,
    pub size: u64,
}

impl fmt::Debug for Compiled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compiled")
            .field("sha256", &self.sha256)
            .field("api_version", &self.api_version)
            .finish()
    }
}

/// What one plugin call used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallStats {
    pub elapsed: Duration,
    /// The largest linear memory the instance grew to, in bytes.
    pub peak_memory: usize,
}

thread_local! {
    static LAST_CALL: std::cell::Cell<Option<CallStats>> = const { std::cell::Cell::new(None) };
}

/// What the last plugin call made on this thread used (calls run on the calling thread).
pub fn last_call_stats() -> Option<CallStats> {
    LAST_CALL.with(std::cell::Cell::get)
}

static RUNTIME: OnceLock<Result<Arc<Runtime>, String>> = OnceLock::new();

/// The process's runtime, started on first use.
pub fn runtime() -> Result<Arc<Runtime>, PluginError> {
    RUNTIME
        .get_or_init(|| Runtime::start().map(Arc::new))
        .clone()
        .map_err(|e| {
            PluginError::new(
                format!("the wasm runtime could not start: {e}"),
                "this is a fault of the host machine or of Tally, not of the dataset",
            )
        })
}

impl Runtime {
    fn start() -> Result<Runtime, String> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config).map_err(|e| e.to_string())?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| e.to_string())?;
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("tally-wasm-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(TICK);
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Runtime {
            engine,
            linker,
            compiled: Mutex::new(HashMap::new()),
            compiling: Mutex::new(()),
        })
    }

    /// Compiles a component (or takes it from the cache), after checking that it is a
    /// component and speaks this host's plugin API version. `label` names it in messages.
    /// With `code`, the compiled code is taken from that directory when it is there and kept
    /// in it when it was not.
    pub fn compile(
        &self,
        label: &str,
        bytes: &[u8],
        code: Option<&CodeCache>,
    ) -> Result<Arc<Compiled>, PluginError> {
        let sha256 = tally_storage::backend::sha256_hex(bytes);
        let cached = || {
            self.compiled
                .lock()
                .ok()
                .and_then(|cache| cache.get(&sha256).map(Arc::clone))
        };
        if let Some(c) = cached() {
            return Ok(c);
        }
        let _one_at_a_time = self.compiling.lock().unwrap_or_else(|p| p.into_inner());
        // Compiled by another registration while this one waited.
        if let Some(c) = cached() {
            return Ok(c);
        }
        check_component_bytes(label, bytes)?;
        let started = Instant::now();
        let kept = match code.map(|c| c.load(&self.engine, &sha256)) {
            Some(Ok(kept)) => kept,
            Some(Err(why)) => {
                tracing::warn!("the compiled code of {label} kept on disk is not used: {why}");
                None
            }
            None => None,
        };
        let from_disk = kept.is_some();
        let component = match kept {
            Some(c) => c,
            None => Component::new(&self.engine, bytes).map_err(|e| {
                PluginError::incomplete(
                    format!(
                        "{label} is not a valid WebAssembly component: {}",
                        root_cause(&e)
                    ),
                    "build the plugin for wasm32-wasip2 with tally-plugin-api's guest helper",
                )
            })?,
        };
        let api_version = check_api_version(label, &self.engine, &component)?;
        let instance_pre = self.linker.instantiate_pre(&component).map_err(|e| {
            PluginError::new(
                format!(
                    "{label} needs something the sandbox does not provide: {}",
                    root_cause(&e)
                ),
                "a plugin gets WASI with a read-only view of its dataset folder and nothing else (no network, no environment)",
            )
        })?;
        let pre = Pre::bind(api_version, instance_pre).map_err(|e| {
            PluginError::new(
                format!(
                    "{label} does not export the source interface as this host expects: {}",
                    root_cause(&e)
                ),
                format!("build it against tally-plugin-api {api_version}"),
            )
        })?;
        if from_disk {
            tracing::debug!(
                "loaded the compiled code of {label} ({} bytes) in {:?}",
                bytes.len(),
                started.elapsed()
            );
        } else {
            tracing::debug!(
                "compiled {label} ({} bytes) in {:?}",
                bytes.len(),
                started.elapsed()
            );
            if let Some(code) = code
                && let Err(why) = code.store(&self.engine, &sha256, &component)
            {
                tracing::warn!("the compiled code of {label} is not kept on disk: {why}");
            }
        }
        let compiled = Arc::new(Compiled {
            pre,
            api_version,
            sha256: sha256.clone(),
            size: bytes.len() as u64,
        });
        if let Ok(mut cache) = self.compiled.lock() {
            // Components replaced many times must not pile up: keep the most recent few.
            if cache.len() >= 32 {
                cache.clear();
            }
            cache.insert(sha256, Arc::clone(&compiled));
        }
        Ok(compiled)
    }

    /// Runs one call in a fresh sandbox over `folder`.
    fn call<R: FromPlugin>(
        &self,
        label: &str,
        compiled: &Compiled,
        folder: &Path,
        limits: &PluginLimits,
        what: &str,
        f: impl FnOnce(&mut Store<State>, &Instance) -> wasmtime::Result<Result<R, String>>,
    ) -> Result<R, PluginError> {
        let stderr = StderrTail::new(limits.stderr_bytes);
        let mut store = sandbox(&self.engine, label, folder, limits, &stderr)?;
        let started = Instant::now();
        let outcome = compiled
            .pre
            .instantiate(&mut store)
            .and_then(|plugin| f(&mut store, &plugin));
        LAST_CALL.with(|last| {
            last.set(Some(CallStats {
                elapsed: started.elapsed(),
                peak_memory: store.data().limits.peak,
            }))
        });
        let call = Call {
            label,
            what,
            limits,
            stderr,
            started,
        };
        // Everything the plugin said is escaped here, where it enters (its error, below; what
        // it wrote to stderr, in `Call`): nothing a plugin writes reaches a client or the log
        // with a control character that acts on a terminal.
        match outcome {
            Ok(Ok(r)) => Ok(r.escaped()),
            Ok(Err(message)) => Err(call.refused(&escape_controls(&message, Lines::Escaped))),
            Err(e) => Err(call.stopped(store.data().limits.refused, &e)),
        }
    }

    /// `describe` for a dataset's config.
    pub fn describe(
        &self,
        label: &str,
        compiled: &Compiled,
        folder: &Path,
        limits: &PluginLimits,
        config: &str,
    ) -> Result<Description, PluginError> {
        self.call(
            label,
            compiled,
            folder,
            limits,
            "describe itself",
            |store, instance| match instance {
                Instance::V0_1_0(p) => p.tally_plugin_source().call_describe(store, config),
            },
        )
    }

    /// `scan`, with the output cap applied.
    pub fn scan(
        &self,
        label: &str,
        compiled: &Compiled,
        folder: &Path,
        limits: &PluginLimits,
        request: &ScanRequest,
    ) -> Result<ScanResult, PluginError> {
        let _traced = tracing::info_span!("plugin call", otel.name = "plugin call").entered();
        let result = self.call(
            label,
            compiled,
            folder,
            limits,
            "scan",
            |store, instance| match instance {
                Instance::V0_1_0(p) => p.tally_plugin_source().call_scan(store, request),
            },
        )?;
        let size = output_size(&result);
        if size > limits.output_bytes {
            return Err(PluginError::new(
                format!(
                    "{label} returned {} of output, over the cap of {}",
                    mib(size),
                    mib(limits.output_bytes)
                ),
                "the dataset is too large for one scan; the plugin should apply filters or the server needs a higher --plugin-output-mb",
            ));
        }
        Ok(result)
    }
}

/// Refuses bytes that are not a WebAssembly component before wasmtime reads them, saying
/// what they are instead.
fn check_component_bytes(label: &str, bytes: &[u8]) -> Result<(), PluginError> {
    if !bytes.starts_with(b"\0asm") {
        return Err(PluginError::incomplete(
            format!("{label} is not WebAssembly (it does not start with the bytes `\\0asm`)"),
            "name a .wasm component built for wasm32-wasip2",
        ));
    }
    if bytes.len() >= 8 && bytes[4..8] == [1, 0, 0, 0] {
        return Err(PluginError::new(
            format!("{label} is a core WebAssembly module, not a component"),
            "build the plugin for the wasm32-wasip2 target, which produces a component",
        ));
    }
    Ok(())
}

fn output_size(r: &ScanResult) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    r.ipc.len()
        + r.row_sources.len() * 4
        + r.sources
            .iter()
            .map(|s| {
                s.uri.len()
                    + s.title.len()
                    + s.source_type.len()
                    + text(&s.publisher)
                    + text(&s.locator)
                    + text(&s.published_at)
                    + text(&s.effective_at)
                    + text(&s.file)
            })
            .sum::<usize>()
        + r.files.iter().map(String::len).sum::<usize>()
        + r.notes.iter().map(String::len).sum::<usize>()
}
