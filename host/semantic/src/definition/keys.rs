//! The keys of `dataset.yaml`, one table per section: each key, the shape of its value and
//! what it means in one line.
//!
//! The reader takes its keys from these tables alone: a key its section does not list is
//! reported as unknown and ignored (`Reader::map`), and a key it reads must be listed (checked
//! in debug builds by `MapView::get`). The JSON Schema editors read (`schema`, `tally schema`)
//! is generated from the same tables and from the vocabularies' own lists of names, so what an
//! editor completes and flags is what the reader reads.

use tally_plugin_api::provenance::SourceType;

use super::types::{Aggregation, BackendKind, DataType, Grain, LocatorKind, Mode, Role};

/// Longest field name.
pub const MAX_NAME_CHARS: usize = 200;
/// Longest `unit` (`円/件`, `人/km²`) and `period` (`2020年度`).
pub const MAX_UNIT_CHARS: usize = 32;

/// One kind of mapping of the format: the dataset itself, a field, a computed measure…
#[derive(Debug)]
pub struct Section {
    /// Its name in messages and in the schema (`field`, `computed_measure`).
    pub name: &'static str,
    /// What one such mapping is, in one line.
    pub doc: &'static str,
    /// Its keys, in the order the reader's messages list them.
    pub keys: &'static [KeyDef],
    /// Keys required when another key has a given value (`grain` with `role: time`).
    pub when: &'static [When],
}

/// One key of a section.
#[derive(Debug)]
pub struct KeyDef {
    pub name: &'static str,
    pub shape: Shape,
    pub need: Need,
    /// What the key means, in one line.
    pub doc: &'static str,
}

/// Whether a key must be written, and whether it may be written empty (`key:` alone, YAML
/// null).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// It may be left out or left empty, which reads as left out.
    Optional,
    /// It may be left out, but not left empty (an empty list of texts neither).
    NotEmpty,
    /// The reader refuses the mapping without it; never empty.
    Required,
}

/// Keys required when `key` is `is`.
#[derive(Debug)]
pub struct When {
    pub key: &'static str,
    pub is: &'static str,
    pub requires: &'static [&'static str],
}

/// What a key's value may be, as the reader reads it.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// Text.
    Text,
    /// Text naming something (a field, a dataset, a file).
    Name,
    /// Text of at most [`MAX_UNIT_CHARS`] characters (`件`, `円/件`).
    Unit,
    /// Text or a whole number (`"2020"`, `2020年度`, `2020`), at most [`MAX_UNIT_CHARS`]
    /// characters.
    Period,
    /// The format's version: text or a whole number.
    Version,
    /// `true` or `false`.
    Bool,
    /// A whole number from 0.
    Count,
    /// A number above 0.
    Positive,
    /// A date (`2025-07-24`) or an RFC 3339 date-time, as text.
    Date,
    /// An http(s) URL.
    Url,
    /// One of a vocabulary's names.
    Word(Vocabulary),
    /// A list of texts; one text is a list of one, a number is read as its digits.
    Texts,
    /// A list of names; one name is a list of one.
    Names,
    /// A mapping of a section's keys.
    Section(&'static Section),
    /// A list of mappings of a section's keys.
    Sections(&'static Section),
    /// `auto`, `auto_split`, or a list of codes (`- 1 実施済`, `- "1 実施済": description`).
    Codelist,
    /// `true`, `false`, or a mapping of a section's keys (`{separator: "|"}`).
    FlagOr(&'static Section),
    /// Levels of parents of values: `{<level>: {<parent>: [<value>, …]}}`.
    Rollup,
    /// Fields of this dataset mapped to fields of another: `{<field here>: <field there>}`;
    /// `one`: exactly one pair.
    Pairs { one: bool },
    /// Any mapping, handed on as it is.
    Mapping,
}

/// A closed list of names a key takes, the enum the reader parses it into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vocabulary {
    Role,
    DataType,
    Grain,
    Aggregation,
    Mode,
    Backend,
    Source,
    Locator,
}

impl Vocabulary {
    /// Every name the reader takes, its own names first, then their synonyms.
    pub fn names(self) -> Vec<&'static str> {
        match self {
            Vocabulary::Role => Role::ALL
                .iter()
                .map(|r| r.as_str())
                .chain(Role::SYNONYMS.iter().map(|(n, _)| *n))
                .collect(),
            Vocabulary::DataType => DataType::ALL
                .iter()
                .map(|t| t.as_str())
                .chain(DataType::SYNONYMS.iter().map(|(n, _)| *n))
                .collect(),
            Vocabulary::Grain => Grain::ALL.map(Grain::as_str).to_vec(),
            Vocabulary::Aggregation => Aggregation::ALL.map(Aggregation::as_str).to_vec(),
            Vocabulary::Mode => Mode::ALL.map(Mode::as_str).to_vec(),
            Vocabulary::Backend => BackendKind::ALL.map(BackendKind::as_str).to_vec(),
            Vocabulary::Source => SourceType::ALL.map(SourceType::as_str).to_vec(),
            Vocabulary::Locator => LocatorKind::ALL.map(LocatorKind::as_str).to_vec(),
        }
    }
}

impl Section {
    /// The names of its keys, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.keys.iter().map(|k| k.name).collect()
    }

    pub fn has(&self, key: &str) -> bool {
        self.keys.iter().any(|k| k.name == key)
    }
}

const fn key(name: &'static str, shape: Shape, doc: &'static str) -> KeyDef {
    KeyDef {
        name,
        shape,
        need: Need::Optional,
        doc,
    }
}

const fn not_empty(name: &'static str, shape: Shape, doc: &'static str) -> KeyDef {
    KeyDef {
        name,
        shape,
        need: Need::NotEmpty,
        doc,
    }
}

const fn required(name: &'static str, shape: Shape, doc: &'static str) -> KeyDef {
    KeyDef {
        name,
        shape,
        need: Need::Required,
        doc,
    }
}

pub static DATASET: Section = Section {
    name: "dataset",
    doc: "A dataset definition (dataset.yaml): what the data's columns mean, where it comes from, and what reads it.",
    keys: &[
        key(
            "schema_version",
            Shape::Version,
            "The format's version, \"1\"; a newer one is read with a warning and its unknown keys ignored.",
        ),
        key(
            "id",
            Shape::Name,
            "The dataset's id, which must be its folder's name: best left out.",
        ),
        key(
            "title",
            Shape::Text,
            "The dataset's title as its publisher gives it (the id without one).",
        ),
        key(
            "description",
            Shape::Text,
            "What the data is, in a few sentences.",
        ),
        key("publisher", Shape::Text, "Who publishes the data."),
        key(
            "license",
            Shape::Text,
            "The licence it is published under (`CC-BY-4.0`).",
        ),
        key(
            "as_of_date",
            Shape::Date,
            "The date the data describes (YYYY-MM-DD).",
        ),
        key(
            "published_at",
            Shape::Date,
            "When the publisher published it (YYYY-MM-DD, or an RFC 3339 date-time).",
        ),
        key(
            "retrieved_at",
            Shape::Date,
            "When it was retrieved (YYYY-MM-DD, or an RFC 3339 date-time); `.fetch.json`, written by `tally fetch`, comes first.",
        ),
        key(
            "source",
            Shape::Section(&SOURCE),
            "Where the data comes from: the publisher's page, and the file `tally add` and `tally fetch` convert.",
        ),
        key("tags", Shape::Texts, "Words to find the dataset by."),
        key(
            "enabled",
            Shape::Bool,
            "`false` hides the dataset (it is served by default).",
        ),
        key(
            "id_field",
            Shape::Name,
            "The declared field that identifies a record (always shown in records).",
        ),
        key(
            "generic_values",
            Shape::Texts,
            "Values that say nothing of a record (`その他`): a column holding only these on a page is left out of it.",
        ),
        key(
            "notes",
            Shape::Texts,
            "Caveats about the whole dataset; they travel with every answer.",
        ),
        key(
            "data_file",
            Shape::Name,
            "The data in the dataset folder: a Parquet file, a glob (`parts/*.parquet`) or a folder of Hive partitions (`data.parquet` by default).",
        ),
        key(
            "data",
            Shape::Name,
            "The data in object storage instead of `data_file`: `s3://bucket/prefix/` (credentials from the server's environment, never from here).",
        ),
        key(
            "backend",
            Shape::Section(&BACKEND),
            "What reads the data: the built-in Parquet reader (by default), a wasm component or a native library.",
        ),
        required(
            "fields",
            Shape::Sections(&FIELD),
            "The data's columns, each with its name and role; a column not declared is not served.",
        ),
        key(
            "computed_measures",
            Shape::Sections(&MEASURE),
            "Shares and ratios the server computes from declared fields.",
        ),
        not_empty(
            "revisions",
            Shape::Section(&REVISIONS),
            "The records are revisions of things (laws): which field names the thing, which its revision, and when each takes effect.",
        ),
        key(
            "links",
            Shape::Sections(&LINK),
            "Links from fields of this dataset to the records of another (a procedure's law and article to the law's provisions).",
        ),
        key(
            "relations",
            Shape::Sections(&RELATION),
            "Fields lent by another dataset served beside this one, found by a key (many records here to one there), to group and filter by.",
        ),
    ],
    when: &[],
};

pub static SOURCE: Section = Section {
    name: "source",
    doc: "Where the data comes from.",
    keys: &[
        key(
            "url",
            Shape::Url,
            "The publisher's page (http or https); `tally fetch` downloads from it.",
        ),
        key("note", Shape::Text, "A note on the source."),
        key(
            "type",
            Shape::Word(Vocabulary::Source),
            "What kind of source it is, as answers cite it (`dataset` by default).",
        ),
        key(
            "asset_pattern",
            Shape::Text,
            "A regular expression for the file's name among the page's links: `tally fetch` takes the newest match.",
        ),
        key(
            "csv_filename",
            Shape::Text,
            "The publisher's file the data was converted from.",
        ),
        key(
            "csv_header_rows",
            Shape::Count,
            "Header rows above the data; the last names the columns (1 by default).",
        ),
        key(
            "null_markers",
            Shape::Texts,
            "What the publisher writes for \"no value\" (`-`, `不明`): `tally add` stores such cells as empty.",
        ),
    ],
    when: &[],
};

pub static BACKEND: Section = Section {
    name: "backend",
    doc: "What reads the data.",
    keys: &[
        key(
            "kind",
            Shape::Word(Vocabulary::Backend),
            "The backend: the built-in Parquet reader (by default), a sandboxed wasm component, or a native library (only with --allow-native).",
        ),
        not_empty(
            "component",
            Shape::Name,
            "The wasm component (with `kind: wasm`): a file in the dataset folder, or `builtin:<name>`.",
        ),
        not_empty(
            "library",
            Shape::Name,
            "The native library (with `kind: native`): a file in the dataset folder, or `builtin:<name>`.",
        ),
        key(
            "config",
            Shape::Mapping,
            "The plugin's settings, handed to it as they are.",
        ),
    ],
    when: &[
        When {
            key: "kind",
            is: BackendKind::Wasm.as_str(),
            requires: BackendKind::Wasm.plugin_keys(),
        },
        When {
            key: "kind",
            is: BackendKind::Native.as_str(),
            requires: BackendKind::Native.plugin_keys(),
        },
    ],
};

pub static FIELD: Section = Section {
    name: "field",
    doc: "A column of the data: its name, its role and what its values mean.",
    keys: &[
        required(
            "name",
            Shape::Name,
            "The column's name as it appears in the data.",
        ),
        required(
            "role",
            Shape::Word(Vocabulary::Role),
            "What the column is: `id` identifies a record, `dim` is grouped and filtered by, `time` is the period a record is of (one a dataset, with `grain`), `measure` is a number to aggregate, `attr` describes a record.",
        ),
        key(
            "desc",
            Shape::Text,
            "What the column holds, for people and models.",
        ),
        key(
            "data_type",
            Shape::Word(Vocabulary::DataType),
            "The values' type (a measure's is a number; text by default).",
        ),
        key(
            "codelist",
            Shape::Codelist,
            "The field's codes: `auto` (the values in the data), `auto_split` (the parts of multi-value cells), or a list of codes (`- 1 実施済`, or `- \"1 実施済\": what it means`).",
        ),
        key(
            "multi_value",
            Shape::FlagOr(&MULTI_VALUE),
            "A cell holds several values: `true` (separated by `;`) or `{separator: \"|\"}`.",
        ),
        key(
            "groupable",
            Shape::Bool,
            "Whether a summary may group by it (dimensions, time and attributes may by default; a measure never).",
        ),
        key(
            "filterable",
            Shape::Bool,
            "Read for the reference format and ignored: every declared field can be filtered.",
        ),
        key(
            "notes",
            Shape::Texts,
            "Caveats about the column (what a blank means); they travel with every answer that uses it.",
        ),
        key(
            "csv_col_index",
            Shape::Count,
            "The column's place in the publisher's file, from 0: `tally add` takes the column by it.",
        ),
        key(
            "group",
            Shape::Text,
            "A heading the field belongs under (reference format).",
        ),
        key(
            "locator",
            Shape::Word(Vocabulary::Locator),
            "`law`: the column holds provisions (`第九条第一項`), compared in any common form.",
        ),
        key(
            "aliases",
            Shape::Names,
            "Fields of the same record holding other names of this field's values (a law's short title, its number).",
        ),
        key(
            "unit",
            Shape::Unit,
            "What a measure's values are counted in (`件`, `円`, `%`).",
        ),
        key(
            "grain",
            Shape::Word(Vocabulary::Grain),
            "What one period of the time field is (with `role: time`).",
        ),
        not_empty(
            "period",
            Shape::Period,
            "The period a measure's values are of, when the records do not say it (`\"2020\"`, `2020年度`).",
        ),
        key(
            "aggregation",
            Shape::Word(Vocabulary::Aggregation),
            "How a measure adds up: a flow sums over periods and areas, a stock over areas only, a rate never (averaged by its `weight`).",
        ),
        key(
            "weight",
            Shape::Name,
            "The measure a rate is averaged by (with `aggregation: rate`).",
        ),
        not_empty(
            "rollup",
            Shape::Rollup,
            "Levels that group this field's values, written here: `{<level>: {<parent>: [<value>, …]}}`; each level is a field to group and filter by.",
        ),
    ],
    when: &[When {
        key: "role",
        is: Role::Time.as_str(),
        requires: &["grain"],
    }],
};

pub static MULTI_VALUE: Section = Section {
    name: "multi_value",
    doc: "How the values of a cell are separated.",
    keys: &[key(
        "separator",
        Shape::Text,
        "The text between two values (`;` by default).",
    )],
    when: &[],
};

pub static MEASURE: Section = Section {
    name: "computed_measure",
    doc: "A measure the server computes from declared fields, per group.",
    keys: &[
        required(
            "name",
            Shape::Name,
            "The computed measure's name (no field's).",
        ),
        required(
            "mode",
            Shape::Word(Vocabulary::Mode),
            "How it is computed: `count_where` is the share of records whose field is one of some values, `sum_ratio` a sum divided by a sum.",
        ),
        key("desc", Shape::Text, "What the measure means."),
        not_empty(
            "condition_field",
            Shape::Name,
            "The field a `count_where` tests.",
        ),
        not_empty(
            "condition_values",
            Shape::Texts,
            "The values of `condition_field` that count (its codes, when it has a codelist).",
        ),
        not_empty(
            "numerator",
            Shape::Name,
            "The measure summed above the line (`sum_ratio`).",
        ),
        not_empty(
            "denominator",
            Shape::Name,
            "The measure summed below the line (`sum_ratio`; the ratio is null where it sums to 0).",
        ),
        key(
            "unit",
            Shape::Unit,
            "What the ratio is counted in (`円/件`); a `count_where` share has none.",
        ),
        not_empty(
            "scale",
            Shape::Positive,
            "What a `sum_ratio` is multiplied by: `100` for a percent, `1000` per 1,000 (1 by default).",
        ),
    ],
    when: &[
        When {
            key: "mode",
            is: Mode::CountWhere.as_str(),
            requires: Mode::CountWhere.required_keys(),
        },
        When {
            key: "mode",
            is: Mode::SumRatio.as_str(),
            requires: Mode::SumRatio.required_keys(),
        },
    ],
};

pub static REVISIONS: Section = Section {
    name: "revisions",
    doc: "Which revision of each thing is in force on a date.",
    keys: &[
        required(
            "key",
            Shape::Name,
            "The field naming what is revised (a law).",
        ),
        not_empty(
            "title",
            Shape::Name,
            "The field naming it for people (a law's title).",
        ),
        required(
            "effective",
            Shape::Name,
            "The field holding the date each revision takes effect (YYYY-MM-DD).",
        ),
        not_empty("id", Shape::Name, "The field naming a revision."),
    ],
    when: &[],
};

pub static LINK: Section = Section {
    name: "link",
    doc: "A link from fields of this dataset to the records of another.",
    keys: &[
        required("to", Shape::Name, "The id of the dataset linked to."),
        required(
            "on",
            Shape::Pairs { one: false },
            "Fields of this dataset equal to fields of that one: `{<field here>: <field there>}`.",
        ),
        key(
            "text",
            Shape::Text,
            "The field of that dataset holding a provision's text (`text` by default).",
        ),
    ],
    when: &[],
};

pub static RELATION: Section = Section {
    name: "relation",
    doc: "Fields lent by another dataset, found by a key.",
    keys: &[
        required(
            "dataset",
            Shape::Name,
            "The id of a dataset served beside this one.",
        ),
        required(
            "on",
            Shape::Pairs { one: true },
            "This dataset's field and that dataset's key field, whose values are unique there: `{<field here>: <its key field>}`.",
        ),
        required(
            "fields",
            Shape::Texts,
            "Its fields lent to this dataset (names this one does not have).",
        ),
    ],
    when: &[],
};

/// Every section, the dataset first.
pub static SECTIONS: [&Section; 9] = [
    &DATASET,
    &SOURCE,
    &BACKEND,
    &FIELD,
    &MULTI_VALUE,
    &MEASURE,
    &REVISIONS,
    &LINK,
    &RELATION,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_names_each_key_once_and_what_it_requires() {
        for section in SECTIONS {
            let names = section.names();
            for (i, name) in names.iter().enumerate() {
                assert!(
                    !names[..i].contains(name),
                    "{}: `{name}` twice",
                    section.name
                );
            }
            for when in section.when {
                assert!(section.has(when.key), "{}: {}", section.name, when.key);
                for k in when.requires {
                    assert!(section.has(k), "{}: {k}", section.name);
                }
            }
            assert!(section.keys.iter().all(|k| !k.doc.contains('\n')));
        }
    }

    #[test]
    fn vocabularies_are_the_enums_names() {
        assert_eq!(
            Vocabulary::Role.names(),
            [
                "id",
                "dim",
                "time",
                "measure",
                "attr",
                "dimension",
                "attribute"
            ]
        );
        for name in Vocabulary::DataType.names() {
            assert!(DataType::parse(name).is_some(), "{name}");
        }
        for name in Vocabulary::Role.names() {
            assert!(Role::parse(name).is_some(), "{name}");
        }
    }
}
