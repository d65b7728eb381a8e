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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::Expr;
use tally_semantic::definition::{DatasetDef, Derived, DerivedSource, FieldId};
use tally_semantic::error::{Candidate, ErrorCode, RequestError};
use tally_semantic::request::{MAX_VALUES, Op, Scalar};
use tally_semantic::resolve::Filter;

use crate::context::Cx;
use crate::envelope::{Provenance, Source, TransformationType};
use crate::error::EngineError;
use crate::plan::Planner;

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
    /// Each parent as names are compared (NFKC, lower case), parallel to `parents`: folded
    /// once when the table is read, not once per value a condition names.
    folded: Vec<String>,
    /// Key → parent, as the plans that group by the field map it.
    table: Arc<tally_storage::udf::LookupTable>,
}

impl Lookup {
    fn new(
        key: FieldId,
        parents: Vec<(String, Vec<String>)>,
        cited: Option<(Source, Vec<String>, String)>,
    ) -> Lookup {
        let folded = parents.iter().map(|(p, _)| fold(p)).collect();
        let table = Arc::new(tally_storage::udf::LookupTable::new(
            parents
                .iter()
                .flat_map(|(p, children)| children.iter().map(move |c| (c.clone(), p.clone()))),
        ));
        Lookup {
            key,
            parents,
            cited,
            folded,
            table,
        }
    }

    /// How many values of the key field the table maps.
    pub fn keys(&self) -> usize {
        self.parents.iter().map(|(_, c)| c.len()).sum()
    }
}

/// A name as lent values are compared: NFKC, lower case.
fn fold(s: &str) -> String {
    tally_semantic::names::nfkc_value(s).to_lowercase()
}

/// The tables of the derived fields a call uses.
pub type Lookups = BTreeMap<FieldId, Arc<Lookup>>;

/// Reads the tables of the derived fields among `fields` (conditions and groupings of a
/// call): a roll-up from the definition, a relation from its dataset (which must be served to
/// the caller).
pub async fn read(
    engine: &Cx<'_>,
    def: &DatasetDef,
    fields: impl IntoIterator<Item = FieldId>,
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
            DerivedSource::Rollup(parents) => Lookup::new(derived.key, parents.clone(), None),
            DerivedSource::Relation {
                dataset,
                key,
                field,
            } => related(engine, def, id, derived, (dataset, key, field)).await?,
        };
        out.insert(id, Arc::new(lookup));
    }
    Ok(out)
}

/// The table of a field lent by a related dataset: its key and the field, every record, with
/// each key once.
async fn related(
    engine: &Cx<'_>,
    def: &DatasetDef,
    id: FieldId,
    derived: &Derived,
    (dataset, key, field): (&str, &str, &str),
) -> Result<Lookup, EngineError> {
    let scope = engine.scope();
    let name = &def.fields[id].name;
    let broken = |why: String| EngineError::Dataset {
        dataset: def.id.clone(),
        message: format!("its relation to `{dataset}` (for `{name}`) cannot be followed: {why}"),
        diagnostics: Vec::new(),
    };
    let target = engine
        .seen(&engine.catalog.load(), dataset, scope)
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
    let parents = parents_of(
        &batches,
        &tdef.id,
        &|why| broken(why),
        (dataset, key),
        &engine.call.stop,
    )?;
    let (source, warnings) = crate::envelope::dataset_source(&target, &tcall.prepared.files);
    let step = format!(
        "looked up `{name}` as `{field}` of dataset `{dataset}` (version {}) for the `{key}` equal to each record's `{}`; {rows} records of `{dataset}`, each key once; a record whose key it lacks has no `{name}`",
        target.version, def.fields[derived.key].name
    );
    Ok(Lookup::new(
        derived.key,
        parents,
        Some((source, warnings, step)),
    ))
}

/// The parents of a related table's rows (`k`, `v`: each key and its parent), each with its
/// children in the table's order; a key repeated is `broken`.
fn parents_of(
    batches: &[datafusion::arrow::record_batch::RecordBatch],
    target: &str,
    broken: &dyn Fn(String) -> EngineError,
    (dataset, key): (&str, &str),
    stop: &tally_storage::stop::Stop,
) -> Result<Vec<(String, Vec<String>)>, EngineError> {
    let text = |a: &Arc<dyn Array>| -> Result<Vec<Option<String>>, EngineError> {
        let t = cast(a, &DataType::Utf8).map_err(|e| EngineError::backend(target, e))?;
        let t = t
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| EngineError::internal("a cast to text gave no text"))?;
        Ok(t.iter().map(|s| s.map(str::to_string)).collect())
    };
    // Each key once, each parent once, in the table's order: maps, never a search of what
    // was gathered so far (a table of 100,000 keys is 100,000 steps, not 10^10), with the
    // call's stop looked at as the rows go by.
    let mut child_of: HashMap<String, Option<String>> = HashMap::new();
    let mut repeated: Vec<String> = Vec::new();
    let mut order: Vec<String> = Vec::new();
    let mut seen = 0usize;
    for b in batches {
        for (kv, vv) in text(b.column(0))?.into_iter().zip(text(b.column(1))?) {
            seen += 1;
            if seen.is_multiple_of(tally_storage::stop::EVERY) {
                stop.check()?;
            }
            let Some(kv) = kv.filter(|k| !k.trim().is_empty()) else {
                continue;
            };
            if child_of.contains_key(&kv) {
                if repeated.len() < 1_000 && !repeated.contains(&kv) {
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
            "a relation must be many-to-one, and `{key}` of `{dataset}` repeats {}{} key(s): {}{}",
            if repeated.len() >= 1_000 {
                "at least "
            } else {
                ""
            },
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
    let mut parent_at: HashMap<String, usize> = HashMap::new();
    for child in order {
        let Some(Some(parent)) = child_of.remove(&child) else {
            continue;
        };
        match parent_at.get(&parent) {
            Some(&i) => parents[i].1.push(child),
            None => {
                parent_at.insert(parent.clone(), parents.len());
                parents.push((parent, vec![child]));
            }
        }
    }
    Ok(parents)
}

/// Conditions on derived fields as conditions on their key fields: a parent named as the
/// children it has, as one set (`$in`, or `$nin` for a negation), never a condition per
/// child. A set holds at most [`MAX_VALUES`] keys, as an `$in` a caller writes does; past it
/// the condition is refused with what works. A parent the table does not have is refused
/// with those it has.
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
        let children = |at: &mut dyn Iterator<Item = usize>| -> Vec<Scalar> {
            at.flat_map(|i| lookup.parents[i].1.iter().cloned().map(Scalar::Str))
                .collect()
        };
        let named = |values: &[Scalar]| -> Result<Vec<usize>, EngineError> {
            let mut at: HashMap<&str, Vec<usize>> = HashMap::new();
            for (i, p) in lookup.folded.iter().enumerate() {
                at.entry(p.as_str()).or_default().push(i);
            }
            let mut found: Vec<usize> = Vec::new();
            let mut seen: std::collections::HashSet<usize> = std::collections::HashSet::new();
            for value in values {
                let Some(is) = at.get(fold(&value.text()).as_str()) else {
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
                };
                for i in is {
                    if seen.insert(*i) {
                        found.push(*i);
                    }
                }
            }
            Ok(found)
        };
        let containing = |t: &str| -> Vec<usize> {
            let t = fold(t);
            (0..lookup.parents.len())
                .filter(|i| lookup.folded[*i].contains(&t))
                .collect()
        };
        let all = || 0..lookup.parents.len();
        let (keep, at): (bool, Vec<usize>) = match &f.op {
            Op::Eq(v) => (true, named(std::slice::from_ref(v))?),
            Op::In(values) => (true, named(values)?),
            Op::Ne(v) => (false, named(std::slice::from_ref(v))?),
            Op::Nin(values) => (false, named(values)?),
            // A substring no value holds would match nothing, silently: refused as a value.
            Op::Contains(t) => match containing(t) {
                found if found.is_empty() => (true, named(&[Scalar::Str(t.clone())])?),
                found => (true, found),
            },
            Op::NotContains(t) => (false, containing(t)),
            Op::NotEmpty(true) => (true, all().collect()),
            Op::NotEmpty(false) => (false, all().collect()),
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
        };
        let count: usize = at.iter().map(|i| lookup.parents[*i].1.len()).sum();
        if count > MAX_VALUES {
            return Err(EngineError::Request(
                RequestError::invalid(
                    format!("where.{name}"),
                    format!(
                        "the condition on `{name}` stands for {count} values of `{}` (the {} of `{name}` it names hold them), and a condition may list at most {MAX_VALUES} values, as `$in` may",
                        def.fields[key].name,
                        at.len()
                    ),
                )
                .hint(format!(
                    "name fewer values of `{name}`, or group by `{name}` instead (a grouping maps every value of `{}` with no such bound)",
                    def.fields[key].name
                )),
            ));
        }
        let values = children(&mut at.into_iter());
        out.push(match (keep, values.is_empty()) {
            (true, _) => Filter {
                field: key,
                op: Op::In(values),
            },
            // Nothing to exclude: every record is kept, as a `$nin` of no value would keep it.
            (false, true) => continue,
            (false, false) => Filter {
                field: key,
                op: Op::Nin(values),
            },
        });
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
/// when the table lacks it), by one hash lookup per distinct value (`tally_lookup`).
pub fn value(planner: &Planner<'_>, lookup: &Lookup) -> Expr {
    // Text, as the table's children are: a numeric key as its digits.
    let key = planner.column(lookup.key);
    let key = if planner.def.fields[lookup.key].data_type.is_numeric() {
        datafusion::logical_expr::cast(key, DataType::Utf8)
    } else {
        key
    };
    planner.functions.lookup(key, &lookup.table)
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
