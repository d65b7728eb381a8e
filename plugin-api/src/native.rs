//! Native plugins: a shared library that hands Tally a DataFusion table provider.
//!
//! # The entry point
//!
//! A native plugin is a `cdylib` exporting one C function, [`ENTRY_POINT`]
//! (`tally_native_plugin_v0`), that returns a pointer to a static [`Descriptor`]. The host
//! reads the descriptor's first fields — plain integers: [`MAGIC`], the plugin API version
//! and the DataFusion major version — and refuses the library, naming both versions, before
//! it touches anything else: a provider built with another DataFusion does not fit this
//! host's (a mismatch crashes rather than fails). Then it calls `create` with the dataset's
//! `config` as JSON and the host session's logical codec; `create` writes an
//! [`FFI_TableProvider`] (datafusion-ffi, the same version on both sides) or an error
//! message into buffers the host owns, so nothing allocated by one side is freed by the
//! other.
//!
//! # Panics
//!
//! datafusion-ffi has no unwind guard: a panic that crosses the C boundary aborts the host.
//! [`export_native_plugin!`] wraps the constructor, and the provider it returns is wrapped
//! in [`Guarded`]: `scan`, `supports_filters_pushdown`, every plan's `execute` and every
//! poll of every stream run under `catch_unwind`, and a panic becomes an error naming the
//! plugin. (`schema` is read once, under the guard, when the provider is built; `statistics`
//! and `table_type` cannot fail, so a panic there gives "unknown" and "base table".) Build
//! plugins with `panic = "unwind"` (the default).
//!
//! # Trust
//!
//! A native plugin runs with the server's full rights. The host loads one only when told to
//! (`--allow-native`), never unloads one (a changed library is loaded beside the old one),
//! and loads each from a private copy so a file replaced on disk never changes mapped code.
//!
//! ```ignore
//! fn open(context: &tally_plugin_api::native::Context) -> Result<Arc<dyn TableProvider>, String> { … }
//! tally_plugin_api::export_native_plugin!("sqlite", open);
//! ```

#![allow(unsafe_code)]

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::datasource::TableType;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
pub use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
pub use datafusion_ffi::table_provider::FFI_TableProvider;
use futures::{FutureExt, Stream, StreamExt};

/// The symbol every native plugin exports.
pub const ENTRY_POINT: &str = "tally_native_plugin_v0";

/// The first field of every descriptor: "TALLYNTV".
pub const MAGIC: u64 = u64::from_le_bytes(*b"TALLYNTV");

/// The DataFusion major version this crate is built with (checked against datafusion-ffi
/// in a test).
pub const DATAFUSION_MAJOR: u32 = 55;

/// `create`: a [`Context`] as JSON in, an FFI provider or an error message out (both into
/// buffers the host owns). Returns 0 on success.
pub type CreateFn = unsafe extern "C" fn(
    config: *const u8,
    config_len: usize,
    codec: *const FFI_LogicalExtensionCodec,
    out: *mut FFI_TableProvider,
    error: *mut u8,
    error_capacity: usize,
    error_len: *mut usize,
) -> i32;

/// The native plugin ABI this host speaks (major, minor, 0): the layout of [`Descriptor`] and
/// the `create` call. It is versioned apart from [`crate::PLUGIN_API_VERSION`], which follows
/// the WIT package of wasm plugins: an addition to the WIT changes that version and leaves
/// every native plugin loadable. A host loads a plugin of the same major and a minor up to its
/// own (a minor adds to the descriptor's end, which an older plugin does not have and a newer
/// host does not read from it); any other is refused, naming both.
pub const NATIVE_ABI_VERSION: [u32; 3] = [1, 0, 0];

/// Whether a host of [`NATIVE_ABI_VERSION`] can load a plugin built for `plugin`.
pub fn abi_compatible(plugin: [u32; 3]) -> bool {
    plugin[0] == NATIVE_ABI_VERSION[0] && plugin[1] <= NATIVE_ABI_VERSION[1]
}

/// The plain integers every descriptor starts with, in every version: a host reads these
/// (and only these) before it forms any reference to the whole [`Descriptor`], whose later
/// fields may differ in a library built for another version.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: u64,
    /// The native ABI (major, minor, 0) the plugin was built for ([`NATIVE_ABI_VERSION`]).
    pub abi_version: [u32; 3],
    /// The DataFusion major version of the plugin's datafusion-ffi.
    pub datafusion_major: u32,
}

/// What the entry point returns a pointer to. The integer fields come first and never move
/// (they are laid out exactly as [`Header`]), so a host of any version can read them.
#[repr(C)]
pub struct Descriptor {
    /// [`MAGIC`].
    pub magic: u64,
    /// The native ABI (major, minor, 0) the plugin was built for ([`NATIVE_ABI_VERSION`]).
    pub abi_version: [u32; 3],
    /// The DataFusion major version of the plugin's datafusion-ffi.
    pub datafusion_major: u32,
    /// The plugin's name, UTF-8, NUL-padded.
    pub name: [u8; 64],
    /// The plugin's own version, UTF-8, NUL-padded.
    pub version: [u8; 32],
    pub create: CreateFn,
}

impl fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Descriptor")
            .field("abi_version", &self.abi_version)
            .field("datafusion_major", &self.datafusion_major)
            .field("name", &text(&self.name))
            .finish()
    }
}

/// A NUL-padded field as text.
pub fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A text as a NUL-padded field (cut to fit).
pub const fn padded<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() && i < N - 1 {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// The native ABI this crate builds plugins for.
pub const fn abi_version() -> [u32; 3] {
    NATIVE_ABI_VERSION
}

/// What the host hands a constructor: the dataset, its folder and its `backend.config`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Context {
    /// The dataset id.
    pub dataset: String,
    /// The dataset folder, absolute (a native plugin runs with the server's rights; paths in
    /// `config` are meant relative to this folder).
    pub folder: std::path::PathBuf,
    /// `backend.config` from dataset.yaml (`{}` when absent).
    pub config: serde_json::Value,
}

impl Context {
    /// A file named in the config, inside the dataset folder; `..` and absolute paths are
    /// refused.
    pub fn file(&self, key: &str) -> std::result::Result<std::path::PathBuf, String> {
        let name = self
            .config
            .get(key)
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| format!("backend.config needs `{key}`: a file in the dataset folder"))?;
        let path = std::path::Path::new(name);
        if path.is_absolute()
            || path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(format!(
                "backend.config `{key}` is `{name}`, which leaves the dataset folder; name a file inside it"
            ));
        }
        Ok(self.folder.join(path))
    }
}

/// What a plugin's constructor looks like.
pub type Constructor = fn(&Context) -> std::result::Result<Arc<dyn TableProvider>, String>;

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

fn panicked(plugin: &str, during: &str, payload: &(dyn Any + Send)) -> DataFusionError {
    DataFusionError::External(
        format!(
            "native plugin `{plugin}` panicked during {during}: {}",
            panic_message(payload)
        )
        .into(),
    )
}

/// The body of `create` (called by the code [`export_native_plugin!`] generates).
///
/// # Safety
///
/// The pointers must be what the host passes: `config` readable for `config_len` bytes,
/// `codec` a live codec, `out` writable for one provider, `error` writable for
/// `error_capacity` bytes, `error_len` writable.
#[allow(clippy::too_many_arguments)]
pub unsafe fn create(
    plugin: &'static str,
    constructor: Constructor,
    config: *const u8,
    config_len: usize,
    codec: *const FFI_LogicalExtensionCodec,
    out: *mut FFI_TableProvider,
    error: *mut u8,
    error_capacity: usize,
    error_len: *mut usize,
) -> i32 {
    // SAFETY: the host passes a buffer of `config_len` readable bytes.
    let config_bytes = unsafe { std::slice::from_raw_parts(config, config_len) };
    // SAFETY: the host passes a live codec for the duration of the call.
    let codec = unsafe { &*codec };
    let built = catch_unwind(AssertUnwindSafe(
        || -> std::result::Result<FFI_TableProvider, String> {
            let context: Context = serde_json::from_slice(config_bytes)
                .map_err(|e| format!("the host passed a context that is not valid JSON: {e}"))?;
            let provider = constructor(&context)?;
            let guarded = Guarded::new(plugin, provider)?;
            Ok(FFI_TableProvider::new_with_ffi_codec(
                Arc::new(guarded),
                true,
                None,
                codec.clone(),
            ))
        },
    ));
    let message = match built {
        Ok(Ok(provider)) => {
            // SAFETY: the host passes storage for one provider, which it then owns.
            unsafe { out.write(provider) };
            return 0;
        }
        Ok(Err(message)) => message,
        Err(payload) => format!(
            "native plugin `{plugin}` panicked while it was being built: {}",
            panic_message(payload.as_ref())
        ),
    };
    let mut end = message.len().min(error_capacity);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    // SAFETY: `error` is writable for `error_capacity` bytes and `end` is within it.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), error, end);
        error_len.write(end);
    }
    1
}

/// Exports a native plugin: `export_native_plugin!("name", constructor)` with `constructor:
/// fn(&Context) -> Result<Arc<dyn TableProvider>, String>`.
#[macro_export]
macro_rules! export_native_plugin {
    ($name:literal, $constructor:ident) => {
        #[allow(unsafe_code)]
        mod __tally_native_export {
            use $crate::native::{Descriptor, FFI_LogicalExtensionCodec, FFI_TableProvider};

            unsafe extern "C" fn create(
                config: *const u8,
                config_len: usize,
                codec: *const FFI_LogicalExtensionCodec,
                out: *mut FFI_TableProvider,
                error: *mut u8,
                error_capacity: usize,
                error_len: *mut usize,
            ) -> i32 {
                // SAFETY: the host calls with the pointers `CreateFn` documents.
                unsafe {
                    $crate::native::create(
                        $name,
                        super::$constructor,
                        config,
                        config_len,
                        codec,
                        out,
                        error,
                        error_capacity,
                        error_len,
                    )
                }
            }

            static DESCRIPTOR: Descriptor = Descriptor {
                magic: $crate::native::MAGIC,
                abi_version: $crate::native::abi_version(),
                datafusion_major: $crate::native::DATAFUSION_MAJOR,
                name: $crate::native::padded($name),
                version: $crate::native::padded(env!("CARGO_PKG_VERSION")),
                create,
            };

            #[unsafe(no_mangle)]
            pub extern "C" fn tally_native_plugin_v0() -> *const Descriptor {
                &DESCRIPTOR
            }
        }
    };
}

/// A provider whose every call runs under `catch_unwind`.
#[derive(Debug)]
pub struct Guarded {
    plugin: &'static str,
    inner: Arc<dyn TableProvider>,
    schema: SchemaRef,
}

impl Guarded {
    /// Wraps a provider, reading its schema once under the guard.
    pub fn new(
        plugin: &'static str,
        inner: Arc<dyn TableProvider>,
    ) -> std::result::Result<Guarded, String> {
        let schema = catch_unwind(AssertUnwindSafe(|| inner.schema())).map_err(|p| {
            format!(
                "native plugin `{plugin}` panicked while giving its schema: {}",
                panic_message(p.as_ref())
            )
        })?;
        Ok(Guarded {
            plugin,
            inner,
            schema,
        })
    }
}

#[async_trait]
impl TableProvider for Guarded {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        catch_unwind(AssertUnwindSafe(|| self.inner.table_type())).unwrap_or(TableType::Base)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        catch_unwind(AssertUnwindSafe(|| {
            self.inner.supports_filters_pushdown(filters)
        }))
        .map_err(|p| panicked(self.plugin, "supports_filters_pushdown", p.as_ref()))?
    }

    fn statistics(&self) -> Option<Statistics> {
        catch_unwind(AssertUnwindSafe(|| self.inner.statistics())).unwrap_or(None)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = AssertUnwindSafe(self.inner.scan(state, projection, filters, limit))
            .catch_unwind()
            .await
            .map_err(|p| panicked(self.plugin, "scan", p.as_ref()))??;
        Ok(Arc::new(GuardedExec {
            plugin: self.plugin,
            inner: plan,
        }))
    }
}

/// A plan whose `execute` and streams run under `catch_unwind`.
#[derive(Debug)]
struct GuardedExec {
    plugin: &'static str,
    inner: Arc<dyn ExecutionPlan>,
}

impl DisplayAs for GuardedExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.fmt_as(t, f)
    }
}

#[allow(deprecated)]
impl ExecutionPlan for GuardedExec {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let stream = catch_unwind(AssertUnwindSafe(|| self.inner.execute(partition, context)))
            .map_err(|p| panicked(self.plugin, "execute", p.as_ref()))??;
        Ok(Box::pin(GuardedStream {
            plugin: self.plugin,
            schema: stream.schema(),
            inner: Some(stream),
        }))
    }
}

/// A stream whose every poll runs under `catch_unwind`; after a panic it ends.
struct GuardedStream {
    plugin: &'static str,
    schema: SchemaRef,
    inner: Option<SendableRecordBatchStream>,
}

impl Stream for GuardedStream {
    type Item = Result<RecordBatch>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Self::Item>> {
        let plugin = self.plugin;
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match catch_unwind(AssertUnwindSafe(|| inner.poll_next_unpin(cx))) {
            Ok(poll) => poll,
            Err(p) => {
                // The stream's state is unknown after a panic: never poll it again.
                self.inner = None;
                Poll::Ready(Some(Err(panicked(plugin, "a stream poll", p.as_ref()))))
            }
        }
    }
}

impl RecordBatchStream for GuardedStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// A leaf plan of one partition that runs a stream made when it executes, named as the
/// plugin likes (`SQLite: SELECT …` shows in the host's plan).
pub struct StreamExec {
    label: String,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    make: Box<dyn Fn() -> SendableRecordBatchStream + Send + Sync>,
}

impl fmt::Debug for StreamExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamExec")
            .field("label", &self.label)
            .finish()
    }
}

impl StreamExec {
    pub fn new(
        label: impl Into<String>,
        schema: SchemaRef,
        make: impl Fn() -> SendableRecordBatchStream + Send + Sync + 'static,
    ) -> StreamExec {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        StreamExec {
            label: label.into(),
            schema,
            properties,
            make: Box::new(make),
        }
    }

    /// A plan over batches already read.
    pub fn batches(
        label: impl Into<String>,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> StreamExec {
        let stream_schema = Arc::clone(&schema);
        StreamExec::new(label, schema, move || {
            let items: Vec<Result<RecordBatch>> = batches.iter().cloned().map(Ok).collect();
            Box::pin(
                datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                    Arc::clone(&stream_schema),
                    futures::stream::iter(items),
                ),
            )
        })
    }
}

impl DisplayAs for StreamExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.label)
    }
}

#[allow(deprecated)]
impl ExecutionPlan for StreamExec {
    fn name(&self) -> &str {
        &self.label
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "{} has one partition, not {partition}",
                self.label
            )));
        }
        let _ = &self.schema;
        Ok((self.make)())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_datafusion_major_is_the_one_linked() {
        assert_eq!(DATAFUSION_MAJOR as u64, datafusion_ffi::version());
        assert_eq!(text(&padded::<8>("sqlite")), "sqlite");
        assert_eq!(text(&padded::<4>("toolong")), "too");
    }

    #[test]
    fn the_abi_admits_older_minors_of_its_major_only() {
        let [major, minor, _] = NATIVE_ABI_VERSION;
        assert!(abi_compatible(NATIVE_ABI_VERSION));
        assert!(abi_compatible([major, 0, 0]));
        assert!(!abi_compatible([major, minor + 1, 0]), "a newer minor");
        assert!(!abi_compatible([major + 1, 0, 0]), "another major");
        assert!(!abi_compatible([9, 0, 0]));
        // The ABI is not the WIT's version: a WIT addition must not refuse native plugins.
        let wit: Vec<u32> = crate::PLUGIN_API_VERSION
            .split('.')
            .filter_map(|p| p.parse().ok())
            .collect();
        assert_eq!(wit.len(), 3, "{}", crate::PLUGIN_API_VERSION);
    }

    #[test]
    fn the_header_is_the_start_of_every_descriptor() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(Header, magic), offset_of!(Descriptor, magic));
        assert_eq!(
            offset_of!(Header, abi_version),
            offset_of!(Descriptor, abi_version)
        );
        assert_eq!(
            offset_of!(Header, datafusion_major),
            offset_of!(Descriptor, datafusion_major)
        );
        assert!(std::mem::size_of::<Header>() <= offset_of!(Descriptor, name));
        assert!(std::mem::align_of::<Header>() <= std::mem::align_of::<Descriptor>());
    }
}
