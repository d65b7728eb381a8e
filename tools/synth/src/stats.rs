//! The published per-column statistics the generator reproduces.

use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Clone, Deserialize)]
pub struct Stats {
    pub record_count: usize,
    pub fields: Vec<FieldStats>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FieldStats {
    pub name: String,
    pub role: String,
    #[serde(default)]
    pub multi_value: bool,
    /// `"auto"`, `"auto_split"`, or a list of codes (plain strings or
    /// single-entry `{code: description}` maps).
    #[serde(default)]
    pub codelist: Option<serde_json::Value>,
    pub stats: ColumnStats,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ColumnStats {
    pub null_count: usize,
    pub null_ratio: f64,
    pub distinct_count: usize,
    #[serde(default)]
    pub top_values: Vec<TopValue>,
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub sum: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TopValue {
    pub value: String,
    pub count: usize,
}

impl Stats {
    pub fn load(path: &Path) -> Result<Stats, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
    }

    pub fn field(&self, name: &str) -> Result<&FieldStats, String> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| format!("statistics have no field {name}"))
    }

    pub fn column(&self, name: &str) -> Result<&ColumnStats, String> {
        Ok(&self.field(name)?.stats)
    }
}

impl FieldStats {
    /// Static codes of the codelist, in order; empty for `auto` codelists.
    pub fn codes(&self) -> Vec<String> {
        let Some(serde_json::Value::Array(entries)) = &self.codelist else {
            return Vec::new();
        };
        entries
            .iter()
            .filter_map(|e| match e {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Object(map) => map.keys().next().cloned(),
                _ => None,
            })
            .collect()
    }
}

impl ColumnStats {
    pub fn non_null(&self, rows: usize) -> usize {
        rows.saturating_sub(self.null_count)
    }

    pub fn top_count(&self, value: &str) -> Option<usize> {
        self.top_values
            .iter()
            .find(|t| t.value == value)
            .map(|t| t.count)
    }
}
