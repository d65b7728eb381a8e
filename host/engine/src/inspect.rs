//! `inspect_dataset`: what every field means and how well it is filled, computed once per
//! dataset version.

use datafusion::arrow::datatypes::DataType;
use datafusion::functions::expr_fn::btrim;
use datafusion::functions_aggregate::expr_fn::{avg, count, max, min, sum};
use datafusion::logical_expr::{Expr, cast, lit, when};
use datafusion::prelude::ident;
use serde_json::{Value, json};
use tally_semantic::definition::{Codelist, Role};

use crate::Engine;
use crate::dataset::Dataset;
use crate::error::EngineError;
use crate::plan::Planner;
use crate::summarize::{AVG_DECIMALS, RATIO_DECIMALS};

/// How many values of an `auto` codelist are shown.
pub const TOP_VALUES: usize = 30;

fn quality(fill_rate: f64) -> &'static str {
    if fill_rate >= 1.0 {
        "fully"
    } else if fill_rate >= 0.5 {
        "mostly"
    } else {
        "sparse"
    }
}

fn round_to(v: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (v * p).round() / p
}

fn first_value(batches: &[datafusion::arrow::record_batch::RecordBatch], column: &str) -> Value {
    batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .and_then(|b| b.column_by_name(column))
        .map(|a| {
            crate::json::column_values(a)
                .into_iter()
                .next()
                .unwrap_or(Value::Null)
        })
        .unwrap_or(Value::Null)
}

/// Attributes with at most this many distinct values have them listed.
pub const MAX_LISTED_DISTINCT: usize = 200;

/// A field's values (parts, for a multi-value field) with their record counts, most frequent
/// first, the values equal under NFKC counted together (`variants` lists the spellings).
fn observed_values(
    prepared: &crate::dataset::Prepared,
    def: &tally_semantic::DatasetDef,
    field: tally_semantic::definition::FieldId,
) -> Vec<Value> {
    let mut by_form: Vec<(String, usize, Vec<String>)> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (value, count) in prepared.distinct_values(def, field).iter() {
        let form = tally_semantic::names::nfkc_value(value);
        match index.get(&form) {
            Some(&k) => {
                by_form[k].1 += count;
                by_form[k].2.push(value.clone());
            }
            None => {
                index.insert(form, by_form.len());
                by_form.push((value.clone(), *count, vec![value.clone()]));
            }
        }
    }
    by_form.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    by_form
        .into_iter()
        .map(|(value, count, variants)| {
            if variants.len() > 1 {
                json!({ "value": value, "count": count, "variants": variants })
            } else {
                json!({ "value": value, "count": count })
            }
        })
        .collect()
}

pub async fn compute(engine: &Engine, ds: &Dataset) -> Result<Value, EngineError> {
    let def = &ds.def;
    let prepared = ds.prepared(engine).await?;
    let planner = Planner {
        def,
        functions: engine.functions(),
    };
    let total = prepared.rows;
    let table = engine.call_context()?.read_table(prepared.table.clone())?;

    // One pass for fill rates and numeric statistics.
    let mut aggregates: Vec<Expr> = vec![count(lit(1i64)).alias("rows")];
    for (i, f) in def.fields.iter().enumerate() {
        let column = ident(&f.name);
        let filled = if f.data_type.is_numeric() {
            column.clone().is_not_null()
        } else {
            column
                .clone()
                .is_not_null()
                .and(btrim(vec![column.clone()]).not_eq(lit("")))
        };
        aggregates.push(
            sum(when(filled, lit(1i64))
                .otherwise(lit(0i64))
                .unwrap_or(lit(0i64)))
            .alias(format!("f{i}_filled")),
        );
        if f.data_type.is_numeric() {
            let x = cast(column.clone(), DataType::Float64);
            aggregates.push(min(column.clone()).alias(format!("f{i}_min")));
            aggregates.push(max(column.clone()).alias(format!("f{i}_max")));
            aggregates.push(avg(x.clone()).alias(format!("f{i}_mean")));
            aggregates.push(
                sum(when(x.eq(lit(0.0f64)), lit(1i64))
                    .otherwise(lit(0i64))
                    .unwrap_or(lit(0i64)))
                .alias(format!("f{i}_zeros")),
            );
        }
    }
    let stats = table
        .clone()
        .aggregate(vec![], aggregates)?
        .collect()
        .await
        .map_err(|e| EngineError::computing(&def.id, e))?;

    let mut fields = Vec::with_capacity(def.fields.len());
    let (mut fully, mut mostly, mut sparse) = (0, 0, 0);
    for (i, f) in def.fields.iter().enumerate() {
        let filled = first_value(&stats, &format!("f{i}_filled"))
            .as_f64()
            .unwrap_or(0.0);
        let fill_rate = if total == 0 {
            0.0
        } else {
            round_to(filled / total as f64, 4)
        };
        let q = quality(fill_rate);
        match q {
            "fully" => fully += 1,
            "mostly" => mostly += 1,
            _ => sparse += 1,
        }
        let mut entry = json!({
            "name": f.name,
            "role": f.role.as_str(),
            "data_type": f.data_type.as_str(),
            "description": f.desc,
            "groupable": f.groupable,
            "fill_rate": fill_rate,
            "quality": q,
        });
        if let Some(sep) = &f.multi_value {
            entry["multi_value_separator"] = json!(sep);
        }
        if f.locator == Some(tally_semantic::definition::LocatorKind::Law) {
            entry["locator"] = json!({
                "kind": "law",
                "form": "第九条第一項第二号 (kanji numerals; 附則 first for supplementary provisions)",
                "matching": "a value in any common form (第5条第1項, 第５条の２, 第5の2条, lists) matches that provision and everything inside it",
            });
        }
        if !f.notes.is_empty() {
            entry["notes"] = json!(f.notes);
        }
        if f.data_type.is_numeric() {
            let mean = first_value(&stats, &format!("f{i}_mean"))
                .as_f64()
                .map(|m| round_to(m, AVG_DECIMALS as i32));
            entry["stats"] = json!({
                "min": first_value(&stats, &format!("f{i}_min")),
                "max": first_value(&stats, &format!("f{i}_max")),
                "mean": mean,
                "zero_count": first_value(&stats, &format!("f{i}_zeros")),
            });
        }
        match &f.codelist {
            Some(Codelist::Static(codes)) => {
                entry["codelist"] = json!({ "kind": "static", "codes": codes });
            }
            Some(kind @ (Codelist::Auto | Codelist::AutoSplit)) => {
                let split = matches!(kind, Codelist::AutoSplit) || f.is_multi_value();
                let mut df = table.clone();
                let key = if split {
                    df = df
                        .with_column(
                            "__tally_value",
                            planner.parts(tally_semantic::definition::FieldId::at(i), false),
                        )?
                        .unnest_columns(&["__tally_value"])?;
                    ident("__tally_value")
                } else {
                    ident(&f.name)
                };
                let counted = df
                    .filter(
                        key.clone()
                            .is_not_null()
                            .and(btrim(vec![key.clone()]).not_eq(lit(""))),
                    )?
                    .aggregate(
                        vec![key.alias("value")],
                        vec![count(lit(1i64)).alias("count")],
                    )?;
                let distinct = counted
                    .clone()
                    .count()
                    .await
                    .map_err(|e| EngineError::computing(&def.id, e))?;
                let top = counted
                    .sort(vec![
                        ident("count").sort(false, false),
                        ident("value").sort(true, false),
                    ])?
                    .limit(0, Some(TOP_VALUES))?
                    .collect()
                    .await
                    .map_err(|e| EngineError::computing(&def.id, e))?;
                let values: Vec<Value> =
                    crate::json::rows(&top, &["value".to_string(), "count".to_string()])
                        .into_iter()
                        .map(|r| json!({ "value": r[0], "count": r[1] }))
                        .collect();
                entry["codelist"] = json!({
                    "kind": if matches!(kind, Codelist::AutoSplit) { "auto_split" } else { "auto" },
                    "distinct_count": distinct,
                    "top_values": values,
                    "note": if distinct > TOP_VALUES { format!("the {TOP_VALUES} most frequent of {distinct} values") } else { format!("all {distinct} values") },
                });
            }
            None => {
                // Without a codelist a model still needs the exact spelling of the values it
                // may filter or group by: the top values of every groupable field and of every
                // attribute with few distinct values, NFKC variants counted together.
                if !f.data_type.is_numeric()
                    && f.locator.is_none()
                    && f.role != tally_semantic::definition::Role::Id
                {
                    let values =
                        observed_values(&prepared, def, tally_semantic::definition::FieldId::at(i));
                    let distinct = values.len();
                    // Values that each occur once (names, free text) are not worth listing:
                    // the count says so, and `q` searches them.
                    let unique = values
                        .first()
                        .is_some_and(|v| v["count"].as_u64() == Some(1));
                    if unique && distinct > TOP_VALUES {
                        entry["values"] = json!({
                            "distinct_count": distinct,
                            "note": format!("{distinct} values, none repeated: search them with q or $contains rather than filtering on exact values"),
                        });
                    } else if f.groupable || distinct <= MAX_LISTED_DISTINCT {
                        let top: Vec<Value> = values.into_iter().take(TOP_VALUES).collect();
                        entry["values"] = json!({
                            "distinct_count": distinct,
                            "top_values": top,
                            "note": if distinct > TOP_VALUES { format!("the {TOP_VALUES} most frequent of {distinct} values (parts, for a multi-value field); filter with these exact values") } else { format!("all {distinct} values (parts, for a multi-value field)") },
                        });
                    }
                }
            }
        }
        fields.push(entry);
    }

    let measures: Vec<Value> = def
        .computed_measures
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "mode": m.mode(),
                "description": m.desc,
                "formula": m.formula_text(&def.fields),
                "metric": format!("avg:{}", m.name),
                "rounded_to_decimals": RATIO_DECIMALS,
            })
        })
        .collect();
    let measure_names: Vec<&str> = def
        .fields
        .iter()
        .filter(|f| f.role == Role::Measure)
        .map(|f| f.name.as_str())
        .collect();

    Ok(json!({
        "dataset_id": def.id,
        "title": def.title,
        "description": def.description,
        "publisher": def.publisher,
        "license": def.license,
        "as_of_date": def.as_of_date.as_ref().map(|d| d.as_str()),
        "published_at": def.published_at.as_ref().map(|d| d.as_str()),
        "record_count": total,
        "id_field": def.id_field,
        "fields": fields,
        "quality_summary": {
            "fully": fully,
            "mostly": mostly,
            "sparse": sparse,
            "rule": "fill rate (null and blank count as empty): fully = 1.0, mostly ≥ 0.5, sparse < 0.5",
        },
        "computed_measures": measures,
        "metrics": {
            "kinds": ["count", "sum:F", "avg:F", "min:F", "max:F", "avg:<computed measure>"],
            "measures": measure_names,
            "rounding": format!("averages are rounded to {AVG_DECIMALS} decimals, ratios (computed measures) to {RATIO_DECIMALS}"),
        },
        "generic_values": def.generic_values,
        "dataset_notes": def.notes,
        "undeclared_columns": ds.undeclared_columns,
        "undeclared_columns_note": "columns of the data file that dataset.yaml does not declare are not served",
        "definition_warnings": ds.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "version": ds.version,
        "backend": ds.backend.describe(),
    }))
}

/// Top values a compact description lists per field.
pub const COMPACT_TOP_VALUES: usize = 5;
/// Characters of a field's description a compact description keeps.
pub const COMPACT_DESCRIPTION_CHARS: usize = 80;

/// The compact description (the default of `inspect_dataset`): what a model needs to write a
/// correct call — every field's name, role, type, fill rate, one line of meaning, its notes,
/// its codes or most frequent values — without every code's description, every top value or
/// per-field quality words; `detail: "full"` gives those.
pub fn compact(mut body: Value) -> Value {
    if let Some(fields) = body.get_mut("fields").and_then(Value::as_array_mut) {
        for field in fields.iter_mut() {
            let Some(f) = field.as_object_mut() else {
                continue;
            };
            f.remove("quality");
            if let Some(Value::String(d)) = f.get("description") {
                let line = d.lines().next().unwrap_or("").trim();
                // The first sentence, or the first characters of a long one.
                let sentence = line
                    .find('。')
                    .map(|i| &line[..i + '。'.len_utf8()])
                    .unwrap_or(line);
                let short: String = sentence.chars().take(COMPACT_DESCRIPTION_CHARS).collect();
                let short = if short.chars().count() < sentence.chars().count() {
                    format!("{short}…")
                } else {
                    short
                };
                f.insert("description".into(), Value::String(short));
            }
            if let Some(Value::Object(codelist)) = f.get_mut("codelist") {
                if let Some(Value::Array(codes)) = codelist.get("codes") {
                    let values: Vec<Value> = codes
                        .iter()
                        .map(|c| c.get("value").cloned().unwrap_or(Value::Null))
                        .collect();
                    codelist.insert("codes".into(), Value::Array(values));
                }
                shorten_top(codelist);
            }
            if let Some(Value::Object(values)) = f.get_mut("values") {
                shorten_top(values);
            }
        }
    }
    if let Some(m) = body.as_object_mut() {
        m.insert(
            "detail".into(),
            json!("compact: one line of meaning per field, codes without their descriptions, the 5 most frequent values as [value, count] (top) out of distinct_count; call again with \"detail\": \"full\" for everything"),
        );
    }
    body
}

/// The most frequent values as `[value, count]` pairs, the first few only; the note goes
/// (the `detail` line says what is shortened).
fn shorten_top(m: &mut serde_json::Map<String, Value>) {
    m.remove("note");
    if let Some(Value::Array(top)) = m.remove("top_values") {
        let pairs: Vec<Value> = top
            .iter()
            .take(COMPACT_TOP_VALUES)
            .map(|v| json!([v["value"], v["count"]]))
            .collect();
        m.insert("top".into(), Value::Array(pairs));
    }
}
