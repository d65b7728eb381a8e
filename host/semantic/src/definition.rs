//! The dataset definition (`dataset.yaml`): its model, and the reader that validates it.
//!
//! The format is a superset of the public administrative-procedures format
//! (`schema_version: "1"`). Reading never stops at the first problem: every error and warning
//! is collected with the file, the line, the key path and a fix, so that one `tally check`
//! run shows everything that needs mending.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use tally_plugin_api::provenance::SourceType;

use crate::names::{normalize, suggest};
use crate::yaml::{self, Key, Node, Pos, Value};

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

fn digits(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn valid_date(s: &str) -> bool {
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

fn valid_time_with_offset(s: &str) -> bool {
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

/// Where in object storage a dataset's data lies: `s3://bucket/prefix`. A prefix that ends
/// in `/` (or is empty) names every Parquet object under it; any other names one object, or,
/// when no object has that exact key, the objects under `prefix/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectUrl {
    /// The scheme, lower case: `s3` (the only one served).
    pub scheme: String,
    pub bucket: String,
    /// The key or key prefix, without a leading `/`.
    pub prefix: String,
}

impl ObjectUrl {
    /// Reads `s3://bucket/prefix`, refusing anything that could carry a secret (user
    /// information, a query string) or that is not a bucket name.
    pub fn parse(text: &str) -> Result<ObjectUrl, String> {
        let text = text.trim();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err("it has no scheme (`s3://`)".into());
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "s3" {
            return Err(format!(
                "the scheme `{scheme}://` is not served (S3 and S3-compatible stores are, as `s3://`)"
            ));
        }
        // `key:secret@bucket`, where a secret may hold `/`: user information is whatever
        // comes before the last `@` when a `:` precedes it.
        if credentials_in(rest) {
            return Err(
                "it names credentials before the bucket; they never belong in dataset.yaml".into(),
            );
        }
        if rest.contains(['?', '#']) {
            return Err("it has a query or fragment; a signed URL carries credentials, which never belong in dataset.yaml".into());
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.contains(['@', ':']) {
            return Err(
                "its bucket part holds `@` or `:`; credentials never belong in dataset.yaml".into(),
            );
        }
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !valid_bucket {
            return Err(format!(
                "`{bucket}` is not a bucket name (3 to 63 lower-case letters, digits, `-` and `.`)"
            ));
        }
        if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains('\\') {
            return Err("its key has `.` or `..` parts".into());
        }
        Ok(ObjectUrl {
            scheme,
            bucket: bucket.to_string(),
            prefix: prefix.trim_start_matches('/').to_string(),
        })
    }

    /// Whether the URL names a folder (every object under it) rather than one object.
    pub fn is_folder(&self) -> bool {
        self.prefix.is_empty() || self.prefix.ends_with('/')
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}/{}", self.scheme, self.bucket, self.prefix)
    }
}

/// Whether the part of a URL after `scheme://` starts with user information: an `@` with a
/// `:` before it (a secret may hold `/`, so the authority cannot be cut at the first `/`), or
/// an `@` before the first `/`.
fn credentials_in(rest: &str) -> bool {
    match rest.rfind('@') {
        Some(at) => rest[..at].contains(':') || !rest[..at].contains('/'),
        None => false,
    }
}

/// A URL as it may be shown back: what could be a secret (user information, a query such as
/// a signature) replaced by `…`.
fn redacted(url: &str) -> String {
    let (head, query) = match url.split_once(['?', '#']) {
        Some((h, _)) => (h, "?…"),
        None => (url, ""),
    };
    let head = match head.split_once("://") {
        Some((scheme, rest)) if credentials_in(rest) => {
            format!(
                "{scheme}://…@{}",
                rest.rsplit('@').next().unwrap_or_default()
            )
        }
        Some(_) => head.to_string(),
        // Not a URL at all: it may be a secret pasted in whole.
        None => "…".to_string(),
    };
    head + query
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

    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Parquet => "parquet",
            BackendKind::Wasm => "wasm",
            BackendKind::Native => "native",
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

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Id => "id",
            Role::Dim => "dim",
            Role::Time => "time",
            Role::Measure => "measure",
            Role::Attr => "attr",
        }
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

    fn parse(s: &str) -> Option<DataType> {
        Some(match s {
            "string" | "text" | "str" => DataType::String,
            "integer" | "int" => DataType::Integer,
            "number" | "float" | "double" | "decimal" => DataType::Number,
            "boolean" | "bool" => DataType::Boolean,
            "date" => DataType::Date,
            _ => return None,
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

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::CountWhere => "count_where",
            Mode::SumRatio => "sum_ratio",
        }
    }

    /// The keys the mode reads, as the fix of a message spells them.
    pub fn keys(self) -> &'static str {
        match self {
            Mode::CountWhere => "condition_field, condition_values",
            Mode::SumRatio => "numerator, denominator",
        }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem found in a dataset definition, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// The key path, e.g. `fields[12].codelist` (empty for the document itself).
    pub path: String,
    pub message: String,
    pub fix: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{}:{}:{}: {severity}", self.file, self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, " at `{}`", self.path)?;
        }
        write!(f, ": {}", self.message)?;
        if !self.fix.is_empty() {
            write!(f, " Fix: {}", self.fix)?;
        }
        Ok(())
    }
}

/// A definition that cannot be served, with every error found (and the warnings beside them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.diagnostics))]
pub struct DefinitionError {
    pub diagnostics: Vec<Diagnostic>,
    /// The text is not a YAML document at all (it does not parse, or is empty): a file cut
    /// off mid-write looks like this, so a watcher retries before reporting it.
    pub unparsed: bool,
}

impl DefinitionError {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }
}

fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A definition that can be served, and the warnings found while reading it.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub dataset: DatasetDef,
    pub warnings: Vec<Diagnostic>,
}

/// Reads and validates a dataset definition.
///
/// `file` names the file in diagnostics (e.g. `datasets/survey/dataset.yaml`); `folder_id` is
/// the dataset folder's name, the id unless the file gives one.
pub fn load_definition(file: &str, folder_id: &str, text: &str) -> Result<Loaded, DefinitionError> {
    load_definition_hiding(file, folder_id, text, &[])
}

/// Reads and validates a dataset definition as if the fields named in `hidden` were not
/// declared (a caller's policy hides them): they are left out of `fields` before the
/// definition is read, so everything that names one (a measure, a weight, an alias, a
/// relation, `id_field`) is refused as naming an undeclared field, and nothing read from
/// the definition can mention them.
pub fn load_definition_hiding(
    file: &str,
    folder_id: &str,
    text: &str,
    hidden: &[String],
) -> Result<Loaded, DefinitionError> {
    let mut reader = Reader {
        file: file.to_string(),
        diagnostics: Vec::new(),
        aliases: Vec::new(),
        weights: Vec::new(),
        rollups: Vec::new(),
    };
    let root = match yaml::parse(text) {
        Ok(root) => root,
        Err(e) => {
            reader.error(
                e.pos,
                &e.path,
                format!("the file is not valid YAML: {}", e.message),
                "correct the YAML syntax at this position (check indentation, colons and closing brackets)",
            );
            return Err(DefinitionError {
                diagnostics: reader.diagnostics,
                unparsed: true,
            });
        }
    };
    let empty = root.value == Value::Null;
    let mut root = root;
    if !hidden.is_empty() {
        strip_fields(&mut root, hidden);
    }
    let dataset = reader.dataset(&root, folder_id);
    reader
        .diagnostics
        .sort_by_key(|d| (d.line, d.column, d.severity == Severity::Warning));
    match dataset {
        Some(dataset) if !reader.has_errors() => Ok(Loaded {
            dataset,
            warnings: reader.diagnostics,
        }),
        _ => Err(DefinitionError {
            diagnostics: reader.diagnostics,
            unparsed: empty,
        }),
    }
}

/// Leaves the fields named in `hidden` out of a definition's `fields` (a list of mappings
/// with `name`, or a mapping by name).
fn strip_fields(root: &mut Node, hidden: &[String]) {
    let Value::Map(entries) = &mut root.value else {
        return;
    };
    let Some((_, fields)) = entries.iter_mut().find(|(k, _)| k.name == "fields") else {
        return;
    };
    let hides = |name: Option<&str>| name.is_some_and(|n| hidden.iter().any(|h| h == n.trim()));
    match &mut fields.value {
        Value::Seq(items) => items.retain(|item| {
            let name = match &item.value {
                Value::Map(m) => m
                    .iter()
                    .find(|(k, _)| k.name == "name")
                    .and_then(|(_, v)| v.as_str()),
                _ => None,
            };
            !hides(name)
        }),
        Value::Map(by_name) => by_name.retain(|(k, _)| !hides(Some(&k.name))),
        _ => {}
    }
}

const DATASET_KEYS: &[&str] = &[
    "schema_version",
    "id",
    "title",
    "description",
    "publisher",
    "license",
    "as_of_date",
    "published_at",
    "retrieved_at",
    "source",
    "tags",
    "enabled",
    "id_field",
    "generic_values",
    "notes",
    "data_file",
    "data",
    "backend",
    "fields",
    "computed_measures",
    "revisions",
    "links",
    "relations",
];
const RELATION_KEYS: &[&str] = &["dataset", "on", "fields"];
const REVISIONS_KEYS: &[&str] = &["key", "title", "effective", "id"];
const LINK_KEYS: &[&str] = &["to", "on", "text"];
const SOURCE_KEYS: &[&str] = &[
    "url",
    "note",
    "type",
    "asset_pattern",
    "csv_filename",
    "csv_header_rows",
    "null_markers",
];
const BACKEND_KEYS: &[&str] = &["kind", "component", "library", "config"];
const FIELD_KEYS: &[&str] = &[
    "name",
    "role",
    "desc",
    "data_type",
    "codelist",
    "multi_value",
    "groupable",
    "filterable",
    "notes",
    "csv_col_index",
    "group",
    "locator",
    "aliases",
    "unit",
    "grain",
    "period",
    "aggregation",
    "weight",
    "rollup",
];
const MULTI_VALUE_KEYS: &[&str] = &["separator"];
const MEASURE_KEYS: &[&str] = &[
    "name",
    "mode",
    "desc",
    "condition_field",
    "condition_values",
    "numerator",
    "denominator",
    "unit",
    "scale",
];
const MAX_NAME_CHARS: usize = 200;
/// Longest `unit` (`円/件`, `人/km²`).
const MAX_UNIT_CHARS: usize = 32;

struct Reader {
    file: String,
    diagnostics: Vec<Diagnostic>,
    /// `aliases` as written on each field, resolved to field ids once every field is read.
    aliases: Vec<AliasesWritten>,
    /// `weight` as written on each rate (field, name, position, key path), resolved to a
    /// field id once every field is read.
    weights: Vec<(String, String, Pos, String)>,
    /// `rollup` as written on each field: (field, level, parents with their children,
    /// position, key path), made derived fields once every field is read.
    rollups: Vec<Rollup>,
}

/// A field looked up from `key` (a roll-up level, a related dataset's field): a dimension
/// of text, grouped by.
fn derived_field(
    name: String,
    desc: Option<String>,
    key: FieldId,
    source: DerivedSource,
    pos: Pos,
) -> Field {
    Field {
        name,
        role: Role::Dim,
        desc,
        data_type: DataType::String,
        codelist: None,
        multi_value: None,
        groupable: true,
        notes: Vec::new(),
        csv_col_index: None,
        group: None,
        locator: None,
        unit: None,
        grain: None,
        period: None,
        aggregation: None,
        weight: None,
        aliases: Vec::new(),
        derived: Some(Derived { key, source }),
        pos,
    }
}

/// A level of a hierarchy as written under a field's `rollup`.
struct Rollup {
    field: String,
    level: String,
    parents: Vec<(String, Vec<String>)>,
    pos: Pos,
    path: String,
}

/// A field's `aliases`, as written: the field, where the key is, and each name with its
/// position and key path.
struct AliasesWritten {
    field: String,
    pos: Pos,
    path: String,
    names: Vec<(String, Pos, String)>,
}

/// A mapping being read: remembers which keys were consumed so the rest can be reported.
struct MapView<'a> {
    pos: Pos,
    entries: &'a [(Key, Node)],
}

impl<'a> MapView<'a> {
    fn get(&self, key: &str) -> Option<&'a Node> {
        self.entries
            .iter()
            .find(|(k, _)| k.name == key)
            .map(|(_, v)| v)
    }

    fn key_pos(&self, key: &str) -> Pos {
        self.entries
            .iter()
            .find(|(k, _)| k.name == key)
            .map(|(k, _)| k.pos)
            .unwrap_or(self.pos)
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Reader {
    fn push(&mut self, severity: Severity, pos: Pos, path: &str, message: String, fix: &str) {
        self.diagnostics.push(Diagnostic {
            severity,
            file: self.file.clone(),
            line: pos.line,
            column: pos.column,
            path: path.to_string(),
            message,
            fix: fix.to_string(),
        });
    }

    fn error(&mut self, pos: Pos, path: &str, message: impl Into<String>, fix: impl AsRef<str>) {
        self.push(Severity::Error, pos, path, message.into(), fix.as_ref());
    }

    fn warning(&mut self, pos: Pos, path: &str, message: impl Into<String>, fix: impl AsRef<str>) {
        self.push(Severity::Warning, pos, path, message.into(), fix.as_ref());
    }

    fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    fn map<'a>(&mut self, node: &'a Node, path: &str, known: &[&str]) -> Option<MapView<'a>> {
        match &node.value {
            Value::Map(entries) => {
                for (key, _) in entries {
                    if !known.contains(&key.name.as_str()) {
                        let key_path = join(path, &key.name);
                        match suggest(&key.name, known.iter().copied()) {
                            Some(near) => self.warning(
                                key.pos,
                                &key_path,
                                format!(
                                    "unknown key `{}` is ignored; did you mean `{near}`?",
                                    key.name
                                ),
                                format!("rename it to `{near}`, or remove it"),
                            ),
                            None => self.warning(
                                key.pos,
                                &key_path,
                                format!("unknown key `{}` is ignored", key.name),
                                format!("remove it; known keys here are: {}", known.join(", ")),
                            ),
                        }
                    }
                }
                Some(MapView {
                    pos: node.pos,
                    entries,
                })
            }
            _ => {
                self.error(
                    node.pos,
                    path,
                    format!("expected a mapping of keys, found {}", node.kind()),
                    format!(
                        "write `key: value` lines here; allowed keys: {}",
                        known.join(", ")
                    ),
                );
                None
            }
        }
    }

    /// A string value; numbers and booleans are refused rather than silently converted, except
    /// where the caller allows it.
    fn string(&mut self, map: &MapView<'_>, key: &str, path: &str, fix: &str) -> Option<String> {
        let node = map.get(key)?;
        let key_path = join(path, key);
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            Value::Null => None,
            _ => {
                self.error(
                    node.pos,
                    &key_path,
                    format!("`{key}` must be a string, found {}", node.kind()),
                    fix,
                );
                None
            }
        }
    }

    fn required_string(
        &mut self,
        map: &MapView<'_>,
        key: &str,
        path: &str,
        fix: &str,
    ) -> Option<String> {
        let value = self.string(map, key, path, fix);
        match value {
            Some(s) if !s.trim().is_empty() => Some(s),
            Some(_) => {
                self.error(
                    map.key_pos(key),
                    &join(path, key),
                    format!("`{key}` is empty"),
                    fix,
                );
                None
            }
            None => {
                if map.get(key).is_none() {
                    let near = suggest_present(map, key);
                    let fix = match near {
                        Some(near) => {
                            format!("{fix} (found `{near}`: is it a misspelling of `{key}`?)")
                        }
                        None => fix.to_string(),
                    };
                    self.error(
                        map.pos,
                        &join(path, key),
                        format!("`{key}` is missing"),
                        fix,
                    );
                }
                None
            }
        }
    }

    fn boolean(&mut self, map: &MapView<'_>, key: &str, path: &str) -> Option<bool> {
        let node = map.get(key)?;
        match &node.value {
            Value::Bool(b) => Some(*b),
            Value::Null => None,
            _ => {
                self.error(
                    node.pos,
                    &join(path, key),
                    format!("`{key}` must be true or false, found {}", node.kind()),
                    format!("write `{key}: true` or `{key}: false`"),
                );
                None
            }
        }
    }

    fn string_list(&mut self, map: &MapView<'_>, key: &str, path: &str) -> Vec<String> {
        let Some(node) = map.get(key) else {
            return Vec::new();
        };
        let key_path = join(path, key);
        match &node.value {
            Value::Null => Vec::new(),
            // A single string where a list is expected is what people write for one note.
            Value::Str(s) => vec![s.clone()],
            Value::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match &item.value {
                        Value::Str(s) => out.push(s.clone()),
                        Value::Int(n) => out.push(n.to_string()),
                        _ => self.error(
                            item.pos,
                            &format!("{key_path}[{i}]"),
                            format!("expected a string, found {}", item.kind()),
                            "write each entry as a plain string (quote it if it contains `:`)",
                        ),
                    }
                }
                out
            }
            _ => {
                self.error(
                    node.pos,
                    &key_path,
                    format!("`{key}` must be a list of strings, found {}", node.kind()),
                    format!("write it as a list, e.g. `{key}: [\"a\", \"b\"]`"),
                );
                Vec::new()
            }
        }
    }

    fn date(&mut self, map: &MapView<'_>, key: &str, path: &str) -> Option<DateValue> {
        let node = map.get(key)?;
        let key_path = join(path, key);
        let fix = format!(
            "write a date as `{key}: \"2025-07-24\"` or a date-time as `{key}: \"2025-07-24T09:00:00+09:00\"`"
        );
        match &node.value {
            Value::Null => None,
            Value::Str(s) => match DateValue::parse(s) {
                Some(d) => Some(d),
                None => {
                    self.error(
                        node.pos,
                        &key_path,
                        format!("`{s}` is not a valid date (YYYY-MM-DD) or RFC 3339 date-time"),
                        fix,
                    );
                    None
                }
            },
            _ => {
                self.error(
                    node.pos,
                    &key_path,
                    format!("`{key}` must be a date string, found {}", node.kind()),
                    fix,
                );
                None
            }
        }
    }

    /// A path inside the dataset folder: relative, no `..`, no drive or root.
    fn relative_path(
        &mut self,
        node: &Node,
        value: &str,
        path: &str,
        what: &str,
    ) -> Option<String> {
        let v = value.trim();
        let escapes = v.is_empty()
            || v.starts_with('/')
            || v.starts_with('\\')
            || v.contains('\0')
            || v.split(['/', '\\']).any(|part| part == "..")
            || (v.len() >= 2 && v.as_bytes()[1] == b':');
        if escapes {
            self.error(
                node.pos,
                path,
                format!("{what} `{value}` is not a path inside the dataset folder"),
                format!(
                    "put the file in the dataset folder and give its name relative to it, e.g. `{}`",
                    v.rsplit(['/', '\\']).find(|p| !p.is_empty() && *p != "..").unwrap_or("data.parquet")
                ),
            );
            return None;
        }
        Some(v.trim_start_matches("./").to_string())
    }

    fn dataset(&mut self, root: &Node, folder_id: &str) -> Option<DatasetDef> {
        if root.value == Value::Null {
            self.error(
                root.pos,
                "",
                "the file is empty",
                "start from a definition with at least `title:` and `fields:` (see datasets/ for examples)",
            );
            return None;
        }
        let map = self.map(root, "", DATASET_KEYS)?;

        let schema_version = self.schema_version(root, &map);
        let id = self.dataset_id(&map, folder_id);
        let title = self.title(&map, &id);
        let description = self.string(&map, "description", "", "write `description: \"…\"`");
        let publisher = self.string(&map, "publisher", "", "write `publisher: \"…\"`");
        let license = self.string(
            &map,
            "license",
            "",
            "write `license: \"CC-BY-4.0\"` or similar",
        );
        let as_of_date = self.date(&map, "as_of_date", "");
        let published_at = self.date(&map, "published_at", "");
        let retrieved_at = self.date(&map, "retrieved_at", "");
        let source = match map.get("source") {
            Some(node) if node.value != Value::Null => self.source(node),
            _ => SourceDef::default(),
        };
        let tags = self.string_list(&map, "tags", "");
        let enabled = self.boolean(&map, "enabled", "").unwrap_or(true);
        let generic_values = self.string_list(&map, "generic_values", "");
        let notes = self.string_list(&map, "notes", "");
        let data_file = match (
            map.get("data_file"),
            self.string(&map, "data_file", "", "write `data_file: data.parquet`"),
        ) {
            (Some(node), Some(value)) => self
                .relative_path(node, &value, "data_file", "data_file")
                .unwrap_or_default(),
            _ => "data.parquet".to_string(),
        };
        let backend = match map.get("backend") {
            Some(node) if node.value != Value::Null => self.backend(node),
            _ => BackendDef::default(),
        };
        let data_url = self.data_url(&map, &backend);

        let mut fields = self.dataset_fields(&map);

        self.resolve_aliases(&mut fields);
        self.resolve_weights_and_time(&mut fields);
        self.derived_fields(&mut fields, &map);

        let id_field = self.id_field(&map, &fields);

        let computed_measures = match map.get("computed_measures") {
            Some(node) => self.computed_measures(node, &fields),
            None => Vec::new(),
        };
        let revisions = map
            .get("revisions")
            .and_then(|node| self.revisions(node, &fields));
        let links = match map.get("links") {
            Some(node) => self.links(node, &fields),
            None => Vec::new(),
        };

        Some(DatasetDef {
            id,
            schema_version,
            title,
            description,
            publisher,
            license,
            as_of_date,
            published_at,
            retrieved_at,
            source,
            tags,
            enabled,
            id_field,
            generic_values,
            notes,
            data_file,
            data_url,
            backend,
            fields,
            computed_measures,
            undeclared: Vec::new(),
            revisions,
            links,
        })
    }

    /// Reads `schema_version` (this server's when absent), warning when it is newer.
    fn schema_version(&mut self, root: &Node, map: &MapView<'_>) -> String {
        let schema_version = match map.get("schema_version").map(|n| &n.value) {
            None | Some(Value::Null) => SCHEMA_VERSION.to_string(),
            Some(Value::Str(s)) => s.clone(),
            Some(Value::Int(i)) => i.to_string(),
            Some(_) => {
                let node = map.get("schema_version").unwrap_or(root);
                self.error(
                    node.pos,
                    "schema_version",
                    format!("`schema_version` must be a string, found {}", node.kind()),
                    "write `schema_version: \"1\"`",
                );
                SCHEMA_VERSION.to_string()
            }
        };
        if schema_version != SCHEMA_VERSION {
            self.warning(
                map.key_pos("schema_version"),
                "schema_version",
                format!(
                    "schema_version `{schema_version}` is newer than this server's `{SCHEMA_VERSION}`; keys it does not know are ignored"
                ),
                "upgrade Tally, or write `schema_version: \"1\"` if the file uses only version 1 keys",
            );
        }
        schema_version
    }

    /// Reads `id` (the folder name when absent) and checks it, and the folder name, as an id.
    fn dataset_id(&mut self, map: &MapView<'_>, folder_id: &str) -> String {
        let id = match self.string(
            map,
            "id",
            "",
            "write `id: my-dataset` (letters, digits, `-`, `_`)",
        ) {
            Some(id) => {
                if !valid_id(&id) {
                    self.error(
                        map.key_pos("id"),
                        "id",
                        format!("`{id}` is not a valid dataset id"),
                        "use 1–64 characters: letters, digits, `-`, `_` or `.`, not starting with `.`",
                    );
                } else if id != folder_id && valid_id(folder_id) {
                    // A dataset's id is its folder name: a folder cannot claim another
                    // folder's dataset (a new folder declaring `id: procedures` would take over
                    // `procedures`), and two folders can never claim one id.
                    self.error(
                        map.key_pos("id"),
                        "id",
                        format!(
                            "`id: {id}` differs from the folder name `{folder_id}`; a dataset's id is its folder name"
                        ),
                        format!(
                            "remove the `id:` line (the dataset is then `{folder_id}`), or rename the folder to `{id}`"
                        ),
                    );
                }
                id
            }
            None => folder_id.to_string(),
        };
        if !valid_id(folder_id) {
            self.error(
                Pos { line: 1, column: 1 },
                "",
                format!(
                    "the folder name {} is not a valid dataset id (a dataset's id is its folder name)",
                    quote_name(folder_id)
                ),
                "rename the folder: 1–64 characters, letters, digits, `-`, `_` or `.`, not starting with `.`",
            );
        }
        id
    }

    /// Reads `title`, the id when it is missing or not a string.
    fn title(&mut self, map: &MapView<'_>, id: &str) -> String {
        match self.string(map, "title", "", "write `title: \"…\"`") {
            Some(t) if !t.trim().is_empty() => t,
            // A title of the wrong type was reported above.
            _ if map
                .get("title")
                .is_some_and(|n| !matches!(n.value, Value::Null | Value::Str(_))) =>
            {
                id.to_string()
            }
            _ => {
                self.warning(
                    map.pos,
                    "title",
                    format!("`title` is missing; the dataset is listed as `{id}`"),
                    "add `title: \"…\"` so people and models can tell what the data is",
                );
                id.to_string()
            }
        }
    }

    /// Reads `fields`, reporting it when missing.
    fn dataset_fields(&mut self, map: &MapView<'_>) -> Vec<Field> {
        match map.get("fields") {
            Some(node) => self.fields(node),
            None => {
                let fix = match suggest_present(map, "fields") {
                    Some(near) => format!(
                        "list the data's columns under `fields:`, each with `name` and `role` (found `{near}`: is it a misspelling of `fields`?)"
                    ),
                    None => "list the data's columns under `fields:`, each with `name` and `role`"
                        .to_string(),
                };
                self.error(map.pos, "fields", "`fields` is missing", fix);
                Vec::new()
            }
        }
    }

    /// Reads `id_field`, checked to name a declared field.
    fn id_field(&mut self, map: &MapView<'_>, fields: &[Field]) -> Option<String> {
        let id_field = self.string(
            map,
            "id_field",
            "",
            "write `id_field: <name of a declared field>`",
        );
        if let Some(name) = &id_field
            && !fields.iter().any(|f| &f.name == name)
        {
            let candidates = fields.iter().map(|f| f.name.as_str());
            let fix = match suggest(name, candidates) {
                Some(near) => {
                    format!("did you mean `{near}`? id_field must name a declared field")
                }
                None => "name a field declared under `fields`".to_string(),
            };
            self.error(
                map.key_pos("id_field"),
                "id_field",
                format!("id_field `{name}` is not a declared field"),
                fix,
            );
        }
        id_field
    }

    /// `data: s3://bucket/prefix/`: checked here for its form only (the bucket is asked when
    /// the dataset is registered). `data_file` and `data` name the data twice; a URL in
    /// `data_file` belongs in `data`.
    fn data_url(&mut self, map: &MapView<'_>, backend: &BackendDef) -> Option<ObjectUrl> {
        if let Some(node) = map.get("data_file")
            && let Value::Str(v) = &node.value
            && v.contains("://")
        {
            self.error(
                node.pos,
                "data_file",
                format!("`data_file` names a file in the dataset folder, not a URL (`{v}`)"),
                format!("write the object-store URL under `data:` instead: `data: {v}`"),
            );
        }
        let node = map.get("data")?;
        let value = self.string(map, "data", "", "write `data: s3://bucket/prefix/`")?;
        if map.get("data_file").is_some() {
            self.error(
                node.pos,
                "data",
                "both `data` and `data_file` name the dataset's data",
                "keep one: `data:` for an object-store URL, `data_file:` for a file in the dataset folder",
            );
            return None;
        }
        if backend.kind != BackendKind::Parquet {
            self.error(
                node.pos,
                "data",
                format!(
                    "`data` is read by the built-in Parquet backend, but this dataset's backend is `{}`",
                    backend.kind.as_str()
                ),
                "remove `data:`, or remove `backend:` to read Parquet objects from the URL",
            );
            return None;
        }
        match ObjectUrl::parse(&value) {
            Ok(url) => Some(url),
            Err(why) => {
                self.error(
                    node.pos,
                    "data",
                    format!(
                        "`{}` is not an object-store URL Tally reads: {why}",
                        redacted(&value)
                    ),
                    "write `data: s3://bucket/prefix/` (one Parquet object, or every Parquet object under the prefix); credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_PROFILE …), never from dataset.yaml",
                );
                None
            }
        }
    }

    fn source(&mut self, node: &Node) -> SourceDef {
        let Some(map) = self.map(node, "source", SOURCE_KEYS) else {
            return SourceDef::default();
        };
        let url = self.string(&map, "url", "source", "write `url: https://…`");
        if let Some(u) = &url
            && !valid_http_url(u)
        {
            self.error(
                map.key_pos("url"),
                "source.url",
                format!("`{u}` is not an http(s) URL"),
                "give the publisher's page as `https://host/path`",
            );
        }
        let source_type = match self.string(&map, "type", "source", "write `type: dataset`") {
            Some(t) => match SourceType::parse(&t) {
                Some(t) => Some(t),
                None => {
                    let all: Vec<&str> = SourceType::ALL.iter().map(|t| t.as_str()).collect();
                    self.error(
                        map.key_pos("type"),
                        "source.type",
                        format!("unknown source type `{t}`"),
                        format!("use one of: {}", all.join(", ")),
                    );
                    None
                }
            },
            None => None,
        };
        let csv_header_rows = match map.get("csv_header_rows").map(|n| (n, &n.value)) {
            Some((_, Value::Int(i))) if *i >= 0 => u32::try_from(*i).ok(),
            Some((n, Value::Null)) => {
                let _ = n;
                None
            }
            Some((n, _)) => {
                self.error(
                    n.pos,
                    "source.csv_header_rows",
                    format!(
                        "`csv_header_rows` must be a non-negative integer, found {}",
                        n.kind()
                    ),
                    "write e.g. `csv_header_rows: 2`",
                );
                None
            }
            None => None,
        };
        SourceDef {
            url,
            note: self.string(&map, "note", "source", "write `note: \"…\"`"),
            source_type,
            asset_pattern: self.string(
                &map,
                "asset_pattern",
                "source",
                "write the pattern as a string",
            ),
            csv_filename: self.string(
                &map,
                "csv_filename",
                "source",
                "write the file name as a string",
            ),
            csv_header_rows,
            null_markers: self.string_list(&map, "null_markers", "source"),
        }
    }

    fn backend(&mut self, node: &Node) -> BackendDef {
        let Some(map) = self.map(node, "backend", BACKEND_KEYS) else {
            return BackendDef::default();
        };
        let kind = match self.string(
            &map,
            "kind",
            "backend",
            "write `kind: parquet`, `kind: wasm` or `kind: native`",
        ) {
            None => Some(BackendKind::Parquet),
            Some(k) => match BackendKind::parse(&k) {
                Some(kind) => Some(kind),
                None => {
                    let other = k.as_str();
                    let near = suggest(other, BackendKind::ALL.map(BackendKind::as_str));
                    self.error(
                        map.key_pos("kind"),
                        "backend.kind",
                        format!("unknown backend kind `{other}`"),
                        match near {
                            Some(n) => format!("did you mean `{n}`? use parquet, wasm or native"),
                            None => "use parquet, wasm or native".to_string(),
                        },
                    );
                    None
                }
            },
        };
        // With an unknown kind, which plugin key applies cannot be told: check no further.
        let Some(kind) = kind else {
            return BackendDef::default();
        };
        let plugin_key = match kind {
            BackendKind::Wasm => Some("component"),
            BackendKind::Native => Some("library"),
            BackendKind::Parquet => None,
        };
        for key in ["component", "library"] {
            if map.get(key).is_some() && plugin_key != Some(key) {
                self.error(
                    map.key_pos(key),
                    &format!("backend.{key}"),
                    format!("`{key}` does not apply to backend kind `{}`", kind.as_str()),
                    match key {
                        "component" => "use `component:` with `kind: wasm`",
                        _ => "use `library:` with `kind: native`",
                    },
                );
            }
        }
        let plugin = plugin_key.and_then(|key| self.plugin(&map, key));
        let config = match map.get("config") {
            None => serde_json::Value::Object(Default::default()),
            Some(n) => match &n.value {
                Value::Map(_) => n.to_json(),
                Value::Null => serde_json::Value::Object(Default::default()),
                _ => {
                    self.error(
                        n.pos,
                        "backend.config",
                        format!("`config` must be a mapping, found {}", n.kind()),
                        "write the plugin's settings as `key: value` lines under `config:`",
                    );
                    serde_json::Value::Object(Default::default())
                }
            },
        };
        BackendDef {
            kind,
            plugin,
            config,
        }
    }

    /// Reads a backend's plugin under `key` (`component` or `library`): a built-in name or
    /// a file in the dataset folder.
    fn plugin(&mut self, map: &MapView<'_>, key: &str) -> Option<PluginRef> {
        let path = format!("backend.{key}");
        let fix = format!("write `{key}: <file in the dataset folder>` or `{key}: builtin:<name>`");
        let value = self.required_string(map, key, "backend", &fix)?;
        let node = map.get(key)?;
        match value.strip_prefix("builtin:") {
            Some(name) => {
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    self.error(
                        node.pos,
                        &path,
                        format!("`{value}` is not a valid built-in plugin name"),
                        "write `builtin:<name>` with letters, digits, `-` or `_`",
                    );
                    return None;
                }
                Some(PluginRef::Builtin(name.to_string()))
            }
            None => self
                .relative_path(node, &value, &path, key)
                .map(PluginRef::File),
        }
    }

    fn fields(&mut self, node: &Node) -> Vec<Field> {
        let Value::Seq(items) = &node.value else {
            self.error(
                node.pos,
                "fields",
                format!("`fields` must be a list, found {}", node.kind()),
                "write one `- name: … role: …` entry per column",
            );
            return Vec::new();
        };
        if items.is_empty() {
            self.error(
                node.pos,
                "fields",
                "`fields` is empty",
                "declare at least one column, e.g. `- {name: 件数, role: measure}`",
            );
        }
        let mut fields: Vec<Field> = Vec::with_capacity(items.len());
        let mut seen: HashMap<String, (String, Pos)> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("fields[{i}]");
            let Some(field) = self.field(item, &path) else {
                continue;
            };
            let key = normalize(&field.name);
            if let Some((first, pos)) = seen.get(&key) {
                let same = first == &field.name;
                self.error(
                    item.pos,
                    &format!("{path}.name"),
                    if same {
                        format!("field `{}` is declared twice (first on line {})", field.name, pos.line)
                    } else {
                        format!(
                            "field `{}` differs from `{first}` (line {}) only in width or case, so names could not be told apart",
                            field.name, pos.line
                        )
                    },
                    "remove the duplicate entry or give it a distinct name",
                );
                continue;
            }
            seen.insert(key, (field.name.clone(), item.pos));
            fields.push(field);
        }
        fields
    }

    fn field(&mut self, node: &Node, path: &str) -> Option<Field> {
        let map = self.map(node, path, FIELD_KEYS)?;
        let name = self.field_name(&map, path)?;
        let role = self.role(&map, path)?;
        let data_type = self.data_type(&map, path, role);
        let codelist = map
            .get("codelist")
            .and_then(|n| self.codelist(n, &join(path, "codelist")));
        if codelist.is_some() && role == Role::Measure {
            self.error(
                map.key_pos("codelist"),
                &join(path, "codelist"),
                "a measure cannot have a codelist",
                "remove `codelist`, or change the role to `dim` or `attr`",
            );
        }
        let multi_value = self.multi_value(&map, path)?;
        if multi_value.is_some() && role == Role::Measure {
            self.error(
                map.key_pos("multi_value"),
                &join(path, "multi_value"),
                "a measure cannot be multi-valued",
                "remove `multi_value`, or change the role to `attr`",
            );
        }
        if let Some(Codelist::AutoSplit) = codelist
            && multi_value.is_none()
        {
            self.error(
                    map.key_pos("codelist"),
                    &join(path, "codelist"),
                    "`codelist: auto_split` lists the parts of multi-value cells, but the field is not multi-valued",
                    "add `multi_value: true`, or use `codelist: auto`",
                );
        }
        let groupable = self.groupable(&map, path, role);
        let _filterable = self.boolean(&map, "filterable", path);
        let locator = self.locator(&map, path, data_type, multi_value.as_deref());
        self.aliases_written(&map, &name, path);
        let notes = self.string_list(&map, "notes", path);
        let csv_col_index = self.csv_col_index(&map, path);
        let unit = self.unit(
            &map,
            path,
            (role != Role::Measure).then_some(
                "a unit says what a measure's values are counted in: remove `unit`, or change the role to `measure`",
            ),
        );
        let grain = self.grain(&map, path, role, data_type);
        let period = self.measure_period(&map, path, role);
        let aggregation = self.aggregation(&map, path, role);
        self.weight_written(&map, &name, path, aggregation);
        self.rollup_written(&map, &name, path, role);
        Some(Field {
            desc: self.string(&map, "desc", path, "write `desc: \"…\"`"),
            group: self.string(&map, "group", path, "write `group: \"…\"`"),
            name,
            role,
            data_type,
            codelist,
            multi_value,
            groupable,
            locator,
            unit,
            grain,
            period,
            aggregation,
            weight: None,
            aliases: Vec::new(),
            derived: None,
            notes,
            csv_col_index,
            pos: node.pos,
        })
    }

    /// Reads `unit` (`件`, `円`, `%`): short text on one line. `refused` is the fix when the
    /// entry may not have a unit at all.
    fn unit(&mut self, map: &MapView<'_>, path: &str, refused: Option<&str>) -> Option<String> {
        let fix = "write what a value is counted in, e.g. `unit: 件`, `unit: 円` or `unit: \"%\"`";
        let unit = self.string(map, "unit", path, fix)?;
        let problem = if let Some(refused) = refused {
            Some((
                "this entry takes no `unit`".to_string(),
                refused.to_string(),
            ))
        } else if unit.trim().is_empty() {
            Some(("`unit` is empty".to_string(), fix.to_string()))
        } else if unit.chars().count() > MAX_UNIT_CHARS || unit.chars().any(char::is_control) {
            Some((
                format!(
                    "`unit` is longer than {MAX_UNIT_CHARS} characters or holds a control character"
                ),
                fix.to_string(),
            ))
        } else {
            None
        };
        match problem {
            Some((message, fix)) => {
                self.error(map.key_pos("unit"), &join(path, "unit"), message, fix);
                None
            }
            None => Some(unit.trim().to_string()),
        }
    }

    /// Reads a measure's `period` (`"2020"`, `2020年度`, `2019-10-01`): the period its values
    /// are of, short text on one line; refused on any other role.
    fn measure_period(&mut self, map: &MapView<'_>, path: &str, role: Role) -> Option<String> {
        let fix = "write the period the measure's values are of, e.g. `period: \"2020\"`, `period: 2020年度` or `period: 2019-10-01`";
        let written = match &map.get("period")?.value {
            Value::Str(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            _ => {
                self.error(
                    map.key_pos("period"),
                    &join(path, "period"),
                    "`period` is not text or a year",
                    fix,
                );
                return None;
            }
        };
        let problem = if role != Role::Measure {
            Some(format!(
                "`period` says what period a measure's values are of, and this field's role is `{}`",
                role.as_str()
            ))
        } else if written.trim().is_empty()
            || written.chars().count() > MAX_UNIT_CHARS
            || written.chars().any(char::is_control)
        {
            Some(format!(
                "`period` is empty, longer than {MAX_UNIT_CHARS} characters or holds a control character"
            ))
        } else {
            None
        };
        match problem {
            Some(message) => {
                self.error(map.key_pos("period"), &join(path, "period"), message, fix);
                None
            }
            None => Some(written.trim().to_string()),
        }
    }

    /// Reads a field's `name`, refused when too long or holding control characters.
    fn field_name(&mut self, map: &MapView<'_>, path: &str) -> Option<String> {
        let name = self.required_string(
            map,
            "name",
            path,
            "give the column's name as it appears in the data: `name: …`",
        )?;
        if name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
            self.error(
                map.key_pos("name"),
                &join(path, "name"),
                format!("field name `{name}` is longer than {MAX_NAME_CHARS} characters or contains control characters"),
                "use the column's name as it appears in the data",
            );
            return None;
        }
        Some(name)
    }

    /// Reads a field's `role`; `None` when it is missing or unknown (reported).
    fn role(&mut self, map: &MapView<'_>, path: &str) -> Option<Role> {
        let roles: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
        let role_fix = format!("write `role:` as one of {}", roles.join(", "));
        let role = match self.required_string(map, "role", path, &role_fix)?.as_str() {
            "id" => Role::Id,
            "dim" | "dimension" => Role::Dim,
            "time" => Role::Time,
            "measure" => Role::Measure,
            "attr" | "attribute" => Role::Attr,
            other => {
                let fix = match suggest(other, roles.iter().copied()) {
                    Some(near) => format!("did you mean `{near}`? {role_fix}"),
                    None => role_fix,
                };
                self.error(
                    map.key_pos("role"),
                    &join(path, "role"),
                    format!("unknown role `{other}`"),
                    fix,
                );
                return None;
            }
        };
        Some(role)
    }

    /// Reads a field's `data_type` (the role's default when absent), numeric for a measure.
    fn data_type(&mut self, map: &MapView<'_>, path: &str, role: Role) -> DataType {
        let data_type = match self.string(
            map,
            "data_type",
            path,
            "write `data_type: integer` (or string, number, boolean, date)",
        ) {
            None => match role {
                Role::Measure => DataType::Number,
                // A year is an integer; a month or a date is read as written.
                Role::Time => match map.get("grain").map(|n| &n.value) {
                    Some(Value::Str(g)) if Grain::parse(g).is_some_and(Grain::is_year) => {
                        DataType::Integer
                    }
                    Some(Value::Str(g)) if g == "date" => DataType::Date,
                    _ => DataType::String,
                },
                _ => DataType::String,
            },
            Some(t) => match DataType::parse(&t) {
                Some(t) => t,
                None => {
                    self.error(
                        map.key_pos("data_type"),
                        &join(path, "data_type"),
                        format!("unknown data_type `{t}`"),
                        "use one of string, integer, number, boolean, date",
                    );
                    // Go on with the role's default so one mistake is reported once.
                    match role {
                        Role::Measure => DataType::Number,
                        _ => DataType::String,
                    }
                }
            },
        };
        if role == Role::Measure && !data_type.is_numeric() {
            self.error(
                map.key_pos("data_type"),
                &join(path, "data_type"),
                format!(
                    "a measure must be numeric, but data_type is `{}`",
                    data_type.as_str()
                ),
                "use `data_type: integer` or `data_type: number`, or change the role to `attr`",
            );
        }
        data_type
    }

    /// Reads a field's `grain`: required on the time field (and only there); a year is an
    /// integer.
    fn grain(
        &mut self,
        map: &MapView<'_>,
        path: &str,
        role: Role,
        data_type: DataType,
    ) -> Option<Grain> {
        let grains = Grain::ALL.map(Grain::as_str).join(", ");
        let fix = format!("write `grain:` as one of {grains}, e.g. `grain: year`");
        if role != Role::Time {
            if map.get("grain").is_some() {
                self.error(
                    map.key_pos("grain"),
                    &join(path, "grain"),
                    "`grain` says what one period of the time field is, and this field's role is not `time`",
                    "remove `grain`, or make this the dataset's time field with `role: time`",
                );
            }
            return None;
        }
        let written = self.required_string(map, "grain", path, &fix)?;
        let Some(grain) = Grain::parse(&written) else {
            let fix = match suggest(&written, Grain::ALL.map(Grain::as_str)) {
                Some(near) => format!("did you mean `{near}`? {fix}"),
                None => fix,
            };
            self.error(
                map.key_pos("grain"),
                &join(path, "grain"),
                format!("unknown grain `{written}`"),
                fix,
            );
            return None;
        };
        let fits = match grain {
            Grain::Year | Grain::FiscalYear => data_type == DataType::Integer,
            Grain::Month => matches!(data_type, DataType::Integer | DataType::String),
            Grain::Date => matches!(data_type, DataType::Date | DataType::String),
        };
        if !fits {
            self.error(
                map.key_pos("data_type"),
                &join(path, "data_type"),
                format!(
                    "a time field of grain `{grain}` cannot have data_type `{}`",
                    data_type.as_str()
                ),
                match grain {
                    Grain::Year | Grain::FiscalYear => {
                        "a year is an integer: write `data_type: integer` (or remove the key)"
                    }
                    Grain::Month => "a month is `2020-04` (string) or `202004` (integer)",
                    Grain::Date => "a date is `data_type: date` or a `2020-04-01` string",
                },
            );
        }
        Some(grain)
    }

    /// Reads a measure's `aggregation`: flow, stock or rate.
    fn aggregation(&mut self, map: &MapView<'_>, path: &str, role: Role) -> Option<Aggregation> {
        map.get("aggregation")?;
        let kinds = Aggregation::ALL.map(Aggregation::as_str).join(", ");
        let fix = format!(
            "write `aggregation:` as one of {kinds}: flow sums over periods and areas (births), stock sums over areas but not over periods (population), rate is never summed (a fertility rate)"
        );
        let written = self.required_string(map, "aggregation", path, &fix)?;
        if role != Role::Measure {
            self.error(
                map.key_pos("aggregation"),
                &join(path, "aggregation"),
                "`aggregation` says how a measure adds up, and this field is not a measure",
                "remove `aggregation`, or change the role to `measure`",
            );
            return None;
        }
        let Some(aggregation) = Aggregation::parse(&written) else {
            let fix = match suggest(&written, Aggregation::ALL.map(Aggregation::as_str)) {
                Some(near) => format!("did you mean `{near}`? {fix}"),
                None => fix,
            };
            self.error(
                map.key_pos("aggregation"),
                &join(path, "aggregation"),
                format!("unknown aggregation `{written}`"),
                fix,
            );
            return None;
        };
        Some(aggregation)
    }

    /// Reads a rate's `weight` as written; resolved by [`Reader::resolve_weights`] once every
    /// field is known.
    /// Reads `rollup` on a field: `{<level>: {<parent>: [<child value>, …]}}`, kept until
    /// every field is read ([`Checker::derived_fields`]).
    fn rollup_written(&mut self, map: &MapView<'_>, field: &str, path: &str, role: Role) {
        let Some(node) = map.get("rollup") else {
            return;
        };
        let path = join(path, "rollup");
        let fix = "write `rollup: {<level>: {<parent>: [<value of this field>, …]}}`, e.g. `rollup: {地方: {東北: [青森県, 岩手県]}}`";
        if role == Role::Measure {
            self.error(
                node.pos,
                &path,
                "a measure has no hierarchy to roll up",
                "move `rollup` to the dimension whose values it groups",
            );
            return;
        }
        let Value::Map(levels) = &node.value else {
            self.error(
                node.pos,
                &path,
                format!("`rollup` must be a mapping, found {}", node.kind()),
                fix,
            );
            return;
        };
        for (level, parents_node) in levels {
            let level_path = join(&path, &level.name);
            let Value::Map(parents) = &parents_node.value else {
                self.error(
                    parents_node.pos,
                    &level_path,
                    format!(
                        "a level of `rollup` maps each parent to its children, found {}",
                        parents_node.kind()
                    ),
                    fix,
                );
                continue;
            };
            let mut out: Vec<(String, Vec<String>)> = Vec::new();
            let mut seen: std::collections::HashMap<String, String> =
                std::collections::HashMap::new();
            for (parent, children) in parents {
                let child_path = join(&level_path, &parent.name);
                let values: Vec<String> = match &children.value {
                    Value::Str(s) => vec![s.clone()],
                    Value::Int(i) => vec![i.to_string()],
                    Value::Seq(items) => items
                        .iter()
                        .filter_map(|i| match &i.value {
                            Value::Str(s) => Some(s.clone()),
                            Value::Int(n) => Some(n.to_string()),
                            _ => None,
                        })
                        .collect(),
                    _ => {
                        self.error(children.pos, &child_path, format!("the children of `{}` must be a list of values of `{field}`, found {}", parent.name, children.kind()), fix);
                        continue;
                    }
                };
                for v in &values {
                    if let Some(other) = seen.insert(v.clone(), parent.name.clone())
                        && other != parent.name
                    {
                        self.error(children.pos, &child_path, format!("`{v}` is under both `{other}` and `{}`: a value of `{field}` has one parent in a level", parent.name), "list each value under one parent");
                    }
                }
                out.push((parent.name.clone(), values));
            }
            if out.is_empty() {
                self.error(
                    parents_node.pos,
                    &level_path,
                    "the level lists no parent",
                    fix,
                );
                continue;
            }
            self.rollups.push(Rollup {
                field: field.to_string(),
                level: level.name.clone(),
                parents: out,
                pos: level.pos,
                path: level_path,
            });
        }
    }

    /// Appends the derived fields after every column's: each level of a `rollup`, then each
    /// field lent by a dataset of `relations` (`- {dataset: 都道府県表, on: {地域コード:
    /// 地域コード}, fields: [地方]}`). Their names are new names of this dataset.
    fn derived_fields(&mut self, fields: &mut Vec<Field>, map: &MapView<'_>) {
        let taken = |fields: &[Field], name: &str| fields.iter().any(|f| f.name == name);
        for r in std::mem::take(&mut self.rollups) {
            let Some(key) = fields.iter().position(|f| f.name == r.field) else {
                continue;
            };
            if taken(fields, &r.level) {
                self.error(
                    r.pos,
                    &r.path,
                    format!("the level `{}` has the name of a field", r.level),
                    "name the level by a name no field has",
                );
                continue;
            }
            fields.push(derived_field(
                r.level.clone(),
                Some(format!(
                    "the {} of each {} (a roll-up written in the definition)",
                    r.level, r.field
                )),
                FieldId::at(key),
                DerivedSource::Rollup(r.parents),
                r.pos,
            ));
        }
        let Some(node) = map.get("relations") else {
            return;
        };
        let fix = "write `relations: [{dataset: <id of a dataset served beside this one>, on: {<field here>: <its key field>}, fields: [<its fields lent>]}]`";
        let Value::Seq(items) = &node.value else {
            if node.value != Value::Null {
                self.error(
                    node.pos,
                    "relations",
                    format!("`relations` must be a list, found {}", node.kind()),
                    fix,
                );
            }
            return;
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("relations[{i}]");
            let Some(rel) = self.map(item, &path, RELATION_KEYS) else {
                continue;
            };
            let Some(dataset) = self.required_string(&rel, "dataset", &path, fix) else {
                continue;
            };
            let on_path = join(&path, "on");
            let pair = match rel.get("on").map(|n| &n.value) {
                Some(Value::Map(entries)) if entries.len() == 1 => match &entries[0] {
                    (
                        k,
                        Node {
                            value: Value::Str(there),
                            ..
                        },
                    ) => Some((k.clone(), there.clone())),
                    _ => None,
                },
                _ => None,
            };
            let Some((here, there)) = pair else {
                self.error(rel.pos, &on_path, "`on` must map one field of this dataset to the key field of the related dataset", fix);
                continue;
            };
            let Some(key) = fields
                .iter()
                .position(|f| f.name == here.name && f.is_column())
            else {
                let near = suggest(&here.name, fields.iter().map(|f| f.name.as_str()));
                self.error(
                    here.pos,
                    &join(&on_path, &here.name),
                    format!("`{}` is not a declared field of this dataset", here.name),
                    match near {
                        Some(n) => format!("did you mean `{n}`?"),
                        None => "name a field declared under `fields`".to_string(),
                    },
                );
                continue;
            };
            let lent = self.string_list(&rel, "fields", &path);
            if lent.is_empty() {
                self.error(
                    rel.pos,
                    &join(&path, "fields"),
                    "a relation lends no field",
                    "write `fields: [<fields of the related dataset to group and filter by>]`",
                );
                continue;
            }
            for name in lent {
                if taken(fields, &name) {
                    self.error(
                        rel.pos,
                        &join(&path, "fields"),
                        format!("`{name}` is already the name of a field of this dataset"),
                        "lend fields whose names this dataset does not have",
                    );
                    continue;
                }
                fields.push(derived_field(
                    name.clone(),
                    Some(format!(
                        "`{name}` of dataset `{dataset}`, for the {} of each record",
                        there
                    )),
                    FieldId::at(key),
                    DerivedSource::Relation {
                        dataset: dataset.clone(),
                        key: there.clone(),
                        field: name,
                    },
                    rel.pos,
                ));
            }
        }
    }

    fn weight_written(
        &mut self,
        map: &MapView<'_>,
        field: &str,
        path: &str,
        aggregation: Option<Aggregation>,
    ) {
        if map.get("weight").is_none() {
            return;
        }
        let fix =
            "write `weight: <the measure the rate is of>`, e.g. the population a birth rate is per";
        let Some(name) = self.string(map, "weight", path, fix) else {
            return;
        };
        if aggregation != Some(Aggregation::Rate) {
            self.error(
                map.key_pos("weight"),
                &join(path, "weight"),
                "`weight` is what a rate is averaged by, and this field is not declared `aggregation: rate`",
                "add `aggregation: rate`, or remove `weight`",
            );
            return;
        }
        self.weights.push((
            field.to_string(),
            name,
            map.key_pos("weight"),
            join(path, "weight"),
        ));
    }

    /// Resolves every rate's `weight` to a measure (another one, itself not a rate), and checks
    /// that at most one field is the time field.
    fn resolve_weights_and_time(&mut self, fields: &mut [Field]) {
        for (field, name, pos, path) in std::mem::take(&mut self.weights) {
            let Some(at) = fields.iter().position(|f| f.name == field) else {
                continue;
            };
            let found = fields.iter().position(|f| f.name == name);
            let problem = match found {
                None => Some(
                    match suggest(
                        &name,
                        fields
                            .iter()
                            .filter(|f| f.role == Role::Measure)
                            .map(|f| f.name.as_str()),
                    ) {
                        Some(near) => (
                            format!("`weight: {name}` is no declared field"),
                            format!(
                                "did you mean `{near}`? name a measure declared under `fields`"
                            ),
                        ),
                        None => (
                            format!("`weight: {name}` is no declared field"),
                            "name a measure declared under `fields`".to_string(),
                        ),
                    },
                ),
                Some(w) if w == at => Some((
                    format!("`{field}` cannot be weighted by itself"),
                    "name the measure the rate is of (its denominator), e.g. a population"
                        .to_string(),
                )),
                Some(w) if fields[w].role != Role::Measure => Some((
                    format!("`weight: {name}` is not a measure"),
                    "name a numeric field with `role: measure`".to_string(),
                )),
                Some(w) if fields[w].aggregation == Some(Aggregation::Rate) => Some((
                    format!("`weight: {name}` is itself a rate"),
                    "weight a rate by a count or a level (people, households), not by another rate"
                        .to_string(),
                )),
                Some(_) => None,
            };
            match problem {
                Some((message, fix)) => self.error(pos, &path, message, fix),
                None => fields[at].weight = found.map(FieldId::at),
            }
        }
        let times: Vec<usize> = (0..fields.len())
            .filter(|i| fields[*i].role == Role::Time)
            .collect();
        if let [first, rest @ ..] = times.as_slice() {
            for i in rest {
                self.error(
                    fields[*i].pos,
                    &format!("fields[{i}].role"),
                    format!(
                        "`{}` and `{}` both have `role: time`; a dataset has one time field",
                        fields[*first].name, fields[*i].name
                    ),
                    "keep `role: time` on the field that says which period a record is of, and make the other a `dim`",
                );
            }
        }
    }

    /// Reads a field's `multi_value`: its separator, `None` when single-valued. The outer
    /// `None` gives the field up (a `multi_value` mapping that could not be read).
    fn multi_value(&mut self, map: &MapView<'_>, path: &str) -> Option<Option<String>> {
        Some(match map.get("multi_value") {
            None => None,
            Some(n) => match &n.value {
                Value::Bool(true) => Some(DEFAULT_SEPARATOR.to_string()),
                Value::Bool(false) | Value::Null => None,
                Value::Map(_) => {
                    let mv_path = join(path, "multi_value");
                    let mv = self.map(n, &mv_path, MULTI_VALUE_KEYS)?;
                    match self.string(&mv, "separator", &mv_path, "write `separator: \";\"`") {
                        Some(sep) if !sep.is_empty() => Some(sep),
                        Some(_) => {
                            self.error(
                                mv.key_pos("separator"),
                                &join(&mv_path, "separator"),
                                "the separator is empty",
                                "write the character that separates values, e.g. `separator: \";\"`",
                            );
                            None
                        }
                        None => Some(DEFAULT_SEPARATOR.to_string()),
                    }
                }
                _ => {
                    self.error(
                        n.pos,
                        &join(path, "multi_value"),
                        format!("`multi_value` must be true, false or `{{separator: \"…\"}}`, found {}", n.kind()),
                        "write `multi_value: true` (values separated by `;`) or `multi_value: {separator: \"|\"}`",
                    );
                    None
                }
            },
        })
    }

    /// Reads a field's `groupable` (dimensions and attributes by default); never a measure.
    fn groupable(&mut self, map: &MapView<'_>, path: &str, role: Role) -> bool {
        let groupable_default = matches!(role, Role::Dim | Role::Attr | Role::Time);
        match self.boolean(map, "groupable", path) {
            Some(true) if role == Role::Measure => {
                self.error(
                    map.key_pos("groupable"),
                    &join(path, "groupable"),
                    "a measure is aggregated, not grouped",
                    "remove `groupable: true`, or change the role to `dim`",
                );
                false
            }
            Some(g) => g,
            None => groupable_default,
        }
    }

    /// Reads a field's `locator`: `law`, on a single-valued text field only.
    fn locator(
        &mut self,
        map: &MapView<'_>,
        path: &str,
        data_type: DataType,
        multi_value: Option<&str>,
    ) -> Option<LocatorKind> {
        match map.get("locator").map(|n| (n, &n.value)) {
            None | Some((_, Value::Null)) => None,
            Some((_, Value::Str(s)))
                if s == "law" && !data_type.is_numeric() && multi_value.is_none() =>
            {
                Some(LocatorKind::Law)
            }
            Some((n, _)) => {
                self.error(
                    n.pos,
                    &join(path, "locator"),
                    format!(
                        "`locator` must be `law` on a single-valued text field, found {}",
                        n.kind()
                    ),
                    "write `locator: law` on the field holding provisions such as 第九条第一項, or remove the key",
                );
                None
            }
        }
    }

    /// Reads a field's `csv_col_index`, a non-negative integer.
    fn csv_col_index(&mut self, map: &MapView<'_>, path: &str) -> Option<u32> {
        match map.get("csv_col_index").map(|n| (n, &n.value)) {
            Some((_, Value::Int(i))) if *i >= 0 => u32::try_from(*i).ok(),
            Some((_, Value::Null)) | None => None,
            Some((n, _)) => {
                self.error(
                    n.pos,
                    &join(path, "csv_col_index"),
                    format!(
                        "`csv_col_index` must be a non-negative integer, found {}",
                        n.kind()
                    ),
                    "write the 0-based column index, e.g. `csv_col_index: 3`",
                );
                None
            }
        }
    }

    /// Reads a field's `aliases` as written (one name, or a list of names); they are checked
    /// and resolved by [`Reader::resolve_aliases`] once every field is known.
    fn aliases_written(&mut self, map: &MapView<'_>, field: &str, path: &str) {
        let Some(node) = map.get("aliases") else {
            return;
        };
        let key_path = join(path, "aliases");
        let fix = "write the fields holding other names of this field's values, e.g. `aliases: [law_abbrev, law_num]`";
        let items: Vec<&Node> = match &node.value {
            Value::Null => return,
            Value::Str(_) => vec![node],
            Value::Seq(items) => items.iter().collect(),
            _ => {
                self.error(
                    node.pos,
                    &key_path,
                    format!(
                        "`aliases` must be a list of field names, found {}",
                        node.kind()
                    ),
                    fix,
                );
                return;
            }
        };
        let mut names = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let item_path = if matches!(node.value, Value::Seq(_)) {
                format!("{key_path}[{i}]")
            } else {
                key_path.clone()
            };
            match &item.value {
                Value::Str(s) => names.push((s.clone(), item.pos, item_path)),
                _ => self.error(
                    item.pos,
                    &item_path,
                    format!("expected a field name, found {}", item.kind()),
                    fix,
                ),
            }
        }
        self.aliases.push(AliasesWritten {
            field: field.to_string(),
            pos: map.key_pos("aliases"),
            path: key_path,
            names,
        });
    }

    /// Checks every field's `aliases` against the fields declared and resolves them to ids:
    /// the field itself must be a single-valued text field whose values are compared as they
    /// are (no static codes, no provisions), and each alias a distinct other text field.
    fn resolve_aliases(&mut self, fields: &mut [Field]) {
        let written = std::mem::take(&mut self.aliases);
        for w in written {
            let Some(at) = fields.iter().position(|f| f.name == w.field) else {
                continue;
            };
            let f = &fields[at];
            let why_not = if f.role == Role::Measure || f.data_type.is_numeric() {
                Some("it holds numbers")
            } else if f.multi_value.is_some() {
                Some("it is multi-valued")
            } else if matches!(f.codelist, Some(Codelist::Static(_))) {
                Some("its values are declared codes, which have their own names (their labels)")
            } else if f.locator.is_some() {
                Some("it holds provisions, read by `locator`")
            } else {
                None
            };
            if let Some(why) = why_not {
                self.error(
                    w.pos,
                    &w.path,
                    format!("`{}` cannot have aliases: {why}", w.field),
                    "declare `aliases` on the single-valued text field that names things (e.g. a law's title), or remove the key",
                );
                continue;
            }
            let mut ids: Vec<FieldId> = Vec::with_capacity(w.names.len());
            for (name, pos, path) in &w.names {
                let Some(id) = fields.iter().position(|f| &f.name == name) else {
                    let fix = match suggest(name, fields.iter().map(|f| f.name.as_str())) {
                        Some(near) => format!(
                            "did you mean `{near}`? name a field declared under `fields` that holds other names of `{}`",
                            w.field
                        ),
                        None => format!(
                            "name a field declared under `fields` that holds other names of `{}`",
                            w.field
                        ),
                    };
                    self.error(*pos, path, format!("`{name}` is not a declared field"), fix);
                    continue;
                };
                let alias = &fields[id];
                let problem = if id == at {
                    Some(format!("`{name}` names the field itself"))
                } else if alias.data_type.is_numeric() {
                    Some(format!(
                        "`{name}` holds numbers; an alias is a name, held as text"
                    ))
                } else if ids.contains(&FieldId::at(id)) {
                    Some(format!("`{name}` is listed twice"))
                } else {
                    None
                };
                match problem {
                    Some(message) => self.error(
                        *pos,
                        path,
                        message,
                        format!(
                            "list other text fields of the same record holding other names of `{}` (short titles, numbers), each once",
                            w.field
                        ),
                    ),
                    None => ids.push(FieldId::at(id)),
                }
            }
            fields[at].aliases = ids;
        }
    }

    fn codelist(&mut self, node: &Node, path: &str) -> Option<Codelist> {
        let fix = "write `codelist: auto`, `codelist: auto_split`, or a list of codes (`- 1 実施済` or `- \"1 実施済\": description`)";
        match &node.value {
            Value::Null => None,
            Value::Str(s) => match s.as_str() {
                "auto" => Some(Codelist::Auto),
                "auto_split" => Some(Codelist::AutoSplit),
                other => {
                    let near = suggest(other, ["auto", "auto_split"]);
                    self.error(
                        node.pos,
                        path,
                        format!("unknown codelist mode `{other}`"),
                        match near {
                            Some(n) => format!("did you mean `{n}`? {fix}"),
                            None => fix.to_string(),
                        },
                    );
                    None
                }
            },
            Value::Seq(items) => {
                let mut codes: Vec<Code> = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let item_path = format!("{path}[{i}]");
                    let Some(code) = self.code(item, &item_path, fix) else {
                        continue;
                    };
                    if code.value.trim().is_empty() {
                        self.error(
                            item.pos,
                            &item_path,
                            "the code is empty",
                            "remove the entry or write the code",
                        );
                        continue;
                    }
                    if codes.iter().any(|c| c.value == code.value) {
                        self.error(
                            item.pos,
                            &item_path,
                            format!("code `{}` is listed twice", code.value),
                            "remove the duplicate entry",
                        );
                        continue;
                    }
                    codes.push(code);
                }
                if codes.is_empty() && !items.is_empty() {
                    return None;
                }
                if codes.is_empty() {
                    self.error(node.pos, path, "the codelist is empty", fix);
                    return None;
                }
                Some(Codelist::Static(codes))
            }
            _ => {
                self.error(
                    node.pos,
                    path,
                    format!(
                        "a codelist must be `auto`, `auto_split` or a list, found {}",
                        node.kind()
                    ),
                    fix,
                );
                None
            }
        }
    }

    /// Reads one entry of a codelist: a code, or `code: description`.
    fn code(&mut self, item: &Node, item_path: &str, fix: &str) -> Option<Code> {
        Some(match &item.value {
            Value::Str(s) => Code {
                value: s.clone(),
                description: None,
            },
            Value::Int(n) => Code {
                value: n.to_string(),
                description: None,
            },
            Value::Map(entries) if entries.len() == 1 => {
                let (key, value) = &entries[0];
                let description = match &value.value {
                    Value::Str(s) => Some(s.clone()),
                    Value::Null => None,
                    _ => {
                        self.error(
                            value.pos,
                            item_path,
                            format!(
                                "the description of code `{}` must be a string, found {}",
                                key.name,
                                value.kind()
                            ),
                            "write `- \"code\": description text`",
                        );
                        None
                    }
                };
                Code {
                    value: key.name.clone(),
                    description,
                }
            }
            _ => {
                self.error(
                    item.pos,
                    item_path,
                    format!(
                        "expected a code (a string, or `code: description`), found {}",
                        item.kind()
                    ),
                    fix,
                );
                return None;
            }
        })
    }

    /// The id of the field named at `path`, which must be declared, or the error that says
    /// which are.
    fn declared_field(
        &mut self,
        map: &MapView<'_>,
        key: &str,
        path: &str,
        fields: &[Field],
        what: &str,
    ) -> Option<FieldId> {
        let name = self.required_string(map, key, path, &format!("write `{key}: <{what}>`"))?;
        if let Some(at) = fields.iter().position(|f| f.name == name) {
            return Some(FieldId::at(at));
        }
        let fix = match suggest(&name, fields.iter().map(|f| f.name.as_str())) {
            Some(near) => format!("did you mean `{near}`? {what} must be a declared field"),
            None => format!("{what} must be a field declared under `fields`"),
        };
        self.error(
            map.key_pos(key),
            &join(path, key),
            format!("`{name}` is not a declared field"),
            fix,
        );
        None
    }

    fn revisions(&mut self, node: &Node, fields: &[Field]) -> Option<Revisions> {
        let map = self.map(node, "revisions", REVISIONS_KEYS)?;
        let key = self.declared_field(
            &map,
            "key",
            "revisions",
            fields,
            "the field naming what is revised",
        );
        let effective = self.declared_field(
            &map,
            "effective",
            "revisions",
            fields,
            "the field holding the date a revision takes effect",
        );
        let id = match map.get("id") {
            Some(_) => Some(self.declared_field(
                &map,
                "id",
                "revisions",
                fields,
                "the field naming a revision",
            )?),
            None => None,
        };
        let title = match map.get("title") {
            Some(_) => Some(self.declared_field(
                &map,
                "title",
                "revisions",
                fields,
                "the field naming it for people",
            )?),
            None => None,
        };
        if let Some(f) = effective.map(|id| &fields[id])
            && f.data_type.is_numeric()
        {
            self.error(
                map.key_pos("effective"),
                "revisions.effective",
                format!("`{}` holds numbers, not dates", f.name),
                "name the field holding each revision's effective date as YYYY-MM-DD text",
            );
            return None;
        }
        Some(Revisions {
            key: key?,
            title,
            effective: effective?,
            id,
        })
    }

    fn links(&mut self, node: &Node, fields: &[Field]) -> Vec<Link> {
        let Value::Seq(items) = &node.value else {
            if node.value != Value::Null {
                self.error(
                    node.pos,
                    "links",
                    format!("`links` must be a list, found {}", node.kind()),
                    "write one `- {to: <dataset>, on: {<field here>: <field there>}}` entry per link",
                );
            }
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("links[{i}]");
            let Some(map) = self.map(item, &path, LINK_KEYS) else {
                continue;
            };
            let Some(to) = self.required_string(
                &map,
                "to",
                &path,
                "write `to: <id of the dataset linked to>`",
            ) else {
                continue;
            };
            let on_path = join(&path, "on");
            let Some(on_node) = map.get("on") else {
                self.error(
                    map.pos,
                    &on_path,
                    "`on` is missing",
                    "write `on: {<field of this dataset>: <field of the dataset linked to>}`",
                );
                continue;
            };
            // Its keys are field names, not keys of the format: read as they are.
            let Value::Map(entries) = &on_node.value else {
                self.error(
                    on_node.pos,
                    &on_path,
                    format!("`on` must be a mapping, found {}", on_node.kind()),
                    "write `on: {<field of this dataset>: <field of the dataset linked to>}`",
                );
                continue;
            };
            let mut pairs = Vec::new();
            for (k, v) in entries {
                let Value::Str(there) = &v.value else {
                    self.error(
                        v.pos,
                        &join(&on_path, &k.name),
                        format!(
                            "`{}` must name a field of `{to}`, found {}",
                            k.name,
                            v.kind()
                        ),
                        "write the name of the field of the dataset linked to",
                    );
                    continue;
                };
                let Some(here) = fields.iter().position(|f| f.name == k.name) else {
                    let fix = match suggest(&k.name, fields.iter().map(|f| f.name.as_str())) {
                        Some(near) => format!("did you mean `{near}`?"),
                        None => "name a field declared under `fields`".to_string(),
                    };
                    self.error(
                        k.pos,
                        &join(&on_path, &k.name),
                        format!("`{}` is not a declared field of this dataset", k.name),
                        fix,
                    );
                    continue;
                };
                pairs.push((FieldId::at(here), there.clone()));
            }
            if pairs.is_empty() {
                self.error(
                    on_node.pos,
                    &on_path,
                    "`on` links no field",
                    "write at least one `<field of this dataset>: <field of the dataset linked to>`",
                );
                continue;
            }
            let text = self.string(
                &map,
                "text",
                &path,
                "write `text: <field of the dataset linked to that holds the text>`",
            );
            out.push(Link {
                to,
                on: pairs,
                text,
            });
        }
        out
    }

    fn computed_measures(&mut self, node: &Node, fields: &[Field]) -> Vec<ComputedMeasure> {
        let Value::Seq(items) = &node.value else {
            if node.value != Value::Null {
                self.error(
                    node.pos,
                    "computed_measures",
                    format!("`computed_measures` must be a list, found {}", node.kind()),
                    "write one `- name: … mode: …` entry per measure",
                );
            }
            return Vec::new();
        };
        let mut out: Vec<ComputedMeasure> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("computed_measures[{i}]");
            if let Some(measure) = self.computed_measure(item, &path, fields, &out) {
                out.push(measure);
            }
        }
        out
    }

    /// Reads one computed measure, its name unlike any field's or earlier measure's; `None`
    /// when it is given up (reported).
    fn computed_measure(
        &mut self,
        item: &Node,
        path: &str,
        fields: &[Field],
        earlier: &[ComputedMeasure],
    ) -> Option<ComputedMeasure> {
        let map = self.map(item, path, MEASURE_KEYS)?;
        let name = self.required_string(&map, "name", path, "write `name: …`")?;
        if fields
            .iter()
            .any(|f| normalize(&f.name) == normalize(&name))
        {
            self.error(
                map.key_pos("name"),
                &join(path, "name"),
                format!("computed measure `{name}` has the name of a field"),
                "give the computed measure a name of its own",
            );
            return None;
        }
        if earlier
            .iter()
            .any(|m| normalize(&m.name) == normalize(&name))
        {
            self.error(
                map.key_pos("name"),
                &join(path, "name"),
                format!("computed measure `{name}` is declared twice"),
                "remove the duplicate entry or rename it",
            );
            return None;
        }
        let desc = self.string(&map, "desc", path, "write `desc: \"…\"`");
        let mode_fix = format!(
            "write {}",
            Mode::ALL
                .map(|m| format!("`mode: {m}` (with {})", m.keys()))
                .join(" or ")
        );
        let written = self.required_string(&map, "mode", path, &mode_fix)?;
        let Some(mode) = Mode::parse(&written) else {
            let fix = match suggest(&written, Mode::ALL.map(Mode::as_str)) {
                Some(near) => format!("did you mean `{near}`? {mode_fix}"),
                None => mode_fix,
            };
            self.error(
                map.key_pos("mode"),
                &join(path, "mode"),
                format!("unknown mode `{written}`"),
                fix,
            );
            return None;
        };
        let formula = match mode {
            Mode::CountWhere => self.count_where(&map, path, fields)?,
            Mode::SumRatio => {
                let numerator =
                    self.field_ref(&map, "numerator", path, fields, Some(Role::Measure));
                let denominator =
                    self.field_ref(&map, "denominator", path, fields, Some(Role::Measure));
                let (Some((n, nf)), Some((d, df))) = (numerator, denominator) else {
                    return None;
                };
                for (key, f) in [("numerator", nf), ("denominator", df)] {
                    if f.aggregation == Some(Aggregation::Rate) {
                        self.error(
                            map.key_pos(key),
                            &join(path, key),
                            format!("`{}` is a rate, and a sum of rates means nothing", f.name),
                            "divide sums of counts or levels (births by population), not of rates",
                        );
                    }
                }
                Formula::SumRatio {
                    numerator: n,
                    denominator: d,
                }
            }
        };
        let unit = self.unit(
            &map,
            path,
            mode.is_share()
                .then_some("a count_where measure is a share of records (0 to 1): remove `unit`"),
        );
        let scale = self.scale(&map, path, mode);
        Some(ComputedMeasure {
            name,
            desc,
            formula,
            unit,
            scale,
        })
    }

    /// Reads a `sum_ratio`'s `scale`: a positive number the ratio is multiplied by.
    fn scale(&mut self, map: &MapView<'_>, path: &str, mode: Mode) -> Option<f64> {
        let node = map.get("scale")?;
        let fix = "write the number the ratio is multiplied by, e.g. `scale: 1000` for a value per 1,000 (with `unit: ‰`)";
        let value = match &node.value {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        };
        let problem = match value {
            _ if mode != Mode::SumRatio => Some((
                "`scale` multiplies a `sum_ratio`, and this measure is a share of records"
                    .to_string(),
                "remove `scale`".to_string(),
            )),
            Some(v) if v.is_finite() && v > 0.0 => None,
            Some(v) => Some((
                format!("`scale` must be a positive number, found {v}"),
                fix.to_string(),
            )),
            None => Some((
                format!("`scale` must be a positive number, found {}", node.kind()),
                fix.to_string(),
            )),
        };
        match problem {
            Some((message, fix)) => {
                self.error(map.key_pos("scale"), &join(path, "scale"), message, fix);
                None
            }
            None => value,
        }
    }

    /// Reads the formula of a `count_where` measure: its field, and values that are codes of
    /// that field when it has a static codelist.
    fn count_where(&mut self, map: &MapView<'_>, path: &str, fields: &[Field]) -> Option<Formula> {
        let field = self.field_ref(map, "condition_field", path, fields, None);
        let values = self.string_list(map, "condition_values", path);
        if map.get("condition_values").is_none() || values.is_empty() {
            self.error(
                map.key_pos("condition_values"),
                &join(path, "condition_values"),
                "`condition_values` is missing or empty",
                "list the values that count, e.g. `condition_values: [\"1 実施済\"]`",
            );
        }
        let (field_id, field) = field?;
        if let Some(codes) = field.static_codes() {
            for (j, v) in values.iter().enumerate() {
                if !codes.iter().any(|c| &c.value == v) {
                    let listed: Vec<&str> = codes.iter().map(|c| c.value.as_str()).collect();
                    self.error(
                        map.get("condition_values")
                            .map(|n| n.pos)
                            .unwrap_or(map.pos),
                        &format!("{path}.condition_values[{j}]"),
                        format!("`{v}` is not a code of `{}`", field.name),
                        format!(
                            "use codes as written in the codelist: {}",
                            listed.join(", ")
                        ),
                    );
                }
            }
        }
        Some(Formula::CountWhere {
            condition_field: field_id,
            condition_values: values,
        })
    }

    /// A key whose value must name a declared field (of a given role, if any).
    fn field_ref<'f>(
        &mut self,
        map: &MapView<'_>,
        key: &str,
        path: &str,
        fields: &'f [Field],
        role: Option<Role>,
    ) -> Option<(FieldId, &'f Field)> {
        let name = self.required_string(
            map,
            key,
            path,
            &format!("write `{key}: <name of a declared field>`"),
        )?;
        let key_path = join(path, key);
        let Some((id, field)) = fields.iter().enumerate().find(|(_, f)| f.name == name) else {
            let pool = fields
                .iter()
                .filter(|f| role.is_none_or(|r| f.role == r))
                .map(|f| f.name.as_str());
            let fix = match suggest(&name, pool.clone()) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!(
                    "name one of the declared {}: {}",
                    if role == Some(Role::Measure) {
                        "measures"
                    } else {
                        "fields"
                    },
                    pool.take(12).collect::<Vec<_>>().join(", ")
                ),
            };
            self.error(
                map.key_pos(key),
                &key_path,
                format!("`{name}` is not a declared field"),
                fix,
            );
            return None;
        };
        if let Some(role) = role
            && field.role != role
        {
            let measures: Vec<&str> = fields
                .iter()
                .filter(|f| f.role == role)
                .map(|f| f.name.as_str())
                .collect();
            self.error(
                map.key_pos(key),
                &key_path,
                format!(
                    "`{name}` has role `{}`, but `{key}` needs a {}",
                    field.role.as_str(),
                    role.as_str()
                ),
                format!("name one of: {}", measures.join(", ")),
            );
            return None;
        }
        Some((FieldId::at(id), field))
    }
}

fn suggest_present(map: &MapView<'_>, key: &str) -> Option<String> {
    let present = map.entries.iter().map(|(k, _)| k.name.as_str());
    suggest(key, present).map(str::to_string)
}

/// A name as it may be shown in a message: in backquotes when plain, escaped otherwise (a
/// newline, a quote or a right-to-left mark in a folder name must not reshape the message).
pub fn quote_name(name: &str) -> String {
    if name
        .chars()
        .all(|c| !c.is_control() && !c.is_whitespace() && !is_format_char(c) && c != '`')
    {
        format!("`{name}`")
    } else {
        format!("{name:?}")
    }
}

/// Invisible formatting characters (bidirectional marks, zero-width joiners, BOM).
fn is_format_char(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}' | '\u{061c}')
}

/// Dataset ids appear in tool calls and URIs: keep them plain.
pub fn valid_id(id: &str) -> bool {
    let n = id.chars().count();
    (1..=64).contains(&n)
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn valid_http_url(u: &str) -> bool {
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"));
    match rest {
        Some(r) => {
            let host = r.split(['/', '?', '#']).next().unwrap_or("");
            !host.is_empty() && !u.chars().any(|c| c.is_whitespace() || c.is_control())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_stay_dates() {
        assert_eq!(
            DateValue::parse("2025-07-24"),
            Some(DateValue::Date("2025-07-24".into()))
        );
        assert_eq!(
            DateValue::parse("2025-07-24T09:00:00+09:00"),
            Some(DateValue::DateTime("2025-07-24T09:00:00+09:00".into()))
        );
        assert_eq!(
            DateValue::parse("2025-07-24T09:00:00.5Z"),
            Some(DateValue::DateTime("2025-07-24T09:00:00.5Z".into()))
        );
        assert_eq!(DateValue::parse("2025-02-30"), None);
        assert!(DateValue::parse("2024-02-29").is_some());
        assert_eq!(DateValue::parse("2025-07-24 09:00"), None);
        assert_eq!(DateValue::parse("24/07/2025"), None);
    }

    #[test]
    fn code_labels() {
        let code = |v: &str| Code {
            value: v.into(),
            description: None,
        };
        assert_eq!(code("1 実施済").label(), Some("実施済"));
        assert_eq!(
            code("2-1 申請等に基づく処分通知等").label(),
            Some("申請等に基づく処分通知等")
        );
        assert_eq!(code("弁護士").label(), None);
        assert_eq!(code("1 2024年度").label(), Some("2024年度"));
    }

    #[test]
    fn urls() {
        assert!(valid_http_url("https://www.digital.go.jp/resources"));
        assert!(!valid_http_url("ftp://x"));
        assert!(!valid_http_url("https://"));
        assert!(!valid_http_url("/etc/passwd"));
    }
}

#[cfg(test)]
mod object_url_tests {
    use super::ObjectUrl;

    #[test]
    fn object_urls_are_read_and_secrets_refused() {
        let u = ObjectUrl::parse("S3://tally-data/survey/year=2024/").unwrap();
        assert_eq!((u.scheme.as_str(), u.bucket.as_str()), ("s3", "tally-data"));
        assert_eq!(u.prefix, "survey/year=2024/");
        assert!(u.is_folder());
        assert_eq!(u.to_string(), "s3://tally-data/survey/year=2024/");
        let one = ObjectUrl::parse("s3://tally-data/a/b.parquet").unwrap();
        assert!(!one.is_folder());
        assert!(ObjectUrl::parse("s3://tally-data").unwrap().is_folder());
        for bad in [
            "tally-data/x",
            "https://tally-data/x",
            "s3://key:secret@tally-data/x",
            "s3://tally-data/x?X-Amz-Credential=a",
            "s3://Tally_Data/x",
            "s3://ab/x",
            "s3://tally-data/../x",
            "s3://AKIAX:ab/cd+ef@tally-data/x",
        ] {
            assert!(ObjectUrl::parse(bad).is_err(), "{bad}");
        }
        // A key may hold `@`; a secret with `/` is still cut from what is shown back.
        assert!(ObjectUrl::parse("s3://tally-data/people/a@b.parquet").is_ok());
        let shown = super::redacted("s3://AKIAX:ab/cd+ef@tally-data/x");
        assert!(
            !shown.contains("cd+ef") && !shown.contains("AKIAX"),
            "{shown}"
        );
        assert_eq!(
            super::redacted("s3://tally-data/x?X-Amz-Signature=s"),
            "s3://tally-data/x?…"
        );
    }
}
