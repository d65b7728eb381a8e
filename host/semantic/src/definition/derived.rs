//! Fields derived from others, weights and time, multi-value fields, locators and aliases.

use crate::names::suggest;
use crate::yaml::{Node, Value};

use super::keys::{MULTI_VALUE, RELATION};
use super::read::{AliasesWritten, MapView, Reader, derived_field, join};
use super::types::{
    Aggregation, Codelist, DEFAULT_SEPARATOR, DataType, DerivedSource, Field, FieldId, LocatorKind,
    Role,
};

impl Reader {
    /// Appends the derived fields after every column's: each level of a `rollup`, then each
    /// field lent by a dataset of `relations` (`- {dataset: 都道府県表, on: {地域コード:
    /// 地域コード}, fields: [地方]}`). Their names are new names of this dataset.
    pub(super) fn derived_fields(&mut self, fields: &mut Vec<Field>, map: &MapView<'_>) {
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
            let Some(rel) = self.map(item, &path, &RELATION) else {
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

    pub(super) fn weight_written(
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
    pub(super) fn resolve_weights_and_time(&mut self, fields: &mut [Field]) {
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
    pub(super) fn multi_value(&mut self, map: &MapView<'_>, path: &str) -> Option<Option<String>> {
        Some(match map.get("multi_value") {
            None => None,
            Some(n) => match &n.value {
                Value::Bool(true) => Some(DEFAULT_SEPARATOR.to_string()),
                Value::Bool(false) | Value::Null => None,
                Value::Map(_) => {
                    let mv_path = join(path, "multi_value");
                    let mv = self.map(n, &mv_path, &MULTI_VALUE)?;
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
    pub(super) fn groupable(&mut self, map: &MapView<'_>, path: &str, role: Role) -> bool {
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
    pub(super) fn locator(
        &mut self,
        map: &MapView<'_>,
        path: &str,
        data_type: DataType,
        multi_value: Option<&str>,
    ) -> Option<LocatorKind> {
        match map.get("locator").map(|n| (n, &n.value)) {
            None | Some((_, Value::Null)) => None,
            Some((_, Value::Str(s)))
                if LocatorKind::parse(s).is_some()
                    && !data_type.is_numeric()
                    && multi_value.is_none() =>
            {
                LocatorKind::parse(s)
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
    pub(super) fn csv_col_index(&mut self, map: &MapView<'_>, path: &str) -> Option<u32> {
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
    pub(super) fn aliases_written(&mut self, map: &MapView<'_>, field: &str, path: &str) {
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
    pub(super) fn resolve_aliases(&mut self, fields: &mut [Field]) {
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
}
