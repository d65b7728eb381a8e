//! `inspect_dataset`: what every field means and how well it is filled, computed once per
//! dataset version.

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::functions::expr_fn::btrim;
use datafusion::functions_aggregate::expr_fn::{avg, count, max, min, sum};
use datafusion::logical_expr::{Expr, cast, lit, when};
use datafusion::prelude::{DataFrame, ident};
use serde_json::Value;
use tally_semantic::definition::{Codelist, FieldId, Role};

use crate::error::EngineError;
use crate::plan::Planner;
use crate::results::{
    CodeDescription, CodelistDescription, CodelistKind, Codes, FieldDescription, InspectResult,
    LocatorGuide, LookedUp, MeasureDescription, MetricsGuide, NumericStats, Periods, Quality,
    QualitySummary, TopValueList, TopValues, ValueCount,
};
use crate::summarize::{AVG_DECIMALS, RATIO_DECIMALS};
use tally_storage::dataset::Dataset;

/// How many values of an `auto` codelist are shown.
pub const TOP_VALUES: usize = 30;

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

/// A field's values (parts, for a multi-value field) with their record counts, the values
/// equal under NFKC counted together (`variants` lists the spellings): how many there are,
/// and the `top` most frequent (ties by value). A field of millions of distinct values is
/// gone through once, its values borrowed (most are their own NFKC form), only the `top`
/// ones written out.
async fn observed_values(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &tally_storage::dataset::Prepared,
    def: &tally_semantic::DatasetDef,
    field: FieldId,
    top: usize,
) -> Result<(usize, Vec<ValueCount>), EngineError> {
    let counts = prepared.distinct_values(ctx, def, field).await?;
    // Per form: the first spelling met (the most frequent), the records, the other spellings.
    let mut by_form: Vec<(usize, usize, Vec<usize>)> = Vec::with_capacity(counts.len());
    let mut index: std::collections::HashMap<std::borrow::Cow<'_, str>, usize> =
        std::collections::HashMap::with_capacity(counts.len());
    let stop = tally_storage::stop::Stop::of(ctx);
    for (i, (value, count)) in counts.iter().enumerate() {
        // Folding runs long between two awaits on a field with a value per record: a call
        // given up stops here (`tally_storage::stop`).
        if i.is_multiple_of(tally_storage::stop::EVERY) {
            stop.check()?;
        }
        match index.entry(tally_semantic::names::nfkc_form(value)) {
            std::collections::hash_map::Entry::Occupied(at) => {
                let form = &mut by_form[*at.get()];
                form.1 += count;
                form.2.push(i);
            }
            std::collections::hash_map::Entry::Vacant(at) => {
                at.insert(by_form.len());
                by_form.push((i, *count, Vec::new()));
            }
        }
    }
    let distinct = by_form.len();
    let order = |a: &(usize, usize, Vec<usize>), b: &(usize, usize, Vec<usize>)| {
        b.1.cmp(&a.1).then(counts[a.0].0.cmp(&counts[b.0].0))
    };
    // The top ones only: selected in linear time, then sorted.
    if by_form.len() > top && top > 0 {
        by_form.select_nth_unstable_by(top - 1, order);
        by_form.truncate(top);
    }
    by_form.sort_by(order);
    by_form.truncate(top);
    Ok((
        distinct,
        by_form
            .into_iter()
            .map(|(first, count, others)| ValueCount {
                value: Value::String(counts[first].0.clone()),
                count: count as u64,
                variants: if others.is_empty() {
                    Vec::new()
                } else {
                    std::iter::once(first)
                        .chain(others)
                        .map(|i| counts[i].0.clone())
                        .collect()
                },
            })
            .collect(),
    ))
}

/// The answer of `inspect_dataset` for one call: the version's description, computed once
/// and kept (compact unless `full`), with this call's names and provenance.
pub(crate) async fn answer(
    cx: &crate::context::Cx<'_>,
    ds: &std::sync::Arc<Dataset>,
    resolution: Option<tally_semantic::resolve::Resolution>,
    full: bool,
) -> Result<(InspectResult, crate::envelope::Provenance), EngineError> {
    let (body, ran) = cx
        .descriptions
        .cell(ds)
        .get_or_try_init(|| compute(cx, ds))
        .await?
        .clone();
    let mut data = if full { body } else { compact(body) };
    let prepared = ds.prepared_for_every_value(cx).await?;
    let mut provenance = crate::envelope::Provenance::default();
    let (source, warnings) = crate::envelope::dataset_source(ds, &prepared.files);
    let source_ref = provenance.cite(source);
    for w in warnings {
        provenance.warn(w);
    }
    data.resolved_fields = crate::results::resolved_names(resolution.as_slice(), &cx.call.chosen);
    if let Some(r) = &resolution {
        provenance.warn(format!(
            "`{}` in dataset_id was read as `{}`",
            r.input, r.canonical
        ));
    }
    data.source_refs = vec![source_ref];
    if let Some(ran) = ran {
        // Computed once per version: where the plans of that computation ran.
        provenance.step(
            crate::envelope::TransformationType::Extract,
            format!(
                "read the {} records of dataset `{}` {ran}",
                prepared.rows, ds.def.id
            ),
        );
    }
    provenance.step(
        crate::envelope::TransformationType::Aggregate,
        format!(
            "computed fill rates, numeric statistics and value counts over all {} records of `{}`",
            prepared.rows, ds.def.id
        ),
    );
    Ok((data, provenance))
}

/// The answer of `inspect_dataset`, and, with a cluster, where its plans ran (said in every
/// answer from this version: the answer is computed once).
pub async fn compute(
    engine: &crate::context::Cx<'_>,
    ds: &Dataset,
) -> Result<(InspectResult, Option<String>), EngineError> {
    let def = &ds.def;
    let prepared = ds.prepared_for_every_value(engine).await?;
    let planner = Planner {
        def,
        functions: engine.functions(),
        data: None,
        stop: engine.call.stop.clone(),
    };
    let ctx = engine.call_context(prepared.rows)?;
    let table = ctx.read_table(prepared.table().provider)?;
    let (stats, mut parts) = facts_and_values(&ctx, &prepared, def, &table).await?;
    let (mut listed, unlisted) = listed_values_of_every_field(&ctx, &prepared, def).await?;
    let mut fields = Vec::with_capacity(def.fields.len());
    let mut quality_summary = QualitySummary {
        rule: "fill rate (null and blank count as empty): fully = 1.0, mostly ≥ 0.5, sparse < 0.5",
        ..QualitySummary::default()
    };
    // What the data shows the definition did not say (cells of several codes in a field
    // declared single-valued), said with the definition's own warnings.
    let mut data_warnings: Vec<String> = unlisted;
    for (i, f) in def.fields.iter().enumerate() {
        // A call given up ends between two fields: over prepared data each field's queries
        // may finish without ever yielding, where an abort would take effect.
        engine.call.stop.check()?;
        let id = FieldId::at(i);
        if let Some(derived) = &f.derived {
            fields.push(looked_up(def, f, derived, &fields));
            continue;
        }
        let mut entry = describe_field(f, &stats[i], prepared.rows);
        entry.weight = f.weight.map(|w| def.fields[w].name.clone());
        if f.role == Role::Time {
            entry.periods = periods(&table, def, id).await?;
        }
        quality_summary.count(entry.quality);
        match &f.codelist {
            Some(Codelist::Static(codes)) => {
                // From prepared data only: read from files, it would be one more scan of
                // the data per coded field (exact matches still count such cells and say
                // so; `tally check` reads them).
                if prepared.is_prepared()
                    && let Some(multi) = crate::multicode::find(&ctx, &prepared, def, id).await?
                {
                    data_warnings.push(multi.warning(&f.name));
                }
                entry.codelist = Some(CodelistDescription {
                    kind: CodelistKind::Static,
                    codes: Some(Codes::Described(
                        codes
                            .iter()
                            .map(|c| CodeDescription {
                                value: c.value.clone(),
                                description: c.description.clone(),
                            })
                            .collect(),
                    )),
                    values: TopValues::default(),
                });
            }
            Some(kind @ (Codelist::Auto | Codelist::AutoSplit)) => {
                let counted = counted_codes(&ctx, &prepared, def, id, kind, &mut parts).await?;
                entry.codelist = Some(match counted {
                    Some(kept) => kept,
                    None => auto_codelist(&planner, &table, id, kind).await?,
                });
            }
            // Without a codelist a model still needs the exact spelling of the values it may
            // filter or group by: the top values of every groupable field and of every
            // attribute with few distinct values, NFKC variants counted together.
            None if lists_values(f) => {
                entry.values = listed.remove(&id).flatten();
            }
            None => {}
        }
        fields.push(entry);
    }
    let ran = where_ran(&ctx, &prepared);
    let body = InspectResult {
        dataset_id: def.id.clone(),
        title: def.title.clone(),
        description: def.description.clone(),
        publisher: def.publisher.clone(),
        license: def.license.clone(),
        as_of_date: def.as_of_date.as_ref().map(|d| d.as_str().to_string()),
        published_at: def.published_at.as_ref().map(|d| d.as_str().to_string()),
        record_count: prepared.rows,
        id_field: def.id_field.clone(),
        fields,
        quality_summary,
        computed_measures: computed_measures(def),
        metrics: MetricsGuide {
            kinds: vec![
                "count",
                "sum:F",
                "avg:F",
                "min:F",
                "max:F",
                "avg:<computed measure>",
            ],
            measures: def
                .fields
                .iter()
                .filter(|f| f.role == Role::Measure)
                .map(|f| f.name.clone())
                .collect(),
            rounding: format!(
                "averages are rounded to {AVG_DECIMALS} decimals, ratios (computed measures) to {RATIO_DECIMALS}"
            ),
        },
        generic_values: def.generic_values.clone(),
        dataset_notes: def.notes.clone(),
        undeclared_columns: ds.undeclared_columns.clone(),
        undeclared_columns_note: "columns of the data file that dataset.yaml does not declare are not served",
        definition_warnings: ds
            .warnings
            .iter()
            .map(ToString::to_string)
            .chain(data_warnings)
            .collect(),
        version: ds.version.clone(),
        backend: ds.backend.describe().into(),
        detail: None,
        resolved_fields: Vec::new(),
        source_refs: Vec::new(),
    };
    Ok((body, ran))
}

/// Every field's statistics, and, for data read from its files, the values of the fields
/// whose values are described, counted in the same pass over the data (one job on a
/// cluster): kept by `prepared` as it keeps a prepared table's, but for the parts of `auto`
/// codelists that split (given back by field).
async fn facts_and_values(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &tally_storage::dataset::Prepared,
    def: &tally_semantic::DatasetDef,
    table: &DataFrame,
) -> Result<
    (
        Vec<Facts>,
        std::collections::HashMap<FieldId, Vec<(String, usize)>>,
    ),
    EngineError,
> {
    let counted_here: Vec<FieldId> = if prepared.is_prepared() {
        Vec::new()
    } else {
        (0..def.fields.len())
            .map(FieldId::at)
            .filter(|&id| counts_values(&def.fields[id]))
            .collect()
    };
    let (stats, counted) = Facts::of_every_field(prepared, def, table, &counted_here).await?;
    let mut parts = std::collections::HashMap::new();
    for (id, values) in counted {
        let f = &def.fields[id];
        match &f.codelist {
            Some(kind) if splits(f, kind) => {
                let separator = f.multi_value.as_deref().unwrap_or(";");
                let occurring = tally_storage::dataset::part_occurrences(
                    values.iter().map(|(v, n)| (v.as_str(), *n)),
                    separator,
                );
                parts.insert(id, occurring);
            }
            _ => prepared.keep_values(ctx, def, id, &values)?,
        }
    }
    Ok((stats, parts))
}

/// With a cluster, where the plans of an inspection ran (or why they were computed here).
fn where_ran(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &tally_storage::dataset::Prepared,
) -> Option<String> {
    let cluster = ctx
        .state()
        .config()
        .get_extension::<tally_storage::cluster::ClusterCall>()?;
    let here = if prepared.extract.is_some() {
        "a plugin's records are read by this server, not from files the cluster can open"
    } else if prepared.is_prepared() {
        "the table was prepared in this server's memory"
    } else {
        "this backend's reads cannot be sent"
    };
    Some(crate::meta::where_plans_ran(&cluster, here))
}

/// A field's fill and, for a number, its statistics: as preparing kept them, or counted by
/// [`statistics`].
struct Facts {
    filled: u64,
    min: Option<serde_json::Number>,
    max: Option<serde_json::Number>,
    mean: Option<f64>,
    zeros: Option<u64>,
}

impl Facts {
    fn kept(s: &tally_storage::store::FieldStats, rows: usize) -> Facts {
        Facts {
            filled: s.filled,
            min: s.min.clone(),
            max: s.max.clone(),
            mean: s.mean(),
            // As a sum over no record, none of an empty table.
            zeros: (rows > 0).then_some(s.zeros),
        }
    }

    /// Every column field's: what a prepared table kept while it was prepared, else one pass
    /// over the data ([`statistics`]), which also counts the values of the fields `counted`
    /// (each distinct value with its records, given back by field).
    async fn of_every_field(
        prepared: &tally_storage::dataset::Prepared,
        def: &tally_semantic::DatasetDef,
        table: &DataFrame,
        counted: &[FieldId],
    ) -> Result<(Vec<Facts>, Vec<(FieldId, Vec<(String, usize)>)>), EngineError> {
        if let Some(kept) = prepared.field_stats()
            && counted.is_empty()
        {
            let facts = kept.iter().map(|s| Facts::kept(s, prepared.rows)).collect();
            return Ok((facts, Vec::new()));
        }
        let (batches, counted) = match statistics(def, table, counted).await {
            Ok(batches) => (batches, counted),
            // Every field's values held at once may not fit the call's memory where one
            // field's at a time do (millions of names): then each field's values are counted
            // by a plan of its own, as before this pass.
            Err(e) if !counted.is_empty() && out_of_memory(&e) => {
                tracing::info!(dataset = %def.id, "values counted a field at a time: {e}");
                let batches = statistics(def, table, &[])
                    .await
                    .map_err(|e| EngineError::computing(&def.id, e))?;
                (batches, &[][..])
            }
            Err(e) => return Err(EngineError::computing(&def.id, e)),
        };
        let facts = (0..def.column_fields().len())
            .map(|i| Facts::counted(&batches, i))
            .collect();
        let row = batches.iter().find(|b| b.num_rows() > 0);
        let mut values = Vec::with_capacity(counted.len());
        for &id in counted {
            let column = row.and_then(|b| b.column_by_name(&counts_column(id)));
            let counts = match column {
                Some(c) => tally_storage::value_counts::counts_at(c, 0)
                    .map_err(|e| EngineError::computing(&def.id, e))?,
                None => Vec::new(),
            };
            values.push((id, counts));
        }
        Ok((facts, values))
    }

    /// Column `i` of the one row [`statistics`] gives.
    fn counted(stats: &[RecordBatch], i: usize) -> Facts {
        let number = |suffix: &str| match first_value(stats, &format!("f{i}_{suffix}")) {
            Value::Number(n) => Some(n),
            _ => None,
        };
        Facts {
            filled: number("filled").and_then(|n| n.as_u64()).unwrap_or(0),
            min: number("min"),
            max: number("max"),
            mean: number("mean").and_then(|m| m.as_f64()),
            zeros: number("zeros").and_then(|n| n.as_u64()),
        }
    }
}

/// The column of [`statistics`] that counts the values of field `id`.
fn counts_column(id: FieldId) -> String {
    format!("v{}", id.index())
}

/// One pass over the data for every field's fill rate and every numeric field's statistics:
/// one row, with columns `f{i}_filled`, `f{i}_min`, `f{i}_max`, `f{i}_mean`, `f{i}_zeros`;
/// and the values of the fields `counted` with their records ([`counts_column`]).
async fn statistics(
    def: &tally_semantic::DatasetDef,
    table: &DataFrame,
    counted: &[FieldId],
) -> Result<Vec<RecordBatch>, datafusion::error::DataFusionError> {
    let mut aggregates: Vec<Expr> = vec![count(lit(1i64)).alias("rows")];
    for &id in counted {
        aggregates.push(
            tally_storage::value_counts::value_counts(ident(&def.fields[id].name))
                .alias(counts_column(id)),
        );
    }
    for (i, f) in def.column_fields().iter().enumerate() {
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
    table.clone().aggregate(vec![], aggregates)?.collect().await
}

/// Whether a plan failed for want of memory (the call's, the caller's or the server's; on a
/// cluster, an executor's, whose errors arrive as text).
fn out_of_memory(e: &datafusion::error::DataFusionError) -> bool {
    tally_storage::error::memory_limit(e).is_some() || e.to_string().contains("Resources exhausted")
}

/// A field as its definition and the statistics describe it (no values yet).
/// A field looked up from another (a roll-up level, a related dataset's field): what it is
/// looked up from, and a roll-up's values; no statistics of its own (its key field's fill).
fn looked_up(
    def: &tally_semantic::DatasetDef,
    f: &tally_semantic::definition::Field,
    derived: &tally_semantic::definition::Derived,
    described: &[FieldDescription],
) -> FieldDescription {
    use tally_semantic::definition::DerivedSource;
    let key = &def.fields[derived.key].name;
    let fill_rate = described
        .iter()
        .find(|d| d.name == *key)
        .map_or(0.0, |d| d.fill_rate);
    let (dataset, values) = match &derived.source {
        DerivedSource::Rollup(parents) => {
            (None, Some(parents.iter().map(|(p, _)| p.clone()).collect()))
        }
        DerivedSource::Relation { dataset, .. } => (Some(dataset.clone()), None),
    };
    FieldDescription {
        name: f.name.clone(),
        role: f.role,
        data_type: f.data_type,
        description: f.desc.clone(),
        groupable: true,
        fill_rate,
        quality: None,
        multi_value_separator: None,
        locator: None,
        notes: f.notes.clone(),
        stats: None,
        codelist: None,
        values: None,
        unit: None,
        aggregation: None,
        weight: None,
        period: None,
        periods: None,
        looked_up: Some(LookedUp {
            from: key.clone(),
            dataset,
            values,
        }),
    }
}

fn describe_field(
    f: &tally_semantic::definition::Field,
    facts: &Facts,
    total: usize,
) -> FieldDescription {
    let fill_rate = if total == 0 {
        0.0
    } else {
        round_to(facts.filled as f64 / total as f64, 4)
    };
    FieldDescription {
        name: f.name.clone(),
        role: f.role,
        data_type: f.data_type,
        description: f.desc.clone(),
        groupable: f.groupable,
        fill_rate,
        quality: Some(Quality::of(fill_rate)),
        multi_value_separator: f.multi_value.clone(),
        locator: (f.locator == Some(tally_semantic::definition::LocatorKind::Law)).then_some(
            LocatorGuide {
                kind: "law",
                form: "第九条第一項第二号 (kanji numerals; 附則 first for supplementary provisions)",
                matching: "a value in any common form (第5条第1項, 第５条の２, 第5の2条, lists) matches that provision and everything inside it",
            },
        ),
        notes: f.notes.clone(),
        stats: (f.data_type.is_numeric() && f.role != Role::Time).then(|| NumericStats {
            min: facts.min.clone(),
            max: facts.max.clone(),
            mean: facts.mean.map(|m| round_to(m, AVG_DECIMALS as i32)),
            zero_count: facts.zeros,
        }),
        codelist: None,
        values: None,
        unit: f.unit.clone(),
        aggregation: f.aggregation,
        weight: None,
        period: f.period.clone(),
        periods: None,
        looked_up: None,
    }
}

/// Periods listed by [`periods`] at most (the latest ones).
pub const LISTED_PERIODS: usize = 60;

/// The periods of the time field `id`, with the records of each.
async fn periods(
    table: &DataFrame,
    def: &tally_semantic::DatasetDef,
    id: FieldId,
) -> Result<Option<Periods>, EngineError> {
    let f = &def.fields[id];
    let Some(grain) = f.grain else {
        return Ok(None);
    };
    let column = ident(&f.name);
    let batches = table
        .clone()
        .filter(column.clone().is_not_null())?
        .aggregate(
            vec![column.clone()],
            vec![count(lit(1i64)).alias("records")],
        )?
        .sort(vec![column.sort(true, false)])?
        .collect()
        .await?;
    let mut records: Vec<ValueCount> = Vec::new();
    for batch in &batches {
        let values = crate::json::column_values(batch.column(0));
        let counts = crate::json::column_values(batch.column(1));
        for (value, n) in values.into_iter().zip(counts) {
            records.push(ValueCount {
                value,
                count: n.as_u64().unwrap_or(0),
                variants: Vec::new(),
            });
        }
    }
    let (Some(first), Some(latest)) = (records.first(), records.last()) else {
        return Ok(None);
    };
    let (first, latest, count) = (first.value.clone(), latest.value.clone(), records.len());
    let records = records.split_off(count.saturating_sub(LISTED_PERIODS));
    Ok(Some(Periods {
        grain,
        first,
        latest,
        count,
        records,
        conditions: "one period (`2020`), a range (`\"2010..2020\"`), or `\"latest\"`; a summary with neither a condition on this field nor a grouping by it is of the latest period",
    }))
}

/// An `auto` (or `auto_split`) codelist: how many distinct values (parts, when split) the
/// field holds and the most frequent ones.
async fn auto_codelist(
    planner: &Planner<'_>,
    table: &DataFrame,
    field: FieldId,
    kind: &Codelist,
) -> Result<CodelistDescription, EngineError> {
    let def = planner.def;
    let f = &def.fields[field];
    let mut df = table.clone();
    let key = if splits(f, kind) {
        df = df
            .with_column("__tally_value", planner.parts(field, false))?
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
    let values: Vec<ValueCount> =
        crate::json::rows(&top, &["value".to_string(), "count".to_string()])
            .into_iter()
            .map(|mut r| ValueCount {
                count: r[1].as_u64().unwrap_or(0),
                value: std::mem::take(&mut r[0]),
                variants: Vec::new(),
            })
            .collect();
    Ok(CodelistDescription {
        kind: CodelistKind::of(kind),
        codes: None,
        values: TopValues {
            distinct_count: Some(distinct),
            top_values: Some(TopValueList::Full(values)),
            note: Some(if distinct > TOP_VALUES {
                format!("the {TOP_VALUES} most frequent of {distinct} values")
            } else {
                format!("all {distinct} values")
            }),
        },
    })
}

/// An `auto` codelist of a text field from counts made once per distinct value (a prepared
/// table's dictionary, or the one pass over data read from its files that counted `parts`):
/// what [`auto_codelist`] counts with two plans over every record. `None` where it must
/// count that way (numbers).
async fn counted_codes(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &tally_storage::dataset::Prepared,
    def: &tally_semantic::DatasetDef,
    field: FieldId,
    kind: &Codelist,
    parts: &mut std::collections::HashMap<FieldId, Vec<(String, usize)>>,
) -> Result<Option<CodelistDescription>, EngineError> {
    let f = &def.fields[field];
    if f.data_type.is_numeric() {
        return Ok(None);
    }
    // Split as [`auto_codelist`] splits (the parts `tally_parts` gives), each part counted
    // once for every time it occurs.
    let counts = if splits(f, kind) {
        let separator = f.multi_value.as_deref().unwrap_or(";");
        match parts.remove(&field) {
            Some(counted) => std::sync::Arc::new(counted),
            None => match prepared.part_occurrences(ctx, field, separator) {
                Some(counted) => std::sync::Arc::new(counted?),
                None => return Ok(None),
            },
        }
    } else {
        prepared.distinct_values(ctx, def, field).await?
    };
    let distinct = counts.len();
    let values = counts
        .iter()
        .take(TOP_VALUES)
        .map(|(value, n)| ValueCount {
            value: Value::String(value.clone()),
            count: *n as u64,
            variants: Vec::new(),
        })
        .collect();
    Ok(Some(CodelistDescription {
        kind: CodelistKind::of(kind),
        codes: None,
        values: TopValues {
            distinct_count: Some(distinct),
            top_values: Some(TopValueList::Full(values)),
            note: Some(if distinct > TOP_VALUES {
                format!("the {TOP_VALUES} most frequent of {distinct} values")
            } else {
                format!("all {distinct} values")
            }),
        },
    }))
}

/// Whether a field without a codelist has its values listed: a model still needs the exact
/// spelling of the values it may filter or group by.
fn lists_values(f: &tally_semantic::definition::Field) -> bool {
    f.derived.is_none() && !f.data_type.is_numeric() && f.locator.is_none() && f.role != Role::Id
}

/// Whether an `auto` codelist counts the parts of the field's values.
fn splits(f: &tally_semantic::definition::Field, kind: &Codelist) -> bool {
    matches!(kind, Codelist::AutoSplit) || (matches!(kind, Codelist::Auto) && f.is_multi_value())
}

/// Whether an inspection describes the field's values from their counts: its listed values
/// ([`lists_values`]), or its `auto` codelist of text.
fn counts_values(f: &tally_semantic::definition::Field) -> bool {
    match &f.codelist {
        None => lists_values(f),
        Some(Codelist::Auto | Codelist::AutoSplit) => {
            f.derived.is_none() && !f.data_type.is_numeric()
        }
        Some(_) => false,
    }
}

/// [`listed_values`] of every field without a codelist that [`lists_values`] (from the counts
/// of one pass over the data, or a prepared table's dictionaries), and a warning per field whose values
/// could not be counted within one call's memory (the field then says so itself; the
/// description is not refused for it). Any other failure fails the inspection.
async fn listed_values_of_every_field(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &tally_storage::dataset::Prepared,
    def: &tally_semantic::DatasetDef,
) -> Result<
    (
        std::collections::HashMap<FieldId, Option<TopValues>>,
        Vec<String>,
    ),
    EngineError,
> {
    let mut listed = std::collections::HashMap::new();
    let mut warnings = Vec::new();
    for (i, f) in def.fields.iter().enumerate() {
        if f.codelist.is_none() && lists_values(f) {
            let id = FieldId::at(i);
            let values = match listed_values(ctx, prepared, def, id).await {
                Ok(values) => values,
                Err(e) if e.is_over_call_memory() => {
                    let said = format!(
                        "the values of `{}` are not listed: counting them needs more memory than one call may use (the server's --call-memory-mb); find its values with query_records (`q` or `$contains`) or a summary grouped by it with filters",
                        f.name
                    );
                    warnings.push(said.clone());
                    Some(TopValues {
                        note: Some(said),
                        ..TopValues::default()
                    })
                }
                Err(e) => return Err(e),
            };
            listed.insert(id, values);
        }
    }
    Ok((listed, warnings))
}

/// The values of a text field without a codelist, when worth listing: values that each occur
/// once (names, free text) are only counted (`q` searches them); the values of a groupable
/// field, or of one with few distinct values, are listed most frequent first.
async fn listed_values(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &tally_storage::dataset::Prepared,
    def: &tally_semantic::DatasetDef,
    field: FieldId,
) -> Result<Option<TopValues>, EngineError> {
    let (distinct, values) = observed_values(ctx, prepared, def, field, TOP_VALUES).await?;
    let unique = values.first().is_some_and(|v| v.count == 1);
    Ok(if unique && distinct > TOP_VALUES {
        Some(TopValues {
            distinct_count: Some(distinct),
            note: Some(format!(
                "{distinct} values, none repeated: search them with q or $contains rather than filtering on exact values"
            )),
            ..TopValues::default()
        })
    } else if def.fields[field].groupable || distinct <= MAX_LISTED_DISTINCT {
        let top = values;
        Some(TopValues {
            distinct_count: Some(distinct),
            top_values: Some(TopValueList::Full(top)),
            note: Some(if distinct > TOP_VALUES {
                format!(
                    "the {TOP_VALUES} most frequent of {distinct} values (parts, for a multi-value field); filter with these exact values"
                )
            } else {
                format!("all {distinct} values (parts, for a multi-value field)")
            }),
        })
    } else {
        None
    })
}

/// The computed measures, with the metric that asks for each.
fn computed_measures(def: &tally_semantic::DatasetDef) -> Vec<MeasureDescription> {
    def.computed_measures
        .iter()
        .map(|m| MeasureDescription {
            name: m.name.clone(),
            mode: m.mode(),
            description: m.desc.clone(),
            formula: m.formula_text(&def.fields),
            metric: format!("avg:{}", m.name),
            rounded_to_decimals: RATIO_DECIMALS,
            unit: m.unit.clone(),
        })
        .collect()
}

/// Top values a compact description lists per field.
pub const COMPACT_TOP_VALUES: usize = 5;
/// Characters of a field's description a compact description keeps.
pub const COMPACT_DESCRIPTION_CHARS: usize = 80;

/// The compact description (the default of `inspect_dataset`): what a model needs to write a
/// correct call — every field's name, role, type, fill rate, one line of meaning, its notes,
/// its codes or most frequent values — without every code's description, every top value or
/// per-field quality words; `detail: "full"` gives those.
pub fn compact(mut body: InspectResult) -> InspectResult {
    for f in &mut body.fields {
        f.quality = None;
        if let Some(d) = &f.description {
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
            f.description = Some(short);
        }
        if let Some(codelist) = &mut f.codelist {
            if let Some(Codes::Described(codes)) = codelist.codes.take() {
                codelist.codes = Some(Codes::Values(codes.into_iter().map(|c| c.value).collect()));
            }
            codelist.values.shorten(COMPACT_TOP_VALUES);
        }
        if let Some(values) = &mut f.values {
            values.shorten(COMPACT_TOP_VALUES);
        }
    }
    body.detail = Some(
        "compact: one line of meaning per field, codes without their descriptions, the 5 most frequent values as [value, count] pairs (top_values) out of distinct_count; call again with \"detail\": \"full\" for everything",
    );
    body
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use tally_semantic::request::Tool;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_description_is_computed_once_per_version_and_goes_with_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let folder = dir.path().join("procedures");
        std::fs::create_dir(&folder).expect("dataset folder");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/procedures");
        for file in ["dataset.yaml", "data.parquet"] {
            std::fs::copy(source.join(file), folder.join(file)).expect("copy");
        }
        let engine = crate::engine::Engine::open(dir.path());
        let version = |engine: &crate::engine::Engine| {
            Arc::clone(&engine.catalog.load().datasets["procedures"])
        };
        let first = version(&engine);
        assert!(!engine.descriptions.ready(&first));
        let inspect = json!({"dataset_id": "procedures"});
        let a = engine
            .call(Tool::InspectDataset, &inspect)
            .await
            .expect("inspect");
        assert!(engine.descriptions.ready(&first), "kept once computed");
        let b = engine
            .call(Tool::InspectDataset, &inspect)
            .await
            .expect("inspect again");
        assert_eq!(a["data"], b["data"]);

        // A new version of the definition: described afresh, and the old description goes
        // once nothing holds its version.
        let text = std::fs::read_to_string(folder.join("dataset.yaml")).expect("definition");
        std::fs::write(
            folder.join("dataset.yaml"),
            format!("{text}\n# a new version\n"),
        )
        .expect("write");
        engine.reload(Duration::ZERO);
        let second = version(&engine);
        assert!(!Arc::ptr_eq(&first, &second), "a new version is served");
        assert!(!engine.descriptions.ready(&second));
        engine
            .call(Tool::InspectDataset, &inspect)
            .await
            .expect("inspect the new version");
        assert!(engine.descriptions.ready(&second));
        assert_eq!(
            engine.descriptions.held(),
            2,
            "the first version is still held here"
        );
        drop(first);
        assert_eq!(
            engine.descriptions.held(),
            1,
            "a version no one holds is described no longer"
        );
    }
}
