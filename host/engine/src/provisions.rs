//! `cite_provisions`: from "how many records" to "on which provisions do they rest".
//!
//! A dataset's definition links it to another (`links: [{to: laws, on: {法令番号: law_num,
//! 根拠条項号: locator}}]`). The matching records of the first are counted per distinct
//! reference (and per group, when asked); the linked dataset is read for the laws those
//! references name (the revision in force on `as_of`, or the latest), and each reference is
//! read as the provisions it names, in any common form (`第５条の２第３項`, `第5の2条`, lists
//! such as `第20条第1項及び第3項`), as a `locator: law` field reads them. Each provision found is
//! one row: the law, the provision, its text (trimmed), its revision, its e-Gov URI and the
//! records that rest on it; each law (revision) a page's rows come from is cited once in
//! provenance, and the rows point at it. Records whose reference finds nothing are counted and
//! listed by why: the law is not served, the provision is not in it, or the reference cannot
//! be read. Every number is computed here.
//!
//! The provisions come a page at a time, as `query_records`' records do: at most `limit`, cut
//! to the result's budget (`meta::cap_rows_within`), with a signed cursor for the rest
//! (`cursor`), bound to this call and to the versions of both datasets.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, UInt64Type};
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::prelude::{cast, ident, lit};
use serde_json::Value;
use tally_plugin_api::locator::{normalize_references, within};
use tally_semantic::definition::{FieldId, LocatorKind};
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::{CitePlan, Filter};

use crate::call::{Asked, Call};
use crate::context::Cx;
use crate::cursor;
use crate::envelope::{Provenance, Source, TransformationType};
use crate::error::EngineError;
use crate::meta::{self, echo};
use crate::plan::conjunction;
use crate::results::{CiteResult, Unmatched, UnmatchedReference};
use tally_storage::dataset::{Dataset, ROW_COL};

/// A provision's text, as shown, at most this many characters.
const TEXT_CHARS: usize = 200;
/// References listed per reason at most (all are counted).
const LISTED: usize = 50;
/// Records of the linked dataset one call reads at most.
const MAX_LINKED_ROWS: usize = 1_000_000;

/// Why a reference found no provision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Miss {
    NoReference,
    LawNotServed,
    NotInForce,
    NotFound,
    Unparsable,
}

impl Miss {
    fn reason(self, target: &str, as_of: Option<&str>) -> String {
        match self {
            Miss::NotInForce => format!(
                "law not in force: `{target}` has the law, but no revision of it in force on {}",
                as_of.unwrap_or("the date asked")
            ),
            Miss::NoReference => "no reference: the record names no law or provision".to_string(),
            Miss::LawNotServed => {
                format!("law not served: `{target}` holds no law of that name or number")
            }
            Miss::NotFound => format!(
                "provision not found: the law is served by `{target}`, but has no such article, paragraph or item"
            ),
            Miss::Unparsable => {
                "unparsable reference: it names no article (第…条) Tally can read".to_string()
            }
        }
    }
}

/// A provision found, per group: (group values, the law's key values, the provision).
type ProvisionKey = (Vec<Option<String>>, Vec<String>, String);
/// What rests on a provision: records, the linked rows it stands for, its revision.
type Found = (u64, Vec<u64>, Option<String>);
/// A reference that found nothing: the link's values, the provision read (if any).
type MissedReference = (Vec<Option<String>>, Option<String>);

/// One row of the linked dataset: the key values, its locator, text, row number.
struct Provisional {
    locator: String,
    text: String,
    row: u64,
    revision: Option<String>,
}

/// Text of a cell (null as None).
fn text_at(a: &ArrayRef, i: usize) -> Option<String> {
    let a = datafusion::arrow::compute::cast(a, &DataType::Utf8).ok()?;
    let a = a.as_any().downcast_ref::<StringArray>()?;
    (!a.is_null(i)).then(|| a.value(i).to_string())
}

/// A value compared across datasets: NFKC, trimmed.
fn folded(s: &str) -> String {
    tally_semantic::names::nfkc_value(s)
}

fn trimmed(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= TEXT_CHARS {
        return text;
    }
    let mut out: String = text.chars().take(TEXT_CHARS).collect();
    out.push('…');
    out
}

/// `cite_provisions`, in phases: the link's fields on each side ([`Sides`]), the matching
/// records counted per reference ([`count_references`]), the linked dataset read for the laws
/// they name ([`read_linked`]), each reference matched to provisions ([`match_references`]),
/// a page of provisions ([`page_of`]), and what was done said in provenance ([`say_steps`]).
pub async fn run(
    engine: &Cx<'_>,
    ds: &Dataset,
    target: &Arc<Dataset>,
    mut plan: CitePlan,
) -> Result<(CiteResult, Provenance), EngineError> {
    let def = &ds.def;
    let tdef = &target.def;
    let sides = Sides::of(def, tdef, &plan.link)?;
    let as_of = tally_semantic::resolve::resolve_as_of(tdef, plan.as_of.as_deref(), &[])
        .map_err(EngineError::Request)?;
    // A page belongs to this call as asked (before its values are matched to the data) and to
    // the versions of both datasets: the provisions and their order depend on both.
    let version = format!("{}+{}", ds.version, target.version);
    let fingerprint = cursor::fingerprint(&identity(&plan, def));
    if let Some(c) = &plan.cursor {
        // An edited, foreign or stale cursor is refused before any work; its offset is checked
        // against the provisions once they are counted.
        cursor::decode(c, &version, &fingerprint, usize::MAX)?;
    }

    let call = Call::open(
        engine,
        ds,
        &mut plan.records.filters,
        &mut plan.records.resolved_fields,
        None,
        crate::call::Reads {
            fields: &plan.records.group_by,
            ..Default::default()
        },
    )
    .await?;
    let groups = plan.records.group_by.clone();
    let link_here = sides.here();
    let counted =
        count_references(engine, &call, &plan.records.filters, &groups, &link_here).await?;

    let mut target_filters = sides.wanted(&counted.distinct, groups.len());
    let mut target_resolved = Vec::new();
    let tcall = Call::open(
        engine,
        target,
        &mut target_filters,
        &mut target_resolved,
        as_of.as_deref(),
        crate::call::Reads::default(),
    )
    .await?;
    let linked = read_linked(&tcall, &target_filters, &sides, as_of.is_some()).await?;
    let matched = match_references(&counted.distinct, groups.len(), sides.equal.len(), &linked);

    let (mut provenance, source_id) = call.provenance();
    let target_source_id = cite_target(&mut provenance, target, &tcall);
    let at = PageAt {
        cursor: plan.cursor.as_deref(),
        limit: plan.records.limit,
        version: &version,
        fingerprint: &fingerprint,
    };
    let page = page_of(
        engine,
        &tcall,
        &mut provenance,
        &target_source_id,
        matched.found,
        &linked.laws,
        &at,
    )?;
    let (total_provisions, offset, returned) = (page.total, page.offset, page.rows.len());
    let unmatched = unmatched(
        matched.misses,
        &matched.missed_records,
        &tdef.id,
        as_of.as_deref(),
    );
    let mut columns: Vec<String> = groups.iter().map(|g| def.fields[*g].name.clone()).collect();
    columns.extend(["law", "provision", "text", "revision", "uri", "records"].map(String::from));

    // What was done, and the caveats.
    let mut context = context_of(
        &mut provenance,
        &call,
        &plan,
        &counted,
        &link_here,
        source_id,
    )
    .await?;
    let figures = Figures::of(
        &counted,
        matched.records_matched,
        matched.records_missing,
        &page,
    );
    say_steps(
        &mut provenance,
        engine,
        def,
        &plan,
        &sides,
        &tcall,
        &figures,
    );
    context.row_source_refs = Some(page.row_refs);
    let data = CiteResult {
        dataset_id: def.id.clone(),
        linked_dataset: tdef.id.clone(),
        as_of,
        columns,
        returned,
        rows: page.rows,
        total_provisions,
        offset,
        next_cursor: page.next_cursor,
        records_total: counted.total,
        records_matched: matched.records_matched,
        unmatched,
        context,
    };
    Ok((data, provenance))
}

/// The call's context (fields, resolutions, notices) and what every dataset result cites:
/// the call as resolved, the dataset's source, hints when nothing matched.
async fn context_of(
    provenance: &mut Provenance,
    call: &Call<'_>,
    plan: &CitePlan,
    counted: &Counted,
    link_here: &[FieldId],
    source_id: String,
) -> Result<crate::results::Context, EngineError> {
    let def = call.def();
    let records = &plan.records;
    let mut used: Vec<FieldId> = records.group_by.clone();
    used.extend(records.filters.iter().map(|f| f.field));
    used.extend(link_here);
    let mut context = meta::context(
        provenance,
        def,
        &used,
        &records.resolved_fields,
        &records.notices,
        &call.engine.call.chosen,
    );
    let asked = Asked {
        plan: records,
        filters: &records.filters,
        conditions: &counted.conditions,
        ask_conditions: counted.total == 0 && !counted.conditions.is_empty(),
        nothing_matched: counted.total == 0,
    };
    call.cite(
        provenance,
        &mut context,
        asked,
        echo(plan.to_call(def)),
        source_id,
        &records.resolved_fields,
    )
    .await?;
    Ok(context)
}

/// The fields a link compares: on each side those compared as they are, the reference here
/// and the provision there (`locator: law`), and the linked dataset's text and revision.
struct Sides {
    equal: Vec<(FieldId, FieldId)>,
    ref_here: FieldId,
    loc_there: FieldId,
    text_there: Option<FieldId>,
    revision_there: Option<FieldId>,
}

impl Sides {
    /// The link's fields resolved once, at the start of the call: those of this dataset were
    /// resolved with its definition, those of `tdef` by [`Link::resolve`].
    ///
    /// [`Link::resolve`]: tally_semantic::definition::Link::resolve
    fn of(
        def: &tally_semantic::DatasetDef,
        tdef: &tally_semantic::DatasetDef,
        link: &tally_semantic::definition::Link,
    ) -> Result<Sides, EngineError> {
        let linked = link.resolve(tdef);
        let mut equal: Vec<(FieldId, FieldId)> = Vec::new();
        let mut located: Option<(FieldId, FieldId)> = None;
        for (h, there) in linked.on {
            let t = there.map_err(|there| {
                link_broken(
                    def,
                    &link.to,
                    &format!(
                        "`{}` or `{there}` is not a declared field",
                        def.fields[h].name
                    ),
                )
            })?;
            if tdef.fields[t].locator == Some(LocatorKind::Law) {
                located = Some((h, t));
            } else {
                equal.push((h, t));
            }
        }
        let Some((ref_here, loc_there)) = located else {
            return Err(link_broken(
                def,
                &link.to,
                &format!(
                    "none of its fields of `{}` is a provision (`locator: law`)",
                    link.to
                ),
            ));
        };
        Ok(Sides {
            equal,
            ref_here,
            loc_there,
            text_there: linked.text.ok(),
            revision_there: tdef.revisions.as_ref().and_then(|r| r.id),
        })
    }

    /// The link's fields on this side: the compared ones, then the reference.
    fn here(&self) -> Vec<FieldId> {
        self.equal
            .iter()
            .map(|(h, _)| *h)
            .chain(std::iter::once(self.ref_here))
            .collect()
    }

    /// Conditions on the linked dataset: the values the references' compared fields name.
    fn wanted(&self, distinct: &[(Vec<Option<String>>, u64)], groups: usize) -> Vec<Filter> {
        let mut wanted: Vec<Vec<String>> = vec![Vec::new(); self.equal.len()];
        for (values, _) in distinct {
            for (i, w) in wanted.iter_mut().enumerate() {
                if let Some(v) = &values[groups + i]
                    && !w.contains(v)
                {
                    w.push(v.clone());
                }
            }
        }
        self.equal
            .iter()
            .zip(&wanted)
            .map(|((_, t), values)| Filter {
                field: *t,
                op: Op::In(values.iter().map(|v| Scalar::Str(v.clone())).collect()),
            })
            .collect()
    }
}

/// The matching records, counted per group and distinct reference.
struct Counted {
    /// The call's conditions, as planned.
    conditions: Vec<datafusion::prelude::Expr>,
    /// Group values then link values, and the records that have them.
    distinct: Vec<(Vec<Option<String>>, u64)>,
    total: u64,
}

async fn count_references(
    engine: &Cx<'_>,
    call: &Call<'_>,
    filters: &[Filter],
    groups: &[FieldId],
    link_here: &[FieldId],
) -> Result<Counted, EngineError> {
    let def = call.def();
    let computing = |e| EngineError::computing(&def.id, e);
    let mut conditions = Vec::new();
    for f in filters {
        conditions.push(call.planner.filter(f)?);
    }
    let filtered = match conjunction(conditions.clone()) {
        Some(e) => call.base.clone().filter(e)?,
        None => call.base.clone(),
    };
    let mut keys = Vec::new();
    for (i, f) in groups.iter().chain(link_here.iter()).enumerate() {
        keys.push(cast(call.planner.column(*f), DataType::Utf8).alias(format!("k{i}")));
    }
    let counted = filtered
        .aggregate(keys, vec![count(lit(1)).alias("n")])?
        .collect()
        .await
        .map_err(computing)?;
    let width = groups.len() + link_here.len();
    let mut distinct: Vec<(Vec<Option<String>>, u64)> = Vec::new();
    for b in &counted {
        let n = datafusion::arrow::compute::cast(b.column(width), &DataType::UInt64)
            .map_err(|e| EngineError::backend(&def.id, e))?;
        let n = n.as_primitive::<UInt64Type>();
        for r in 0..b.num_rows() {
            distinct.push((
                (0..width).map(|c| text_at(b.column(c), r)).collect(),
                n.value(r),
            ));
        }
    }
    if distinct.len() > engine.limits().max_groups {
        return Err(EngineError::Limit {
            message: format!(
                "the matching records name more than {} distinct references",
                engine.limits().max_groups
            ),
            hint: "add conditions in `where` (e.g. one law), or group by fewer fields".into(),
        });
    }
    let total = distinct.iter().map(|(_, n)| n).sum();
    Ok(Counted {
        conditions,
        distinct,
        total,
    })
}

/// The linked dataset's provisions, by the folded values of the compared fields (its laws),
/// and the laws it has but not in force on the date asked.
struct Linked {
    laws: HashMap<Vec<String>, Vec<Provisional>>,
    in_force_elsewhere: std::collections::HashSet<Vec<String>>,
}

async fn read_linked(
    tcall: &Call<'_>,
    target_filters: &[Filter],
    sides: &Sides,
    dated: bool,
) -> Result<Linked, EngineError> {
    let tdef = tcall.def();
    let tcomputing = |e| EngineError::computing(&tdef.id, e);
    let mut tconditions = Vec::new();
    for f in target_filters {
        tconditions.push(tcall.planner.filter(f)?);
    }
    let tframe = match conjunction(tconditions.clone()) {
        Some(e) => tcall.base.clone().filter(e)?,
        None => tcall.base.clone(),
    };
    let text_or_null = |field: Option<FieldId>| match field {
        Some(t) => cast(tcall.planner.column(t), DataType::Utf8),
        None => lit(datafusion::common::ScalarValue::Utf8(None)),
    };
    let mut columns: Vec<datafusion::prelude::Expr> = sides
        .equal
        .iter()
        .map(|(_, t)| cast(tcall.planner.column(*t), DataType::Utf8))
        .collect();
    columns.push(cast(tcall.planner.column(sides.loc_there), DataType::Utf8));
    columns.push(text_or_null(sides.text_there));
    columns.push(text_or_null(sides.revision_there));
    columns.push(ident(ROW_COL));
    let batches = tframe
        .select(columns)?
        .sort(vec![ident(ROW_COL).sort(true, false)])?
        .collect()
        .await
        .map_err(tcomputing)?;
    let mut laws: HashMap<Vec<String>, Vec<Provisional>> = HashMap::new();
    let e = sides.equal.len();
    let read: usize = batches.iter().map(|b| b.num_rows()).sum();
    if read > MAX_LINKED_ROWS {
        return Err(EngineError::Limit {
            message: format!(
                "the references name {read} records of `{}`, more than the {MAX_LINKED_ROWS} a call reads",
                tdef.id
            ),
            hint: "narrow `where` to fewer laws (or link by a law number too, so that only the laws named are read)".into(),
        });
    }
    for b in &batches {
        let rows = datafusion::arrow::compute::cast(b.column(e + 3), &DataType::UInt64)
            .map_err(|e| EngineError::backend(&tdef.id, e))?;
        let rows = rows.as_primitive::<UInt64Type>();
        for r in 0..b.num_rows() {
            let key: Vec<String> = (0..e)
                .map(|c| folded(&text_at(b.column(c), r).unwrap_or_default()))
                .collect();
            let Some(locator) = text_at(b.column(e), r) else {
                continue;
            };
            laws.entry(key).or_default().push(Provisional {
                locator,
                text: text_at(b.column(e + 1), r).unwrap_or_default(),
                row: rows.value(r),
                revision: text_at(b.column(e + 2), r),
            });
        }
    }

    // Laws the linked dataset has, but not in force on `as_of`: said as such, not as absent.
    let mut in_force_elsewhere: std::collections::HashSet<Vec<String>> = Default::default();
    if dated && e > 0 {
        let all = tcall.ctx.read_table(tcall.prepared.table().provider)?;
        let all = match conjunction(tconditions) {
            Some(c) => all.filter(c)?,
            None => all,
        };
        let keys: Vec<datafusion::prelude::Expr> = sides
            .equal
            .iter()
            .map(|(_, t)| cast(tcall.planner.column(*t), DataType::Utf8))
            .collect();
        for b in all
            .aggregate(keys, vec![])?
            .collect()
            .await
            .map_err(tcomputing)?
        {
            for r in 0..b.num_rows() {
                let key: Vec<String> = (0..e)
                    .map(|c| folded(&text_at(b.column(c), r).unwrap_or_default()))
                    .collect();
                if !laws.contains_key(&key) {
                    in_force_elsewhere.insert(key);
                }
            }
        }
    }
    Ok(Linked {
        laws,
        in_force_elsewhere,
    })
}

/// Each reference read as provisions, and found or missed.
struct Matched {
    /// (group values, law key, provision) → records, and the rows it stands for.
    found: BTreeMap<ProvisionKey, Found>,
    misses: BTreeMap<Miss, BTreeMap<MissedReference, u64>>,
    /// Records per reason, each record once (a reference naming two missing provisions is
    /// one record under "provision not found").
    missed_records: BTreeMap<Miss, u64>,
    records_missing: u64,
    records_matched: u64,
}

fn match_references(
    distinct: &[(Vec<Option<String>>, u64)],
    groups: usize,
    e: usize,
    linked: &Linked,
) -> Matched {
    let mut m = Matched {
        found: BTreeMap::new(),
        misses: BTreeMap::new(),
        missed_records: BTreeMap::new(),
        records_missing: 0,
        records_matched: 0,
    };
    for (values, n) in distinct {
        let n = *n;
        let group: Vec<Option<String>> = values[..groups].to_vec();
        let link_values = &values[groups..];
        let law_values = &link_values[..e];
        let reference = link_values[e].clone();
        let mut reasons: Vec<Miss> = Vec::new();
        let misses = &mut m.misses;
        let mut miss = |why: Miss, provision: Option<String>| {
            *misses
                .entry(why)
                .or_default()
                .entry((link_values.to_vec(), provision))
                .or_insert(0) += n;
            if !reasons.contains(&why) {
                reasons.push(why);
            }
        };
        if law_values
            .iter()
            .any(|v| v.as_deref().is_none_or(|v| v.trim().is_empty()))
            || reference.as_deref().is_none_or(|r| r.trim().is_empty())
        {
            miss(Miss::NoReference, None);
            *m.missed_records.entry(Miss::NoReference).or_insert(0) += n;
            m.records_missing += n;
            continue;
        }
        let key: Vec<String> = law_values
            .iter()
            .map(|v| folded(v.as_deref().unwrap_or("")))
            .collect();
        let Some(provisions) = linked.laws.get(&key) else {
            if linked.in_force_elsewhere.contains(&key) {
                miss(Miss::NotInForce, None);
            } else {
                miss(Miss::LawNotServed, None);
            }
            for why in reasons {
                *m.missed_records.entry(why).or_insert(0) += n;
            }
            m.records_missing += n;
            continue;
        };
        let named = normalize_references(reference.as_deref().unwrap_or(""));
        if named.is_empty() {
            miss(Miss::Unparsable, None);
            *m.missed_records.entry(Miss::Unparsable).or_insert(0) += n;
            m.records_missing += n;
            continue;
        }
        let mut any = false;
        for locator in named {
            let rows: Vec<&Provisional> = provisions
                .iter()
                .filter(|p| within(&p.locator, &locator))
                .collect();
            if rows.is_empty() {
                miss(Miss::NotFound, Some(locator));
                continue;
            }
            any = true;
            let entry = m
                .found
                .entry((group.clone(), key.clone(), locator))
                .or_insert_with(|| {
                    (
                        0,
                        rows.iter().map(|p| p.row).collect(),
                        rows[0].revision.clone(),
                    )
                });
            entry.0 += n;
        }
        if any {
            m.records_matched += n;
        }
        if !reasons.is_empty() {
            for why in reasons {
                *m.missed_records.entry(why).or_insert(0) += n;
            }
            m.records_missing += n;
        }
    }
    m
}

/// A page of provisions: its rows, each row's law (revision) cited once in provenance, and
/// whether the page was cut to the result's budget.
struct Page {
    rows: Vec<Vec<Value>>,
    row_refs: Vec<Vec<String>>,
    cut: Option<meta::Cut>,
    /// Provisions found in all, and where this page starts among them.
    total: usize,
    offset: usize,
    next_cursor: Option<String>,
}

/// Which page: the cursor given (if any), the page size, and what a cursor is bound to (the
/// versions of both datasets and the call as asked).
struct PageAt<'a> {
    cursor: Option<&'a str>,
    limit: usize,
    version: &'a str,
    fingerprint: &'a str,
}

/// The provisions of the page `at` asks (most records first, ties by group, law and
/// provision: a total order, so pages never overlap or skip), with their text and law.
fn page_of(
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

/// The references that found no provision, by why, the most frequent first.
fn unmatched(
    misses: BTreeMap<Miss, BTreeMap<MissedReference, u64>>,
    missed_records: &BTreeMap<Miss, u64>,
    target: &str,
    as_of: Option<&str>,
) -> Vec<Unmatched> {
    let mut unmatched = Vec::new();
    for (why, refs) in misses {
        let mut listed: Vec<_> = refs.into_iter().collect();
        listed.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        unmatched.push(Unmatched {
            reason: why.reason(target, as_of),
            records: missed_records.get(&why).copied().unwrap_or(0),
            references: listed
                .into_iter()
                .take(LISTED)
                .map(|((values, provision), n)| UnmatchedReference {
                    values: values
                        .into_iter()
                        .map(|v| v.map_or(Value::Null, Value::String))
                        .collect(),
                    provision,
                    records: n,
                })
                .collect(),
        });
    }
    unmatched
}

/// The counts a call's provenance states.
struct Figures {
    records_total: u64,
    records_matched: u64,
    records_missing: u64,
    total_provisions: usize,
    offset: usize,
    returned: usize,
    next_offset: usize,
    paged: bool,
    cut: Option<meta::Cut>,
}

impl Figures {
    fn of(counted: &Counted, records_matched: u64, records_missing: u64, page: &Page) -> Figures {
        Figures {
            records_total: counted.total,
            records_matched,
            records_missing,
            total_provisions: page.total,
            offset: page.offset,
            returned: page.rows.len(),
            next_offset: page.offset + page.rows.len(),
            paged: page.next_cursor.is_some(),
            cut: page.cut,
        }
    }
}

/// The linked dataset's source, cited (with its warning, if any): its id.
fn cite_target(provenance: &mut Provenance, target: &Dataset, tcall: &Call<'_>) -> String {
    let (source, warnings) = crate::envelope::dataset_source(target, &tcall.prepared.files);
    let id = provenance.cite(source);
    for w in warnings {
        provenance.warn(w);
    }
    id
}

/// The steps of a call (filter, count, read references, read the linked dataset, match) and
/// its caveats (a page cut or continued, references that found nothing).
fn say_steps(
    provenance: &mut Provenance,
    engine: &Cx<'_>,
    def: &tally_semantic::DatasetDef,
    plan: &CitePlan,
    sides: &Sides,
    tcall: &Call<'_>,
    f: &Figures,
) {
    let tdef = tcall.def();
    let records_total = f.records_total;
    let groups = &plan.records.group_by;
    let conditions_said: Vec<String> = plan
        .records
        .filters
        .iter()
        .map(|c| c.describe(def))
        .collect();
    provenance.step(
        TransformationType::Filter,
        format!(
            "kept records of `{}` where {}: {records_total} matched",
            def.id,
            if conditions_said.is_empty() {
                "(no condition)".to_string()
            } else {
                conditions_said.join(" and ")
            }
        ),
    );
    provenance.step(
        TransformationType::Aggregate,
        format!(
            "counted the {records_total} matching records of `{}` per {}distinct {}",
            def.id,
            if groups.is_empty() {
                String::new()
            } else {
                format!(
                    "group of {} (group_by) and ",
                    groups
                        .iter()
                        .map(|g| format!("`{}`", def.fields[*g].name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            plan.link
                .on
                .iter()
                .map(|(h, _)| format!("`{}`", def.fields[*h].name))
                .collect::<Vec<_>>()
                .join(" and "),
        ),
    );
    provenance.step(
        TransformationType::Normalize,
        format!(
            "read each `{}` as the provisions it names (any common form: full-width digits, 第5の2条, lists joined by 及び or 、) and matched {} to `{}` of dataset `{}`",
            def.fields[sides.ref_here].name,
            sides.equal.iter().map(|(h, t)| format!("`{}` (NFKC, trimmed) to `{}`", def.fields[*h].name, tdef.fields[*t].name)).collect::<Vec<_>>().join(", "),
            tdef.fields[sides.loc_there].name,
            tdef.id
        ),
    );
    meta::read_and_normalized(
        provenance,
        tcall.ds,
        &tcall.prepared,
        &tcall.table,
        &[],
        tcall.cluster().as_deref(),
        tcall.route(),
    );
    tcall.say_revisions(provenance);
    let (offset, returned, next_offset) = (f.offset, f.returned, f.next_offset);
    provenance.step(
        TransformationType::Aggregate,
        format!(
            "{} provisions found for {} of {records_total} records; a record whose reference names several provisions counts under each; returned provisions {}–{next_offset}, most records first (ties by group, law and provision)",
            f.total_provisions,
            f.records_matched,
            if returned == 0 { offset } else { offset + 1 },
        ),
    );
    let limits = engine.limits();
    if let Some(cut) = f.cut {
        provenance.warn(match cut {
            meta::Cut::Tokens => format!(
                "the page was cut to {returned} provisions to fit the result's context budget (about {} tokens); pass next_cursor for the rest",
                limits.max_result_tokens
            ),
            meta::Cut::Bytes => format!(
                "the page was cut to {returned} provisions to stay within the result size budget ({} bytes); pass next_cursor for the rest",
                limits.max_result_bytes
            ),
        });
    }
    if f.paged {
        provenance.warn(format!(
            "{returned} of {} provisions returned ({}–{next_offset}); pass next_cursor, with the same other arguments, for the next page",
            f.total_provisions,
            if returned == 0 { offset } else { offset + 1 },
        ));
    }
    if f.records_missing > 0 {
        provenance.warn(format!(
            "{} records have a reference that found no provision ({} of them found others); `unmatched` lists them by why",
            f.records_missing,
            f.records_missing
                .saturating_sub(records_total - f.records_matched)
        ));
    }
}

/// The part of a call that names its provisions and their order (not its page size or page):
/// what a cursor is bound to.
fn identity(plan: &CitePlan, def: &tally_semantic::DatasetDef) -> Value {
    let mut v = plan.to_call(def);
    if let Some(m) = v.as_object_mut() {
        m.remove("limit");
        m.remove("cursor");
    }
    v
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

fn link_broken(def: &tally_semantic::DatasetDef, to: &str, why: &str) -> EngineError {
    EngineError::Dataset {
        dataset: def.id.clone(),
        message: format!("its link to `{to}` cannot be followed: {why}"),
        diagnostics: Vec::new(),
    }
}
