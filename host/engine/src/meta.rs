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
        unit: f.unit.clone(),
        period: f.period.clone(),
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
    chosen: &[tally_semantic::resolve::Choice],
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
        resolved_fields: resolved_names(resolved, chosen),
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
/// a text field without static codes, the nearest values the field does hold, with counts; on
/// a field with `aliases`, the nearest of its values and of its aliases' (a short title is
/// offered as such: it names the record too).
pub async fn unknown_value_hints(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &tally_storage::dataset::Prepared,
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
        let (values, substring): (Vec<String>, bool) = match &filter.op {
            Op::In(vs) | Op::Nin(vs) => (vs.iter().map(|v| v.text()).collect(), false),
            Op::Eq(v) | Op::Ne(v) => (vec![v.text()], false),
            // Scanning for a substring costs a pass over the values: only when it explains a
            // result with nothing in it.
            Op::Contains(t) if nothing_found => (vec![t.clone()], true),
            _ => continue,
        };
        // Counted (and kept) only for a filter that looks its values up.
        let existing = prepared.distinct_values(ctx, def, filter.field).await?;
        // The field's values, and those of its aliases, as candidates: (value, as shown).
        let mut pool: Vec<(String, String)> = existing
            .iter()
            .map(|(e, n)| (e.clone(), format!("`{e}` ({n} records)")))
            .collect();
        for &alias in &field.aliases {
            let name = &def.fields[alias].name;
            for (e, n) in prepared.distinct_values(ctx, def, alias).await?.iter() {
                pool.push((e.clone(), format!("`{e}` (the {name} of {n} records)")));
            }
        }
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
            let ranked = tally_semantic::names::rank(&v, pool.iter().map(|(e, _)| e.as_str()));
            let mut closest: Vec<String> = Vec::new();
            for name in ranked {
                if closest.len() == 5 {
                    break;
                }
                if let Some((_, shown)) = pool
                    .iter()
                    .find(|(e, shown)| e == name && !closest.contains(shown))
                {
                    closest.push(shown.clone());
                }
            }
            let aliases: Vec<&str> = field
                .aliases
                .iter()
                .map(|a| def.fields[*a].name.as_str())
                .collect();
            hints.push(format!(
                "no record has {} as {}{}; closest existing values: {}",
                if substring {
                    format!("a value containing `{v}`")
                } else {
                    format!("`{v}`")
                },
                field.name,
                if aliases.is_empty() {
                    String::new()
                } else {
                    format!(" nor as its {}", aliases.join(" or "))
                },
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

/// How many conditions of a call that found nothing are counted one by one at most (each
/// alone, and the others without it): the counts are one pass over the data, whose cost grows
/// with the square of the conditions counted.
pub const MAX_CONDITIONS_COUNTED: usize = 12;

/// When nothing matched: which condition excludes every record by itself, and which one, left
/// out, would let records through. `labels` and `conditions` are the call's, in one order;
/// `base` is the data searched before any condition. Every count is made in one pass over
/// `base` with the planner's own expressions, so a hint never blames a condition the call
/// did not apply as written.
pub async fn zero_hit_hints(
    dataset: &str,
    labels: &[String],
    base: &datafusion::prelude::DataFrame,
    conditions: &[datafusion::logical_expr::Expr],
) -> Result<Vec<String>, crate::error::EngineError> {
    use datafusion::functions_aggregate::expr_fn::{count, sum};
    use datafusion::logical_expr::{lit, when};
    let n = labels.len().min(conditions.len());
    match n {
        0 => return Ok(Vec::new()),
        1 => {
            return Ok(vec![format!(
                "no record matches {}; loosen or remove it",
                labels[0]
            )]);
        }
        _ => {}
    }
    let counted = n.min(MAX_CONDITIONS_COUNTED);
    // The sets of conditions to count: none (the records searched), each alone, and each
    // left out. With two conditions "the first alone" is "the second left out": each set is
    // counted once.
    let mut sets: Vec<Vec<usize>> = vec![Vec::new()];
    let mut alone = Vec::with_capacity(counted);
    let mut without = Vec::with_capacity(counted);
    let index_of =
        |set: Vec<usize>, sets: &mut Vec<Vec<usize>>| match sets.iter().position(|s| *s == set) {
            Some(i) => i,
            None => {
                sets.push(set);
                sets.len() - 1
            }
        };
    for i in 0..counted {
        alone.push(index_of(vec![i], &mut sets));
        without.push(index_of((0..n).filter(|j| *j != i).collect(), &mut sets));
    }
    let aggregates: Vec<datafusion::logical_expr::Expr> = sets
        .iter()
        .enumerate()
        .map(
            |(k, set)| -> datafusion::error::Result<datafusion::logical_expr::Expr> {
                let matched =
                    crate::plan::conjunction(set.iter().map(|&i| conditions[i].clone()).collect());
                Ok(match matched {
                    None => count(lit(1i64)).alias(format!("s{k}")),
                    // A condition that is null for a record (three-valued logic) does not match
                    // it, as in a filter.
                    Some(e) => sum(when(e, lit(1i64)).otherwise(lit(0i64))?).alias(format!("s{k}")),
                })
            },
        )
        .collect::<Result<_, _>>()
        .map_err(|e| crate::error::EngineError::computing(dataset, e))?;
    let batches = base
        .clone()
        .aggregate(vec![], aggregates)?
        .collect()
        .await
        .map_err(|e| crate::error::EngineError::computing(dataset, e))?;
    let mut counts = vec![0u64; sets.len()];
    if let Some(b) = batches.iter().find(|b| b.num_rows() > 0) {
        for (k, c) in counts.iter_mut().enumerate() {
            let column = datafusion::arrow::compute::cast(
                b.column(k),
                &datafusion::arrow::datatypes::DataType::UInt64,
            )
            .map_err(|e| crate::error::EngineError::backend(dataset, e))?;
            use datafusion::arrow::array::{Array, AsArray};
            let column = column.as_primitive::<datafusion::arrow::datatypes::UInt64Type>();
            *c = if column.is_valid(0) {
                column.value(0)
            } else {
                0
            };
        }
    }
    if counts[0] == 0 {
        return Ok(vec![
            "no record was searched before any condition applied (see the warnings), so no condition excludes anything: loosening them finds nothing either".to_string(),
        ]);
    }
    let mut hints = Vec::new();
    for i in 0..counted {
        if counts[alone[i]] == 0 {
            hints.push(format!(
                "{} alone matches no record: it excludes every record by itself; loosen or remove it",
                labels[i]
            ));
        }
    }
    for i in 0..counted {
        let m = counts[without[i]];
        if m > 0 {
            hints.push(format!(
                "without {} the other conditions match {m} records",
                labels[i]
            ));
        }
    }
    if hints.is_empty() {
        let each: Vec<String> = (0..counted)
            .map(|i| format!("{}: {} records", labels[i], counts[alone[i]]))
            .collect();
        hints.push(format!(
            "no single condition excludes every record: each alone matches some ({}), and leaving any one out still matches none; several conditions together exclude every record",
            each.join(", ")
        ));
    }
    if counted < n {
        hints.push(format!(
            "the last {} of the {n} conditions were not counted one by one (at most {MAX_CONDITIONS_COUNTED} are)",
            n - counted
        ));
    }
    Ok(hints)
}

/// The first transformations of every dataset result: where the records were read from, and
/// the names read in another form than typed.
pub fn read_and_normalized(
    provenance: &mut Provenance,
    ds: &tally_storage::dataset::Dataset,
    prepared: &tally_storage::dataset::Prepared,
    table: &tally_storage::dataset::CallTable,
    resolved: &[Resolution],
    cluster: Option<&tally_storage::cluster::ClusterCall>,
    route: Option<&tally_storage::dataset::Route>,
) {
    let def = &ds.def;
    use crate::envelope::TransformationType;
    let files: Vec<&str> = prepared.files.iter().map(|f| f.path.as_str()).collect();
    use tally_storage::dataset::Served;
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
                plans(ran, cluster.and_then(|c| c.tasks()))
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
    // While the table was being prepared: which path answered, and why.
    let from = match route {
        Some(route) => format!("{from}, {route}"),
        None => from,
    };
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

/// Where the plans of a call that has a cluster ran, for a tool whose work is not one read of
/// a dataset (`inspect_dataset`): "by the cluster at df://…: N plans ran on its executors",
/// with the plans computed here and why, or "(computed on this server, not on the cluster at
/// df://…: why)" (`here` when no plan said why: what kept the work here).
pub fn where_plans_ran(cluster: &tally_storage::cluster::ClusterCall, here: &str) -> String {
    let ((ran, why), at) = (cluster.outcome(), cluster.cluster.address());
    if ran > 0 {
        let elsewhere = if why.is_empty() {
            String::new()
        } else {
            format!("; other plans computed on this server: {}", why.join("; "))
        };
        format!(
            "by the cluster at {at}: {}{elsewhere}",
            plans(ran, cluster.tasks())
        )
    } else {
        let why = if why.is_empty() {
            here.to_string()
        } else {
            why.join("; ")
        };
        format!("(computed on this server, not on the cluster at {at}: {why})")
    }
}

/// "1 plan ran on its executors", "3 plans ran … in 12 tasks" (the tasks the scheduler split
/// them into, when it said).
fn plans(n: usize, tasks: Option<usize>) -> String {
    let ran = if n == 1 {
        "1 plan ran on its executors".to_string()
    } else {
        format!("{n} plans ran on its executors")
    };
    match tasks {
        Some(1) => format!("{ran} in 1 task"),
        Some(t) => format!("{ran} in {t} tasks"),
        None => ran,
    }
}

/// What the extract step says of objects read from object storage: the version of each
/// (its ETag, named in every read), and whether the bytes were hashed.
fn objects_read(files: &[tally_storage::backend::ServedFile]) -> String {
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
    ds: &tally_storage::dataset::Dataset,
    prepared: &tally_storage::dataset::Prepared,
) -> (Provenance, String) {
    let mut provenance = Provenance::default();
    let (source, warnings) = crate::envelope::dataset_source(ds, &prepared.files);
    let source_id = provenance.cite(source);
    for w in warnings {
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
    s: &tally_storage::backend::RowSource,
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
    prepared: &tally_storage::dataset::Prepared,
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

/// The row sources (their indexes in the backend's table) of the records of `df`, a dataset's
/// records under a call's conditions; `None` when the backend reports no per-row sources.
pub async fn sources_of_records(
    df: &datafusion::prelude::DataFrame,
    prepared: &tally_storage::dataset::Prepared,
) -> Result<Option<std::collections::BTreeSet<u32>>, datafusion::error::DataFusionError> {
    use datafusion::arrow::array::AsArray as _;
    use datafusion::arrow::datatypes::UInt64Type;
    let Some(table) = prepared.row_sources.as_ref() else {
        return Ok(None);
    };
    let mut found = std::collections::BTreeSet::new();
    let mut stream = df
        .clone()
        .select(vec![datafusion::prelude::ident(
            tally_storage::dataset::ROW_COL,
        )])?
        .execute_stream()
        .await?;
    while let Some(batch) = futures::StreamExt::next(&mut stream).await {
        let batch = batch?;
        let Some(rows) = batch.column(0).as_primitive_opt::<UInt64Type>() else {
            continue;
        };
        found.extend(
            rows.values()
                .iter()
                .filter_map(|&row| table.index.get(row as usize).copied()),
        );
        // Every source found: the rest of the records can only cite them again.
        if found.len() == table.sources.len() {
            break;
        }
    }
    Ok(Some(found))
}

/// Cites, for a result computed over records rather than showing them (a summary), each
/// document the records' own sources lie in, once: a row source without its locator (a file,
/// a law revision), with the hash of its file as read (`contentHash`), as `<dataset
/// source>#doc<n>`. Returns their ids; at most [`MAX_ROW_SOURCES`], then a warning.
pub fn document_sources(
    out: &mut Provenance,
    prepared: &tally_storage::dataset::Prepared,
    dataset_source_id: &str,
    indexes: &std::collections::BTreeSet<u32>,
) -> Vec<String> {
    let Some(table) = prepared.row_sources.as_ref() else {
        return Vec::new();
    };
    let Some(dataset_source) = out
        .sources
        .iter()
        .find(|s| s.id == dataset_source_id)
        .cloned()
    else {
        return Vec::new();
    };
    let mut documents: Vec<crate::envelope::Source> = Vec::new();
    let mut left_out = 0usize;
    for s in indexes
        .iter()
        .filter_map(|&i| table.sources.get(i as usize))
    {
        let document = cited_row_source(String::new(), s, &dataset_source, None);
        let same = |d: &crate::envelope::Source| {
            d.uri == document.uri
                && d.title == document.title
                && d.content_hash == document.content_hash
                && d.published_at == document.published_at
                && d.effective_at == document.effective_at
        };
        if documents.iter().any(same) {
            continue;
        }
        if documents.len() >= MAX_ROW_SOURCES {
            left_out += 1;
            continue;
        }
        documents.push(document);
    }
    if left_out > 0 {
        out.warn(format!(
            "the records come from more than {MAX_ROW_SOURCES} documents: the first {MAX_ROW_SOURCES} are cited; narrow the conditions to get each one"
        ));
    }
    documents
        .into_iter()
        .enumerate()
        .map(|(n, mut d)| {
            d.id = format!("{dataset_source_id}#doc{n}");
            out.cite(d)
        })
        .collect()
}

/// Groups named in a warning at most.
pub const LISTED_GROUPS: usize = 8;

/// Names as a warning lists them: the first [`LISTED_GROUPS`], then how many more.
pub fn listed(names: Vec<String>) -> String {
    let n = names.len();
    let mut shown: Vec<String> = names.into_iter().take(LISTED_GROUPS).collect();
    if n > LISTED_GROUPS {
        shown.push(format!("and {} more", n - LISTED_GROUPS));
    }
    shown.join(", ")
}

/// `1 group`, `3 groups`.
pub fn groups(n: usize) -> String {
    if n == 1 {
        "1 group".into()
    } else {
        format!("{n} groups")
    }
}

/// A group as a warning names it: its key values joined by ` / `, a missing one as
/// `(missing)`.
pub fn group_label<'v>(keys: impl IntoIterator<Item = &'v serde_json::Value>) -> String {
    keys.into_iter()
        .map(|v| match v {
            serde_json::Value::Null => "(missing)".to_string(),
            v => crate::json::value_text(v),
        })
        .collect::<Vec<_>>()
        .join(" / ")
}
