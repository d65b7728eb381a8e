//! Computed measures: their mode, scale and formula.

use crate::names::{normalize, suggest};
use crate::yaml::{Node, Value};

use super::keys::MEASURE;
use super::read::{MapView, Reader, join};
use super::types::{Aggregation, ComputedMeasure, Field, FieldId, Formula, Mode, Role};

impl Reader {
    pub(super) fn computed_measures(
        &mut self,
        node: &Node,
        fields: &[Field],
    ) -> Vec<ComputedMeasure> {
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
    pub(super) fn computed_measure(
        &mut self,
        item: &Node,
        path: &str,
        fields: &[Field],
        earlier: &[ComputedMeasure],
    ) -> Option<ComputedMeasure> {
        let map = self.map(item, path, &MEASURE)?;
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
    pub(super) fn scale(&mut self, map: &MapView<'_>, path: &str, mode: Mode) -> Option<f64> {
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
    pub(super) fn count_where(
        &mut self,
        map: &MapView<'_>,
        path: &str,
        fields: &[Field],
    ) -> Option<Formula> {
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
    pub(super) fn field_ref<'f>(
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
