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

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};

use crate::code_cache::CodeCache;
use crate::stderr::{StderrTail, last_chars};
use wasmtime::{Config, Engine, Store, StoreLimits, Trap};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use tally_plugin_api::{PLUGIN_API_VERSION, SOURCE_INTERFACE};
use tally_storage::text::{Lines, escape_controls};

pub use crate::error::PluginError;

/// One bindings module per plugin API version, generated from its own
/// `plugin-api/wit/since_v*` directory (Zed's layout). A component is bound through the
/// module of the version it declares; when a newer version is added, an older component's
/// results are converted into the newest types, which the rest of the host uses, so adding
/// a version never breaks the components built for the ones before.
#[allow(missing_debug_implementations, clippy::all)]
mod since_v0_1_0 {
    wasmtime::component::bindgen!({
        path: "../../plugin-api/wit/since_v0.1.0",
        world: "source-plugin",
    });
}

/// The newest version: its types are the host's.
use since_v0_1_0 as latest;

pub use latest::tally::plugin::types::{
    Column, ColumnType, Description, Filter, FilterCapability, FilterOp, ScanRequest, ScanResult,
    Source, Value,
};

/// The plugin API versions this host speaks, oldest first: one per `since_v*` directory and
/// bindings module. The last is [`PLUGIN_API_VERSION`].
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0"];

/// A component with its imports resolved, bound in the version it speaks.
enum Pre {
    V0_1_0(since_v0_1_0::SourcePluginPre<State>),
}

/// One instance of a component, in the version it speaks.
enum Instance {
    V0_1_0(since_v0_1_0::SourcePlugin),
}

impl Pre {
    fn bind(
        version: &str,
        instance_pre: wasmtime::component::InstancePre<State>,
    ) -> wasmtime::Result<Pre> {
        match version {
            "0.1.0" => Ok(Pre::V0_1_0(since_v0_1_0::SourcePluginPre::new(
                instance_pre,
            )?)),
            other => Err(wasmtime::format_err!(
                "plugin API {other} has no bindings in this host"
            )),
        }
    }

    fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Instance> {
        match self {
            Pre::V0_1_0(pre) => pre.instantiate(store).map(Instance::V0_1_0),
        }
    }
}

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

/// The host state of one call.
struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: Limiter,
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
struct Limiter {
    inner: StoreLimits,
    memory_bytes: usize,
    /// The size a memory asked to grow to, past the limit.
    refused: Option<usize>,
    /// The largest size a memory grew to.
    peak: usize,
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
        let mut store = self.sandbox(label, folder, limits, &stderr)?;
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

    /// A fresh store for one call over `folder`: WASI with the folder read-only at `/` and
    /// stderr kept in `stderr`, with the memory limit and the epoch deadline of `limits`.
    fn sandbox(
        &self,
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
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        let ticks = (limits.deadline.as_millis() / TICK.as_millis()).max(1) as u64;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        Ok(store)
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

/// One plugin call, as its errors describe it.
struct Call<'a> {
    label: &'a str,
    /// What the plugin was asked to do, e.g. "scan".
    what: &'a str,
    limits: &'a PluginLimits,
    /// The end of what the plugin wrote to stderr (its last `limits.stderr_bytes`).
    stderr: StderrTail,
    started: Instant,
}

impl Call<'_> {
    /// The error of a call the plugin answered with an error `message`, with the end of what
    /// it wrote to stderr (its own account of what went wrong).
    fn refused(&self, message: &str) -> PluginError {
        let Call { label, what, .. } = *self;
        PluginError::refused(
            format!("{label} could not {what}: {message}{}", self.stderr_text()),
            if message.starts_with(tally_plugin_api::PLUGIN_FAULT) {
                "this is a fault in the plugin: its author can reproduce it on this dataset folder with `tally plugin test`"
            } else {
                "fix the dataset's files or backend.config as the message says; if they are right, the plugin's author can reproduce it with `tally plugin test`"
            },
        )
    }

    /// The error of a call the sandbox stopped: past its memory limit (`asked` is what it
    /// asked for), past its deadline, or a trap or another failure `e`.
    fn stopped(&self, asked: Option<usize>, e: &wasmtime::Error) -> PluginError {
        let Call {
            label,
            what,
            limits,
            ref stderr,
            started,
        } = *self;
        let kind = match (asked, e.downcast_ref::<Trap>()) {
            (Some(_), _) => tally_storage::faults::Fault::Memory,
            (None, Some(Trap::Interrupt)) => tally_storage::faults::Fault::Deadline,
            (None, Some(_)) if fault_of(&stderr.contents().0).is_some() => {
                tally_storage::faults::Fault::Panic
            }
            (None, Some(_)) => tally_storage::faults::Fault::Trap,
            (None, None) => tally_storage::faults::Fault::Other,
        };
        tally_storage::faults::count(kind);
        if let Some(asked) = asked {
            return PluginError::stopped(
                format!(
                    "{label} was stopped while trying to {what}: it exceeded its memory limit of {} (it asked for {})",
                    mib(limits.memory_bytes),
                    mib(asked)
                ),
                "the plugin needs less memory for this data, or the server a higher --plugin-memory-mb",
            );
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => PluginError::stopped(
                format!(
                    "{label} was stopped while trying to {what}: it did not finish within its deadline of {:.1} s (ran {:.1} s){}",
                    limits.deadline.as_secs_f64(),
                    started.elapsed().as_secs_f64(),
                    self.stderr_text()
                ),
                "the plugin must work faster on this data, or the server needs a longer --plugin-deadline-ms",
            ),
            Some(trap) => PluginError::stopped(
                match fault_of(&stderr.contents().0) {
                    // What the plugin wrote before the panic (or the whole traceback) is kept:
                    // it is often the author's own account of what went wrong.
                    Some(fault) => format!(
                        "{label} {} while trying to {what}: {}{}",
                        fault.verb,
                        fault.message,
                        self.stderr_text_without(fault.skip)
                    ),
                    None => format!(
                        "{label} failed while trying to {what}: it trapped ({trap}){}",
                        self.stderr_text()
                    ),
                },
                "this is a fault in the plugin (a panic or a trap): its author can reproduce it on this dataset folder with `tally plugin test`, which shows what the plugin wrote to stderr",
            ),
            None => PluginError::stopped(
                format!(
                    "{label} failed while trying to {what}: {}{}",
                    root_cause(e),
                    self.stderr_text()
                ),
                "this is a fault in the plugin or in what it was given",
            ),
        }
    }

    /// The end of what the plugin wrote to stderr, as the end of an error message ("" when
    /// nothing).
    fn stderr_text(&self) -> String {
        self.stderr_text_without(|_| false)
    }

    /// [`Call::stderr_text`] without the lines `skip` says are already in the message.
    fn stderr_text_without(&self, skip: fn(&str) -> bool) -> String {
        let (bytes, dropped) = self.stderr.contents();
        crate::stderr::shown(&bytes, dropped, "it wrote to stderr", skip)
    }
}

/// A fault a guest reported on its stderr as it failed: a Rust panic or a Python exception.
struct Fault {
    /// `panicked`, `raised an exception`.
    verb: &'static str,
    /// What failed, where.
    message: String,
    /// The first line of the fault's own report in stderr: what the plugin wrote before it
    /// is shown beside the message (a Python traceback is shown whole).
    skip: fn(&str) -> bool,
}

/// The fault in what a guest wrote to stderr: a Rust panic, else a Python exception.
fn fault_of(stderr: &[u8]) -> Option<Fault> {
    if let Some(message) = panic_message(stderr)
        // componentize-py's runtime panics when a Python function raises: the exception is
        // the fault, the runtime's panic only its consequence.
        && !message.contains("Python function threw")
    {
        return Some(Fault {
            verb: "panicked",
            message,
            skip: |l| l.contains(" panicked at "),
        });
    }
    python_exception(stderr).map(|message| Fault {
        verb: "raised an exception",
        message,
        skip: |l| l.contains(" panicked at "),
    })
}

/// The exception of the last Python traceback in what a guest wrote to stderr (`Traceback
/// (most recent call last):`, the frames, then `Kind: message`), with its innermost frame.
fn python_exception(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let (_, after) = text.rsplit_once("Traceback (most recent call last):")?;
    let lines: Vec<&str> = after
        .lines()
        .take_while(|l| !l.contains(" panicked at "))
        .collect();
    let exception = lines
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with(' '))?;
    let frame = lines
        .iter()
        .rev()
        .find_map(|l| l.trim_start().strip_prefix("File "))
        .map(|f| {
            // componentize-py puts the app's files under `/0/`, `/1/`…: the author knows them
            // by their own names.
            let f = f.trim();
            let bundled = f
                .strip_prefix("\"/")
                .and_then(|rest| rest.split_once('/'))
                .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .map(|(_, rest)| format!("\"{rest}"));
            let f = bundled.unwrap_or_else(|| f.to_string());
            format!(" (at {})", escape_controls(&f, Lines::Escaped))
        })
        .unwrap_or_default();
    Some(format!(
        "`{}`{frame}",
        escape_controls(last_chars(exception.trim(), 600), Lines::Escaped)
    ))
}

/// The message of a Rust panic in what a guest wrote to stderr (`thread '…' panicked at
/// FILE:LINE:COL:` then the message), with where it happened.
fn panic_message(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let (_, after) = text.split_once(" panicked at ")?;
    let (location, message) = after.split_once('\n').unwrap_or((after, ""));
    let message: Vec<&str> = message
        .lines()
        .filter(|l| !l.contains("RUST_BACKTRACE") && !l.trim().is_empty())
        .collect();
    let joined = message.join(" ");
    let message = escape_controls(last_chars(joined.trim(), 600), Lines::Escaped);
    Some(format!(
        "`{message}` (at {})",
        escape_controls(location.trim().trim_end_matches(':'), Lines::Escaped)
    ))
}

/// What a plugin call returns, with every text in it escaped ([`escape_controls`]) as it
/// enters the host: names, descriptions, notes, sources and the files it reports. The rows
/// themselves (the Arrow stream) are data, served as the plugin read them, like a Parquet
/// file's cells.
trait FromPlugin {
    fn escaped(self) -> Self;
}

fn escaped(text: String) -> String {
    match escape_controls(&text, Lines::Escaped) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

impl FromPlugin for Description {
    fn escaped(self) -> Description {
        Description {
            name: escaped(self.name),
            version: escaped(self.version),
            summary: escaped(self.summary),
            columns: self
                .columns
                .into_iter()
                .map(|c| Column {
                    name: escaped(c.name),
                    data_type: c.data_type,
                    description: c.description.map(escaped),
                })
                .collect(),
            filters: self
                .filters
                .into_iter()
                .map(|f| FilterCapability {
                    column: escaped(f.column),
                    ops: f.ops,
                })
                .collect(),
        }
    }
}

impl FromPlugin for ScanResult {
    fn escaped(self) -> ScanResult {
        ScanResult {
            ipc: self.ipc,
            sources: self
                .sources
                .into_iter()
                .map(|s| Source {
                    uri: escaped(s.uri),
                    title: escaped(s.title),
                    publisher: s.publisher.map(escaped),
                    source_type: escaped(s.source_type),
                    locator: s.locator.map(escaped),
                    published_at: s.published_at.map(escaped),
                    effective_at: s.effective_at.map(escaped),
                    file: s.file.map(escaped),
                })
                .collect(),
            row_sources: self.row_sources,
            files: self.files.into_iter().map(escaped).collect(),
            notes: self.notes.into_iter().map(escaped).collect(),
        }
    }
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

/// The plugin API version a component speaks, among those this host supports; refuses a
/// component that exports the source interface of no supported version.
fn check_api_version(
    label: &str,
    engine: &Engine,
    component: &Component,
) -> Result<&'static str, PluginError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let prefix = format!("{SOURCE_INTERFACE}@");
    let declared: Vec<&str> = exports
        .iter()
        .filter_map(|e| e.strip_prefix(&prefix))
        .collect();
    // The newest version the component exports that this host speaks.
    if let Some(version) = SUPPORTED_VERSIONS
        .iter()
        .rev()
        .find(|v| declared.contains(v))
    {
        return Ok(version);
    }
    let supported = SUPPORTED_VERSIONS.join(", ");
    if let Some(found) = declared.first() {
        return Err(PluginError::new(
            format!(
                "{label} was built for plugin API {found}, but this Tally speaks plugin API {supported}"
            ),
            format!(
                "rebuild the plugin against tally-plugin-api {PLUGIN_API_VERSION} (WIT `tally:plugin@{PLUGIN_API_VERSION}`), or run a Tally that speaks {found}"
            ),
        ));
    }
    if exports.iter().any(|e| e == SOURCE_INTERFACE) {
        return Err(PluginError::new(
            format!(
                "{label} exports {SOURCE_INTERFACE} without a version, so its plugin API version is unknown"
            ),
            format!("build it from the versioned WIT package `tally:plugin@{PLUGIN_API_VERSION}`"),
        ));
    }
    Err(PluginError::new(
        format!(
            "{label} is not a Tally source plugin: it exports {}",
            if exports.is_empty() {
                "nothing".to_string()
            } else {
                exports.join(", ")
            }
        ),
        format!(
            "a source plugin exports `{SOURCE_INTERFACE}@{PLUGIN_API_VERSION}` (see tally-plugin-api's guest helper)"
        ),
    ))
}

/// What wasmtime says of an error, escaped ([`escape_controls`]): it may quote the
/// component's own names (its exports, the functions of a trap's backtrace).
fn root_cause(e: &wasmtime::Error) -> String {
    let mut text = e.to_string();
    let chain: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
    if !chain.is_empty() {
        text.push_str(": ");
        text.push_str(&chain.join(": "));
    }
    escape_controls(&text, Lines::Kept).into_owned()
}

fn mib(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Python exception (componentize-py's runtime panics after writing its traceback) is
    /// the fault, said with its innermost frame; a Rust panic keeps what was written before.
    #[test]
    fn faults_in_stderr_are_read() {
        let python = b"py: about to fail\nTraceback (most recent call last):\n  File \"/0/tally_plugin.py\", line 9, in scan\n  File \"/0/app.py\", line 53, in scan\nValueError: cannot read past row 1\nthread '<unnamed>' panicked at runtime/src/lib.rs:1:2:\nPython function threw an unexpected exception\n";
        let fault = fault_of(python).expect("a fault");
        assert_eq!(fault.verb, "raised an exception");
        assert_eq!(
            fault.message,
            "`ValueError: cannot read past row 1` (at \"app.py\", line 53, in scan)"
        );
        let rust = b"reading part 2\nthread 'main' panicked at src/lib.rs:3:4:\nbad header\n";
        let fault = fault_of(rust).expect("a fault");
        assert_eq!(fault.verb, "panicked");
        assert_eq!(fault.message, "`bad header` (at src/lib.rs:3:4)");
        assert!((fault.skip)("thread 'main' panicked at src/lib.rs:3:4:"));
        assert!(fault_of(b"nothing of note\n").is_none());
    }

    /// Every `since_v*` directory of the plugin API has a bindings module here (and is in
    /// [`SUPPORTED_VERSIONS`]), and the newest is the version plugins are built against.
    #[test]
    fn one_bindings_module_per_wit_version() {
        let wit = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugin-api/wit");
        let mut dirs: Vec<String> = std::fs::read_dir(&wit)
            .expect("plugin-api/wit")
            .filter_map(Result::ok)
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("since_v"))
                    .map(str::to_string)
            })
            .collect();
        let key = |v: &String| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap()).collect() };
        dirs.sort_by_key(key);
        assert_eq!(dirs, SUPPORTED_VERSIONS);
        assert_eq!(SUPPORTED_VERSIONS.last(), Some(&PLUGIN_API_VERSION));
        let source = include_str!("wasm.rs");
        for v in SUPPORTED_VERSIONS {
            let module = format!("mod since_v{} {{", v.replace('.', "_"));
            assert!(source.contains(&module), "no `{module}` bindings for {v}");
            assert!(
                source.contains(&format!("path: \"../../plugin-api/wit/since_v{v}\"")),
                "the bindings of {v} are not generated from its own directory"
            );
        }
    }

    /// Each kind of fault is an error of its own kind, which the layers above act on (an
    /// incomplete file is retried when it settles; the rest are reported): a file that is not
    /// WebAssembly or is cut short is incomplete, a core module or another API version
    /// unusable, an error the plugin returns refused, a deadline or a panic stopped.
    #[test]
    fn each_kind_of_fault_is_an_error_of_its_kind() {
        fn kind<T>(result: Result<T, PluginError>) -> &'static str {
            match result {
                Ok(_) => "ok",
                Err(PluginError::Unusable { .. }) => "unusable",
                Err(PluginError::Incomplete { .. }) => "incomplete",
                Err(PluginError::Refused { .. }) => "refused",
                Err(PluginError::Stopped { .. }) => "stopped",
            }
        }
        let rt = runtime().expect("the runtime");
        let read = |stem: &str| {
            std::fs::read(tally_wasm_plugins::built(stem))
                .unwrap_or_else(|e| panic!("the workspace built {stem}: {e}"))
        };
        let hostile = read("tally_test_plugin_hostile");
        assert_eq!(
            kind(rt.compile("text", b"not wasm at all", None)),
            "incomplete"
        );
        assert_eq!(
            kind(rt.compile("half", &hostile[..hostile.len() / 2], None)),
            "incomplete"
        );
        assert_eq!(
            kind(rt.compile("core", b"\0asm\x01\0\0\0", None)),
            "unusable"
        );
        assert_eq!(
            kind(rt.compile("other", &read("tally_test_plugin_wrong_version"), None)),
            "unusable"
        );

        let compiled = rt.compile("hostile", &hostile, None).expect("compiles");
        let folder = std::env::temp_dir();
        let limits = PluginLimits {
            deadline: Duration::from_millis(500),
            ..PluginLimits::default()
        };
        let scan = |mode: &str, projection: Option<Vec<String>>| {
            rt.scan(
                "hostile",
                &compiled,
                &folder,
                &limits,
                &ScanRequest {
                    dataset: "hostile".into(),
                    config: format!(r#"{{"mode": "{mode}"}}"#),
                    projection,
                    filters: Vec::new(),
                    limit: None,
                },
            )
        };
        assert_eq!(kind(scan("ok", None)), "ok");
        let partial = Some(vec!["name".to_string()]);
        assert_eq!(kind(scan("late-error", partial)), "refused");
        assert_eq!(kind(scan("loop", None)), "stopped");
        assert_eq!(kind(scan("trap", None)), "stopped");
    }
}
