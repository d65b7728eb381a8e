//! Values of a call compared with the values the data holds, before planning.
//!
//! The semantic layer checks values against codelists it knows from `dataset.yaml`; the data
//! itself is known here. Two things are done with it:
//! - an exact comparison (`[...]`, `$eq`, `$in`, `$ne`) on a text field without a static
//!   codelist matches every form of the value the data holds that is equal under NFKC
//!   (`30日` finds `30日` and `３０日`; `$ne` excludes both), disclosed in `resolved_fields`
//!   with the forms and the records of each;
//! - a substring (a plain string or `$contains`) on a coded field that matches several codes
//!   is said, with the codes and their counts, so a count over two codes is never silent.

use tally_semantic::DatasetDef;
use tally_semantic::definition::Codelist;
use tally_semantic::names::{fold, nfkc_value};
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::{Filter, Resolution};

use crate::error::EngineError;
use tally_storage::dataset::Prepared;

/// Rewrites exact text comparisons to every form of their values the data holds (NFKC-equal),
/// disclosing each rewrite in `resolved`, and returns the warnings about substrings matching
/// several codes. Each filter is matched by its kind: a substring on a coded field
/// ([`Matcher::substring_codes`]), an exact comparison on a coded field
/// ([`Matcher::multicode_cells`]), an exact comparison on text ([`Matcher::every_form`]).
pub async fn match_data(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &Prepared,
    def: &DatasetDef,
    filters: &mut Vec<Filter>,
    resolved: &mut Vec<Resolution>,
) -> Result<Vec<String>, EngineError> {
    let mut matcher = Matcher {
        ctx,
        prepared,
        def,
        resolved,
        warnings: Vec::new(),
        extra: Vec::new(),
    };
    for filter in filters.iter_mut() {
        let field = &def.fields[filter.field];
        if field.data_type.is_numeric()
            || field.locator == Some(tally_semantic::definition::LocatorKind::Law)
        {
            continue;
        }
        let parameter = format!("where.{} value", field.name);
        let coded = matches!(field.codelist, Some(Codelist::Static(_)));
        match &filter.op {
            Op::Contains(needle) if coded => {
                matcher.substring_codes(filter.field, needle).await?;
            }
            Op::Eq(_) | Op::In(_) | Op::Ne(_) | Op::Nin(_) if coded => {
                matcher.multicode_cells(filter, &parameter).await?;
            }
            _ if coded => {}
            _ => matcher.every_form(filter, &parameter).await?,
        }
    }
    filters.extend(matcher.extra);
    Ok(matcher.warnings)
}

/// What matching a call's values reads (its data) and gathers across its filters.
struct Matcher<'a> {
    ctx: &'a datafusion::prelude::SessionContext,
    prepared: &'a Prepared,
    def: &'a DatasetDef,
    resolved: &'a mut Vec<Resolution>,
    warnings: Vec<String>,
    /// The `$ne` of the other forms of a value, added after the loop.
    extra: Vec<Filter>,
}

impl Matcher<'_> {
    /// A substring on a coded field that matches several codes: said, with the codes and
    /// their counts.
    async fn substring_codes(
        &mut self,
        field_id: tally_semantic::definition::FieldId,
        needle: &str,
    ) -> Result<(), EngineError> {
        let field = &self.def.fields[field_id];
        let wanted = fold(needle).into_owned();
        let counts = self
            .prepared
            .distinct_values(self.ctx, self.def, field_id)
            .await?;
        let matched: Vec<&(String, usize)> = counts
            .iter()
            .filter(|(v, _)| fold(v).contains(wanted.as_str()))
            .collect();
        if matched.len() > 1 {
            let listed: Vec<String> = matched
                .iter()
                .map(|(v, n)| format!("`{v}` ({n} records)"))
                .collect();
            let first = &matched[0].0;
            self.warnings.push(format!(
                "`{needle}` on `{}` is a substring that matched {} codes: {}; the result counts all of them. To count one code, send it in an array, e.g. {{\"{}\": [\"{first}\"]}}",
                field.name,
                matched.len(),
                listed.join(", "),
                field.name
            ));
        }
        Ok(())
    }

    /// An exact comparison on a coded field: also the cells that hold its codes among others,
    /// disclosed.
    async fn multicode_cells(
        &mut self,
        filter: &mut Filter,
        parameter: &str,
    ) -> Result<(), EngineError> {
        let field = &self.def.fields[filter.field];
        // Cells that hold several codes of a field declared single-valued: each
        // counts for every code it holds (never silently left out), disclosed.
        let Some(multi) =
            crate::multicode::find(self.ctx, self.prepared, self.def, filter.field).await?
        else {
            return Ok(());
        };
        let codes: Vec<Scalar> = match &filter.op {
            Op::Eq(v) | Op::Ne(v) => vec![v.clone()],
            Op::In(vs) | Op::Nin(vs) => vs.clone(),
            _ => Vec::new(),
        };
        let mut cells: Vec<Scalar> = Vec::new();
        for code in &codes {
            let text = code.text();
            let held: Vec<&(String, usize, Vec<String>)> = multi.holding(&text).collect();
            if held.is_empty() {
                continue;
            }
            self.resolved.push(Resolution {
                parameter: parameter.to_string(),
                input: text.clone(),
                canonical: std::iter::once(text.clone())
                    .chain(
                        held.iter()
                            .map(|(cell, n, _)| format!("{cell} ({n} records)")),
                    )
                    .collect::<Vec<_>>()
                    .join(", "),
            });
            for (cell, _, _) in held {
                let cell = Scalar::Str(cell.clone());
                if !cells.contains(&cell) {
                    cells.push(cell);
                }
            }
        }
        if cells.is_empty() {
            return Ok(());
        }
        self.warnings.push(multi.warning(&field.name));
        match &mut filter.op {
            Op::Eq(v) => {
                let mut all = vec![v.clone()];
                all.extend(cells);
                filter.op = Op::In(all);
            }
            Op::In(vs) | Op::Nin(vs) => vs.extend(cells),
            Op::Ne(_) => self.extra.extend(cells.into_iter().map(|c| Filter {
                field: filter.field,
                op: Op::Ne(c),
            })),
            _ => {}
        }
        Ok(())
    }

    /// An exact comparison on a text field without a static codelist: every form of its
    /// values the data holds, disclosed.
    async fn every_form(
        &mut self,
        filter: &mut Filter,
        parameter: &str,
    ) -> Result<(), EngineError> {
        let (ctx, prepared, def) = (self.ctx, self.prepared, self.def);
        match &mut filter.op {
            Op::Eq(v) => {
                if let Some(forms) = forms_in_data(ctx, prepared, def, filter.field, v).await? {
                    self.resolved.push(disclosed(parameter, v, &forms));
                    let mut held: Vec<Scalar> =
                        forms.into_iter().map(|(f, _)| Scalar::Str(f)).collect();
                    filter.op = if held.len() == 1 {
                        Op::Eq(held.remove(0))
                    } else {
                        Op::In(held)
                    };
                }
            }
            Op::Ne(v) => {
                // Every form is excluded: one `$ne` per form, ANDed (a missing cell still
                // differs from each, as `$ne` on text says).
                if let Some(forms) = forms_in_data(ctx, prepared, def, filter.field, v).await? {
                    self.resolved.push(disclosed(parameter, v, &forms));
                    let mut forms = forms.into_iter().map(|(f, _)| Scalar::Str(f));
                    if let Some(first) = forms.next() {
                        *v = first;
                    }
                    self.extra.extend(forms.map(|f| Filter {
                        field: filter.field,
                        op: Op::Ne(f),
                    }));
                }
            }
            // Every form of every value is kept (`$in`) or excluded (`$nin`).
            Op::In(values) | Op::Nin(values) => {
                let mut out: Vec<Scalar> = Vec::with_capacity(values.len());
                for v in values.iter() {
                    match forms_in_data(ctx, prepared, def, filter.field, v).await? {
                        Some(forms) => {
                            self.resolved.push(disclosed(parameter, v, &forms));
                            for (f, _) in forms {
                                let s = Scalar::Str(f);
                                if !out.contains(&s) {
                                    out.push(s);
                                }
                            }
                        }
                        None => {
                            if !out.contains(v) {
                                out.push(v.clone());
                            }
                        }
                    }
                }
                *values = out;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Every form of `value` the data holds that is equal to it under NFKC (`３０日` and `30日`,
/// `（ＥＡＳＹ）` and `(EASY)`), with how many records hold each, most first: `None` when the
/// value as typed is the only form held, or no form is. Matching only the typed form when the
/// data holds others undercounts silently (the minority form winning); matching every form,
/// disclosed with its count, does not.
async fn forms_in_data(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &Prepared,
    def: &DatasetDef,
    field: tally_semantic::definition::FieldId,
    value: &Scalar,
) -> Result<Option<Vec<(String, usize)>>, EngineError> {
    let text = value.text();
    let variants = prepared.nfkc_variants(ctx, def, field).await?;
    let Some(found) = variants.get(&nfkc_value(&text)) else {
        return Ok(None);
    };
    if found.len() == 1 && found[0] == text {
        return Ok(None);
    }
    let counts = prepared.distinct_values(ctx, def, field).await?;
    let mut forms: Vec<(String, usize)> = found
        .iter()
        .map(|f| {
            let n = counts.iter().find(|(v, _)| v == f).map_or(0, |(_, n)| *n);
            (f.clone(), n)
        })
        .collect();
    forms.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(Some(forms))
}

/// What a value was read as: every form it matched, with the records of each.
fn disclosed(parameter: &str, value: &Scalar, forms: &[(String, usize)]) -> Resolution {
    Resolution {
        parameter: parameter.to_string(),
        input: value.text(),
        canonical: forms
            .iter()
            .map(|(f, n)| format!("{f} ({n} records)"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
