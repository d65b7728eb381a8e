//! Tally's plugin host: the backends that run code a dataset folder brings.
//!
//! - [`wasm`]: the sandbox for WebAssembly components (wasmtime): one bindings module per
//!   plugin API version under `plugin-api/wit/since_v*`, chosen by the version a component
//!   declares; [`wasm_backend`] serves a dataset from a component.
//! - `native` (the `native` feature): the loader of native plugins (shared libraries over
//!   datafusion-ffi), which run with the server's full rights and load only when the server
//!   allows them. A build without it refuses `kind: native` datasets, saying what works.
//!
//! Each is a [`BackendFactory`] registered into the engine's [`Backends`] by the binary
//! ([`backends`]); the engine knows neither.
//!
//! Architecture invariant: the only crate that links wasmtime, libloading or datafusion-ffi.
//! Everything a plugin reports reaches the engine as a [`tally_storage::Backend`]: a schema, a
//! fingerprint and rows with their sources.

use std::path::Path;
use std::sync::Arc;

use tally_semantic::definition::{BackendKind, DatasetDef, PluginRef};
use tally_storage::backend::{Backend, BackendFactory, Backends};
use tally_storage::problem::{Problem, Refusal};

pub mod code_cache;
pub mod error;
pub mod failures;
#[cfg(feature = "native")]
pub mod native;
pub mod native_stderr;
pub mod probe;
pub mod stderr;
pub mod wasm;
pub mod wasm_backend;

pub use code_cache::CodeCache;
pub use error::PluginError;
pub use wasm::PluginLimits;

/// What plugins may do on this server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginOptions {
    /// The sandbox limits of every wasm plugin call.
    pub limits: PluginLimits,
    /// Whether native plugins (shared libraries, with the server's full rights) may load.
    pub allow_native: bool,
    /// Where compiled wasm components are kept across starts (none: compiled at every
    /// start).
    pub code_cache: Option<CodeCache>,
}

/// The built-in backends plus wasm components and native libraries.
pub fn backends(options: PluginOptions) -> Backends {
    Backends::builtin()
        .with(WasmFactory {
            limits: options.limits,
            code_cache: options.code_cache,
        })
        .with(NativeFactory {
            allow: options.allow_native,
            probe_deadline: options.limits.deadline,
        })
}

/// Builds `kind: wasm` datasets: a component in the folder or a built-in one.
#[derive(Debug, Clone)]
pub struct WasmFactory {
    pub limits: PluginLimits,
    pub code_cache: Option<CodeCache>,
}

impl BackendFactory for WasmFactory {
    fn kind(&self) -> BackendKind {
        BackendKind::Wasm
    }

    fn create(&self, def: &DatasetDef, folder: &Path) -> Result<Arc<dyn Backend>, Refusal> {
        let Some(plugin) = &def.backend.plugin else {
            return Err(Refusal::from(vec![Problem::plain(
                "a wasm backend names no component",
                "add `component: <file>.wasm` (a file in this folder) or `component: builtin:<name>` under `backend:`",
            )]));
        };
        if let PluginRef::File(f) = plugin
            && !folder.join(f).is_file()
        {
            // The definition may have been copied before its component.
            return Err(Refusal {
                problems: vec![Problem {
                    line: None,
                    key: "backend.component".into(),
                    reason: format!("the component `{f}` is not in the dataset folder"),
                    fix: "put the .wasm component there, or name a built-in one with `builtin:<name>`".into(),
                }],
                maybe_incomplete: true,
                data_gone: false,
            });
        }
        let backend = wasm_backend::WasmBackend::register(
            &def.id,
            folder,
            plugin,
            &def.backend.config,
            self.limits,
            self.code_cache.as_ref(),
        )
        .map_err(|e| e.refusal("backend"))?;
        Ok(Arc::new(backend))
    }
}

/// Builds `kind: native` datasets from a shared library in the folder, when allowed.
#[derive(Debug, Clone, Copy)]
pub struct NativeFactory {
    pub allow: bool,
    /// How long the probe read at registration may take (the wasm plugins' call deadline):
    /// past it, it stops and the dataset is served (the probe proved nothing against it).
    #[cfg_attr(not(feature = "native"), allow(dead_code))]
    pub probe_deadline: std::time::Duration,
}

impl BackendFactory for NativeFactory {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn create(&self, def: &DatasetDef, folder: &Path) -> Result<Arc<dyn Backend>, Refusal> {
        let Some(PluginRef::File(library)) = &def.backend.plugin else {
            return Err(Refusal::from(vec![Problem::plain(
                "a native backend names no library file",
                "add `library: <file>` (a shared library in this folder) under `backend:`",
            )]));
        };
        self.load(def, folder, library)
    }
}

impl NativeFactory {
    #[cfg(feature = "native")]
    fn load(
        &self,
        def: &DatasetDef,
        folder: &Path,
        library: &str,
    ) -> Result<Arc<dyn Backend>, Refusal> {
        if !self.allow {
            return Err(Refusal::from(vec![Problem {
                line: None,
                key: "backend.kind".into(),
                reason: format!(
                    "native plugins are not allowed on this server, so `{library}` was not loaded: a native plugin runs with the server's full rights"
                ),
                fix: "start tally with --allow-native (or TALLY_ALLOW_NATIVE=1) if you trust this library, or serve the data another way".into(),
            }]));
        }
        if !folder.join(library).is_file() {
            return Err(Refusal {
                problems: vec![Problem {
                    line: None,
                    key: "backend.library".into(),
                    reason: format!("the library `{library}` is not in the dataset folder"),
                    fix: "put the shared library there under that name".into(),
                }],
                maybe_incomplete: true,
                data_gone: false,
            });
        }
        let backend = native::NativeBackend::register(
            &def.id,
            folder,
            library,
            &def.backend.config,
            self.probe_deadline,
        )
        .map_err(|e| e.refusal("backend"))?;
        Ok(Arc::new(backend))
    }

    /// A build without native plugins refuses every `kind: native` dataset, saying how to get
    /// one that loads them (and that `--allow-native` cannot, when it was given).
    #[cfg(not(feature = "native"))]
    fn load(
        &self,
        _def: &DatasetDef,
        _folder: &Path,
        library: &str,
    ) -> Result<Arc<dyn Backend>, Refusal> {
        Err(not_built(library, self.allow))
    }
}

/// What a build without native plugins says of a `kind: native` dataset: how to get a build
/// that loads it, and that `--allow-native` cannot, when it was given. (Compiled in every
/// build, so that its test runs in the one CI tests.)
#[cfg_attr(feature = "native", allow(dead_code))]
fn not_built(library: &str, allowed: bool) -> Refusal {
    let allowed = if allowed {
        " (--allow-native was given, but it cannot add what the build left out)"
    } else {
        ""
    };
    Refusal::from(vec![Problem {
        line: None,
        key: "backend.kind".into(),
        reason: format!(
            "this tally was built without native plugins, so `{library}` was not loaded{allowed}"
        ),
        fix: "use a build that loads them: a release archive, or `cargo install --locked --path host/server --features native-plugins` (or `--features full`); or serve the data another way (a wasm plugin, or Parquet)".into(),
    }])
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_build_without_native_plugins_says_which_build_loads_them() {
        let refusal = super::not_built("libsurvey.so", true);
        let [problem] = refusal.problems.as_slice() else {
            panic!("one problem: {refusal:?}");
        };
        assert_eq!(problem.key, "backend.kind");
        assert!(
            problem.reason.contains("`libsurvey.so` was not loaded"),
            "{}",
            problem.reason
        );
        assert!(
            problem.reason.contains("--allow-native was given"),
            "{}",
            problem.reason
        );
        assert!(
            problem.fix.contains("--features native-plugins"),
            "{}",
            problem.fix
        );
        let quiet = super::not_built("libsurvey.so", false);
        assert!(
            !quiet.problems[0].reason.contains("--allow-native"),
            "{quiet:?}"
        );
    }
}
