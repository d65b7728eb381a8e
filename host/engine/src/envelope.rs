//! The result envelope: `data` (the tool's typed result, [`crate::results`]) and
//! `provenance` (where it came from and what was done to it), built once per call.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tally_plugin_api::provenance::SourceType;

use tally_storage::backend::ServedFile;
use tally_storage::dataset::{Dataset, Retrieved};

/// The version written into every transformation.
pub fn tool_version() -> String {
    format!("tally {}", env!("CARGO_PKG_VERSION"))
}

/// One cited source (`provenance.sources[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    #[schemars(length(min = 1))]
    pub id: String,
    /// The publisher's URL, or urn:tally:dataset:<id>; never a local path.
    #[schemars(url)]
    pub uri: String,
    pub title: String,
    pub publisher: String,
    #[schemars(schema_with = "crate::results::date_or_time")]
    pub retrieved_at: String,
    #[schemars(schema_with = "source_types")]
    pub source_type: String,
    /// Where inside the source: an article, a page, a section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locator: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::results::date_or_time")]
    pub published_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::results::date_or_time")]
    pub effective_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// SHA-256 of the bytes served: proves they are unchanged, not who published them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub content_hash: Option<String>,
    /// The objects read, where the data lies in object storage: each with the version read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<SourceObject>,
    /// The version of the dataset this source was read through (its definition and data
    /// files): `tally verify` tells a changed dataset by it, also where no bytes were hashed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset_version: Option<String>,
}

/// One object of object storage a result was computed from, and the version read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceObject {
    /// `s3://bucket/key`, percent-encoded where the key needs it.
    #[schemars(url)]
    pub uri: String,
    /// The store's entity tag of the version read; every read named it (`If-Match`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The store's version id, where the bucket keeps versions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    pub size: u64,
    /// SHA-256 of the object's bytes, when this answer's data was read whole and hashed;
    /// absent when it was read by byte ranges.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub content_hash: Option<String>,
}

/// A URL with the bytes a URI may not hold raw percent-encoded (non-ASCII keys, spaces).
pub fn uri_of(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    for b in url.bytes() {
        // `%` too: a key may hold `%E7`, which as a URI would name another key.
        let keep = b.is_ascii_alphanumeric() || b"-._~/:=!$&'()*+,;@".contains(&b);
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn source_types(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let types: Vec<&str> = SourceType::ALL.iter().map(|t| t.as_str()).collect();
    schemars::json_schema!({ "enum": types })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TransformationType {
    Extract,
    Filter,
    Normalize,
    Aggregate,
}

/// One step done to the data (`provenance.transformations[]`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
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

/// The call as Tally resolved it, to run it again (`tally verify`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NormalizedCall {
    /// The tool that answered.
    pub tool: String,
    /// Its arguments after resolution: canonical dataset and field names, codes as the
    /// codelist writes them, every operator spelled out, defaults filled in.
    pub arguments: serde_json::Map<String, Value>,
    /// The Tally that resolved and computed it (`tally 0.1.0`).
    pub tool_version: String,
}

/// Where the result came from and what was done to it.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    #[schemars(schema_with = "date_time")]
    pub generated_at: String,
    /// The call as resolved: running it again on the same data gives the same `data`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<NormalizedCall>,
    /// SHA-256 of `{"data": …, "query": …}` (this answer's data and `query`) in canonical JSON
    /// (keys sorted, no spaces): an envelope whose data or recorded call was edited no longer
    /// matches it.
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub result_hash: String,
    /// Every source the result was computed from; ids are unique and every reference in data
    /// resolves to one.
    pub sources: Vec<Source>,
    pub transformations: Vec<Transformation>,
    /// Field notes that qualify the numbers, truncation, corrections of names.
    pub warnings: Vec<String>,
}

fn date_time(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "format": "date-time" })
}

impl Provenance {
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

    /// Records a step done to the data.
    pub fn step(&mut self, kind: TransformationType, description: impl Into<String>) {
        self.transformations
            .push(Transformation::new(kind, description));
    }
}

/// A tool's answer: its result (`data`) and where that came from (`provenance`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Envelope<T> {
    pub data: T,
    pub provenance: Provenance,
    /// The provenance as W3C PROV-O in JSON-LD, when the call asked for it
    /// (`provenance_format: "prov"`): the same facts, for tools that read PROV.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub prov: Option<Value>,
}

impl<T: Serialize> Envelope<T> {
    /// The envelope as JSON with `generatedAt` set now and the hash of its data and call, the
    /// data written once (the hash is taken of the JSON that is sent).
    pub fn seal_value(data: T, mut provenance: Provenance) -> Result<Value, serde_json::Error> {
        provenance.generated_at =
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let data = serde_json::to_value(&data)?;
        let query = serde_json::to_value(&provenance.query)?;
        provenance.result_hash = result_hash(&data, &query);
        let mut out = serde_json::Map::new();
        out.insert("data".into(), data);
        out.insert("provenance".into(), serde_json::to_value(&provenance)?);
        Ok(Value::Object(out))
    }
}

/// `value` as canonical JSON: object keys sorted (by their UTF-16 code units, as RFC 8785
/// sorts them), no whitespace, strings and numbers as serde_json writes them.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    let _ = write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut impl std::fmt::Write) -> std::fmt::Result {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.write_char('{')?;
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.write_char(',')?;
                }
                write!(out, "{}:", Value::from(k.as_str()))?;
                write_canonical(&map[k], out)?;
            }
            out.write_char('}')
        }
        Value::Array(items) => {
            out.write_char('[')?;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.write_char(',')?;
                }
                write_canonical(v, out)?;
            }
            out.write_char(']')
        }
        other => write!(out, "{other}"),
    }
}

/// Text written straight into a SHA-256: an answer of megabytes is hashed without a second
/// copy of it.
struct Hashing(sha2::Sha256);

impl std::fmt::Write for Hashing {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        sha2::Digest::update(&mut self.0, s.as_bytes());
        Ok(())
    }
}

/// `sha256:<hex>` of `{"data": data, "query": query}` in canonical JSON: what
/// `provenance.resultHash` holds. The call is in it too: an answer whose numbers or whose
/// recorded call were edited no longer matches it.
pub fn result_hash(data: &Value, query: &Value) -> String {
    use sha2::Digest;
    use std::fmt::Write;
    let mut h = Hashing(sha2::Sha256::new());
    // The object {"data", "query"} written as canonical_json writes it (its keys in order).
    let _ = h
        .write_str("{\"data\":")
        .and_then(|()| write_canonical(data, &mut h))
        .and_then(|()| h.write_str(",\"query\":"))
        .and_then(|()| write_canonical(query, &mut h))
        .and_then(|()| h.write_str("}"));
    let hex: String = h.0.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The source a dataset's results cite: its publisher's URL (or a stable URN, never a local
/// path), its dates as given, and the hash of the bytes served when they have been read;
/// with the warnings about it (no retrieval date; a change of its source that could not be
/// served, this version answering meanwhile: its data deleted at the source, above all).
pub fn dataset_source(ds: &Dataset, files: &[ServedFile]) -> (Source, Vec<String>) {
    let def = &ds.def;
    let uri = def
        .source
        .url
        .clone()
        .or_else(|| ds.fetched_from.clone())
        .unwrap_or_else(|| format!("urn:tally:dataset:{}", def.id));
    let content_hash = ds.backend.content_hash(files).map(|(hash, _)| hash);
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
        dataset_version: Some(ds.version.clone()),
        objects: files
            .iter()
            .filter_map(|f| {
                let o = f.object.as_ref()?;
                Some(SourceObject {
                    uri: uri_of(&o.url),
                    etag: o.etag.clone(),
                    version_id: o.version.clone(),
                    size: f.size,
                    content_hash: Some(f.sha256.clone()).filter(|h| !h.is_empty()),
                })
            })
            .collect(),
    };
    let mut warnings: Vec<String> = warning.into_iter().collect();
    if let Some(refused) = ds.refused_change() {
        warnings.push(refused_warning(&def.id, &ds.version, &refused));
    }
    (source, warnings)
}

/// What an answer from a version whose folder or source changed in a way that could not be
/// served says of it.
pub fn refused_warning(
    id: &str,
    version: &str,
    refused: &tally_storage::dataset::RefusedChange,
) -> String {
    if refused.data_gone {
        format!(
            "the data of dataset `{id}` no longer exists at its source: it was deleted there or moved ({}; seen at {}). This answer is from the version served before, {version}, read before it was deleted; what it cites can no longer be read at the source",
            refused.reason, refused.since
        )
    } else {
        format!(
            "dataset `{id}` changed at {} in a way that cannot be served ({}); this answer is from the version served before, {version}",
            refused.since, refused.reason
        )
    }
}

/// The provenance of `envelope` as W3C PROV-O, in JSON-LD (compacted, one `@graph`):
///
/// - the result: a `prov:Entity` (its id names its `resultHash`), generated at `generatedAt`
///   by the last transformation, derived from every source (`prov:wasDerivedFrom`) and
///   attributed to Tally;
/// - Tally, the `prov:SoftwareAgent` every transformation is associated with;
/// - each source: a `prov:Entity` (its URI, with its locator as the fragment where it has one),
///   attributed to its publisher (a `prov:Organization`), generated by its retrieval (a
///   `prov:Activity` that used the publisher's resource and ended at `retrievedAt`), with its
///   title, dates, locator and content hash;
/// - each transformation: a `prov:Activity` that used what the one before generated (the
///   first used the sources), so the chain from the sources to the result can be followed.
pub fn prov_jsonld(envelope: &Value) -> Value {
    use serde_json::json;
    let p = &envelope["provenance"];
    let hash = text_of(p, "resultHash").unwrap_or_default();
    let short: String = hash
        .trim_start_matches("sha256:")
        .chars()
        .take(16)
        .collect();
    let version = text_of(&p["query"], "toolVersion").unwrap_or_else(tool_version);
    let agent = format!("urn:tally:agent:{}", version.replace(' ', "-"));
    let result = format!("urn:tally:result:{short}");
    let mut graph = vec![json!({
        "@id": agent,
        "@type": ["prov:SoftwareAgent"],
        "rdfs:label": version,
    })];
    let sources = prov_sources(p, &short, &mut graph);
    let last_activity = prov_activities(p, &short, &agent, &sources, &mut graph);
    let mut result_node = json!({
        "@id": result,
        "@type": "prov:Entity",
        "rdfs:label": format!("the answer of {}", text_of(&p["query"], "tool").unwrap_or_else(|| "a tool".into())),
        "prov:wasDerivedFrom": sources.iter().map(|(id, _)| json!({ "@id": id })).collect::<Vec<_>>(),
        "prov:wasAttributedTo": { "@id": agent },
        "tally:resultHash": hash,
    });
    if let Some(at) = text_of(p, "generatedAt") {
        result_node["prov:generatedAtTime"] = prov_time(&at);
    }
    if let Some(activity) = last_activity {
        result_node["prov:wasGeneratedBy"] = json!({ "@id": activity });
    }
    graph.insert(0, result_node);
    json!({
        "@context": {
            "prov": "http://www.w3.org/ns/prov#",
            "xsd": "http://www.w3.org/2001/XMLSchema#",
            "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
            "dcterms": "http://purl.org/dc/terms/",
            "tally": "urn:tally:vocabulary#",
        },
        "@graph": graph,
    })
}

/// The text at `key` of `v`, if it is text.
fn text_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// A date (`YYYY-MM-DD`) or a date-time, typed as such in JSON-LD.
fn prov_time(t: &str) -> Value {
    use serde_json::json;
    if t.len() == 10 {
        json!({ "@value": t, "@type": "xsd:date" })
    } else {
        json!({ "@value": t, "@type": "xsd:dateTime" })
    }
}

/// Adds to `graph` each source of provenance `p` (with its publisher, once, and its
/// retrieval), and returns each source's node id and URI, in order.
fn prov_sources(p: &Value, short: &str, graph: &mut Vec<Value>) -> Vec<(String, String)> {
    use serde_json::json;
    let mut publishers: Vec<String> = Vec::new();
    let mut sources = Vec::new();
    for (i, s) in p["sources"].as_array().into_iter().flatten().enumerate() {
        let uri = text_of(s, "uri").unwrap_or_default();
        // The copy read is an entity of its own, apart from the publisher's resource it was
        // retrieved from (the URI): at its locator where it has one.
        let id = match text_of(s, "locator") {
            Some(locator) if !uri.contains('#') => format!("{uri}#{}", uri_of(&locator)),
            _ => format!(
                "urn:tally:source:{short}:{}",
                uri_of(&text_of(s, "id").unwrap_or_else(|| i.to_string()))
            ),
        };
        let id = if sources
            .iter()
            .any(|(seen, _): &(String, String)| *seen == id)
        {
            format!("{id}?source={i}")
        } else {
            id
        };
        let publisher = text_of(s, "publisher").unwrap_or_default();
        let publisher_id = format!("urn:tally:publisher:{}", uri_of(&publisher));
        if !publishers.contains(&publisher) {
            graph.push(json!({
                "@id": publisher_id,
                "@type": ["prov:Organization"],
                "rdfs:label": publisher,
            }));
            publishers.push(publisher.clone());
        }
        let retrieval = format!("urn:tally:retrieval:{short}:{i}");
        let mut retrieval_node = json!({
            "@id": retrieval,
            "@type": "prov:Activity",
            "rdfs:label": "retrieval",
            "prov:used": { "@id": uri },
        });
        if let Some(at) = text_of(s, "retrievedAt") {
            retrieval_node["prov:endedAtTime"] = prov_time(&at);
        }
        graph.push(retrieval_node);
        graph.push(prov_source(s, &id, &uri, &publisher_id, &retrieval));
        sources.push((id, uri));
    }
    sources
}

/// The entity of source `s`: its title, where it came from and how, and what is known of it.
fn prov_source(s: &Value, id: &str, uri: &str, publisher_id: &str, retrieval: &str) -> Value {
    use serde_json::json;
    let mut node = json!({
        "@id": id,
        "@type": "prov:Entity",
        "dcterms:title": text_of(s, "title").unwrap_or_default(),
        "dcterms:source": { "@id": uri },
        "prov:wasAttributedTo": { "@id": publisher_id },
        "prov:wasGeneratedBy": { "@id": retrieval },
        "tally:sourceId": text_of(s, "id").unwrap_or_default(),
        "tally:sourceType": text_of(s, "sourceType").unwrap_or_default(),
    });
    for (key, term) in [
        ("locator", "tally:locator"),
        ("contentHash", "tally:contentHash"),
        ("datasetVersion", "tally:datasetVersion"),
        ("license", "dcterms:license"),
    ] {
        if let Some(v) = text_of(s, key) {
            node[term] = Value::String(v);
        }
    }
    if let Some(d) = text_of(s, "publishedAt") {
        node["dcterms:issued"] = prov_time(&d);
    }
    if let Some(d) = text_of(s, "effectiveAt") {
        node["tally:effectiveAt"] = prov_time(&d);
    }
    node
}

/// Adds to `graph` each transformation of provenance `p` as an activity that used what the
/// one before generated (the first, the `sources`), and returns the last activity's id.
fn prov_activities(
    p: &Value,
    short: &str,
    agent: &str,
    sources: &[(String, String)],
    graph: &mut Vec<Value>,
) -> Option<String> {
    use serde_json::json;
    let steps = p["transformations"].as_array().cloned().unwrap_or_default();
    let mut used: Vec<Value> = sources.iter().map(|(id, _)| json!({ "@id": id })).collect();
    let mut last_activity = None;
    for (i, t) in steps.iter().enumerate() {
        let activity = format!("urn:tally:activity:{short}:{i}");
        graph.push(json!({
            "@id": activity,
            "@type": "prov:Activity",
            "rdfs:label": text_of(t, "type").unwrap_or_default(),
            "rdfs:comment": text_of(t, "description").unwrap_or_default(),
            "prov:used": used,
            "prov:wasAssociatedWith": { "@id": agent },
        }));
        if i + 1 < steps.len() {
            let entity = format!("urn:tally:entity:{short}:{i}");
            graph.push(json!({
                "@id": entity,
                "@type": "prov:Entity",
                "prov:wasGeneratedBy": { "@id": activity },
                "prov:wasDerivedFrom": used,
            }));
            used = vec![json!({ "@id": entity })];
        }
        last_activity = Some(activity);
    }
    last_activity
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_by_utf16_and_the_hash_is_of_it() {
        // U+1F600 sorts before U+FF61 in UTF-16 (its surrogate 0xD83D < 0xFF61), after it in
        // UTF-8 (0xF0 > 0xEF): RFC 8785 orders by UTF-16.
        let v = json!({"b": [1, {"z": null, "a": "x"}], "\u{1F600}": 1, "\u{FF61}": 2, "a": 0.5});
        assert_eq!(
            canonical_json(&v),
            "{\"a\":0.5,\"b\":[1,{\"a\":\"x\",\"z\":null}],\"\u{1F600}\":1,\"\u{FF61}\":2}"
        );
        let (data, query) = (json!({"rows": [[1]]}), json!({"tool": "t"}));
        use sha2::Digest;
        let both = canonical_json(&json!({"query": query, "data": data}));
        let hex: String = sha2::Sha256::digest(both.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(result_hash(&data, &query), format!("sha256:{hex}"));
    }
}
