//! What travels with every result: the meaning of each returned field and the notes of
//! every field used.

use serde_json::Value;
use tally_semantic::definition::{Codelist, DatasetDef, Field};
use tally_semantic::request::Notice;
use tally_semantic::resolve::{FieldId, Resolution};

use crate::envelope::Provenance;
use crate::results::{CodelistKind, Context, FieldMeta, FieldNotes, resolved_names};

pub fn field_meta(f: &Field) -> FieldMeta {
    FieldMeta {
        name: f.name.clone(),
        role: f.role,
        data_type: f.data_type,
        description: f.desc.clone(),
        multi_value_separator: f.multi_value.clone(),
        codelist: f.codelist.as_ref().map(CodelistKind::of),
    }
}

/// Notes of the fields used, each field once, in the order first used.
pub fn notes_of(def: &DatasetDef, used: &[FieldId]) -> Vec<FieldNotes> {
    let mut seen: Vec<FieldId> = Vec::new();
    let mut out = Vec::new();
    for &id in used {
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let f = &def.fields[id];
        if !f.notes.is_empty() {
            out.push(FieldNotes {
                field: f.name.clone(),
                notes: f.notes.clone(),
            });
        }
    }
    out
}

/// What every dataset result carries after its own keys: field notes and dataset notes
/// (once, in `data`) and the resolved names; corrections and notices become warnings. The
/// hints, parameters and references are the caller's to fill.
pub fn context(
    provenance: &mut Provenance,
    def: &DatasetDef,
    used: &[FieldId],
    resolved: &[Resolution],
    notices: &[Notice],
) -> Context {
    // The caveats of the fields used travel in `data.notes`, once; `warnings` is about what
    // this call did (corrections, cuts, empty results).
    for r in resolved {
        provenance.warn(format!(
            "`{}` in {} was read as `{}`",
            r.input, r.parameter, r.canonical
        ));
    }
    for n in notices {
        provenance.warn(format!("{}: {}", n.parameter, n.message));
    }
    Context {
        notes: notes_of(def, used),
        dataset_notes: def.notes.clone(),
        resolved_fields: resolved_names(resolved),
        ..Context::default()
    }
}

/// True for a value that says nothing: null, blank, or a generic value of the dataset.
pub fn is_uninformative(v: &Value, generic: &[String]) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => {
            let t = s.trim();
            t.is_empty() || generic.iter().any(|g| g == t)
        }
        _ => false,
    }
}

/// The parameters as resolved (canonical names), without what is reported beside them.
pub fn echo(mut plan: Value) -> Value {
    if let Some(m) = plan.as_object_mut() {
        m.remove("resolved_fields");
        m.remove("notices");
    }
    plan
}

/// Which budget cut a result's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The estimated tokens of the rows (a model's context).
    Tokens,
    /// Their serialised bytes.
    Bytes,
}

/// Estimated tokens of text as language models count them: about four characters of ASCII
/// per token, about one token per character of other scripts (kana, kanji).
pub fn estimated_tokens(text: &str) -> usize {
    let ascii = text.bytes().filter(u8::is_ascii).count();
    let other = text.chars().count() - ascii;
    ascii.div_ceil(4) + other
}

/// Cuts `rows` to what fits both budgets (at least one row is kept when the first fits the
/// byte budget, so a page always moves forward); `None` when everything fits.
pub fn cap_rows_within(
    rows: &mut Vec<Vec<Value>>,
    max_bytes: usize,
    max_tokens: usize,
) -> Option<Cut> {
    let (mut bytes, mut tokens) = (0usize, 0usize);
    for (i, row) in rows.iter().enumerate() {
        let text = serde_json::to_string(row).unwrap_or_default();
        bytes += text.len() + 1;
        tokens += estimated_tokens(&text) + 1;
        if bytes > max_bytes {
            rows.truncate(i);
            return Some(Cut::Bytes);
        }
        if tokens > max_tokens && i > 0 {
            rows.truncate(i);
            return Some(Cut::Tokens);
        }
    }
    None
}

/// Values no record has: not an error (the answer is simply zero), but said, with the closest
/// values that do exist, because a guessed value is the usual reason. For each exact value the
/// data does not hold (and, when the call found nothing, each substring no value contains) on
/// a text field without static codes, the nearest values the field does hold, with counts.
pub async fn unknown_value_hints(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &crate::dataset::Prepared,
    def: &DatasetDef,
    filters: &[tally_semantic::resolve::Filter],
    nothing_found: bool,
) -> Result<Vec<String>, crate::error::EngineError> {
    use tally_semantic::names::fold;
    use tally_semantic::request::Op;
    let mut hints = Vec::new();
    for filter in filters {
        let field = &def.fields[filter.field];
        // Exact values on static codes were checked already (an unknown code is refused with
        // the codes); numbers and law provisions have no values to suggest.
        let coded = matches!(field.codelist, Some(Codelist::Static(_)));
        if field.data_type.is_numeric() || field.locator.is_some() {
            continue;
        }
        if coded && !matches!(filter.op, Op::Contains(_)) {
            continue;
        }
        let existing = prepared.distinct_values(ctx, def, filter.field).await?;
        let (values, substring): (Vec<String>, bool) = match &filter.op {
            Op::In(vs) => (vs.iter().map(|v| v.text()).collect(), false),
            Op::Eq(v) | Op::Ne(v) => (vec![v.text()], false),
            // Scanning for a substring costs a pass over the values: only when it explains a
            // result with nothing in it.
            Op::Contains(t) if nothing_found => (vec![t.clone()], true),
            _ => continue,
        };
        for v in values {
            let found = if substring {
                let wanted = fold(&v).into_owned();
                existing
                    .iter()
                    .any(|(e, _)| fold(e).contains(wanted.as_str()))
            } else {
                existing.iter().any(|(e, _)| *e == v)
            };
            if found {
                continue;
            }
            let ranked = tally_semantic::names::rank(&v, existing.iter().map(|(e, _)| e.as_str()));
            let closest: Vec<String> = ranked
                .iter()
                .take(5)
                .map(|name| {
                    let n = existing
                        .iter()
                        .find(|(e, _)| e == name)
                        .map_or(0, |(_, n)| *n);
                    format!("`{name}` ({n} records)")
                })
                .collect();
            hints.push(format!(
                "no record has {} as {}; closest existing values: {}",
                if substring {
                    format!("a value containing `{v}`")
                } else {
                    format!("`{v}`")
                },
                field.name,
                if closest.is_empty() {
                    "none".to_string()
                } else {
                    closest.join(", ")
                }
            ));
        }
    }
    Ok(hints)
}

/// The first transformations of every dataset result: where the records were read from, and
/// the names read in another form than typed.
pub fn read_and_normalized(
    provenance: &mut Provenance,
    ds: &crate::dataset::Dataset,
    prepared: &crate::dataset::Prepared,
    table: &crate::dataset::CallTable,
    resolved: &[Resolution],
    cluster: Option<&crate::cluster::ClusterCall>,
) {
    let def = &ds.def;
    use crate::envelope::TransformationType;
    let files: Vec<&str> = prepared.files.iter().map(|f| f.path.as_str()).collect();
    use crate::dataset::Served;
    let path = match (prepared.served, &table.counts) {
        (Served::Memory, _) => "prepared in memory".to_string(),
        (Served::Written, _) => "prepared and kept in the cache".to_string(),
        (Served::Mapped, _) => "prepared once and mapped from the cache".to_string(),
        (Served::Streamed, Some(counts)) => match counts.row_groups() {
            (1, 1) => "read from the files at this call: its one row group".to_string(),
            (read, of) if read == of => {
                format!("read from the files at this call: all {of} row groups")
            }
            (read, of) => format!(
                "read from the files at this call: {read} of {of} row groups, the others ruled out by their statistics"
            ),
        },
        (Served::Streamed, None) => "read from the files at this call".to_string(),
    };
    // With a cluster: who read the files. The executors' reads are not counted here.
    let mut elsewhere = String::new();
    let path = match cluster.map(|c| (c.outcome(), c.cluster.address())) {
        None => path,
        Some(((ran, why), at)) if ran > 0 => {
            if !why.is_empty() {
                elsewhere = format!("; other plans computed on this server: {}", why.join("; "));
            }
            format!(
                "read from the files at this call by the cluster at {at}: {}",
                plans(ran)
            )
        }
        Some(((_, why), at)) => {
            let why = if !why.is_empty() {
                why.join("; ")
            } else if prepared.extract.is_some() {
                "a plugin's records are read by this server, not from files the cluster can open"
                    .to_string()
            } else if prepared.served == Served::Streamed {
                "this backend's reads cannot be sent".to_string()
            } else {
                "the table was prepared in this server's memory".to_string()
            };
            elsewhere = format!("; computed on this server, not on the cluster at {at}: {why}");
            path
        }
    };
    let from = match &prepared.extract {
        Some(how) if prepared.served == Served::Streamed => format!("returned by {how} ({path})"),
        Some(how) => format!("returned by {how}"),
        None => format!("from {} ({path})", files.join(", ")),
    };
    let from = from + &elsewhere;
    let hashed = match ds.backend.content_hash(&prepared.files) {
        Some((_, Some(how))) => format!("; {how}"),
        _ => String::new(),
    };
    let hashed = hashed + &objects_read(&prepared.files);
    if let Some(origin) = ds.backend.origin() {
        provenance.step(TransformationType::Extract, origin);
    }
    provenance.step(
        TransformationType::Extract,
        format!(
            "read {} records of dataset `{}` {from}{hashed}",
            prepared.rows, def.id
        ),
    );
    if !resolved.is_empty() {
        let read_as: Vec<String> = resolved
            .iter()
            .map(|r| format!("`{}` read as `{}` ({})", r.input, r.canonical, r.parameter))
            .collect();
        provenance.step(TransformationType::Normalize, read_as.join("; "));
    }
}

/// "1 plan ran on its executors", "3 plans ran …".
fn plans(n: usize) -> String {
    if n == 1 {
        "1 plan ran on its executors".to_string()
    } else {
        format!("{n} plans ran on its executors")
    }
}

/// What the extract step says of objects read from object storage: the version of each
/// (its ETag, named in every read), and whether the bytes were hashed.
fn objects_read(files: &[crate::backend::ServedFile]) -> String {
    let objects: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let o = f.object.as_ref()?;
            let mut version = Vec::new();
            if let Some(e) = &o.etag {
                version.push(format!("ETag {e}"));
            }
            if let Some(v) = &o.version {
                version.push(format!("version {v}"));
            }
            Some(if version.is_empty() {
                o.url.clone()
            } else {
                format!("{} ({})", o.url, version.join(", "))
            })
        })
        .collect();
    if objects.is_empty() {
        return String::new();
    }
    let hashed = files.iter().all(|f| !f.sha256.is_empty());
    format!(
        "; the object{} read: {}; {}",
        if objects.len() == 1 { "" } else { "s" },
        objects.join(", "),
        if hashed {
            "every byte was read and hashed (contentHash)"
        } else {
            "read by byte ranges, each request pinned to the ETag with If-Match, and not hashed: the answer cites the ETags and no contentHash"
        }
    )
}

/// A dataset result's provenance to start from: the dataset's source cited (with its date
/// warning, if any) and the preparation's notes. Returns it and the source's id.
pub fn dataset_provenance(
    ds: &crate::dataset::Dataset,
    prepared: &crate::dataset::Prepared,
) -> (Provenance, String) {
    let mut provenance = Provenance::default();
    let (source, warning) = crate::envelope::dataset_source(ds, &prepared.files);
    let source_id = provenance.cite(source);
    if let Some(w) = warning {
        provenance.warn(w);
    }
    for note in &prepared.notes {
        provenance.warn(note.clone());
    }
    (provenance, source_id)
}

/// A row's own source as cited, with id `id`, at `locator`: what the row source does not
/// say (retrieval date, license, publisher, dataset version) it inherits from its dataset's.
pub fn cited_row_source(
    id: String,
    s: &crate::backend::RowSource,
    dataset_source: &crate::envelope::Source,
    locator: Option<String>,
) -> crate::envelope::Source {
    crate::envelope::Source {
        id,
        uri: s.uri.clone(),
        title: s.title.clone(),
        publisher: s
            .publisher
            .clone()
            .unwrap_or_else(|| dataset_source.publisher.clone()),
        retrieved_at: dataset_source.retrieved_at.clone(),
        source_type: s.source_type.clone(),
        locator,
        published_at: s.published_at.clone(),
        effective_at: s.effective_at.clone(),
        license: dataset_source.license.clone(),
        content_hash: s.content_hash.clone(),
        objects: Vec::new(),
        dataset_version: dataset_source.dataset_version.clone(),
    }
}

/// Cites the own sources of the rows on a page (by their row numbers) and returns, per row,
/// the ids it references; `None` when the backend reports no per-row sources. Each row
/// source inherits what the dataset says and the source does not (retrieval date, license,
/// publisher).
pub fn row_source_refs(
    out: &mut Provenance,
    prepared: &crate::dataset::Prepared,
    dataset_source_id: &str,
    page_rows: &[u64],
) -> Option<Vec<Vec<String>>> {
    let table = prepared.row_sources.as_ref()?;
    let dataset_source = out
        .sources
        .iter()
        .find(|s| s.id == dataset_source_id)
        .cloned()?;
    let mut per_row = Vec::with_capacity(page_rows.len());
    let mut capped = 0usize;
    for &row in page_rows {
        let Some(&index) = table.index.get(row as usize) else {
            per_row.push(vec![dataset_source_id.to_string()]);
            continue;
        };
        let Some(s) = table.sources.get(index as usize) else {
            per_row.push(vec![dataset_source_id.to_string()]);
            continue;
        };
        let id = format!("{dataset_source_id}#{index}");
        if !out.sources.iter().any(|c| c.id == id) && out.sources.len() > MAX_ROW_SOURCES {
            capped += 1;
            per_row.push(vec![dataset_source_id.to_string()]);
            continue;
        }
        let id = out.cite(cited_row_source(id, s, &dataset_source, s.locator.clone()));
        per_row.push(vec![id]);
    }
    if capped > 0 {
        out.warn(format!(
            "{capped} rows of this page cite only the dataset: a result cites at most {MAX_ROW_SOURCES} row sources; ask for fewer rows (limit) to get each row's own source"
        ));
    }
    Some(per_row)
}

/// How many row sources one result cites at most.
pub const MAX_ROW_SOURCES: usize = 500;
