//! Values that name a record by one of its other names: a field declared with `aliases`
//! (`law_title` with `aliases: [law_abbrev, law_num]`) is compared with a value that is none
//! of its values, but is one of those fields' values, as the values of the field of the
//! records holding it: `["不正アクセス禁止法"]` on `law_title` is read as
//! `["不正アクセス行為の禁止等に関する法律"]`, and so is `["平成11年法律第128号"]`, disclosed in
//! `resolved_fields`.
//!
//! This runs before the call's conditions are handed to the backend (a plugin applies an
//! equality on the title itself, and would return nothing for a short title), over the whole
//! table: which names a record has is a fact of the data, not of the call.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::prelude::{SessionContext, cast, ident};
use tally_semantic::DatasetDef;
use tally_semantic::definition::FieldId;
use tally_semantic::names::{alias_key, fold, nfkc_value};
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::{Filter, Resolution};

use crate::context::Cx;
use crate::error::EngineError;
use crate::plan::Planner;
use tally_storage::dataset::{Dataset, Prepared};

/// Titles a value found through an alias: (the field's value, the alias field, the alias as
/// the data holds it).
type Found = Vec<(String, FieldId, String)>;

/// Rewrites every value compared exactly (`[...]`, `$eq`, `$in`, `$ne`) with a field that
/// declares `aliases`, and a plain string or `$contains` no value of the field contains, to
/// the field's values of the records whose alias fields hold it (NFKC, numbers in kanji or
/// digits alike), disclosing each in `resolved`. A value that is a value of the field itself
/// stays as it is: the full name always wins over another record's short one.
pub async fn read_aliases(
    engine: &Cx<'_>,
    ds: &Dataset,
    filters: &mut Vec<Filter>,
    resolved: &mut Vec<Resolution>,
) -> Result<(), EngineError> {
    let def = &ds.def;
    let asks = filters.iter().any(|f| {
        !def.fields[f.field].aliases.is_empty()
            && matches!(
                f.op,
                Op::Eq(_) | Op::In(_) | Op::Ne(_) | Op::Nin(_) | Op::Contains(_)
            )
    });
    if !asks {
        return Ok(());
    }
    let prepared = ds.prepared(engine).await?;
    let ctx = engine.call_context(prepared.rows)?;
    let mut names = Names {
        engine,
        def,
        prepared: &prepared,
        ctx: &ctx,
        keys: HashMap::new(),
    };
    // Further `$ne` filters, one for each title past the first a `$ne` value found.
    let mut extra: Vec<Filter> = Vec::new();
    for filter in filters.iter_mut() {
        let field = filter.field;
        if def.fields[field].aliases.is_empty() {
            continue;
        }
        let parameter = format!("where.{} value", def.fields[field].name);
        match &mut filter.op {
            Op::Eq(v) => {
                if let Some(found) = names.titles(field, &v.text()).await? {
                    resolved.push(disclosed(def, &parameter, &v.text(), &found));
                    filter.op = exact(found);
                }
            }
            Op::In(values) | Op::Nin(values) => {
                let mut out: Vec<Scalar> = Vec::with_capacity(values.len());
                for v in values.iter() {
                    let read = match names.titles(field, &v.text()).await? {
                        Some(found) => {
                            resolved.push(disclosed(def, &parameter, &v.text(), &found));
                            found.into_iter().map(|(t, _, _)| Scalar::Str(t)).collect()
                        }
                        None => vec![v.clone()],
                    };
                    for s in read {
                        if !out.contains(&s) {
                            out.push(s);
                        }
                    }
                }
                *values = out;
            }
            Op::Ne(v) => {
                if let Some(found) = names.titles(field, &v.text()).await? {
                    resolved.push(disclosed(def, &parameter, &v.text(), &found));
                    let mut titles = titles_of(found).into_iter();
                    if let Some(first) = titles.next() {
                        *v = first;
                    }
                    extra.extend(titles.map(|t| Filter {
                        field,
                        op: Op::Ne(t),
                    }));
                }
            }
            Op::Contains(text) => {
                // A plain string is a substring, as everywhere: read as a name only when no
                // value of the field contains it (it would find nothing otherwise).
                if names.contained(field, text).await? {
                    continue;
                }
                if let Some(found) = names.titles(field, text).await? {
                    resolved.push(disclosed(def, &parameter, text, &found));
                    filter.op = exact(found);
                }
            }
            _ => {}
        }
    }
    filters.extend(extra);
    Ok(())
}

/// The titles found, each once, in order.
fn titles_of(found: Found) -> Vec<Scalar> {
    let mut out: Vec<Scalar> = Vec::new();
    for (t, _, _) in found {
        let s = Scalar::Str(t);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// `$eq` of the one title found, `$in` of several.
fn exact(found: Found) -> Op {
    let mut titles = titles_of(found);
    if titles.len() == 1 {
        Op::Eq(titles.remove(0))
    } else {
        Op::In(titles)
    }
}

/// What a value was read as: each title, with the alias that named it (and the alias as the
/// data writes it, when the value was written otherwise: `平成11年法律第128号` found
/// `平成十一年法律第百二十八号`).
fn disclosed(def: &DatasetDef, parameter: &str, input: &str, found: &Found) -> Resolution {
    let canonical = found
        .iter()
        .map(|(title, via, held)| {
            let via = &def.fields[*via].name;
            if held == input {
                format!("{title} (its {via})")
            } else {
                format!("{title} (its {via} {held})")
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    Resolution {
        parameter: parameter.to_string(),
        input: input.to_string(),
        canonical,
    }
}

/// The names of the whole table: each alias field's values by their [`alias_key`], read once
/// per call.
struct Names<'a> {
    engine: &'a Cx<'a>,
    def: &'a DatasetDef,
    prepared: &'a Prepared,
    ctx: &'a SessionContext,
    keys: HashMap<FieldId, HashMap<String, Vec<String>>>,
}

impl Names<'_> {
    /// Whether some value of `field` contains `text` (folded, as a substring search reads).
    async fn contained(&self, field: FieldId, text: &str) -> Result<bool, EngineError> {
        let wanted = fold(text).into_owned();
        let values = self
            .prepared
            .distinct_values(self.ctx, self.def, field)
            .await?;
        Ok(values
            .iter()
            .any(|(v, _)| fold(v).contains(wanted.as_str())))
    }

    /// The values of `field` of the records one of its alias fields names `value` in, or
    /// `None` when `value` is a value of `field` itself (NFKC) or no alias holds it.
    async fn titles(&mut self, field: FieldId, value: &str) -> Result<Option<Found>, EngineError> {
        let variants = self
            .prepared
            .nfkc_variants(self.ctx, self.def, field)
            .await?;
        if variants.contains_key(&nfkc_value(value)) {
            return Ok(None);
        }
        let key = alias_key(value);
        if key.is_empty() {
            return Ok(None);
        }
        let mut found: Found = Vec::new();
        for &alias in &self.def.fields[field].aliases {
            let forms = self.forms(alias, &key).await?;
            if forms.is_empty() {
                continue;
            }
            for title in self.titles_where(field, alias, &forms).await? {
                if !found.iter().any(|(t, _, _)| *t == title) {
                    found.push((title, alias, forms.join(", ")));
                }
            }
        }
        Ok((!found.is_empty()).then_some(found))
    }

    /// The values of `alias` (the parts of a multi-value one) whose key is `key`.
    async fn forms(&mut self, alias: FieldId, key: &str) -> Result<Vec<String>, EngineError> {
        if !self.keys.contains_key(&alias) {
            let mut by_key: HashMap<String, Vec<String>> = HashMap::new();
            for (v, _) in self
                .prepared
                .distinct_values(self.ctx, self.def, alias)
                .await?
                .iter()
            {
                let forms = by_key.entry(alias_key(v)).or_default();
                if !forms.contains(v) {
                    forms.push(v.clone());
                }
            }
            for forms in by_key.values_mut() {
                forms.sort();
            }
            self.keys.insert(alias, by_key);
        }
        Ok(self
            .keys
            .get(&alias)
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default())
    }

    /// The distinct non-blank values of `field` in the records whose `alias` is one of
    /// `forms` (any part of a multi-value one), compared as the planner compares them.
    async fn titles_where(
        &self,
        field: FieldId,
        alias: FieldId,
        forms: &[String],
    ) -> Result<Vec<String>, EngineError> {
        let planner = Planner {
            def: self.def,
            functions: self.engine.functions(),
            data: None,
            stop: self.engine.call.stop.clone(),
        };
        let condition = planner.filter(&Filter {
            field: alias,
            op: Op::In(forms.iter().cloned().map(Scalar::Str).collect()),
        })?;
        let computing = |e| EngineError::computing(&self.def.id, e);
        let batches = self
            .ctx
            .read_table(self.prepared.table().provider)?
            .filter(condition)?
            .aggregate(
                vec![cast(planner.column(field), DataType::Utf8).alias("title")],
                vec![],
            )?
            .sort(vec![ident("title").sort(true, true)])?
            .collect()
            .await
            .map_err(computing)?;
        let mut out = Vec::new();
        for b in &batches {
            let Some(a) = b.column(0).as_any().downcast_ref::<StringArray>() else {
                continue;
            };
            for i in 0..a.len() {
                if a.is_valid(i) && !a.value(i).trim().is_empty() {
                    out.push(a.value(i).to_string());
                }
            }
        }
        Ok(out)
    }
}
