//! Backends: where a dataset's rows come from.
//!
//! Every backend hands the engine a DataFusion [`TableProvider`]; the semantic layer, the
//! planner and the envelope are the same for all of them. The engine owns the [`Backend`]
//! trait and a registry of [`BackendFactory`]s by [`BackendKind`] (DataFusion's
//! `TableProviderFactory` pattern): the built-in Parquet backend is registered here; wasm and
//! native plugins live in `tally-plugin-host`, which the binary registers. The engine never
//! depends on a plugin runtime.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use sha2::{Digest, Sha256};

use tally_semantic::definition::{BackendKind, DatasetDef};

use crate::error::StorageError;
use crate::memory::Meter;
use crate::problem::{Problem, Refusal};

/// A file a result was computed from, as the envelope cites it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedFile {
    /// Relative to the dataset folder (never an absolute path: it is shown to callers).
    pub path: String,
    pub size: u64,
    /// `sha256:<64 hex>` of the bytes read.
    pub sha256: String,
    pub modified: Option<SystemTime>,
    /// Where the file is an object in object storage: the version read.
    pub object: Option<ObjectVersion>,
}

/// The version of an object a result was computed from, as the envelope cites it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    /// `s3://bucket/key`.
    pub url: String,
    /// The store's ETag (without quotes).
    pub etag: Option<String>,
    /// The store's version id, where the bucket keeps versions.
    pub version: Option<String>,
}

/// A backend's data, ready to query.
#[derive(Debug, Clone)]
pub struct LoadedData {
    pub provider: Arc<dyn TableProvider>,
    /// What the result cites: the first file's hash is the dataset source's content hash.
    pub files: Vec<ServedFile>,
    /// How the rows were read, when "read from <files>" does not say it (plugins).
    pub extract: Option<String>,
    /// Caveats the backend reported, shown with every result on this data.
    pub notes: Vec<String>,
    /// Per row (in the provider's order), where it comes from, when the backend says.
    pub row_sources: Option<Arc<RowSources>>,
}

/// Where each row comes from: a table of distinct sources and, per row, an index into it.
#[derive(Debug, Clone, PartialEq)]
pub struct RowSources {
    pub sources: Vec<RowSource>,
    pub index: Vec<u32>,
}

/// A source one or more rows come from (a document section, a law article).
#[derive(Debug, Clone, PartialEq)]
pub struct RowSource {
    pub uri: String,
    pub title: String,
    pub publisher: Option<String>,
    pub source_type: String,
    pub locator: Option<String>,
    pub published_at: Option<String>,
    pub effective_at: Option<String>,
    /// `sha256:<hex>` of the file the row was read from, when known.
    pub content_hash: Option<String>,
}

/// A condition the backend applies itself, on one column. The engine applies every condition
/// again, so a backend that returns more rows than asked is slower, never wrong; and a
/// condition that cannot be said in these terms is simply not pushed.
///
/// Compared and hashed as a whole: a set of them is the key a dataset's subsets and streams
/// are kept by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Pushed {
    pub column: String,
    pub test: Test,
}

/// What a [`Pushed`] condition asks of its column's value. Ranges are declared first: on
/// the same column they sort before equalities, the order conditions are listed in messages.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Test {
    /// `column <op> value` on a numeric column (only for backends that
    /// [`Backend::prunes_ranges`]).
    Range(Bound),
    /// Equal to any of these (text; a number as its number: `2024`, never `"2024.0"`).
    Equals(Values),
}

/// The values an equality condition accepts: never empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Values(Vec<String>);

impl Values {
    /// `None` for no value (a condition no row satisfies is the engine's to say).
    pub fn new(values: Vec<String>) -> Option<Values> {
        (!values.is_empty()).then_some(Values(values))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    pub fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }
}

/// `column <op> value` on a numeric column: `$gt`, `$gte`, `$lt`, `$lte`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Bound {
    pub op: BoundOp,
    /// The number, parsed once where the condition is made.
    pub value: Number,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum BoundOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// A finite number a [`Bound`] compares with.
///
/// Kept as the `f64` itself and compared, ordered and hashed by its bits (`f64::to_bits`,
/// `f64::total_cmp`, which agree): `Eq` and `Hash` stay sound because a NaN, the one value
/// not equal to itself, is never made (nor an infinity). `0` and `-0` are different keys
/// then, which only keeps two cache entries for the same rows; both hold for the same
/// numbers, and each is written as the request wrote it (`-0`).
#[derive(Debug, Clone, Copy)]
pub struct Number(f64);

impl Number {
    /// `None` for a NaN or an infinity.
    pub fn new(value: f64) -> Option<Number> {
        value.is_finite().then_some(Number(value))
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

impl PartialEq for Number {
    fn eq(&self, other: &Number) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Number {}

impl std::hash::Hash for Number {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Number) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Number) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// As Rust writes the `f64`: `2024`, `2023.5` (how a condition has always been described).
impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl serde::Serialize for Number {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.0)
    }
}

impl Bound {
    /// Whether `number` satisfies the bound.
    pub fn holds(&self, number: f64) -> bool {
        let limit = self.value.get();
        match self.op {
            BoundOp::Gt => number > limit,
            BoundOp::Gte => number >= limit,
            BoundOp::Lt => number < limit,
            BoundOp::Lte => number <= limit,
        }
    }
}

impl Pushed {
    /// `column` equal to any of `values`; `None` for no value.
    pub fn equal(column: impl Into<String>, values: Vec<String>) -> Option<Pushed> {
        Some(Pushed {
            column: column.into(),
            test: Test::Equals(Values::new(values)?),
        })
    }

    /// `column <op> value`.
    pub fn range(column: impl Into<String>, op: BoundOp, value: Number) -> Pushed {
        Pushed {
            column: column.into(),
            test: Test::Range(Bound { op, value }),
        }
    }

    /// `law_id = "x"`, `law_id in ("x", "y")`, `年度` ≥ 2023.
    pub fn describe(&self) -> String {
        match &self.test {
            Test::Range(b) => {
                let op = match b.op {
                    BoundOp::Gt => ">",
                    BoundOp::Gte => "≥",
                    BoundOp::Lt => "<",
                    BoundOp::Lte => "≤",
                };
                format!("`{}` {op} {}", self.column, b.value)
            }
            Test::Equals(values) => match values.as_slice() {
                [one] => format!("`{}` = \"{one}\"", self.column),
                many => format!(
                    "`{}` in ({})",
                    self.column,
                    many.iter()
                        .map(|v| format!("\"{v}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        }
    }
}

/// What the scans of one call over a streamed table read of its files.
#[derive(Debug, Default)]
pub struct ReadCounts {
    /// Row groups of the files the call could read.
    pub row_groups: std::sync::atomic::AtomicUsize,
    /// Row groups (file, group) some scan of the call read pages of.
    pub read: std::sync::Mutex<std::collections::BTreeSet<(usize, usize)>>,
}

impl ReadCounts {
    /// Row groups read, and of how many.
    pub fn row_groups(&self) -> (usize, usize) {
        let read = self.read.lock().map(|r| r.len()).unwrap_or(0);
        (
            read,
            self.row_groups.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

/// A dataset's data read from its files at every call, instead of prepared once: what serves
/// data too large for the memory budget, and a large dataset while it is being prepared.
pub trait Streaming: Send + Sync + fmt::Debug {
    /// A table for one call: the fields asked for ([`Backend::stream`]) in the types asked
    /// for, then `__tally_row` (`UInt64`, the record's position in file order, as a prepared
    /// table numbers it), and what the call's scans read of the files.
    fn table(&self) -> (Arc<dyn TableProvider>, Arc<ReadCounts>);
    /// The files it reads, with the hashes of their bytes.
    fn files(&self) -> &[ServedFile];
    /// How the rows are read, when "read from <files>" does not say it (files left out).
    fn extract(&self) -> Option<String>;
    /// The records it reads.
    fn rows(&self) -> usize;
    /// Whether its table reads the text field `field` as dictionary arrays, one dictionary per
    /// chunk as stored, when asked (the streamed table's dictionary columns); else such a
    /// column is made of the text, dearer than the text itself.
    fn dictionary_encoded(&self, _field: &str) -> bool {
        false
    }
    /// Where its files are, for an executor of a cluster to read them itself
    /// ([`crate::source::TableSource`]): the partition keys served, the files, and each
    /// file's key values. `None`: its reads cannot be sent elsewhere.
    #[allow(clippy::type_complexity)]
    fn source_files(
        &self,
    ) -> Option<(
        Vec<String>,
        Vec<crate::source::SourceFile>,
        Vec<Vec<datafusion::common::ScalarValue>>,
    )> {
        None
    }
}

/// The engine's view of a source of rows.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug {
    /// The kind of backend, as `backend.kind` names it.
    fn kind(&self) -> BackendKind;
    /// The columns the source holds, known at registration (before any data is read).
    fn schema(&self) -> SchemaRef;
    /// The number of rows, when known at registration.
    fn row_count(&self) -> Option<u64>;
    /// The files the data comes from, as known at registration (size and time, no hash yet).
    fn files(&self) -> Vec<ServedFile>;
    /// Bytes that change whenever the data changes, known at registration (for Parquet, the
    /// footer); part of the dataset version.
    fn fingerprint(&self) -> Vec<u8>;
    /// Reads the data (only the given columns, by name) for querying; `pushed` holds
    /// conditions on [`Backend::pushdown_columns`] only.
    ///
    /// Whatever the backend holds in memory for the data is accounted with `meter` as it is
    /// read, batch by batch, so a source that expands beyond the server's memory budget is
    /// stopped before it is all in memory.
    async fn load(
        &self,
        columns: &[String],
        pushed: &[Pushed],
        meter: &Meter,
    ) -> Result<LoadedData, StorageError>;
    /// The columns on which the backend applies equality conditions itself.
    fn pushdown_columns(&self) -> Vec<String> {
        Vec::new()
    }
    /// Whether range conditions on numeric [`Backend::pushdown_columns`] are pushed too (as
    /// a [`Test::Range`]); a backend that applies equality only leaves them to the engine.
    fn prunes_ranges(&self) -> bool {
        false
    }
    /// Whether what [`Backend::load`] returns for pushed conditions is always part of what it
    /// returns without them. Then the whole table, once prepared, answers every call and no
    /// subset is read. Not so for a plugin whose conditions select data a whole read leaves
    /// out (older revisions of a law), so by default false.
    fn subsets_of_whole(&self) -> bool {
        false
    }
    /// The content hash a result cites for data read from `files` (as [`LoadedData`] listed
    /// them), and, when it is not simply a file's hash, how it is made (said in the extract
    /// step). By default the first file's hash.
    fn content_hash(&self, files: &[ServedFile]) -> Option<(String, Option<String>)> {
        files
            .first()
            .map(|f| f.sha256.clone())
            .filter(|h| !h.is_empty())
            .map(|h| (h, None))
    }
    /// How the served files were made from the publisher's, when a tool says so (`tally add`
    /// records the input's name, hash, format and sheet in a Parquet footer): said in the
    /// answer's transformations before the extract step.
    fn origin(&self) -> Option<String> {
        None
    }
    /// Why the last read of the whole data failed, while no read of it has succeeded since: a
    /// plugin that describes itself and reads its first row (registration checks that much)
    /// but fails past it. Counted among the broken datasets by `/health`.
    fn read_failure(&self) -> Option<String> {
        None
    }
    /// For data in object storage, the listing it was registered from (keys, sizes, ETags,
    /// versions): compared with a new listing at every `--object-poll`.
    fn remote_listing(&self) -> Option<String> {
        None
    }
    /// What `inspect_dataset` says about the backend.
    fn describe(&self) -> crate::backend::BackendDescription {
        crate::backend::BackendDescription::of(self.kind())
    }
    /// Decodes every page of every column of the data once and lets it go (`tally check`):
    /// a page that does not decode is an error naming its file and column, so a file every
    /// query would fail on is not passed. `held` is told the bytes held while a part is
    /// decoded (0 once let go) and may refuse. Backends without pages have none to read.
    fn read_every_page(
        &self,
        _held: &mut dyn FnMut(usize) -> Result<(), String>,
    ) -> Result<(), String> {
        Ok(())
    }
    /// Whether [`Backend::stream`] can serve the data without preparing it (then no amount of
    /// data is refused for the memory budget).
    fn streams(&self) -> bool {
        false
    }
    /// The data read from the files at every call: `fields` by name with the types the
    /// engine serves them in, and `pushed` conditions as [`Backend::load`] takes them.
    /// `None` when the backend cannot stream.
    async fn stream(
        &self,
        _fields: &[(String, datafusion::arrow::datatypes::DataType)],
        _pushed: &[Pushed],
        _budget: &Arc<crate::memory::Budget>,
    ) -> Option<Result<Arc<dyn Streaming>, StorageError>> {
        None
    }
}

/// Builds the backend of one kind for a dataset: what a dataset folder names under
/// `backend:` is handed to the factory registered for its kind.
pub trait BackendFactory: Send + Sync + fmt::Debug {
    /// The kind this factory builds.
    fn kind(&self) -> BackendKind;
    /// Builds the backend for `def`, whose folder is `folder` (files it names are already
    /// checked to lie inside it). Reads metadata only: data is read by [`Backend::load`].
    /// A refusal names the `dataset.yaml` key at fault and what would work.
    fn create(&self, def: &DatasetDef, folder: &Path) -> Result<Arc<dyn Backend>, Refusal>;
}

/// The backends a server can build, by kind. Cloning shares the factories.
#[derive(Clone, Debug)]
pub struct Backends {
    factories: std::collections::BTreeMap<BackendKind, Arc<dyn BackendFactory>>,
}

impl Backends {
    /// No backend at all; [`Backends::builtin`] (the crate root's) adds the Parquet one,
    /// which is defined above this module.
    pub fn empty() -> Backends {
        Backends {
            factories: Default::default(),
        }
    }

    /// Adds (or replaces) the factory of its kind.
    pub fn with(mut self, factory: impl BackendFactory + 'static) -> Backends {
        self.factories.insert(factory.kind(), Arc::new(factory));
        self
    }

    /// The factory for `kind`, when this server has one.
    pub fn get(&self, kind: BackendKind) -> Option<&Arc<dyn BackendFactory>> {
        self.factories.get(&kind)
    }

    /// The kinds this server can serve.
    pub fn kinds(&self) -> impl Iterator<Item = BackendKind> + '_ {
        self.factories.keys().copied()
    }

    /// Builds the backend `def` names, or refuses with the key at fault.
    pub fn create(&self, def: &DatasetDef, folder: &Path) -> Result<Arc<dyn Backend>, Refusal> {
        let kind = def.backend.kind;
        match self.get(kind) {
            Some(factory) => factory.create(def, folder),
            None => Err(Refusal::from(vec![Problem {
                line: None,
                key: "backend.kind".into(),
                reason: format!("this server has no `{kind}` backend"),
                fix: format!(
                    "use one of the kinds it serves ({}), or run the `tally` binary, which serves wasm and native plugins",
                    self.kinds()
                        .map(BackendKind::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }])),
        }
    }
}

/// Appends each file's path, size and modification time: bytes that change whenever a file of
/// a plugin's folder does (part of a plugin dataset's version).
pub fn stamp_files(out: &mut Vec<u8>, files: &[ServedFile]) {
    for file in files {
        out.extend_from_slice(file.path.as_bytes());
        out.extend_from_slice(&file.size.to_le_bytes());
        let nanos = file
            .modified
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        out.extend_from_slice(&nanos.to_le_bytes());
    }
}

/// `sha256:<hex>` of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_digest(Sha256::digest(bytes).as_slice())
}

/// `sha256:<hex>` of a file, read in blocks (never whole into memory).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut block = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            break;
        }
        hasher.update(&block[..n]);
    }
    Ok(hex_digest(hasher.finalize().as_slice()))
}

pub(crate) fn hex_digest(digest: &[u8]) -> String {
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A plugin's sandbox, as it runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sandbox {
    pub files: &'static str,
    pub network: bool,
    pub deadline_ms: u64,
    pub memory_bytes: u64,
    pub output_bytes: u64,
}

/// Where the records come from: the kind of backend and, for plugins, the plugin, its
/// version, its code's hash and its sandbox.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendDescription {
    pub kind: BackendKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filters_applied_by_plugin: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
}

impl BackendDescription {
    /// A backend described by its kind alone.
    pub fn of(kind: BackendKind) -> BackendDescription {
        BackendDescription {
            kind,
            plugin: None,
            plugin_version: None,
            summary: None,
            component: None,
            component_sha256: None,
            library: None,
            library_sha256: None,
            trust: None,
            filters_applied_by_plugin: None,
            sandbox: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Bound, BoundOp, Number, Pushed, Test};

    fn range(op: BoundOp, value: f64) -> Pushed {
        Pushed::range("年度", op, Number::new(value).expect("finite"))
    }

    #[test]
    fn a_range_compares_its_parsed_bound_as_a_number() {
        // As text, "9" sorts after "10"; as numbers it is below.
        let Test::Range(bound) = range(BoundOp::Lt, 10.0).test else {
            unreachable!()
        };
        assert_eq!(bound.value.get(), 10.0);
        assert!(bound.holds(9.0) && bound.holds(-1e9) && !bound.holds(10.0));
        let cases = [
            (BoundOp::Gt, [false, false, true]),
            (BoundOp::Gte, [false, true, true]),
            (BoundOp::Lt, [true, false, false]),
            (BoundOp::Lte, [true, true, false]),
        ];
        for (op, expected) in cases {
            let bound = Bound {
                op,
                value: Number::new(2023.5).expect("finite"),
            };
            let got = [2023.0, 2023.5, 2024.0].map(|n| bound.holds(n));
            assert_eq!(got, expected, "{op:?}");
        }
    }

    #[test]
    fn a_number_is_finite_and_equal_and_hashed_by_its_value() {
        use std::collections::HashSet;
        assert!(Number::new(f64::NAN).is_none());
        assert!(Number::new(f64::INFINITY).is_none());
        assert!(Number::new(f64::NEG_INFINITY).is_none());
        // Cache keys: the same condition made twice is one key; another bound another.
        let keys: HashSet<Pushed> = [
            range(BoundOp::Gte, 2023.0),
            range(BoundOp::Gte, 2023.0),
            range(BoundOp::Gte, 2024.0),
            range(BoundOp::Gt, 2023.0),
        ]
        .into_iter()
        .collect();
        assert_eq!(keys.len(), 3);
        // Ordered as numbers, not as text.
        assert!(range(BoundOp::Lt, 9.0) < range(BoundOp::Lt, 10.0));
    }

    #[test]
    fn an_equality_has_a_value() {
        assert_eq!(Pushed::equal("law_id", Vec::new()), None);
    }

    #[test]
    fn pushed_conditions_are_described_as_before() {
        let equal = |values: &[&str]| {
            Pushed::equal("law_id", values.iter().map(|v| v.to_string()).collect())
                .expect("a value")
                .describe()
        };
        assert_eq!(equal(&["x"]), "`law_id` = \"x\"");
        assert_eq!(equal(&["x", "y"]), "`law_id` in (\"x\", \"y\")");
        for (op, value, said) in [
            (BoundOp::Gt, 2023.5, "`年度` > 2023.5"),
            (BoundOp::Gte, 2023.0, "`年度` ≥ 2023"),
            (BoundOp::Lt, 2024.0, "`年度` < 2024"),
            (BoundOp::Lte, -1.25, "`年度` ≤ -1.25"),
        ] {
            assert_eq!(range(op, value).describe(), said);
        }
    }

    #[test]
    fn ranges_sort_before_equalities_on_the_same_column() {
        let mut pushed = [
            Pushed::equal("年度", vec!["2024".into()]).expect("a value"),
            range(BoundOp::Gte, 2023.0),
            Pushed::equal("a", vec!["x".into()]).expect("a value"),
        ];
        pushed.sort();
        let said: Vec<String> = pushed.iter().map(Pushed::describe).collect();
        assert_eq!(said, ["`a` = \"x\"", "`年度` ≥ 2023", "`年度` = \"2024\""]);
    }
}
