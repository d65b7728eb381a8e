//! The plugin API versions this host speaks: one bindings module per version, the types of
//! the newest (the host's), a component bound and instantiated in the version it speaks,
//! and which version that is.

use wasmtime::component::Component;
use wasmtime::{Engine, Store};

use tally_plugin_api::{PLUGIN_API_VERSION, SOURCE_INTERFACE};

use super::sandbox::State;
use crate::error::PluginError;

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
pub(super) enum Pre {
    V0_1_0(since_v0_1_0::SourcePluginPre<State>),
}

/// One instance of a component, in the version it speaks.
pub(super) enum Instance {
    V0_1_0(since_v0_1_0::SourcePlugin),
}

impl Pre {
    pub(super) fn bind(
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

    pub(super) fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Instance> {
        match self {
            Pre::V0_1_0(pre) => pre.instantiate(store).map(Instance::V0_1_0),
        }
    }
}

/// The plugin API version a component speaks, among those this host supports; refuses a
/// component that exports the source interface of no supported version.
pub(super) fn check_api_version(
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
