//! Values of a call compared with the values the data holds, before planning.
//!
//! The semantic layer checks values against codelists it knows from `dataset.yaml`; the data
//! itself is known here. Two things are done with it:
//! - an exact comparison (`[...]`, `$eq`, `$in`, `$ne`) on a text field without a static
//!   codelist also matches the values that are equal under NFKC (`押印+印鑑証明` finds
//!   `押印＋印鑑証明`), and the rewrite is disclosed in `resolved_fields`;
//! - a substring (a plain string or `$contains`) on a coded field that matches several codes
//!   is said, with the codes and their counts, so a count over two codes is never silent.

use tally_semantic::DatasetDef;
use tally_semantic::definition::Codelist;
use tally_semantic::names::{fold, nfkc_value};
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::{Filter, Resolution};

use crate::dataset::Prepared;
use crate::error::EngineError;

/// Rewrites exact text comparisons to the values the data holds (NFKC-equal), disclosing each
/// rewrite in `resolved`, and returns the warnings about substrings matching several codes.
pub async fn match_data(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &Prepared,
    def: &DatasetDef,
    filters: &mut [Filter],
    resolved: &mut Vec<Resolution>,
) -> Result<Vec<String>, EngineError> {
    let mut warnings = Vec::new();
    for filter in filters.iter_mut() {
        let field = &def.fields[filter.field];
        if field.data_type.is_numeric()
            || field.locator == Some(tally_semantic::definition::LocatorKind::Law)
        {
            continue;
        }
        let parameter = format!("where.{} value", field.name);
        let coded = matches!(field.codelist, Some(Codelist::Static(_)));
        match &mut filter.op {
            Op::Contains(needle) if coded => {
                let wanted = fold(needle).into_owned();
                let counts = prepared.distinct_values(ctx, def, filter.field).await?;
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
                    warnings.push(format!(
                        "`{needle}` on `{}` is a substring that matched {} codes: {}; the result counts all of them. To count one code, send it in an array, e.g. {{\"{}\": [\"{first}\"]}}",
                        field.name,
                        matched.len(),
                        listed.join(", "),
                        field.name
                    ));
                }
            }
            _ if coded => {}
            Op::Eq(_) | Op::Ne(_) => {
                let equal = matches!(filter.op, Op::Eq(_));
                let (Op::Eq(v) | Op::Ne(v)) = &mut filter.op else {
                    continue;
                };
                if let Some(found) = equal_in_data(ctx, prepared, def, filter.field, v).await? {
                    if let [one] = found.as_slice() {
                        resolved.push(Resolution {
                            parameter,
                            input: v.text(),
                            canonical: one.clone(),
                        });
                        *v = Scalar::Str(one.clone());
                    } else if equal {
                        resolved.push(Resolution {
                            parameter,
                            input: v.text(),
                            canonical: found.join(", "),
                        });
                        filter.op = Op::In(found.into_iter().map(Scalar::Str).collect());
                    }
                }
            }
            Op::In(values) => {
                let mut out: Vec<Scalar> = Vec::with_capacity(values.len());
                for v in values.iter() {
                    match equal_in_data(ctx, prepared, def, filter.field, v).await? {
                        Some(found) => {
                            resolved.push(Resolution {
                                parameter: parameter.clone(),
                                input: v.text(),
                                canonical: found.join(", "),
                            });
                            for f in found {
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
    }
    Ok(warnings)
}

/// The values the data holds that equal `value` under NFKC, when the value itself is not
/// held (`None`: held as typed, or nothing equal).
async fn equal_in_data(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &Prepared,
    def: &DatasetDef,
    field: tally_semantic::definition::FieldId,
    value: &Scalar,
) -> Result<Option<Vec<String>>, EngineError> {
    let text = value.text();
    let variants = prepared.nfkc_variants(ctx, def, field).await?;
    let Some(found) = variants.get(&nfkc_value(&text)) else {
        return Ok(None);
    };
    if found.contains(&text) {
        return Ok(None);
    }
    Ok(Some(found.clone()))
}
