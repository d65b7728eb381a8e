//! A field and its keys: name, role, type, unit, period, grain, aggregation, rollups.

use std::collections::HashMap;

use crate::names::{normalize, suggest};
use crate::yaml::{Node, Pos, Value};

use super::keys::{FIELD, MAX_NAME_CHARS, MAX_UNIT_CHARS};
use super::read::{MapView, Reader, Rollup, join};
use super::types::{Aggregation, Codelist, DataType, Field, Grain, Role};

impl Reader {
    pub(super) fn fields(&mut self, node: &Node) -> Vec<Field> {
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

    pub(super) fn field(&mut self, node: &Node, path: &str) -> Option<Field> {
        let map = self.map(node, path, &FIELD)?;
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
    pub(super) fn unit(
        &mut self,
        map: &MapView<'_>,
        path: &str,
        refused: Option<&str>,
    ) -> Option<String> {
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
    pub(super) fn measure_period(
        &mut self,
        map: &MapView<'_>,
        path: &str,
        role: Role,
    ) -> Option<String> {
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
    pub(super) fn field_name(&mut self, map: &MapView<'_>, path: &str) -> Option<String> {
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
    pub(super) fn role(&mut self, map: &MapView<'_>, path: &str) -> Option<Role> {
        let roles: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
        let role_fix = format!("write `role:` as one of {}", roles.join(", "));
        let written = self.required_string(map, "role", path, &role_fix)?;
        let role = match Role::parse(&written) {
            Some(role) => role,
            None => {
                let other = written.as_str();
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
    pub(super) fn data_type(&mut self, map: &MapView<'_>, path: &str, role: Role) -> DataType {
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
    pub(super) fn grain(
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
    pub(super) fn aggregation(
        &mut self,
        map: &MapView<'_>,
        path: &str,
        role: Role,
    ) -> Option<Aggregation> {
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
    pub(super) fn rollup_written(
        &mut self,
        map: &MapView<'_>,
        field: &str,
        path: &str,
        role: Role,
    ) {
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
}
