//! Fields looked up from another field's value ([`Derived`]): a level of a roll-up written
//! in the definition (`rollup: {地方: {東北: [青森県, …]}}`), or a field lent by a related
//! dataset served beside this one (`relations`), found by its key.
//!
//! A call that groups or filters by such a field first reads its table (child → parent;
//! written in the definition, or read from the related dataset, whose keys must be unique:
//! the relation is many-to-one, else it is refused naming the repeated keys). A condition on
//! it becomes a condition on the key field (`地方 = 東北` → `都道府県 in [青森県, …]`), so the
//! storage and the backends only ever see the data's own columns; a grouping by it groups
//! the key field's values mapped to their parents. A related dataset is cited as a source of
//! the answer beside the dataset's own.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{Expr, lit, when};
use tally_semantic::definition::{DatasetDef, Derived, DerivedSource, FieldId};
use tally_semantic::error::{Candidate, ErrorCode, RequestError};
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::Filter;

use crate::envelope::{Provenance, Source, TransformationType};
use crate::error::EngineError;
use crate::plan::Planner;
use crate::{Engine, Scope};

/// Rows a related dataset may have to be read as a lookup table.
pub const MAX_LOOKUP_ROWS: usize = 100_000;

/// One derived field's table.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The field of the dataset whose values are looked up.
    pub key: FieldId,
    /// Each parent with its children (values of the key field), in order.
    pub parents: Vec<(String, Vec<String>)>,
    /// The related dataset read: its source, the warnings about it, and what was done.
    pub cited: Option<(Source, Vec<String>, String)>,
}

/// The tables of the derived fields a call uses.
pub type Lookups = BTreeMap<FieldId, Arc<Lookup>>;

/// Reads the tables of the derived fields among `fields` (conditions and groupings of a
/// call): a roll-up from the definition, a relation from its dataset (which must be served to
/// the caller).
pub async fn read(
    engine: &Engine,
    def: &DatasetDef,
    fields: impl IntoIterator<Item = FieldId>,
    scope: &Scope,
) -> Result<Lookups, EngineError> {
    let mut out = Lookups::new();
    for id in fields {
        if out.contains_key(&id) {
            continue;
        }
        let Some(derived) = &def.fields[id].derived else {
            continue;
        };
        let lookup = match &derived.source {
            DerivedSource::Rollup(parents) => Lookup {
                key: derived.key,
                parents: parents.clone(),
                cited: None,
            },
            DerivedSource::Relation {
                dataset,
                key,
                field,
            } => related(engine, def, id, derived, (dataset, key, field), scope).await?,
        };
        out.insert(id, Arc::new(lookup));
    }
    Ok(out)
}

/// The table of a field lent by a related dataset: its key and the field, every record, with
/// each key once.
async fn related(
    engine: &Engine,
    def: &DatasetDef,
    id: FieldId,
    derived: &Derived,
    (dataset, key, field): (&str, &str, &str),
    scope: &Scope,
) -> Result<Lookup, EngineError> {
    let name = &def.fields[id].name;
    let broken = |why: String| EngineError::Dataset {
        dataset: def.id.clone(),
        message: format!("its relation to `{dataset}` (for `{name}`) cannot be followed: {why}"),
        diagnostics: Vec::new(),
    };
    let target = engine
        .catalog
        .load()
        .datasets
        .get(dataset)
        .filter(|_| scope.allows(dataset))
        .cloned()
        .ok_or_else(|| {
            broken(format!(
                "`{dataset}` is not served (a folder of that name in the datasets directory; `tally check` says why one is refused)"
            ))
        })?;
    let tdef = &target.def;
    let column = |n: &str| {
        tdef.fields
            .iter()
            .position(|f| f.name == n && f.is_column())
            .map(FieldId::at)
            .ok_or_else(|| broken(format!("`{dataset}` declares no field `{n}`")))
    };
    let (k, v) = (column(key)?, column(field)?);
    let mut filters = Vec::new();
    let mut resolved = Vec::new();
    let tcall = crate::call::Call::open(
        engine,
        &target,
        &mut filters,
        &mut resolved,
        None,
        crate::call::Reads {
            fields: &[k, v],
            ..Default::default()
        },
    )
    .await?;
    let batches = tcall
        .base
        .clone()
        .select(vec![
            tcall.planner.column(k).alias("k"),
            tcall.planner.column(v).alias("v"),
        ])?
        .limit(0, Some(MAX_LOOKUP_ROWS + 1))?
        .collect()
        .await
        .map_err(|e| EngineError::computing(&tdef.id, e))?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows > MAX_LOOKUP_ROWS {
        return Err(broken(format!(
            "`{dataset}` has more than {MAX_LOOKUP_ROWS} records, more than a table looked up per call may have"
        )));
    }
    let text = |a: &Arc<dyn Array>| -> Result<Vec<Option<String>>, EngineError> {
        let t = cast(a, &DataType::Utf8).map_err(|e| EngineError::backend(&tdef.id, e))?;
        let t = t
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| EngineError::internal("a cast to text gave no text"))?;
        Ok(t.iter().map(|s| s.map(str::to_string)).collect())
    };
    let mut child_of: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut repeated: Vec<String> = Vec::new();
    let mut order: Vec<String> = Vec::new();
    for b in &batches {
        for (kv, vv) in text(b.column(0))?.into_iter().zip(text(b.column(1))?) {
            let Some(kv) = kv.filter(|k| !k.trim().is_empty()) else {
                continue;
            };
            if child_of.contains_key(&kv) {
                if !repeated.contains(&kv) {
                    repeated.push(kv);
                }
                continue;
            }
            order.push(kv.clone());
            child_of.insert(kv, vv.filter(|v| !v.trim().is_empty()));
        }
    }
    if !repeated.is_empty() {
        repeated.sort();
        let shown: Vec<String> = repeated.iter().take(10).map(|k| format!("`{k}`")).collect();
        return Err(broken(format!(
            "a relation must be many-to-one, and `{key}` of `{dataset}` repeats {} key(s): {}{}",
            repeated.len(),
            shown.join(", "),
            if repeated.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        )));
    }
    let mut parents: Vec<(String, Vec<String>)> = Vec::new();
    for child in order {
        let Some(Some(parent)) = child_of.remove(&child) else {
            continue;
        };
        match parents.iter_mut().find(|(p, _)| *p == parent) {
            Some((_, children)) => children.push(child),
            None => parents.push((parent, vec![child])),
        }
    }
    let (source, warnings) = crate::envelope::dataset_source(&target, &tcall.prepared.files);
    let step = format!(
        "looked up `{name}` as `{field}` of dataset `{dataset}` (version {}) for the `{key}` equal to each record's `{}`; {rows} records of `{dataset}`, each key once; a record whose key it lacks has no `{name}`",
        target.version, def.fields[derived.key].name
    );
    Ok(Lookup {
        key: derived.key,
        parents,
        cited: Some((source, warnings, step)),
    })
}

/// Conditions on derived fields as conditions on their key fields: a parent named as the
/// children it has. A parent the table does not have is refused with those it has.
pub fn rewrite(
    def: &DatasetDef,
    filters: &mut Vec<Filter>,
    lookups: &Lookups,
) -> Result<(), EngineError> {
    let mut out = Vec::with_capacity(filters.len());
    for f in std::mem::take(filters) {
        let Some(lookup) = lookups.get(&f.field) else {
            out.push(f);
            continue;
        };
        let name = &def.fields[f.field].name;
        let key = lookup.key;
        let folded = |s: &str| tally_semantic::names::nfkc_value(s).to_lowercase();
        let children_of = |value: &Scalar| -> Result<Vec<Scalar>, EngineError> {
            let wanted = folded(&value.text());
            let found: Vec<&(String, Vec<String>)> = lookup
                .parents
                .iter()
                .filter(|(p, _)| folded(p) == wanted)
                .collect();
            if found.is_empty() {
                let names: Vec<&str> = lookup.parents.iter().map(|(p, _)| p.as_str()).collect();
                let ranked = tally_semantic::names::rank(&value.text(), names.iter().copied());
                return Err(EngineError::Request(
                    RequestError::new(
                        ErrorCode::InvalidCode,
                        format!("`{}` is not a value of `{name}`", value.text()),
                    )
                    .at(format!("where.{name}"))
                    .candidates(
                        ranked.iter().take(10).map(|c| Candidate::new(*c)).collect(),
                        names.len(),
                    )
                    .hint(format!(
                        "name one of the values of `{name}` (inspect_dataset lists them)"
                    )),
                ));
            }
            Ok(found
                .into_iter()
                .flat_map(|(_, c)| c.iter().cloned().map(Scalar::Str))
                .collect())
        };
        let containing = |t: &str| -> Vec<Scalar> {
            let t = folded(t);
            lookup
                .parents
                .iter()
                .filter(|(p, _)| folded(p).contains(&t))
                .flat_map(|(_, c)| c.iter().cloned().map(Scalar::Str))
                .collect()
        };
        let all = || -> Vec<Scalar> {
            lookup
                .parents
                .iter()
                .flat_map(|(_, c)| c.iter().cloned().map(Scalar::Str))
                .collect()
        };
        let none_of = |children: Vec<Scalar>, out: &mut Vec<Filter>| {
            for c in children {
                out.push(Filter {
                    field: key,
                    op: Op::Ne(c),
                });
            }
        };
        match &f.op {
            Op::Eq(v) => out.push(Filter {
                field: key,
                op: Op::In(children_of(v)?),
            }),
            Op::In(values) => {
                let mut children = Vec::new();
                for v in values {
                    children.extend(children_of(v)?);
                }
                out.push(Filter {
                    field: key,
                    op: Op::In(children),
                });
            }
            Op::Ne(v) => none_of(children_of(v)?, &mut out),
            // A substring no value holds would match nothing, silently: refused as a value.
            Op::Contains(t) => {
                let children = containing(t);
                let children = if children.is_empty() {
                    children_of(&Scalar::Str(t.clone()))?
                } else {
                    children
                };
                out.push(Filter {
                    field: key,
                    op: Op::In(children),
                });
            }
            Op::NotContains(t) => none_of(containing(t), &mut out),
            Op::NotEmpty(true) => out.push(Filter {
                field: key,
                op: Op::In(all()),
            }),
            Op::NotEmpty(false) => none_of(all(), &mut out),
            other => {
                return Err(EngineError::Request(
                    RequestError::invalid(
                        format!("where.{name}"),
                        format!(
                            "`{name}` is looked up from `{}` and compared as a name: `{}` does not apply",
                            def.fields[key].name,
                            other.name()
                        ),
                    )
                    .hint(format!("compare `{name}` with values (`{{\"{name}\": [\"…\"]}}`) or a substring")),
                ));
            }
        }
    }
    *filters = out;
    Ok(())
}

/// The fields read for `fields`: a derived field reads its key field.
pub fn read_fields(def: &DatasetDef, fields: &[FieldId]) -> Vec<FieldId> {
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let read = def.fields[*f].derived.as_ref().map_or(*f, |d| d.key);
        if !out.contains(&read) {
            out.push(read);
        }
    }
    out
}

/// A derived field's value for each record: its key field's value mapped to its parent (null
/// when the table lacks it).
pub fn value(planner: &Planner<'_>, lookup: &Lookup) -> Expr {
    let key = planner.column(lookup.key);
    let key = if planner.def.fields[lookup.key].data_type.is_numeric() {
        datafusion::logical_expr::cast(key, DataType::Utf8)
    } else {
        key
    };
    let mut branches = lookup.parents.iter().map(|(parent, children)| {
        let list: Vec<Expr> = children.iter().map(|c| lit(c.clone())).collect();
        (key.clone().in_list(list, false), lit(parent.clone()))
    });
    let Some((first_when, first_then)) = branches.next() else {
        return lit(datafusion::common::ScalarValue::Utf8(None));
    };
    let mut case = when(first_when, first_then);
    for (w, t) in branches {
        case = case.when(w, t);
    }
    case.otherwise(lit(datafusion::common::ScalarValue::Utf8(None)))
        .unwrap_or_else(|_| lit(datafusion::common::ScalarValue::Utf8(None)))
}

/// The related datasets read, cited as sources of the answer, with what was done.
pub fn cite(provenance: &mut Provenance, lookups: &Lookups) {
    for lookup in lookups.values() {
        if let Some((source, warnings, step)) = &lookup.cited {
            provenance.cite(source.clone());
            for w in warnings {
                provenance.warn(w.clone());
            }
            provenance.step(TransformationType::Extract, step.clone());
        }
    }
}
