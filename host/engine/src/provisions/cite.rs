//! What a call cites and says: its context and the call as resolved, the linked dataset's
//! source, the counts it states, and its steps and caveats in provenance.

use tally_semantic::definition::FieldId;
use tally_semantic::resolve::CitePlan;

use super::page::Page;
use super::read::Counted;
use super::sides::Sides;
use crate::call::{Asked, Call};
use crate::context::Cx;
use crate::envelope::{Provenance, TransformationType};
use crate::error::EngineError;
use crate::meta::{self, echo};
use tally_storage::dataset::Dataset;

/// The call's context (fields, resolutions, notices) and what every dataset result cites:
/// the call as resolved, the dataset's source, hints when nothing matched.
pub(super) async fn context_of(
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

/// The counts a call's provenance states.
pub(super) struct Figures {
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
    pub(super) fn of(
        counted: &Counted,
        records_matched: u64,
        records_missing: u64,
        page: &Page,
    ) -> Figures {
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
pub(super) fn cite_target(
    provenance: &mut Provenance,
    target: &Dataset,
    tcall: &Call<'_>,
) -> String {
    let (source, warnings) = crate::envelope::dataset_source(target, &tcall.prepared.files);
    let id = provenance.cite(source);
    for w in warnings {
        provenance.warn(w);
    }
    id
}

/// The steps of a call (filter, count, read references, read the linked dataset, match) and
/// its caveats (a page cut or continued, references that found nothing).
pub(super) fn say_steps(
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
