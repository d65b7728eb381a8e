//! The `source` and `backend` keys: where the data comes from and which plugin serves it.

use tally_plugin_api::provenance::SourceType;

use crate::names::suggest;
use crate::yaml::{Node, Value};

use super::keys::{BACKEND, SOURCE};
use super::read::{MapView, Reader, valid_http_url};
use super::types::{BackendDef, BackendKind, PluginRef, SourceDef};

impl Reader {
    pub(super) fn source(&mut self, node: &Node) -> SourceDef {
        let Some(map) = self.map(node, "source", &SOURCE) else {
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

    pub(super) fn backend(&mut self, node: &Node) -> BackendDef {
        let Some(map) = self.map(node, "backend", &BACKEND) else {
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
        let plugin_key = kind.plugin_keys().first().copied();
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
    pub(super) fn plugin(&mut self, map: &MapView<'_>, key: &str) -> Option<PluginRef> {
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
}
