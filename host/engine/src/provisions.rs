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
//!
//! In phases, each in its own module: the link's fields ([`sides`]), the records and the
//! linked dataset read ([`read`]), references matched to provisions ([`matching`]), a page
//! of them ([`page`]), and what was done cited and said ([`cite`]).

mod cite;
mod matching;
mod page;
mod read;
mod sides;

use std::sync::Arc;

use serde_json::Value;
use tally_semantic::resolve::CitePlan;

use crate::call::Call;
use crate::context::Cx;
use crate::cursor;
use crate::envelope::Provenance;
use crate::error::EngineError;
use crate::results::CiteResult;
use cite::{Figures, cite_target, context_of, say_steps};
use matching::{match_references, unmatched};
use page::{PageAt, page_of};
use read::{count_references, read_linked};
use sides::Sides;
use tally_storage::dataset::Dataset;

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
