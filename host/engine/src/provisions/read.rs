//! The two reads of a call: the matching records counted per group and distinct reference,
//! and the linked dataset's provisions of the laws those references name.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::{DataType, UInt64Type};
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::prelude::{cast, ident, lit};
use tally_semantic::definition::FieldId;
use tally_semantic::resolve::Filter;
use tally_storage::dataset::ROW_COL;

use super::sides::Sides;
use crate::call::Call;
use crate::context::Cx;
use crate::error::EngineError;
use crate::plan::conjunction;

/// Records of the linked dataset one call reads at most.
const MAX_LINKED_ROWS: usize = 1_000_000;

/// One row of the linked dataset: the key values, its locator, text, row number.
pub(super) struct Provisional {
    pub(super) locator: String,
    pub(super) text: String,
    pub(super) row: u64,
    pub(super) revision: Option<String>,
}

/// Text of a cell (null as None).
fn text_at(a: &ArrayRef, i: usize) -> Option<String> {
    let a = datafusion::arrow::compute::cast(a, &DataType::Utf8).ok()?;
    let a = a.as_any().downcast_ref::<StringArray>()?;
    (!a.is_null(i)).then(|| a.value(i).to_string())
}

/// A value compared across datasets: NFKC, trimmed.
pub(super) fn folded(s: &str) -> String {
    tally_semantic::names::nfkc_value(s)
}

/// The matching records, counted per group and distinct reference.
pub(super) struct Counted {
    /// The call's conditions, as planned.
    pub(super) conditions: Vec<datafusion::prelude::Expr>,
    /// Group values then link values, and the records that have them.
    pub(super) distinct: Vec<(Vec<Option<String>>, u64)>,
    pub(super) total: u64,
}

pub(super) async fn count_references(
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
pub(super) struct Linked {
    pub(super) laws: HashMap<Vec<String>, Vec<Provisional>>,
    pub(super) in_force_elsewhere: std::collections::HashSet<Vec<String>>,
}

pub(super) async fn read_linked(
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
