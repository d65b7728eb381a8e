//! Native plugins: shared libraries loaded at run time, serving a DataFusion table provider
//! through datafusion-ffi.
//!
//! A native plugin runs with the server's full rights, so nothing is loaded unless the
//! server was started with `--allow-native`. Each library is loaded from a private copy, in
//! a new folder only this user can enter (mode 0700, an unpredictable name, never one that
//! already exists), removed once mapped, so that a file replaced on disk never changes code
//! already mapped, and a changed library is loaded beside the old one; libraries are never
//! unloaded (code of an old version may still run in a call that started before the swap).
//! The descriptor's leading integers (magic, plugin API version, DataFusion major version)
//! are copied out and checked before any reference to the whole descriptor is formed or
//! anything else in the library is called.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::execution::TaskContextProvider;
use datafusion::logical_expr::{Expr, col, lit};
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::SessionContext;
use datafusion_ffi::execution_plan::ForeignExecutionPlan;
use tally_plugin_api::PLUGIN_API_VERSION;
use tally_plugin_api::native::{
    Descriptor, ENTRY_POINT, FFI_LogicalExtensionCodec, FFI_TableProvider, Header, MAGIC, text,
};
use tally_plugin_api::native::{NATIVE_ABI_VERSION, abi_compatible};
use tally_semantic::definition::BackendKind;

use crate::error::PluginError;
use tally_storage::StorageError;
use tally_storage::backend::BackendDescription;
use tally_storage::backend::{Backend, LoadedData, Pushed, ServedFile, Test, sha256_hex};
use tally_storage::text::{Lines, escape_controls};

/// A library that passed the checks, kept loaded for the life of the process.
#[derive(Debug)]
pub struct Library {
    descriptor: &'static Descriptor,
    pub sha256: String,
    pub name: String,
    pub version: String,
}

static LOADED: OnceLock<Mutex<HashMap<String, Arc<Library>>>> = OnceLock::new();

fn versions(d: &Header) -> String {
    format!(
        "native plugin ABI {}.{} and DataFusion {}",
        d.abi_version[0], d.abi_version[1], d.datafusion_major
    )
}

/// Loads (or finds already loaded) the library at `path`, `label` naming it in messages. The
/// library is loaded from a private copy, removed as soon as it is mapped, so the file in
/// the dataset folder may be replaced at any time and nothing is left behind.
pub fn load(path: &Path, label: &str) -> Result<Arc<Library>, PluginError> {
    let bytes = std::fs::read(path).map_err(|e| {
        PluginError::new(
            format!("the library {label} cannot be read: {e}"),
            "put the shared library in the dataset folder under that name",
        )
    })?;
    let sha256 = sha256_hex(&bytes);
    // One load at a time: two datasets naming the same library share one copy and handle.
    let mut loaded = LOADED
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(lib) = loaded.get(&sha256) {
        return Ok(Arc::clone(lib));
    }
    // A private copy per content: the dynamic loader caches by path, and a file rewritten in
    // place under mapped code would crash the process.
    let dir = private_dir()?;
    let copy: PathBuf = dir.join(format!(
        "{}-{}",
        &sha256[..16],
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let written = write_new(&copy, &bytes);
    let opened = match written {
        // SAFETY: loading runs the library's initialisers with the server's rights; that is
        // what `--allow-native` consents to. A non-library file fails here with an error.
        Ok(()) => Some(unsafe { libloading::Library::new(&copy) }),
        Err(_) => None,
    };
    // The mapping outlives the file: the copy and its folder are removed at once, so nothing
    // is left behind.
    let _ = std::fs::remove_file(&copy);
    let _ = std::fs::remove_dir(&dir);
    written.map_err(|e| {
        PluginError::new(
            format!("the library {label} could not be copied for loading: {e}"),
            "make the temporary directory writable (and give it room for the library)",
        )
    })?;
    let library = opened.expect("opened when written").map_err(|e| {
        PluginError::incomplete(
            format!("{label} is not a loadable shared library: {e}"),
            "build the plugin as a cdylib for this platform (a .so on Linux)",
        )
    })?;
    // SAFETY: the symbol is looked up by name; its type is checked by what it returns next.
    let entry = unsafe {
        library.get::<unsafe extern "C" fn() -> *const Descriptor>(ENTRY_POINT.as_bytes())
    }
    .map_err(|_| {
        PluginError::new(
            format!("{label} has no entry point `{ENTRY_POINT}`: it is not a Tally native plugin"),
            "export the entry point with tally-plugin-api's `export_native_plugin!` (feature `native`)",
        )
    })?;
    // SAFETY: a Tally entry point returns a pointer to a static descriptor. Only its leading
    // plain integers (the `Header`, the same in every version) are copied out first; no
    // reference to the whole descriptor exists until they say it has this version's layout.
    let pointer = unsafe { entry() };
    if pointer.is_null() || !pointer.cast::<Header>().is_aligned() {
        return Err(PluginError::new(
            format!("{label}'s entry point returned no usable descriptor"),
            "return the descriptor from `export_native_plugin!`",
        ));
    }
    // SAFETY: non-null and aligned; the header is plain integers, valid for any bits.
    let header: Header = unsafe { std::ptr::read(pointer.cast::<Header>()) };
    if header.magic != MAGIC {
        return Err(PluginError::new(
            format!("{label} exports `{ENTRY_POINT}` but not a Tally plugin descriptor"),
            "build it with tally-plugin-api's `export_native_plugin!`",
        ));
    }
    let ours = format!(
        "native plugin ABI {}.{} and DataFusion {}",
        NATIVE_ABI_VERSION[0],
        NATIVE_ABI_VERSION[1],
        tally_plugin_api::native::DATAFUSION_MAJOR
    );
    if !abi_compatible(header.abi_version)
        || header.datafusion_major != tally_plugin_api::native::DATAFUSION_MAJOR
    {
        // Nothing else of it is touched; it stays mapped like every library once loaded.
        std::mem::forget(library);
        return Err(PluginError::new(
            format!(
                "{label} was built for {}, but this Tally runs {ours}",
                versions(&header)
            ),
            format!(
                "rebuild the plugin against tally-plugin-api {PLUGIN_API_VERSION} (datafusion-ffi {}.x)",
                tally_plugin_api::native::DATAFUSION_MAJOR
            ),
        ));
    }
    // SAFETY: the header says this library was built against this plugin API and
    // DataFusion, so the rest of the descriptor has this version's layout; it is static in
    // a library that is never unloaded.
    let descriptor: &'static Descriptor = unsafe { &*pointer };
    // Never unloaded: providers, plans and streams from it may outlive any catalog entry.
    std::mem::forget(library);
    let lib = Arc::new(Library {
        descriptor,
        sha256: sha256.clone(),
        // What the library says is escaped as it enters, as a wasm plugin's is
        // (`tally_storage::text`).
        name: escape_controls(&text(&descriptor.name), Lines::Escaped).into_owned(),
        version: escape_controls(&text(&descriptor.version), Lines::Escaped).into_owned(),
    });
    loaded.insert(sha256, Arc::clone(&lib));
    Ok(lib)
}

/// The names of the plan nodes a plugin built (its side of the boundary), in plan order.
fn foreign_plans(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<String>) {
    if plan.is::<ForeignExecutionPlan>() {
        out.push(escape_controls(plan.name(), Lines::Escaped).into_owned());
    }
    for child in plan.children() {
        foreign_plans(child, out);
    }
}

/// A new folder only this process's user can enter, under an unpredictable name, for the
/// private copy of one library. An existing folder is never used: on a shared machine
/// another user could have planted code in it.
fn private_dir() -> Result<PathBuf, PluginError> {
    let base = std::env::temp_dir();
    let mut last = None;
    for _ in 0..8 {
        let mut nonce = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut nonce) {
            return Err(PluginError::new(
                format!("no random name for a private folder for native libraries: {e}"),
                "this system has no source of randomness for Tally to use",
            ));
        }
        let name: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let dir = base.join(format!("tally-native-{name}"));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(PluginError::new(
                    format!(
                        "no private folder for native libraries in {}: {e}",
                        base.display()
                    ),
                    "make the temporary directory (TMPDIR) writable",
                ));
            }
        }
    }
    Err(PluginError::new(
        format!(
            "no new private folder for native libraries in {}: {}",
            base.display(),
            last.map(|e| e.to_string()).unwrap_or_default()
        ),
        "make the temporary directory (TMPDIR) writable",
    ))
}

/// Writes `bytes` to a file that must not exist yet, readable by this user only.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o700);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The session native providers are built for: its codec crosses the boundary with them.
fn session() -> &'static (Arc<SessionContext>, FFI_LogicalExtensionCodec) {
    static SESSION: OnceLock<(Arc<SessionContext>, FFI_LogicalExtensionCodec)> = OnceLock::new();
    SESSION.get_or_init(|| {
        let ctx = Arc::new(SessionContext::new());
        let provider: Arc<dyn TaskContextProvider> = ctx.clone();
        let codec = FFI_LogicalExtensionCodec::new_default(&provider);
        (ctx, codec)
    })
}

impl Library {
    /// Builds the plugin's provider for a dataset.
    pub fn create(
        &self,
        label: &str,
        dataset: &str,
        folder: &Path,
        config: &serde_json::Value,
    ) -> Result<Arc<dyn TableProvider>, PluginError> {
        let context = tally_plugin_api::native::Context {
            dataset: dataset.to_string(),
            folder: folder
                .canonicalize()
                .unwrap_or_else(|_| folder.to_path_buf()),
            config: config.clone(),
        };
        let json = serde_json::to_vec(&context)
            .map_err(|e| PluginError::new(e.to_string(), "this is a bug in Tally"))?;
        let (_, codec) = session();
        let mut out = std::mem::MaybeUninit::<FFI_TableProvider>::uninit();
        let mut error = vec![0u8; 4096];
        let mut error_len = 0usize;
        let mark = crate::native_stderr::Mark::now();
        // SAFETY: the buffers live for the call; `out` is written on success only, and then
        // owned here.
        let status = unsafe {
            (self.descriptor.create)(
                json.as_ptr(),
                json.len(),
                codec,
                out.as_mut_ptr(),
                error.as_mut_ptr(),
                error.len(),
                &mut error_len,
            )
        };
        if status != 0 {
            let message = escape_controls(
                &String::from_utf8_lossy(&error[..error_len.min(error.len())]),
                Lines::Kept,
            )
            .into_owned();
            return Err(PluginError::refused(
                format!(
                    "{label} could not open the dataset: {message}{}",
                    mark.said()
                ),
                "fix the dataset's files or backend.config as the message says",
            ));
        }
        // SAFETY: status 0 means the plugin wrote a provider into `out`.
        let ffi = unsafe { out.assume_init() };
        let provider: Arc<dyn TableProvider> = (&ffi).into();
        Ok(provider)
    }
}

/// A dataset served by a native plugin.
#[derive(Debug)]
pub struct NativeBackend {
    dataset: String,
    label: String,
    library: Arc<Library>,
    provider: Arc<dyn TableProvider>,
    schema: SchemaRef,
    files: Vec<ServedFile>,
    relative: String,
}

impl NativeBackend {
    pub fn register(
        dataset: &str,
        folder: &Path,
        relative: &str,
        config: &serde_json::Value,
        probe_deadline: std::time::Duration,
    ) -> Result<NativeBackend, PluginError> {
        // One registration at a time: what a library writes while it is built and probed is
        // then its own, and shown with its failure (`native_stderr`).
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _alone = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let path = folder.join(relative);
        let label = format!("library `{relative}`");
        let library = load(&path, &label)?;
        let label = format!(
            "native plugin `{}` {} (from `{relative}`)",
            library.name, library.version
        );
        let provider = library.create(&label, dataset, folder, config)?;
        let schema = provider.schema();
        let files = crate::wasm_backend::folder_files(folder);
        let backend = NativeBackend {
            dataset: dataset.to_string(),
            label,
            library,
            provider,
            schema,
            files,
            relative: relative.to_string(),
        };
        backend.probe(probe_deadline)?;
        Ok(backend)
    }

    /// The probe read a wasm plugin's registration makes (`wasm_backend`): every column,
    /// no condition, the read a first query makes, so a library that opens its dataset but
    /// cannot read it never enters service and a reload to it keeps the last good version
    /// serving. Bounded by [`PROBE_MEMORY`] and by `deadline`: a read stopped at either says
    /// nothing against the data (a large table is read whole when it is prepared, under the
    /// server's budget and each call's deadline), and is said in the log. A library that
    /// blocks its thread without yielding cannot be stopped: it runs with the server's rights.
    fn probe(&self, deadline: std::time::Duration) -> Result<(), PluginError> {
        let columns = crate::wasm_backend::column_names(&self.schema);
        let meter = crate::wasm_backend::probe_meter(&self.label, PROBE_MEMORY);
        // A thread of its own with a runtime of its own: registration may run on a thread of
        // the server's runtime, where blocking on another is refused.
        let read = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(StorageError::internal)?;
                    // The timer is made inside the runtime (it needs its time driver).
                    let read = async {
                        tokio::time::timeout(deadline, self.load(&columns, &[], &meter)).await
                    };
                    match runtime.block_on(read) {
                        Ok(read) => read.map(drop),
                        Err(_) => {
                            tracing::warn!(
                                dataset = %self.dataset,
                                "{}: the probe read of its data did not finish within {:.1} s; it is served unproven",
                                self.label,
                                deadline.as_secs_f64()
                            );
                            Ok(())
                        }
                    }
                })
                .join()
        })
        .map_err(|_| {
            crate::wasm_backend::probe_refused(
                format!("{} panicked while its data was read", self.label),
                "this is a fault of the plugin",
            )
        })?;
        crate::wasm_backend::probe_outcome(
            read,
            "fix the dataset's files or backend.config as the message says; if they are right, this is a fault of the plugin",
        )
    }
}

/// What the probe read of a native dataset may hold before it stops (and passes).
const PROBE_MEMORY: usize = 256 * 1024 * 1024;

#[async_trait]
impl Backend for NativeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn row_count(&self) -> Option<u64> {
        None
    }

    fn files(&self) -> Vec<ServedFile> {
        self.files.clone()
    }

    fn fingerprint(&self) -> Vec<u8> {
        let mut f = self.library.sha256.clone().into_bytes();
        tally_storage::backend::stamp_files(&mut f, &self.files);
        f
    }

    fn pushdown_columns(&self) -> Vec<String> {
        // The provider says per condition what it runs itself; offering every column lets it.
        crate::wasm_backend::column_names(&self.schema)
    }

    fn describe(&self) -> BackendDescription {
        BackendDescription {
            plugin: Some(self.library.name.clone()),
            plugin_version: Some(self.library.version.clone()),
            library: Some(self.relative.clone()),
            library_sha256: Some(self.library.sha256.clone()),
            trust: Some(
                "runs with the server's full rights (loaded because the server allows native plugins)",
            ),
            ..BackendDescription::of(BackendKind::Native)
        }
    }

    async fn load(
        &self,
        columns: &[String],
        pushed: &[Pushed],
        meter: &tally_storage::memory::Meter,
    ) -> Result<LoadedData, StorageError> {
        // DataFusion's errors carry the plugin's own text (its errors, its plans' names),
        // followed by what it wrote to stderr during the read.
        let mark = crate::native_stderr::Mark::now();
        let fail = |e: &dyn std::fmt::Display| StorageError::Backend {
            dataset: self.dataset.clone(),
            message: format!(
                "{} failed: {}{}",
                self.label,
                escape_controls(&e.to_string(), Lines::Kept),
                mark.said()
            ),
        };
        let (ctx, _) = session();
        let mut df = ctx
            .read_table(Arc::clone(&self.provider))
            .map_err(|e| fail(&e))?;
        // Equality only: this backend pushes no ranges (`prunes_ranges` is false).
        for p in pushed {
            let Test::Equals(values) = &p.test else {
                continue;
            };
            let condition: Expr = match values.as_slice() {
                [one] => col(p.column.as_str()).eq(lit(one.clone())),
                many => col(p.column.as_str())
                    .in_list(many.iter().map(|v| lit(v.clone())).collect(), false),
            };
            df = df.filter(condition).map_err(|e| fail(&e))?;
        }
        let wanted: Vec<Expr> = columns
            .iter()
            .filter(|c| self.schema.index_of(c).is_ok())
            .map(|c| col(c.as_str()))
            .collect();
        let df = df.select(wanted).map_err(|e| fail(&e))?;
        let plan = df.create_physical_plan().await.map_err(|e| fail(&e))?;
        tracing::debug!("native plan:\n{}", displayable(plan.as_ref()).indent(false));
        let task = ctx.task_ctx();
        let mut stream = datafusion::physical_plan::execute_stream(Arc::clone(&plan), task)
            .map_err(|e| fail(&e))?;
        let mut batches = Vec::new();
        while let Some(batch) = futures::StreamExt::next(&mut stream).await {
            let batch = batch.map_err(|e| fail(&e))?;
            meter.account(batch.get_array_memory_size(), batch.num_rows())?;
            batches.push(batch);
        }
        let schema = plan.schema();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let mut ipc = Vec::new();
        {
            let mut w = datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut ipc, &schema)
                .map_err(|e| fail(&e))?;
            for b in &batches {
                w.write(b).map_err(|e| fail(&e))?;
            }
            w.finish().map_err(|e| fail(&e))?;
        }
        let table = MemTable::try_new(schema, vec![batches]).map_err(|e| fail(&e))?;
        // What the plugin's own plans said they ran (e.g. `SQLite: SELECT … WHERE … (12
        // rows)`): the names of the plan nodes that crossed the boundary.
        let mut ran = Vec::new();
        foreign_plans(&plan, &mut ran);
        Ok(LoadedData {
            provider: Arc::new(table),
            files: vec![ServedFile {
                path: format!("the rows returned by {}", self.label),
                size: ipc.len() as u64,
                sha256: sha256_hex(&ipc),
                modified: None,
                object: None,
            }],
            extract: Some(format!(
                "{}, library sha256 {}{}; {rows} rows{}",
                self.label,
                self.library.sha256,
                if pushed.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", asked for {}",
                        pushed
                            .iter()
                            .map(Pushed::describe)
                            .collect::<Vec<_>>()
                            .join(" and ")
                    )
                },
                if ran.is_empty() {
                    String::new()
                } else {
                    format!("; the plugin ran: {}", ran.join(" / "))
                }
            )),
            notes: Vec::new(),
            row_sources: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_folders_are_new_unpredictable_and_closed() {
        let a = private_dir().expect("a private folder");
        let b = private_dir().expect("another private folder");
        assert_ne!(a, b, "two loads never share a folder");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "only this user may enter {}", a.display());
        }
        let file = a.join("lib.so");
        write_new(&file, b"x").expect("a new file");
        // A file someone placed first is never written into (and so never loaded).
        assert!(write_new(&file, b"y").is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_dir(&a).unwrap();
        std::fs::remove_dir(&b).unwrap();
    }
}
