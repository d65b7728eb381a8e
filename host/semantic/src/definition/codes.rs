//! Codelists and their codes.

use crate::names::suggest;
use crate::yaml::{Node, Value};

use super::read::{MapView, Reader, join};
use super::types::{Code, Codelist, Field, FieldId};

impl Reader {
    pub(super) fn codelist(&mut self, node: &Node, path: &str) -> Option<Codelist> {
        let fix = "write `codelist: auto`, `codelist: auto_split`, or a list of codes (`- 1 実施済` or `- \"1 実施済\": description`)";
        match &node.value {
            Value::Null => None,
            Value::Str(s) => match Codelist::mode(s) {
                Some(codelist) => Some(codelist),
                None => {
                    let other = s.as_str();
                    let near = suggest(other, Codelist::MODES);
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
    pub(super) fn code(&mut self, item: &Node, item_path: &str, fix: &str) -> Option<Code> {
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
    pub(super) fn declared_field(
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
}
