//! The result of each tool, as types: what `data` holds in an envelope. The published output
//! schemas are derived from these types ([`crate::schema`]), so a key cannot be misspelt or
//! drift from its schema. Field order is the order keys are sent in. The doc comments of the
//! fields are published as their schema descriptions: they speak to a client.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Serialize, Serializer};
use serde_json::Value;
use tally_semantic::definition::{Aggregation, BackendKind, DataType, Grain, Mode, Role};
use tally_semantic::resolve::{Resolution, ValueKind};

/// The schema of a closed vocabulary, from its one table.
fn vocabulary<'a>(values: impl IntoIterator<Item = &'a str>) -> Schema {
    let values: Vec<&str> = values.into_iter().collect();
    json_schema!({ "enum": values })
}

pub(crate) fn roles(_: &mut SchemaGenerator) -> Schema {
    vocabulary(Role::ALL.map(Role::as_str))
}

pub(crate) fn data_types(_: &mut SchemaGenerator) -> Schema {
    vocabulary(DataType::ALL.map(DataType::as_str))
}

pub(crate) fn value_kinds(_: &mut SchemaGenerator) -> Schema {
    vocabulary(ValueKind::ALL.map(ValueKind::as_str))
}

pub(crate) fn grains(_: &mut SchemaGenerator) -> Schema {
    vocabulary(Grain::ALL.map(Grain::as_str))
}

pub(crate) fn aggregations(_: &mut SchemaGenerator) -> Schema {
    vocabulary(Aggregation::ALL.map(Aggregation::as_str))
}

pub(crate) fn modes(_: &mut SchemaGenerator) -> Schema {
    vocabulary(Mode::ALL.map(Mode::as_str))
}

pub(crate) fn backend_kinds(_: &mut SchemaGenerator) -> Schema {
    vocabulary(BackendKind::ALL.map(BackendKind::as_str))
}

/// A date or a date-time, as sources give them (never padded to a made-up time).
pub(crate) fn date_or_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "anyOf": [ { "type": "string", "format": "date" }, { "type": "string", "format": "date-time" } ] })
}

fn date_or_time_or_null(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "anyOf": [ { "type": "string", "format": "date" }, { "type": "string", "format": "date-time" }, { "type": "null" } ] })
}

/// One value of a column, as JSON: a multi-value field's parts are an array.
#[derive(Debug)]
pub enum Cell {}

impl JsonSchema for Cell {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "cell".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": ["string", "number", "integer", "boolean", "null", "array"] })
    }
}

/// Any JSON value of an answer (a value that changed may be a number, a text, a list, or a
/// part of the answer that is an object).
#[derive(Debug)]
pub enum AnyValue {}

impl JsonSchema for AnyValue {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "any_value".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": ["string", "number", "integer", "boolean", "null", "array", "object"] })
    }
}

/// A name or code read in another form than typed (input → canonical).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "resolved")]
pub struct ResolvedName {
    pub parameter: String,
    pub input: String,
    pub canonical: String,
    /// Who chose the name when the one typed was ambiguous: `the user`, asked through the
    /// client (elicitation). Absent when the server matched it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen_by: Option<String>,
}

impl From<&Resolution> for ResolvedName {
    fn from(r: &Resolution) -> ResolvedName {
        ResolvedName {
            parameter: r.parameter.clone(),
            input: r.input.clone(),
            canonical: r.canonical.clone(),
            chosen_by: None,
        }
    }
}

/// The resolved names of a call, for its result: those its user chose say so.
pub fn resolved_names(
    resolved: &[Resolution],
    chosen: &[tally_semantic::resolve::Choice],
) -> Vec<ResolvedName> {
    resolved
        .iter()
        .map(|r| {
            let mut name = ResolvedName::from(r);
            if chosen
                .iter()
                .any(|c| c.parameter == r.parameter && c.input == r.input && c.name == r.canonical)
            {
                name.chosen_by = Some("the user".to_string());
            }
            name
        })
        .collect()
}

/// How a field's values are coded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodelistKind {
    Static,
    Auto,
    AutoSplit,
}

impl CodelistKind {
    pub fn of(codelist: &tally_semantic::definition::Codelist) -> CodelistKind {
        use tally_semantic::definition::Codelist;
        match codelist {
            Codelist::Static(_) => CodelistKind::Static,
            Codelist::Auto => CodelistKind::Auto,
            Codelist::AutoSplit => CodelistKind::AutoSplit,
        }
    }
}

/// The meaning of a returned field.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(rename = "fieldMeta")]
pub struct FieldMeta {
    pub name: String,
    #[schemars(schema_with = "roles")]
    pub role: Role,
    #[schemars(schema_with = "data_types")]
    pub data_type: DataType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_value_separator: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codelist: Option<CodelistKind>,
    /// What a value is counted in, when the definition declares it (measures only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The period a measure's values are of, when the definition declares it (`period:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
}

/// The notes of one field the call used.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FieldNotes {
    pub field: String,
    pub notes: Vec<String>,
}

/// What every record or group result carries after its own keys: caveats, how names were
/// read, the call as resolved and the sources cited.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Context {
    pub notes: Vec<FieldNotes>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dataset_notes: Vec<String>,
    pub resolved_fields: Vec<ResolvedName>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
    /// The call as resolved, with canonical names.
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub parameters: Value,
    #[serde(rename = "sourceRefs")]
    #[schemars(length(min = 1))]
    pub source_refs: Vec<String>,
    /// Per row (parallel to rows): the sources that row comes from, when a backend reports
    /// them.
    #[serde(rename = "rowSourceRefs", skip_serializing_if = "Option::is_none")]
    pub row_source_refs: Option<Vec<Vec<String>>>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A column the page does not show, and why.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OmittedColumn {
    pub field: String,
    pub reason: String,
}

/// `query_records`: one page of matching records.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct QueryResult {
    pub dataset_id: String,
    /// The version of definition and data this result was computed on; a cursor from another
    /// version is refused.
    pub dataset_version: String,
    pub columns: Vec<String>,
    #[schemars(with = "Vec<Vec<Cell>>")]
    pub rows: Vec<Vec<Value>>,
    pub total: usize,
    pub offset: usize,
    pub returned: usize,
    pub next_cursor: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub truncated: bool,
    pub field_metadata: Vec<FieldMeta>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub omitted_columns: Vec<OmittedColumn>,
    #[serde(flatten)]
    pub context: Context,
}

/// How one metric column was computed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MetricMeta {
    pub column: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounded_to_decimals: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub null_excluded_column: Option<String>,
    /// What a value is: `count` and `sum` add up across groups; `share` is a share of
    /// records between 0 and 1 (views show a percentage); `ratio` is a ratio of sums;
    /// `average`, `min`, `max` of a measure. Charts and views read this, never the name.
    #[schemars(schema_with = "value_kinds")]
    pub kind: ValueKind,
    /// What a value is counted in, when the definition declares it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// How the measure adds up, when the definition declares it: `flow` (sums over periods
    /// and areas), `stock` (a level: sums over areas, not over periods), `rate` (never
    /// summed; averaged by its weight).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "aggregations")]
    pub aggregation: Option<Aggregation>,
    /// The period the metric's measure is of, when the definition declares it (`period:`);
    /// for a ratio, its numerator's and denominator's when they differ (`2020 / 2015`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
}

/// Counts by name, sent as a JSON object in the order given.
#[derive(Debug, Clone, Default)]
pub struct CountsByName(pub Vec<(String, u64)>);

impl Serialize for CountsByName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl JsonSchema for CountsByName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "countsByName".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "object", "additionalProperties": { "type": "integer", "minimum": 0 } })
    }
}

/// `summarize_records`: groups with their metrics.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SummaryResult {
    pub dataset_id: String,
    /// The version of definition and data this result was computed on.
    pub dataset_version: String,
    pub columns: Vec<String>,
    #[schemars(with = "Vec<Vec<Cell>>")]
    pub rows: Vec<Vec<Value>>,
    pub total_group_count: usize,
    pub returned: usize,
    #[serde(skip_serializing_if = "is_false")]
    pub truncated: bool,
    pub total_records: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_explode_records: Option<usize>,
    /// Per exploded field, the matched records that have no value in it: they form no group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_without_value: Option<CountsByName>,
    pub field_metadata: Vec<FieldMeta>,
    pub metrics: Vec<MetricMeta>,
    #[serde(flatten)]
    pub context: Context,
}

/// One dataset as `list_datasets` shows it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DatasetCard {
    pub dataset_id: String,
    /// Identifies the version of definition and data the dataset is served at.
    pub version: String,
    pub title: String,
    pub publisher: Option<String>,
    /// The records of this version: from its files' footers, or, for data a plugin reads,
    /// once counted (in the background after a start); `null` until then. A count that
    /// became known since an answer is not a change of its data (`verify_answer`).
    pub record_count: Option<u64>,
    pub field_count: usize,
    #[schemars(schema_with = "backend_kinds")]
    pub backend: BackendKind,
    #[serde(rename = "sourceRef")]
    pub source_ref: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_or_time")]
    pub as_of_date: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_or_time")]
    pub published_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// `list_datasets`: the datasets served, and the folders that cannot be.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ListResult {
    pub total: usize,
    pub datasets: Vec<DatasetCard>,
    /// Dataset folders that cannot be served, with why.
    pub broken_datasets: Vec<Broken>,
}

/// How well a field is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Quality {
    Fully,
    Mostly,
    Sparse,
}

impl Quality {
    pub fn of(fill_rate: f64) -> Quality {
        if fill_rate >= 1.0 {
            Quality::Fully
        } else if fill_rate >= 0.5 {
            Quality::Mostly
        } else {
            Quality::Sparse
        }
    }
}

/// How a field of law provisions is matched.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LocatorGuide {
    pub kind: &'static str,
    pub form: &'static str,
    pub matching: &'static str,
}

/// A numeric field's statistics over all records.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct NumericStats {
    pub min: Option<serde_json::Number>,
    pub max: Option<serde_json::Number>,
    pub mean: Option<f64>,
    pub zero_count: Option<u64>,
}

/// A value with the number of records (or parts) that hold it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ValueCount {
    #[schemars(with = "Cell")]
    pub value: Value,
    pub count: u64,
    /// The spellings counted together (equal under NFKC).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<String>,
}

/// A static code with its description.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CodeDescription {
    pub value: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A field's static codes: with their descriptions, or (compact) the values only.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Codes {
    Described(Vec<CodeDescription>),
    Values(Vec<String>),
}

/// The most frequent values of a field, most frequent first, always under `top_values`: as
/// objects in full (with the spellings counted together), as `[value, count]` pairs in the
/// compact form. One name for both, so a reader of either form finds them.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum TopValueList {
    /// `detail: "full"`: `{value, count, variants?}`.
    Full(Vec<ValueCount>),
    /// The compact form: `[value, count]`.
    Pairs(#[schemars(with = "Vec<(Cell, u64)>")] Vec<(Value, u64)>),
}

/// The most frequent values of a field: `top_values` in full (objects, with a `note`) or
/// compact (`[value, count]` pairs, no note).
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct TopValues {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distinct_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_values: Option<TopValueList>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl TopValues {
    /// The compact form: the first `n` values as `[value, count]`, without the note (kept
    /// when the values were not counted at all: it says why there are none).
    pub fn shorten(&mut self, n: usize) {
        if self.distinct_count.is_some() {
            self.note = None;
        }
        self.top_values = self.top_values.take().map(|top| {
            TopValueList::Pairs(match top {
                TopValueList::Full(values) => values
                    .into_iter()
                    .take(n)
                    .map(|v| (v.value, v.count))
                    .collect(),
                TopValueList::Pairs(pairs) => pairs.into_iter().take(n).collect(),
            })
        });
    }
}

/// A field's codelist: its kind, and its codes or its most frequent values.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CodelistDescription {
    pub kind: CodelistKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codes: Option<Codes>,
    #[serde(flatten)]
    pub values: TopValues,
}

/// One field of a dataset, as `inspect_dataset` describes it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FieldDescription {
    pub name: String,
    #[schemars(schema_with = "roles")]
    pub role: Role,
    #[schemars(schema_with = "data_types")]
    pub data_type: DataType,
    pub description: Option<String>,
    pub groupable: bool,
    #[schemars(range(min = 0.0, max = 1.0))]
    pub fill_rate: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<Quality>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_value_separator: Option<String>,
    /// The field holds law provisions; how values are matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locator: Option<LocatorGuide>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<NumericStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codelist: Option<CodelistDescription>,
    /// For fields without a codelist: the most frequent values with their counts (NFKC
    /// variants together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<TopValues>,
    /// What a value of a measure is counted in, when the definition declares it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// How a measure adds up, when declared: `flow` sums over periods and areas, `stock` over
    /// areas only (over periods it is averaged), `rate` is never summed and is averaged only
    /// by its `weight`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "aggregations")]
    pub aggregation: Option<Aggregation>,
    /// The measure a rate is averaged by (`avg:` is weighted by it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<String>,
    /// The period a measure's values are of, when the definition declares it (`period:`, a
    /// table whose columns are of different reference periods).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// The time field: its grain and the periods in the data (a summary with no condition on
    /// it and no grouping by it is of the latest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub periods: Option<Periods>,
    /// A field that is no column of the data: its value is looked up from another field's
    /// (a roll-up written in the definition, or a related dataset's field). It is grouped and
    /// filtered by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub looked_up: Option<LookedUp>,
}

/// Where a looked-up field's value comes from.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LookedUp {
    /// The field of the dataset whose value is looked up.
    pub from: String,
    /// The related dataset it comes from (a relation), cited with every answer that uses it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// A roll-up's values (the parents), in the order written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

/// The periods of the time field.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Periods {
    #[schemars(schema_with = "grains")]
    pub grain: Grain,
    #[schemars(with = "Cell")]
    pub first: Value,
    #[schemars(with = "Cell")]
    pub latest: Value,
    /// How many distinct periods the data holds.
    pub count: usize,
    /// Records per period, oldest first (the latest ones when there are many).
    pub records: Vec<ValueCount>,
    /// A condition on the time field reads `2020`, `"2010..2020"` or `"latest"`.
    pub conditions: &'static str,
}

/// How many fields are how well filled.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct QualitySummary {
    pub fully: usize,
    pub mostly: usize,
    pub sparse: usize,
    pub rule: &'static str,
}

impl QualitySummary {
    /// Counts one field of that fill.
    pub fn count(&mut self, quality: Option<Quality>) {
        match quality {
            Some(Quality::Fully) => self.fully += 1,
            Some(Quality::Mostly) => self.mostly += 1,
            _ => self.sparse += 1,
        }
    }
}

/// A computed measure: a ratio the server computes.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MeasureDescription {
    pub name: String,
    #[schemars(schema_with = "modes")]
    pub mode: Mode,
    pub description: Option<String>,
    pub formula: String,
    /// The metric that asks for it in summarize_records.
    pub metric: String,
    pub rounded_to_decimals: i64,
    /// What its ratio is counted in, when declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// The metrics summarize_records takes for this dataset.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MetricsGuide {
    pub kinds: Vec<&'static str>,
    pub measures: Vec<String>,
    pub rounding: String,
}

/// A plugin's sandbox, as it runs.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Sandbox {
    pub files: &'static str,
    pub network: bool,
    pub deadline_ms: u64,
    pub memory_bytes: u64,
    pub output_bytes: u64,
}

/// Where the records come from: the kind of backend and, for plugins, the plugin, its
/// version, its code's hash and its sandbox.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BackendDescription {
    #[schemars(schema_with = "backend_kinds")]
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

/// A backend as storage describes it, in the answer's terms.
impl From<tally_storage::backend::BackendDescription> for BackendDescription {
    fn from(b: tally_storage::backend::BackendDescription) -> BackendDescription {
        BackendDescription {
            kind: b.kind,
            plugin: b.plugin,
            plugin_version: b.plugin_version,
            summary: b.summary,
            component: b.component,
            component_sha256: b.component_sha256,
            library: b.library,
            library_sha256: b.library_sha256,
            trust: b.trust,
            filters_applied_by_plugin: b.filters_applied_by_plugin,
            sandbox: b.sandbox.map(|s| Sandbox {
                files: s.files,
                network: s.network,
                deadline_ms: s.deadline_ms,
                memory_bytes: s.memory_bytes,
                output_bytes: s.output_bytes,
            }),
        }
    }
}

/// A dataset folder that cannot be served, and why.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Broken {
    /// The folder name.
    pub folder: String,
    /// The file at fault, relative to the datasets directory.
    pub file: String,
    /// Each problem: line, key path, message and fix.
    pub problems: Vec<Problem>,
    /// When an earlier version of this folder was valid, it keeps serving: its version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_version: Option<String>,
}

/// One problem of a dataset folder: where, what is wrong, and what would work.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key: String,
    pub reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

impl From<&tally_storage::problem::Problem> for Problem {
    fn from(p: &tally_storage::problem::Problem) -> Problem {
        Problem {
            line: p.line,
            key: p.key.clone(),
            reason: p.reason.clone(),
            fix: p.fix.clone(),
        }
    }
}

/// A folder the catalog could not serve, in the answer's terms.
impl From<&tally_storage::catalog::Broken> for Broken {
    fn from(b: &tally_storage::catalog::Broken) -> Broken {
        Broken {
            folder: b.folder.clone(),
            file: b.file.clone(),
            problems: b.problems.iter().map(Problem::from).collect(),
            serving_version: b.serving_version.clone(),
        }
    }
}

/// `inspect_dataset`: what every field means and how well it is filled.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InspectResult {
    pub dataset_id: String,
    pub title: String,
    pub description: Option<String>,
    pub publisher: Option<String>,
    pub license: Option<String>,
    #[schemars(schema_with = "date_or_time_or_null")]
    pub as_of_date: Option<String>,
    #[schemars(schema_with = "date_or_time_or_null")]
    pub published_at: Option<String>,
    pub record_count: usize,
    pub id_field: Option<String>,
    pub fields: Vec<FieldDescription>,
    pub quality_summary: QualitySummary,
    pub computed_measures: Vec<MeasureDescription>,
    pub metrics: MetricsGuide,
    pub generic_values: Vec<String>,
    pub dataset_notes: Vec<String>,
    pub undeclared_columns: Vec<String>,
    pub undeclared_columns_note: &'static str,
    pub definition_warnings: Vec<String>,
    pub version: String,
    pub backend: BackendDescription,
    /// Present when the description is compact: what was shortened and how to get
    /// everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<&'static str>,
    pub resolved_fields: Vec<ResolvedName>,
    #[serde(rename = "sourceRefs")]
    #[schemars(length(min = 1))]
    pub source_refs: Vec<String>,
}

/// What checking an answer again concluded (`verify_answer`, `tally verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyStatus {
    /// The same data gives the same numbers.
    Identical,
    /// A source's data changed since (named in `sources`); `changes` lists the numbers.
    DataChanged,
    /// The answer's data does not match its own `resultHash`: it was edited after Tally made
    /// it. `changes` lists what differs from what Tally computes now.
    Altered,
    /// The call cannot be asked again (its dataset, a field or a code is gone), or the
    /// numbers differ on unchanged data because Tally's semantics changed (`reasons`).
    NotReproducible,
}

impl VerifyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyStatus::Identical => "identical",
            VerifyStatus::DataChanged => "data_changed",
            VerifyStatus::Altered => "altered",
            VerifyStatus::NotReproducible => "not_reproducible",
        }
    }
}

/// One source of the checked answer, then and now.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SourceCheck {
    /// The source's id in the checked answer.
    pub id: String,
    pub recorded_version: Option<String>,
    pub current_version: Option<String>,
    pub recorded_hash: Option<String>,
    pub current_hash: Option<String>,
    /// Whether its data differs now (another dataset version, another content hash, or not
    /// cited by the answer of now).
    pub changed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One value of the checked answer that differs from the answer of now.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct NumberChange {
    /// Where, in words: `row 4 (総務省), column count`.
    pub at: String,
    /// Where, as a JSON pointer into `data`: `/rows/3/1`.
    pub path: String,
    /// The value in the checked answer.
    #[schemars(with = "AnyValue")]
    pub old: Value,
    /// The value Tally computes now.
    #[schemars(with = "AnyValue")]
    pub new: Value,
}

/// `verify_answer`: an answer checked by running its call again.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VerifyResult {
    pub status: VerifyStatus,
    /// One sentence: the outcome and why.
    pub summary: String,
    /// The tool whose answer was checked, and its arguments as resolved then.
    pub tool: String,
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub arguments: Value,
    /// The Tally that made the answer, and the one that checked it.
    pub recorded_with: String,
    pub verified_with: String,
    /// Whether the answer's data matches its own `resultHash` (false: it was edited).
    pub result_hash_matches: bool,
    pub sources: Vec<SourceCheck>,
    /// The values that differ (at most 200 listed; `changes_total` counts them all).
    pub changes: Vec<NumberChange>,
    pub changes_total: usize,
    /// Why the answer is not reproducible, when it is not.
    pub reasons: Vec<String>,
}

/// References that found no provision, for one reason.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Unmatched {
    /// Why: no reference, law not served, law not in force (on `as_of`), provision not
    /// found, unparsable reference.
    pub reason: String,
    /// The records with a reference that found nothing for this reason, each record once. A
    /// record whose reference names several provisions, some found, counts in
    /// `records_matched` and here.
    pub records: u64,
    /// The references, most records first (at most 50).
    pub references: Vec<UnmatchedReference>,
}

/// One reference that found no provision.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UnmatchedReference {
    /// The values of the link's fields, as the records hold them.
    #[schemars(with = "Vec<Cell>")]
    pub values: Vec<Value>,
    /// The provision it names, as Tally read it (when it was read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provision: Option<String>,
    pub records: u64,
}

/// `cite_provisions`: the provisions the matching records rest on.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CiteResult {
    pub dataset_id: String,
    /// The dataset the provisions come from.
    pub linked_dataset: String,
    /// The date whose revisions were read; absent: the latest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<String>,
    /// The group fields asked for, then `law`, `provision` (its locator), `text` (trimmed),
    /// `revision`, `uri` (e-Gov) and `records` (records resting on it).
    pub columns: Vec<String>,
    #[schemars(with = "Vec<Vec<Cell>>")]
    pub rows: Vec<Vec<Value>>,
    pub returned: usize,
    pub total_provisions: usize,
    /// How many provisions come before this page's first (0 on the first page).
    pub offset: usize,
    /// Pass it as `cursor`, with the same other arguments, for the provisions after this
    /// page; null on the last page. A page holds at most `limit` provisions and is cut to the
    /// result's context budget (a warning says so).
    pub next_cursor: Option<String>,
    /// The records matching `where`.
    pub records_total: u64,
    /// Of those, the records whose reference found at least one provision.
    pub records_matched: u64,
    /// References that found nothing, by reason.
    pub unmatched: Vec<Unmatched>,
    #[serde(flatten)]
    pub context: Context,
}
