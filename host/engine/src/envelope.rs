//! The result envelope: `data` (the tool's result) and `provenance` (where it came from and
//! what was done to it), built once per call.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::backend::ServedFile;
use crate::dataset::{Dataset, Retrieved};

/// The version written into every transformation.
pub fn tool_version() -> String {
    format!("tally {}", env!("CARGO_PKG_VERSION"))
}

/// One cited source (`provenance.sources[]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    pub id: String,
    pub uri: String,
    pub title: String,
    pub publisher: String,
    pub retrieved_at: String,
    pub source_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locator: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransformationType {
    Extract,
    Filter,
    Normalize,
    Aggregate,
}

/// One step done to the data (`provenance.transformations[]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Transformation {
    #[serde(rename = "type")]
    pub kind: TransformationType,
    pub description: String,
    pub tool_version: String,
}

impl Transformation {
    pub fn new(kind: TransformationType, description: impl Into<String>) -> Transformation {
        Transformation {
            kind,
            description: description.into(),
            tool_version: tool_version(),
        }
    }
}

/// What a tool produced, before it is wrapped.
#[derive(Debug, Clone, Default)]
pub struct Output {
    pub data: Map<String, Value>,
    pub sources: Vec<Source>,
    pub transformations: Vec<Transformation>,
    pub warnings: Vec<String>,
}

impl Output {
    pub fn set(&mut self, key: &str, value: impl Serialize) {
        self.data.insert(
            key.to_string(),
            serde_json::to_value(value).unwrap_or(Value::Null),
        );
    }

    pub fn warn(&mut self, warning: impl Into<String>) {
        let w = warning.into();
        if !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
    }

    /// Adds a source unless one with the same id is there; returns its id.
    pub fn cite(&mut self, source: Source) -> String {
        let id = source.id.clone();
        if !self.sources.iter().any(|s| s.id == id) {
            self.sources.push(source);
        }
        id
    }

    /// `{"data": …, "provenance": …}` with `generatedAt` set now.
    pub fn into_envelope(self) -> Value {
        let generated_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        json!({
            "data": Value::Object(self.data),
            "provenance": {
                "generatedAt": generated_at,
                "sources": self.sources,
                "transformations": self.transformations,
                "warnings": self.warnings,
            }
        })
    }
}

/// The source a dataset's results cite: its publisher's URL (or a stable URN, never a local
/// path), its dates as given, and the hash of the bytes served when they have been read.
pub fn dataset_source(ds: &Dataset, files: &[ServedFile]) -> (Source, Option<String>) {
    let def = &ds.def;
    let uri = def
        .source
        .url
        .clone()
        .or_else(|| ds.fetched_from.clone())
        .unwrap_or_else(|| format!("urn:tally:dataset:{}", def.id));
    let content_hash = files
        .first()
        .map(|f| f.sha256.clone())
        .filter(|h| !h.is_empty());
    let (retrieved_at, warning) = match &ds.retrieved {
        Retrieved::FileModified(t) => (
            t.clone(),
            Some(format!(
                "dataset `{}` states no retrieval date (no .fetch.json, no retrieved_at): retrievedAt is the data file's modification time",
                def.id
            )),
        ),
        Retrieved::Unknown => (
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            Some(format!(
                "dataset `{}` states no retrieval date and its file time is unknown: retrievedAt is the time of this answer",
                def.id
            )),
        ),
        other => (other.value().unwrap_or_default().to_string(), None),
    };
    let source = Source {
        id: format!("dataset:{}", def.id),
        uri,
        title: def.title.clone(),
        publisher: def
            .publisher
            .clone()
            .unwrap_or_else(|| "(publisher not stated)".to_string()),
        retrieved_at,
        source_type: def
            .source
            .source_type
            .map(|t| t.as_str().to_string())
            .unwrap_or_else(|| "dataset".to_string()),
        locator: None,
        published_at: def.published_at.as_ref().map(|d| d.as_str().to_string()),
        effective_at: None,
        license: def.license.clone(),
        content_hash,
    };
    (source, warning)
}
