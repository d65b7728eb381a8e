//! A page of provisions: most records first, with their text (trimmed), each law (revision)
//! cited once as the source of its rows, and a signed cursor for the rest.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::matching::{Found, ProvisionKey};
use super::read::Provisional;
use crate::call::Call;
use crate::context::Cx;
use crate::cursor;
use crate::envelope::{Provenance, Source};
use crate::error::EngineError;
use crate::meta;

/// A provision's text, as shown, at most this many characters.
const TEXT_CHARS: usize = 200;

fn trimmed(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= TEXT_CHARS {
        return text;
    }
    let mut out: String = text.chars().take(TEXT_CHARS).collect();
    out.push('…');
    out
}

/// A page of provisions: its rows, each row's law (revision) cited once in provenance, and
/// whether the page was cut to the result's budget.
pub(super) struct Page {
    pub(super) rows: Vec<Vec<Value>>,
    pub(super) row_refs: Vec<Vec<String>>,
    pub(super) cut: Option<meta::Cut>,
    /// Provisions found in all, and where this page starts among them.
    pub(super) total: usize,
    pub(super) offset: usize,
    pub(super) next_cursor: Option<String>,
}

/// Which page: the cursor given (if any), the page size, and what a cursor is bound to (the
/// versions of both datasets and the call as asked).
pub(super) struct PageAt<'a> {
    pub(super) cursor: Option<&'a str>,
    pub(super) limit: usize,
    pub(super) version: &'a str,
    pub(super) fingerprint: &'a str,
}

/// The provisions of the page `at` asks (most records first, ties by group, law and
/// provision: a total order, so pages never overlap or skip), with their text and law.
pub(super) fn page_of(
    engine: &Cx<'_>,
    tcall: &Call<'_>,
    provenance: &mut Provenance,
    target_source_id: &str,
    found: BTreeMap<ProvisionKey, Found>,
    laws: &HashMap<Vec<String>, Vec<Provisional>>,
    at: &PageAt<'_>,
) -> Result<Page, EngineError> {
    let tdef = tcall.def();
    let mut ordered: Vec<_> = found.into_iter().collect();
    ordered.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(&b.0)));
    let total = ordered.len();
    let offset = match at.cursor {
        Some(c) => cursor::decode(c, at.version, at.fingerprint, total)?,
        None => 0,
    };
    let limit = at.limit;
    let texts: HashMap<u64, &Provisional> = laws.values().flatten().map(|p| (p.row, p)).collect();
    let mut rows = Vec::new();
    let mut laws_of_rows = Vec::new();
    for ((group, _law, locator), (n, law_rows, revision)) in
        ordered.into_iter().skip(offset).take(limit)
    {
        let text = law_rows
            .iter()
            .filter_map(|r| texts.get(r))
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let source = law_rows
            .first()
            .and_then(|r| law_source(tcall, provenance, target_source_id, *r));
        let (title, uri) = match &source {
            Some(s) => (s.title.clone(), s.uri.clone()),
            None => (tdef.title.clone(), String::new()),
        };
        let mut row: Vec<Value> = group
            .into_iter()
            .map(|g| g.map_or(Value::Null, Value::String))
            .collect();
        row.extend([
            Value::String(title),
            Value::String(locator),
            Value::String(trimmed(&text)),
            revision.map_or(Value::Null, Value::String),
            Value::String(uri),
            Value::from(n),
        ]);
        rows.push(row);
        laws_of_rows.push(source);
    }
    let limits = engine.limits();
    let cut = meta::cap_rows_within(&mut rows, limits.max_result_bytes, limits.max_result_tokens);
    laws_of_rows.truncate(rows.len());
    // Each law (revision) once, however many of the page's provisions it holds: the row says
    // which provision, the source which text it was read from.
    let row_refs: Vec<Vec<String>> = laws_of_rows
        .into_iter()
        .map(|source| match source {
            Some(s) => vec![provenance.cite(s)],
            None => vec![target_source_id.to_string()],
        })
        .collect();
    let next_offset = offset + rows.len();
    let next_cursor =
        (next_offset < total).then(|| cursor::encode(at.version, at.fingerprint, next_offset));
    Ok(Page {
        rows,
        row_refs,
        cut,
        total,
        offset,
        next_cursor,
    })
}

/// The source of the law (revision) row `row` of the linked dataset was read from: its own
/// source without the row's locator, so that every provision of one law cites one source.
/// Its id is made of the law's URI and content hash, the same on every page.
fn law_source(
    call: &Call<'_>,
    provenance: &Provenance,
    dataset_source_id: &str,
    row: u64,
) -> Option<Source> {
    let table = call.prepared.row_sources.as_ref()?;
    let s = table
        .sources
        .get(*table.index.get(row as usize)? as usize)?;
    let dataset_source = provenance
        .sources
        .iter()
        .find(|c| c.id == dataset_source_id)?;
    Some(meta::cited_row_source(
        format!(
            "{dataset_source_id}#{}",
            law_id(&s.uri, s.content_hash.as_deref().unwrap_or(""))
        ),
        s,
        dataset_source,
        None,
    ))
}

/// A short, stable id part for a law's text (`uri` + content hash).
fn law_id(uri: &str, content_hash: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{uri}\u{0}{content_hash}").as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}
