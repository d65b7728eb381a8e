//! Revisions and links to other datasets.

use crate::names::suggest;
use crate::yaml::{Node, Value};

use super::keys::{LINK, REVISIONS};
use super::read::{Reader, join};
use super::types::{Field, FieldId, Link, Revisions};

impl Reader {
    pub(super) fn revisions(&mut self, node: &Node, fields: &[Field]) -> Option<Revisions> {
        let map = self.map(node, "revisions", &REVISIONS)?;
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

    pub(super) fn links(&mut self, node: &Node, fields: &[Field]) -> Vec<Link> {
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
            let Some(map) = self.map(item, &path, &LINK) else {
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
}
