//! The reader: the entry points, the primitive readers of keys (strings, lists, dates, paths)
//! and the dataset's top-level keys. Each kind of key has a module of its own (`fields`,
//! `derived`, `codes`, `links`, `measures`, `backend`), each an `impl Reader` block.

use crate::names::suggest;
use crate::yaml::{self, Key, Node, Pos, Value};

use super::diagnostic::{DefinitionError, Diagnostic, Loaded, Severity};
use super::keys::{DATASET, Section};
use super::types::{
    BackendDef, BackendKind, DataType, DatasetDef, DateValue, Derived, DerivedSource, Field,
    FieldId, Role, SCHEMA_VERSION, SourceDef,
};
use super::url::{ObjectUrl, redacted};

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
pub(super) fn strip_fields(root: &mut Node, hidden: &[String]) {
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

pub(super) struct Reader {
    pub(super) file: String,
    pub(super) diagnostics: Vec<Diagnostic>,
    /// `aliases` as written on each field, resolved to field ids once every field is read.
    pub(super) aliases: Vec<AliasesWritten>,
    /// `weight` as written on each rate (field, name, position, key path), resolved to a
    /// field id once every field is read.
    pub(super) weights: Vec<(String, String, Pos, String)>,
    /// `rollup` as written on each field: (field, level, parents with their children,
    /// position, key path), made derived fields once every field is read.
    pub(super) rollups: Vec<Rollup>,
}

/// A field looked up from `key` (a roll-up level, a related dataset's field): a dimension
/// of text, grouped by.
pub(super) fn derived_field(
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
pub(super) struct Rollup {
    pub(super) field: String,
    pub(super) level: String,
    pub(super) parents: Vec<(String, Vec<String>)>,
    pub(super) pos: Pos,
    pub(super) path: String,
}

/// A field's `aliases`, as written: the field, where the key is, and each name with its
/// position and key path.
pub(super) struct AliasesWritten {
    pub(super) field: String,
    pub(super) pos: Pos,
    pub(super) path: String,
    pub(super) names: Vec<(String, Pos, String)>,
}

/// A mapping being read, with the section whose keys it may hold.
pub(super) struct MapView<'a> {
    pub(super) pos: Pos,
    pub(super) entries: &'a [(Key, Node)],
    pub(super) section: &'static Section,
}

impl<'a> MapView<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Node> {
        // The reader reads no key its section's table does not list: the table is what the
        // unknown-key check and the published schema are made of.
        debug_assert!(
            self.section.has(key),
            "`{key}` is read but not listed in section `{}`",
            self.section.name
        );
        self.entries
            .iter()
            .find(|(k, _)| k.name == key)
            .map(|(_, v)| v)
    }

    pub(super) fn key_pos(&self, key: &str) -> Pos {
        self.entries
            .iter()
            .find(|(k, _)| k.name == key)
            .map(|(k, _)| k.pos)
            .unwrap_or(self.pos)
    }
}

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Reader {
    pub(super) fn push(
        &mut self,
        severity: Severity,
        pos: Pos,
        path: &str,
        message: String,
        fix: &str,
    ) {
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

    pub(super) fn error(
        &mut self,
        pos: Pos,
        path: &str,
        message: impl Into<String>,
        fix: impl AsRef<str>,
    ) {
        self.push(Severity::Error, pos, path, message.into(), fix.as_ref());
    }

    pub(super) fn warning(
        &mut self,
        pos: Pos,
        path: &str,
        message: impl Into<String>,
        fix: impl AsRef<str>,
    ) {
        self.push(Severity::Warning, pos, path, message.into(), fix.as_ref());
    }

    pub(super) fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    pub(super) fn map<'a>(
        &mut self,
        node: &'a Node,
        path: &str,
        section: &'static Section,
    ) -> Option<MapView<'a>> {
        let known = section.names();
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
                    section,
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
    pub(super) fn string(
        &mut self,
        map: &MapView<'_>,
        key: &str,
        path: &str,
        fix: &str,
    ) -> Option<String> {
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

    pub(super) fn required_string(
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
                // A key written with no value (`name:`) is as empty as `name: ""`; a value of
                // another kind was reported by `string`.
                if let Some(node) = map.get(key)
                    && matches!(node.value, Value::Null)
                {
                    self.error(node.pos, &join(path, key), format!("`{key}` is empty"), fix);
                } else if map.get(key).is_none() {
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

    pub(super) fn boolean(&mut self, map: &MapView<'_>, key: &str, path: &str) -> Option<bool> {
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

    pub(super) fn string_list(&mut self, map: &MapView<'_>, key: &str, path: &str) -> Vec<String> {
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

    pub(super) fn date(&mut self, map: &MapView<'_>, key: &str, path: &str) -> Option<DateValue> {
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
    pub(super) fn relative_path(
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

    pub(super) fn dataset(&mut self, root: &Node, folder_id: &str) -> Option<DatasetDef> {
        if root.value == Value::Null {
            self.error(
                root.pos,
                "",
                "the file is empty",
                "start from a definition with at least `title:` and `fields:` (see datasets/ for examples)",
            );
            return None;
        }
        let map = self.map(root, "", &DATASET)?;

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
    pub(super) fn schema_version(&mut self, root: &Node, map: &MapView<'_>) -> String {
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
    pub(super) fn dataset_id(&mut self, map: &MapView<'_>, folder_id: &str) -> String {
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
    pub(super) fn title(&mut self, map: &MapView<'_>, id: &str) -> String {
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
    pub(super) fn dataset_fields(&mut self, map: &MapView<'_>) -> Vec<Field> {
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
    pub(super) fn id_field(&mut self, map: &MapView<'_>, fields: &[Field]) -> Option<String> {
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
    pub(super) fn data_url(
        &mut self,
        map: &MapView<'_>,
        backend: &BackendDef,
    ) -> Option<ObjectUrl> {
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
}

pub(super) fn suggest_present(map: &MapView<'_>, key: &str) -> Option<String> {
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
pub(super) fn is_format_char(c: char) -> bool {
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

pub(super) fn valid_http_url(u: &str) -> bool {
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
    use super::super::types::Code;
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
