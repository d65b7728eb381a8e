//! The model of a dataset definition: what `dataset.yaml` declares, as the reader leaves it.

use std::fmt;

use serde::Serialize;
use tally_plugin_api::provenance::SourceType;

use crate::yaml::Pos;

use super::url::ObjectUrl;

/// The format version this reader implements.
pub const SCHEMA_VERSION: &str = "1";
/// Separator of multi-value cells unless a field names another.
pub const DEFAULT_SEPARATOR: &str = ";";

/// A dataset definition that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetDef {
    /// The folder name unless the file gives `id`.
    pub id: String,
    pub schema_version: String,
    pub title: String,
    pub description: Option<String>,
    pub publisher: Option<String>,
    pub license: Option<String>,
    /// The date the data describes.
    pub as_of_date: Option<DateValue>,
    pub published_at: Option<DateValue>,
    pub retrieved_at: Option<DateValue>,
    pub source: SourceDef,
    pub tags: Vec<String>,
    pub enabled: bool,
    pub id_field: Option<String>,
    pub generic_values: Vec<String>,
    /// Caveats about the whole dataset; they travel with every result.
    pub notes: Vec<String>,
    /// Data file of the built-in Parquet backend, relative to the dataset folder.
    pub data_file: String,
    /// The data in object storage instead (`data: s3://bucket/prefix/`): one Parquet object,
    /// or every Parquet object under a prefix (a Hive-partitioned tree too). Credentials are
    /// never part of it: they come from the server's environment.
    pub data_url: Option<ObjectUrl>,
    pub backend: BackendDef,
    pub fields: Vec<Field>,
    pub computed_measures: Vec<ComputedMeasure>,
    /// Columns the data holds that this definition does not declare (not served). Not read
    /// from the file: whoever registers the dataset fills it in, so that a name that is one
    /// of them is refused as such instead of being corrected to a declared name.
    pub undeclared: Vec<String>,
    /// The records are revisions of things (laws, rules): which one is in force on a date.
    pub revisions: Option<Revisions>,
    /// Links from fields of this dataset to fields of another (a procedure's law and article
    /// to the provisions of a law dataset).
    pub links: Vec<Link>,
}

/// `revisions: {key: law_id, title: law_title, effective: revision_date, id: revision_id}`:
/// each value of
/// `key` has revisions, each in force from its `effective` date (`YYYY-MM-DD`) until the next
/// one. Calls read the revision in force on their `as_of` date, or the latest without one.
///
/// Its fields are resolved to ids when the definition is read (each must be declared), so a
/// call never looks one up by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Revisions {
    /// The field that names what is revised (a law).
    pub key: FieldId,
    /// The field that names it for people (a law's title), when there is one.
    pub title: Option<FieldId>,
    /// The field holding the date a revision takes effect.
    pub effective: FieldId,
    /// The field naming a revision, when there is one.
    pub id: Option<FieldId>,
}

/// `links: [{to: laws, on: {法令番号: law_num, 根拠条項号: locator}}]`: a record of this
/// dataset rests on the records of dataset `to` whose fields equal its own, field by field.
///
/// The fields of this dataset are resolved to ids when the definition is read; those of `to`
/// can only be resolved against `to`'s own definition, read apart from this one: by
/// [`Link::resolve`], once, wherever both are at hand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    /// The dataset linked to.
    pub to: String,
    /// (field of this dataset, name of a field of `to`), in the order written.
    pub on: Vec<(FieldId, String)>,
    /// The field of `to` holding a provision's text (`text` when not given).
    pub text: Option<String>,
}

/// The fields of a [`Link`] resolved against the definition of the dataset linked to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkedFields<'l> {
    /// Per pair of `on`, in the order written: the field of this dataset, and the field of
    /// `to` (`Err` with its name when `to` declares no field of that name).
    pub on: Vec<(FieldId, Result<FieldId, &'l str>)>,
    /// The field of `to` holding a provision's text (`Err` with its name when `to` declares
    /// none).
    pub text: Result<FieldId, &'l str>,
}

impl Link {
    /// The name of the field of `to` holding a provision's text: `text` unless the link names
    /// another.
    pub fn text_field(&self) -> &str {
        self.text.as_deref().unwrap_or("text")
    }

    /// The fields of `to` this link names, looked up once in `to`'s definition; every caller
    /// that follows or checks a link starts from this, and then indexes by id.
    pub fn resolve<'l>(&'l self, to: &DatasetDef) -> LinkedFields<'l> {
        let there = |name: &'l str| to.field_index(name).ok_or(name);
        LinkedFields {
            on: self
                .on
                .iter()
                .map(|(here, name)| (*here, there(name.as_str())))
                .collect(),
            text: there(self.text_field()),
        }
    }
}

impl DatasetDef {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The id of the field named exactly `name`.
    pub fn field_index(&self, name: &str) -> Option<FieldId> {
        self.fields
            .iter()
            .position(|f| f.name == name)
            .map(FieldId::at)
    }

    pub fn computed_measure(&self, name: &str) -> Option<&ComputedMeasure> {
        self.computed_measures.iter().find(|m| m.name == name)
    }

    /// The field whose role is `time`, if the dataset is of several periods.
    /// The fields that are columns of the data: every field but the derived ones, which
    /// come last.
    pub fn column_fields(&self) -> &[Field] {
        let n = self
            .fields
            .iter()
            .position(|f| !f.is_column())
            .unwrap_or(self.fields.len());
        &self.fields[..n]
    }

    /// What keeps this dataset's relations from being followed, given the datasets served
    /// (`served` finds one by id): a related dataset that is not served, a key or lent field
    /// it does not declare. Each as (the derived field, the reason, the fix). That the related
    /// keys are unique is known only from the data (checked where it is read).
    pub fn relation_problems<'d>(
        &self,
        served: impl Fn(&str) -> Option<&'d DatasetDef>,
    ) -> Vec<(&Field, String, String)> {
        let mut out = Vec::new();
        for f in &self.fields {
            let Some(DerivedSource::Relation {
                dataset,
                key,
                field,
            }) = f.derived.as_ref().map(|d| &d.source)
            else {
                continue;
            };
            let Some(target) = served(dataset) else {
                out.push((
                    f,
                    format!("`{}` is lent by dataset `{dataset}`, which is not served", f.name),
                    format!("serve `{dataset}` beside this dataset (a folder of that name), or name a served dataset"),
                ));
                continue;
            };
            for (what, name) in [("key", key), ("field lent", field)] {
                if !target.column_fields().iter().any(|t| t.name == *name) {
                    out.push((
                        f,
                        format!("the {what} `{name}` is not a field of `{dataset}`"),
                        format!(
                            "name one of its fields: {}",
                            target
                                .column_fields()
                                .iter()
                                .map(|t| t.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        }
        out
    }

    pub fn time_field(&self) -> Option<FieldId> {
        self.fields
            .iter()
            .position(|f| f.role == Role::Time)
            .map(FieldId::at)
    }
}

/// A date as the source gave it: a calendar date stays a date, a date-time stays a date-time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum DateValue {
    Date(String),
    DateTime(String),
}

impl DateValue {
    pub fn as_str(&self) -> &str {
        match self {
            DateValue::Date(s) | DateValue::DateTime(s) => s,
        }
    }

    /// Parses `YYYY-MM-DD` or an RFC 3339 date-time (`YYYY-MM-DDThh:mm:ss[.f](Z|±hh:mm)`).
    pub fn parse(s: &str) -> Option<DateValue> {
        let s = s.trim();
        if s.len() == 10 {
            return valid_date(s).then(|| DateValue::Date(s.to_string()));
        }
        let (date, time) = s.split_at_checked(10)?;
        let time = time.strip_prefix(['T', 't'])?;
        (valid_date(date) && valid_time_with_offset(time))
            .then(|| DateValue::DateTime(s.to_string()))
    }
}

impl fmt::Display for DateValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(super) fn digits(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

pub(super) fn valid_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(y), Some(m), Some(d)) = (digits(&s[0..4]), digits(&s[5..7]), digits(&s[8..10]))
    else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

pub(super) fn valid_time_with_offset(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return false;
    }
    let (Some(h), Some(mi), Some(se)) = (digits(&s[0..2]), digits(&s[3..5]), digits(&s[6..8]))
    else {
        return false;
    };
    if h > 23 || mi > 59 || se > 60 {
        return false;
    }
    let mut rest = &s[8..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest {
        "Z" | "z" => true,
        _ => {
            let rb = rest.as_bytes();
            rb.len() == 6
                && (rb[0] == b'+' || rb[0] == b'-')
                && rb[3] == b':'
                && digits(&rest[1..3]).is_some_and(|h| h <= 23)
                && digits(&rest[4..6]).is_some_and(|m| m <= 59)
        }
    }
}

/// Where the dataset comes from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourceDef {
    /// The publisher's URL (http or https).
    pub url: Option<String>,
    pub note: Option<String>,
    pub source_type: Option<SourceType>,
    /// Ingest keys of the reference format, kept so such files load unchanged.
    pub asset_pattern: Option<String>,
    pub csv_filename: Option<String>,
    pub csv_header_rows: Option<u32>,
    /// Values the publisher writes for "no value" (`-`, `不明`): `tally add` stores cells
    /// that hold exactly one of them (spaces around aside) as empty. Never guessed: a person
    /// lists them.
    pub null_markers: Vec<String>,
}

/// Where a dataset's rows come from. The engine keeps a registry of backends by kind; the
/// kinds a definition may name are these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Parquet,
    Wasm,
    Native,
}

impl BackendKind {
    pub const ALL: [BackendKind; 3] =
        [BackendKind::Parquet, BackendKind::Wasm, BackendKind::Native];

    pub const fn as_str(self) -> &'static str {
        match self {
            BackendKind::Parquet => "parquet",
            BackendKind::Wasm => "wasm",
            BackendKind::Native => "native",
        }
    }

    /// The key naming the plugin this kind loads (`component`, `library`), none for the
    /// built-in reader: required with the kind, refused with another.
    pub const fn plugin_keys(self) -> &'static [&'static str] {
        match self {
            BackendKind::Parquet => &[],
            BackendKind::Wasm => &["component"],
            BackendKind::Native => &["library"],
        }
    }

    /// The kind a definition names, exactly as written.
    pub fn parse(name: &str) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plugin file: inside the dataset folder, or one built with Tally itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginRef {
    /// A path relative to the dataset folder (already checked to stay inside it).
    File(String),
    /// `builtin:<name>`.
    Builtin(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct BackendDef {
    pub kind: BackendKind,
    /// The wasm component (kind `wasm`) or shared library (kind `native`).
    pub plugin: Option<PluginRef>,
    /// Handed to the plugin as it is.
    pub config: serde_json::Value,
}

impl Default for BackendDef {
    fn default() -> Self {
        BackendDef {
            kind: BackendKind::Parquet,
            plugin: None,
            config: serde_json::Value::Object(Default::default()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Identifies a record: filterable, not groupable.
    Id,
    /// A dimension: groupable and filterable.
    Dim,
    /// The period a record is of (a year, a fiscal year, a month, a date): groupable and
    /// filterable; at most one a dataset, with its `grain`. A summary over several periods
    /// is said, never silent: with no condition on it and no grouping by it, the latest.
    Time,
    /// A number to aggregate: not groupable.
    Measure,
    /// An attribute: groupable unless `groupable: false`.
    Attr,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::Id, Role::Dim, Role::Time, Role::Measure, Role::Attr];

    /// Other names a definition may give a role (the reference format's long forms).
    pub const SYNONYMS: [(&'static str, Role); 2] =
        [("dimension", Role::Dim), ("attribute", Role::Attr)];

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Id => "id",
            Role::Dim => "dim",
            Role::Time => "time",
            Role::Measure => "measure",
            Role::Attr => "attr",
        }
    }

    /// The role a definition names: its name or a synonym, exactly as written.
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == name)
            .or_else(|| {
                Role::SYNONYMS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, r)| *r)
            })
    }
}

/// What one period of the time field is (`grain:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grain {
    /// A calendar year, written as an integer (`2020`).
    Year,
    /// A fiscal year (年度), written as the integer of the year it starts in (`2020`).
    FiscalYear,
    /// A month (`2020-04`, or `202004` as an integer).
    Month,
    /// A day (`2020-04-01`).
    Date,
}

impl Grain {
    pub const ALL: [Grain; 4] = [Grain::Year, Grain::FiscalYear, Grain::Month, Grain::Date];

    pub fn as_str(self) -> &'static str {
        match self {
            Grain::Year => "year",
            Grain::FiscalYear => "fiscal_year",
            Grain::Month => "month",
            Grain::Date => "date",
        }
    }

    pub fn parse(name: &str) -> Option<Grain> {
        Grain::ALL.into_iter().find(|g| g.as_str() == name)
    }

    /// Whether a period is written as an integer (a year).
    pub fn is_year(self) -> bool {
        matches!(self, Grain::Year | Grain::FiscalYear)
    }
}

impl std::fmt::Display for Grain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a measure adds up over time and over the other dimensions (`aggregation:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Counted over a period (出生数, births): sums over periods and over areas alike.
    Flow,
    /// A level at a point in time (総人口, population): sums over areas, never over periods
    /// (the same people would be counted once a period); over periods, averaged.
    Stock,
    /// A rate or other ratio (合計特殊出生率): never summed; averaged only weighted by its
    /// declared `weight`.
    Rate,
}

impl Aggregation {
    pub const ALL: [Aggregation; 3] = [Aggregation::Flow, Aggregation::Stock, Aggregation::Rate];

    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::Flow => "flow",
            Aggregation::Stock => "stock",
            Aggregation::Rate => "rate",
        }
    }

    pub fn parse(name: &str) -> Option<Aggregation> {
        Aggregation::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl std::fmt::Display for Aggregation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    String,
    Integer,
    /// Any number (integer or float of any width).
    Number,
    Boolean,
    Date,
}

impl DataType {
    pub const ALL: [DataType; 5] = [
        DataType::String,
        DataType::Integer,
        DataType::Number,
        DataType::Boolean,
        DataType::Date,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DataType::String => "string",
            DataType::Integer => "integer",
            DataType::Number => "number",
            DataType::Boolean => "boolean",
            DataType::Date => "date",
        }
    }

    pub fn is_numeric(self) -> bool {
        matches!(self, DataType::Integer | DataType::Number)
    }

    /// Other names a definition may give a type (as other formats and languages write it).
    pub const SYNONYMS: [(&'static str, DataType); 7] = [
        ("text", DataType::String),
        ("str", DataType::String),
        ("int", DataType::Integer),
        ("float", DataType::Number),
        ("double", DataType::Number),
        ("decimal", DataType::Number),
        ("bool", DataType::Boolean),
    ];

    /// The type a definition names: its name or a synonym, exactly as written.
    pub fn parse(s: &str) -> Option<DataType> {
        DataType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .or_else(|| {
                DataType::SYNONYMS
                    .iter()
                    .find(|(n, _)| *n == s)
                    .map(|(_, t)| *t)
            })
    }
}

/// One code of a static codelist: `1 実施済`, optionally with a description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Code {
    pub value: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Code {
    /// The code without its leading number, if it has one: `1 実施済` → `実施済`,
    /// `2-1 申請等に基づく処分通知等` → `申請等に基づく処分通知等`.
    pub fn label(&self) -> Option<&str> {
        let (prefix, rest) = self.value.split_once([' ', '\u{3000}'])?;
        let is_code = !prefix.is_empty()
            && prefix.chars().next().is_some_and(|c| c.is_ascii_digit())
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        let rest = rest.trim();
        (is_code && !rest.is_empty()).then_some(rest)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Codelist {
    /// Inline codes: values compared exactly are checked against them.
    Static(Vec<Code>),
    /// The values present in the data.
    Auto,
    /// The parts of the multi-value cells present in the data.
    AutoSplit,
}

impl Codelist {
    /// The codelists named by a word rather than listed (`codelist: auto`).
    pub const MODES: [&'static str; 2] = ["auto", "auto_split"];

    /// The codelist a word names, exactly as written.
    pub fn mode(name: &str) -> Option<Codelist> {
        match name {
            "auto" => Some(Codelist::Auto),
            "auto_split" => Some(Codelist::AutoSplit),
            _ => None,
        }
    }
}

/// A declared field.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub role: Role,
    pub desc: Option<String>,
    pub data_type: DataType,
    pub codelist: Option<Codelist>,
    /// The separator when the field holds several values in one cell.
    pub multi_value: Option<String>,
    pub groupable: bool,
    pub notes: Vec<String>,
    pub csv_col_index: Option<u32>,
    pub group: Option<String>,
    /// The field holds references to provisions of laws (`locator: law`): a value compared
    /// exactly is read as a law reference in any common form and matches the provision and
    /// everything inside it.
    pub locator: Option<LocatorKind>,
    /// What a value of the field is counted in (`unit: 件`, `円`, `%`), when declared: carried
    /// with every metric over the field, so a reader and a chart need not guess it from a name.
    pub unit: Option<String>,
    /// The time field's period (`grain: year`); only on the field whose role is `time`.
    pub grain: Option<Grain>,
    /// The period a measure's values are of, when the table does not say it per record
    /// (`period: "2020"`, `period: 2019-10-01`): a cross-sectional table whose columns are
    /// of different reference years. Shown with every answer that uses the measure; a ratio
    /// or weighted average across measures of different periods is warned.
    pub period: Option<String>,
    /// How a measure adds up (`aggregation: flow | stock | rate`); undeclared, it is summed
    /// and averaged as any number.
    pub aggregation: Option<Aggregation>,
    /// The measure a rate is weighted by when averaged (`weight: 15～49歳女性人口`).
    pub weight: Option<FieldId>,
    /// Fields of the same record holding other names of what this field names (`aliases:
    /// [law_abbrev, law_num]` on a law's title: its short titles and its law number). A value
    /// compared exactly with this field that is none of its values, but is (NFKC, numbers in
    /// kanji or digits alike, see [`crate::names::alias_key`]) a value of one of these, is read
    /// as the values of this field of the records holding it, disclosed.
    pub aliases: Vec<FieldId>,
    /// A field that is no column of the data: its value is looked up from another field's
    /// (a level of a `rollup`, or a field lent by a related dataset, `relations`). Such fields
    /// come after every column's, and are grouped and filtered by, never selected or searched.
    pub derived: Option<Derived>,
    /// Where the field is declared (for later diagnostics).
    pub pos: Pos,
}

/// Where a derived field's value comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// The field of this dataset whose value is looked up.
    pub key: FieldId,
    pub source: DerivedSource,
}

/// The table a derived field's values are looked up in.
#[derive(Debug, Clone, PartialEq)]
pub enum DerivedSource {
    /// A level of a hierarchy written on the key field (`rollup: {地方: {東北: [青森県, …]}}`):
    /// each parent with its children, in the order written; a child has one parent.
    Rollup(Vec<(String, Vec<String>)>),
    /// A field of another dataset served beside this one, found by its key (`relations`).
    Relation {
        dataset: String,
        /// The key field of `dataset` that the key field here is compared with.
        key: String,
        /// The field of `dataset` lent.
        field: String,
    },
}

/// What kind of locator a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocatorKind {
    /// `第九条第一項第二号`, as e-Gov writes it (see `tally_plugin_api::locator`).
    Law,
}

impl LocatorKind {
    pub const ALL: [LocatorKind; 1] = [LocatorKind::Law];

    pub const fn as_str(self) -> &'static str {
        match self {
            LocatorKind::Law => "law",
        }
    }

    /// The kind a definition names, exactly as written.
    pub fn parse(name: &str) -> Option<LocatorKind> {
        LocatorKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl Field {
    /// Whether the field is a column of the data (not [`Field::derived`]).
    pub fn is_column(&self) -> bool {
        self.derived.is_none()
    }

    pub fn is_multi_value(&self) -> bool {
        self.multi_value.is_some()
    }

    pub fn static_codes(&self) -> Option<&[Code]> {
        match &self.codelist {
            Some(Codelist::Static(codes)) => Some(codes),
            _ => None,
        }
    }
}

/// A measure defined once and computed only by the server.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputedMeasure {
    pub name: String,
    pub desc: Option<String>,
    pub formula: Formula,
    /// What the ratio is counted in (`unit: 円/件`), when declared. A `count_where` share has
    /// none: it is a share of records, between 0 and 1.
    pub unit: Option<String>,
    /// What a `sum_ratio` is multiplied by (`scale: 1000` for births per 1,000 people); 1
    /// when not declared.
    pub scale: Option<f64>,
}

/// How a computed measure is computed, as `mode:` names it: one table, read by the parser,
/// its suggestions and messages, `inspect_dataset` and the summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The share of records whose field is one of some values.
    CountWhere,
    /// `sum(numerator) / sum(denominator)`.
    SumRatio,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::CountWhere, Mode::SumRatio];

    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::CountWhere => "count_where",
            Mode::SumRatio => "sum_ratio",
        }
    }

    /// The keys the mode reads, each required with it.
    pub const fn required_keys(self) -> &'static [&'static str] {
        match self {
            Mode::CountWhere => &["condition_field", "condition_values"],
            Mode::SumRatio => &["numerator", "denominator"],
        }
    }

    /// The keys the mode reads, as the fix of a message spells them.
    pub fn keys(self) -> String {
        self.required_keys().join(", ")
    }

    /// The mode named exactly `name`.
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Whether a value of the measure is a share of records (between 0 and 1).
    pub fn is_share(self) -> bool {
        self == Mode::CountWhere
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Formula {
    /// The share of rows whose `condition_field` is one of `condition_values`.
    CountWhere {
        /// The declared field, resolved when the definition was read.
        condition_field: FieldId,
        condition_values: Vec<String>,
    },
    /// `sum(numerator) / sum(denominator)`, null when the denominator sums to 0.
    SumRatio {
        /// Declared measures, resolved when the definition was read.
        numerator: FieldId,
        denominator: FieldId,
    },
}

/// A declared field: its position in [`DatasetDef::fields`]. Names are resolved to ids once
/// (when a definition is read, when a call is resolved); nothing after that looks a name up
/// again, and an id is a type of its own, so a row number or a count cannot be used as one
/// by mistake. `def.fields[id]` indexes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct FieldId(usize);

impl FieldId {
    /// The id of the field at `position` in a definition's fields (the position a
    /// resolution found it at).
    pub const fn at(position: usize) -> FieldId {
        FieldId(position)
    }

    /// The position in [`DatasetDef::fields`].
    pub const fn index(self) -> usize {
        self.0
    }
}

impl std::fmt::Display for FieldId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A computed measure: its position in [`DatasetDef::computed_measures`], resolved once like
/// a [`FieldId`]. `def.computed_measures[id]` indexes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct MeasureId(usize);

impl MeasureId {
    /// The id of the computed measure at `position`.
    pub const fn at(position: usize) -> MeasureId {
        MeasureId(position)
    }

    /// The position in [`DatasetDef::computed_measures`].
    pub const fn index(self) -> usize {
        self.0
    }
}

impl std::fmt::Display for MeasureId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::ops::Index<MeasureId> for Vec<ComputedMeasure> {
    type Output = ComputedMeasure;

    fn index(&self, id: MeasureId) -> &ComputedMeasure {
        &self[id.0]
    }
}

impl std::ops::Index<FieldId> for Vec<Field> {
    type Output = Field;

    fn index(&self, id: FieldId) -> &Field {
        &self[id.0]
    }
}

impl std::ops::Index<FieldId> for [Field] {
    type Output = Field;

    fn index(&self, id: FieldId) -> &Field {
        &self[id.0]
    }
}

impl ComputedMeasure {
    pub fn mode(&self) -> Mode {
        match self.formula {
            Formula::CountWhere { .. } => Mode::CountWhere,
            Formula::SumRatio { .. } => Mode::SumRatio,
        }
    }

    /// The formula in words, as `inspect_dataset` shows it; `fields` are the dataset's.
    pub fn formula_text(&self, fields: &[Field]) -> String {
        let name = |f: &FieldId| fields[*f].name.as_str();
        match &self.formula {
            Formula::CountWhere {
                condition_field,
                condition_values,
            } => format!(
                "count(rows where {} in [{}]) / count(rows); rounded to 4 decimals",
                name(condition_field),
                condition_values.join(", ")
            ),
            Formula::SumRatio {
                numerator,
                denominator,
            } => {
                let (n, d) = (name(numerator), name(denominator));
                let scale = match self.scale {
                    Some(k) => format!(" × {k}"),
                    None => String::new(),
                };
                format!(
                    "sum({n}) / sum({d}){scale}; null when sum({d}) is 0; rounded to 4 decimals"
                )
            }
        }
    }

    /// The declared fields the formula reads.
    pub fn fields(&self) -> Vec<FieldId> {
        match &self.formula {
            Formula::CountWhere {
                condition_field, ..
            } => vec![*condition_field],
            Formula::SumRatio {
                numerator,
                denominator,
            } => vec![*numerator, *denominator],
        }
    }
}
