//! One call on one dataset, in the phases `query_records` and `summarize_records` share:
//! [`Call::open`] (the data prepared for the call's conditions, the values matched to the
//! data) → the tool's own execute and shape → [`Call::cite`] (hints, the call as resolved,
//! the source referenced, the read and normalize steps).

use std::sync::Arc;

use datafusion::logical_expr::Expr;
use datafusion::prelude::{DataFrame, SessionContext};
use serde_json::Value;
use tally_semantic::DatasetDef;
use tally_semantic::request::{Notice, Scalar};
use tally_semantic::resolve::{Filter, Latest, Resolution};

use crate::context::Cx;
use crate::envelope::Provenance;
use crate::error::EngineError;
use crate::meta::{self, unknown_value_hints};
use crate::plan::Planner;
use crate::results::Context;
use tally_semantic::FieldId;
use tally_semantic::request::Op;
use tally_storage::dataset::{Dataset, Prepared, Route, Work};

/// A call's data and the means to plan over it.
pub struct Call<'a> {
    pub engine: &'a Cx<'a>,
    pub ds: &'a Dataset,
    /// The data, prepared for the conditions the backend applies itself.
    pub prepared: Arc<Prepared>,
    pub planner: Planner<'a>,
    pub ctx: SessionContext,
    /// The call's table before its conditions.
    pub base: DataFrame,
    /// The table it reads (with what its scans read of files, when it reads them).
    pub table: tally_storage::dataset::CallTable,
    /// What matching the call's values to the data corrected or found missing.
    value_warnings: Vec<String>,
    /// Which revisions the call read, where its dataset declares `revisions`.
    in_force: Option<InForce>,
    /// How the call was answered while its dataset's table was being prepared.
    route: Option<Route>,
}

/// Periods of a time field read to check a call's conditions against at most: a field with
/// more is not checked (said), and `"previous"` on it is refused.
pub const MAX_PERIODS: usize = 50_000;

/// The revisions a call read (`revisions` in the definition): those in force on its `as_of`
/// date, or the latest of each.
#[derive(Debug, Default)]
pub struct InForce {
    pub as_of: Option<String>,
    /// (what is revised, as people name it; the revision's id; its effective date).
    pub read: Vec<(String, Option<String>, Option<String>)>,
    /// What had no revision in force on `as_of`, with the date its first revision takes effect.
    pub not_yet: Vec<(String, String)>,
    /// What states no effective date for its revision: left out of a call with `as_of`.
    pub undated: Vec<String>,
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("dataset", &self.ds.def.id)
            .finish_non_exhaustive()
    }
}

/// What a call asks of the hints: its conditions (labels and expressions, in one order) and
/// whether it found nothing.
pub struct Asked<'a> {
    pub plan: &'a (dyn HasConditions + Sync),
    pub filters: &'a [Filter],
    pub conditions: &'a [Expr],
    /// Ask which single condition excludes everything.
    pub ask_conditions: bool,
    pub nothing_matched: bool,
}

impl std::fmt::Debug for Asked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asked")
            .field("filters", &self.filters)
            .field("ask_conditions", &self.ask_conditions)
            .field("nothing_matched", &self.nothing_matched)
            .finish_non_exhaustive()
    }
}

impl<'a> Call<'a> {
    /// Prepares the data for the call's filters and matches their values to the data (a
    /// value read in another form is recorded in `resolved`). `reads` is what else the call
    /// reads besides its filters (see [`work`]).
    pub async fn open(
        engine: &'a Cx<'a>,
        ds: &'a Dataset,
        filters: &mut Vec<Filter>,
        resolved: &mut Vec<Resolution>,
        as_of: Option<&str>,
        reads: Reads<'_>,
    ) -> Result<Call<'a>, EngineError> {
        let def = &ds.def;
        // Before the backend is handed the conditions: it compares a title as it is.
        crate::aliases::read_aliases(engine, ds, filters, resolved).await?;
        let work = work(def, filters, reads);
        let (prepared, route) = ds
            .prepared_for_work(engine, &crate::pushdown::pushdown(ds, filters), work)
            .await?;
        // Run again on the prepared table after the first run outlasted its deadline while
        // the table was being prepared: said as the wait it was.
        let route = route.or_else(|| {
            engine.call.waited_since.map(|since| Route::Waited {
                waited: since.elapsed(),
                estimate: None,
            })
        });
        let ctx = engine.call_context(prepared.rows)?;
        let value_warnings =
            crate::values::match_data(&ctx, &prepared, def, filters, resolved).await?;
        let table = prepared.table();
        let mut base = ctx.read_table(Arc::clone(&table.provider))?;
        // A call that names revisions in `where` reads those; any other reads the ones in
        // force (on `as_of`, or the latest).
        let mut in_force = None;
        if let Some(revisions) = &def.revisions {
            let named = filters
                .iter()
                .any(|f| f.field == revisions.effective || revisions.id == Some(f.field));
            if !named {
                let (reduced, report) = revisions_in_force(base, def, revisions, as_of)
                    .await
                    .map_err(|e| EngineError::computing(&def.id, e))?;
                base = reduced;
                in_force = Some(report);
            }
        }
        Ok(Call {
            engine,
            ds,
            planner: Planner {
                def,
                functions: engine.functions(),
                data: Some(Arc::clone(&prepared)),
                stop: engine.call.stop.clone(),
            },
            prepared,
            ctx,
            base,
            table,
            value_warnings,
            in_force,
            route,
        })
    }

    /// The distinct periods of `field` in the call's data before its conditions, oldest first;
    /// `None` past [`MAX_PERIODS`] (the pass stops there: it holds no more than that many).
    pub async fn periods(&self, field: FieldId) -> Result<Option<Vec<Scalar>>, EngineError> {
        let column = self.planner.column(field);
        let caps = crate::groups::Caps {
            groups: MAX_PERIODS,
            rows: u64::MAX,
        };
        let counted = crate::groups::capped_count(caps).call(vec![datafusion::prelude::lit(1i64)]);
        let read = self
            .base
            .clone()
            .filter(column.clone().is_not_null())?
            .aggregate(
                vec![column.alias("__tally_period")],
                vec![counted.alias("__tally_records")],
            )?
            .sort(vec![
                datafusion::prelude::ident("__tally_period").sort(true, false),
            ])?
            .collect()
            .await;
        let batches = match read {
            Ok(batches) => batches,
            Err(e) if crate::groups::stopped(&e).is_some() => return Ok(None),
            Err(e) => return Err(EngineError::computing(&self.def().id, e)),
        };
        let mut out = Vec::new();
        for b in &batches {
            for row in 0..b.num_rows() {
                let v = datafusion::common::ScalarValue::try_from_array(b.column(0), row)?;
                if let Some(p) = period_of(&v) {
                    out.push(p);
                }
            }
        }
        // On a cluster the cap holds per task: the whole is checked here too.
        Ok((out.len() <= MAX_PERIODS).then_some(out))
    }

    /// Adds the condition of the latest period of the time field to `filters` (the latest in
    /// the call's data before its conditions, the revisions it reads aside) and to the call
    /// as resolved (`call`, so that asked again it asks for that period): disclosed in
    /// `resolved` when asked for (`"latest"` → `2020`), said in `notices` when it was not (a
    /// summary that neither filters nor groups by the time field).
    pub async fn read_latest(
        &self,
        latest: Latest,
        filters: &mut Vec<Filter>,
        resolved: &mut [Resolution],
        notices: &mut Vec<Notice>,
        call: &mut Value,
    ) -> Result<(), EngineError> {
        let field = &self.def().fields[latest.field];
        let name = field.name.clone();
        if latest.previous {
            // The period before the latest: the periods there are, read.
            let Some(periods) = self.periods(latest.field).await? else {
                return Err(tally_semantic::RequestError::invalid(
                    format!("where.{name}"),
                    format!("`{name}` has more than {MAX_PERIODS} periods, too many to find the one before the latest"),
                )
                .hint("name the period")
                .into());
            };
            let Some(period) = periods.len().checked_sub(2).map(|i| periods[i].clone()) else {
                return Err(tally_semantic::RequestError::invalid(
                    format!("where.{name}"),
                    format!(
                        "`{name}` has no period before the latest: the data has {}",
                        tally_semantic::period::describe(&periods)
                    ),
                )
                .hint("ask for \"latest\", or name a period")
                .into());
            };
            self.keep_period(latest, period, filters, resolved, notices, call);
            return Ok(());
        }
        let batches = self
            .base
            .clone()
            .aggregate(
                vec![],
                vec![
                    datafusion::functions_aggregate::expr_fn::max(
                        self.planner.column(latest.field),
                    )
                    .alias("latest"),
                ],
            )?
            .collect()
            .await?;
        let period = match batches.first().filter(|b| b.num_rows() > 0) {
            Some(batch) => period_of(&datafusion::common::ScalarValue::try_from_array(
                batch.column(0),
                0,
            )?),
            None => None,
        };
        let Some(period) = period else {
            notices.push(Notice {
                parameter: format!("where.{name}"),
                message: format!(
                    "`{name}` has no period in the data, so no latest one: the call reads every record"
                ),
            });
            return Ok(());
        };
        self.keep_period(latest, period, filters, resolved, notices, call);
        Ok(())
    }

    /// Adds the condition on `period`, the latest (or the one before it) that `latest` asked
    /// for, and says or discloses it.
    fn keep_period(
        &self,
        latest: Latest,
        period: Scalar,
        filters: &mut Vec<Filter>,
        resolved: &mut [Resolution],
        notices: &mut Vec<Notice>,
        call: &mut Value,
    ) {
        let name = self.def().fields[latest.field].name.clone();
        let shown = period.text();
        let word = if latest.previous {
            "previous"
        } else {
            "latest"
        };
        if latest.defaulted {
            notices.push(Notice {
                parameter: format!("where.{name}"),
                message: format!(
                    "`{name}` is the period of this dataset's records, and this summary neither filters nor groups by it: it is of the latest period, {shown} (group_by `{name}` for every period, or a condition such as {{\"{name}\": {shown}}} or \"2010..{shown}\")"
                ),
            });
        } else if let Some(r) = resolved
            .iter_mut()
            .find(|r| r.parameter == format!("where.{name}") && r.canonical == word)
        {
            r.canonical = shown;
        }
        if let Some(Value::Object(conditions)) = call.get_mut("where") {
            conditions.insert(
                name,
                serde_json::json!({ "$eq": serde_json::to_value(&period).unwrap_or(Value::Null) }),
            );
        }
        filters.push(Filter {
            field: latest.field,
            op: Op::Eq(period),
        });
    }

    /// Says which revisions the call read (a step) and what had none in force (warnings),
    /// where its dataset declares `revisions`.
    pub fn say_revisions(&self, provenance: &mut Provenance) {
        if let Some(in_force) = &self.in_force {
            say_in_force(provenance, in_force);
        }
    }

    /// How the call was answered while its dataset's table was being prepared, if it was.
    pub fn route(&self) -> Option<&Route> {
        self.route.as_ref()
    }

    pub fn def(&self) -> &'a DatasetDef {
        &self.ds.def
    }

    /// The provenance a result starts from (the dataset's source cited, the preparation's
    /// notes) and the source's id.
    pub fn provenance(&self) -> (Provenance, String) {
        meta::dataset_provenance(self.ds, &self.prepared)
    }

    /// The end every dataset result shares, after the tool's own warnings: the hints, the
    /// call as resolved (`parameters`), the value warnings, the dataset's source referenced,
    /// and the read and normalize steps.
    pub async fn cite(
        &self,
        provenance: &mut Provenance,
        context: &mut Context,
        asked: Asked<'_>,
        parameters: Value,
        source_id: String,
        resolved: &[Resolution],
    ) -> Result<(), EngineError> {
        context.hints = self.hints(provenance, asked).await?;
        context.parameters = parameters;
        for w in &self.value_warnings {
            provenance.warn(w.clone());
        }
        context.source_refs = vec![source_id];
        self.say_revisions(provenance);
        let cluster = self.cluster();
        meta::read_and_normalized(
            provenance,
            self.ds,
            &self.prepared,
            &self.table,
            resolved,
            cluster.as_deref(),
            self.route.as_ref(),
        );
        Ok(())
    }

    /// Where the call's plans went, when it has a cluster.
    pub fn cluster(&self) -> Option<std::sync::Arc<tally_storage::cluster::ClusterCall>> {
        self.ctx
            .state()
            .config()
            .get_extension::<tally_storage::cluster::ClusterCall>()
    }

    /// What a call that found nothing (or named values the data lacks) is told, each hint
    /// also a warning: the nearest values of a field for a value it does not hold and, when
    /// asked, which single condition excludes everything.
    async fn hints(
        &self,
        provenance: &mut Provenance,
        asked: Asked<'_>,
    ) -> Result<Vec<String>, EngineError> {
        // Values the backend matched itself were looked for in what it returned: an empty
        // subset holds no value to offer, so the nearest values come from the whole table.
        let whole = if asked.nothing_matched && !self.prepared.pushed.is_empty() {
            Some(self.ds.prepared(self.engine).await?)
        } else {
            None
        };
        let mut hints = unknown_value_hints(
            &self.ctx,
            whole.as_ref().unwrap_or(&self.prepared),
            self.def(),
            asked.filters,
            asked.nothing_matched,
        )
        .await?;
        if asked.ask_conditions {
            // Conditions the backend applied itself shaped the table searched (a law plugin
            // returns nothing for a title it does not hold): which condition excludes
            // everything is asked of all the data, and of the revisions in force in it when
            // revisions are picked by date (a condition is not blamed for what the date left
            // out).
            let all = if self.prepared.pushed.is_empty() {
                self.base.clone()
            } else {
                let whole = self
                    .ctx
                    .read_table(self.ds.prepared(self.engine).await?.table().provider)?;
                match (&self.def().revisions, &self.in_force) {
                    (Some(revisions), Some(in_force)) => {
                        revisions_in_force(whole, self.def(), revisions, in_force.as_of.as_deref())
                            .await
                            .map_err(|e| EngineError::computing(&self.def().id, e))?
                            .0
                    }
                    _ => whole,
                }
            };
            let labels = asked.plan.labels(self.def());
            hints.extend(
                meta::zero_hit_hints(&self.def().id, &labels, &all, asked.conditions).await?,
            );
        }
        for h in &hints {
            provenance.warn(h.clone());
        }
        Ok(hints)
    }
}

/// The records of the revisions in force on `as_of` (or the latest), and which those were:
/// the records kept ([`RevisionColumns::kept`]), then which revisions they are
/// ([`RevisionColumns::read`]), what had none in force yet ([`RevisionColumns::not_yet`]) and
/// what states no date ([`RevisionColumns::undated`]).
async fn revisions_in_force(
    base: DataFrame,
    def: &DatasetDef,
    revisions: &tally_semantic::definition::Revisions,
    as_of: Option<&str>,
) -> datafusion::error::Result<(DataFrame, InForce)> {
    let columns = RevisionColumns::of(def, revisions);
    let Kept {
        reduced,
        dated,
        undated,
    } = columns.kept(base, as_of)?;
    let mut report = InForce {
        as_of: as_of.map(str::to_string),
        ..Default::default()
    };
    report.read = columns.read(&reduced).await?;
    if let Some(date) = as_of {
        report.not_yet = columns.not_yet(&dated, date).await?;
    }
    if as_of.is_none() {
        // Read as they are: nothing is left out for want of a date.
        return Ok((reduced, report));
    }
    report.undated = columns.undated(undated).await?;
    Ok((reduced, report))
}

/// The records a call reads of a dataset with `revisions`, and those set apart on the way.
struct Kept {
    /// The records of the revisions in force.
    reduced: DataFrame,
    /// The records that state the day their revision takes effect.
    dated: DataFrame,
    /// The records that do not.
    undated: DataFrame,
}

/// The columns `revisions` names, as expressions over a dataset's records, built once from
/// the fields the definition resolved.
struct RevisionColumns<'r> {
    /// The column of what is revised (joins name it).
    key_column: &'r str,
    /// What is revised, as text.
    key: Expr,
    /// What is revised, as people name it: its title, or else its key.
    label: Expr,
    /// The revision's id, as text, when the definition names a field for it.
    id: Option<Expr>,
    /// The day a revision takes effect: a date, or a date-time's day, as `YYYY-MM-DD` text (so
    /// a revision in force from the `as_of` day itself is in force on it).
    effective: Expr,
}

/// A field's column as text.
fn text(def: &DatasetDef, field: tally_semantic::FieldId) -> Expr {
    use datafusion::prelude::{cast, ident};
    cast(
        ident(&def.fields[field].name),
        datafusion::arrow::datatypes::DataType::Utf8,
    )
}

/// Text of a cell (null, or a value that cannot be read as text, as None).
fn cell(a: &datafusion::arrow::array::ArrayRef, i: usize) -> Option<String> {
    use datafusion::arrow::array::Array;
    let a =
        datafusion::arrow::compute::cast(a, &datafusion::arrow::datatypes::DataType::Utf8).ok()?;
    let a = a
        .as_any()
        .downcast_ref::<datafusion::arrow::array::StringArray>()?;
    (!a.is_null(i)).then(|| a.value(i).to_string())
}

impl<'r> RevisionColumns<'r> {
    fn of(
        def: &'r DatasetDef,
        revisions: &tally_semantic::definition::Revisions,
    ) -> RevisionColumns<'r> {
        use datafusion::functions::unicode::expr_fn::left;
        use datafusion::prelude::lit;
        RevisionColumns {
            key_column: &def.fields[revisions.key].name,
            key: text(def, revisions.key),
            label: text(def, revisions.title.unwrap_or(revisions.key)),
            id: revisions.id.map(|id| text(def, id)),
            effective: left(text(def, revisions.effective), lit(10i64)),
        }
    }

    /// Keeps of `base` the records of the revision of each thing in force on `as_of` (or the
    /// latest), setting apart those that state the day they take effect and those that do not.
    fn kept(&self, base: DataFrame, as_of: Option<&str>) -> datafusion::error::Result<Kept> {
        use datafusion::common::JoinType;
        use datafusion::functions::string::expr_fn::btrim;
        use datafusion::functions_aggregate::expr_fn::max;
        use datafusion::prelude::lit;
        let (key, effective) = (&self.key, &self.effective);
        let dated_expr = effective
            .clone()
            .is_not_null()
            .and(btrim(vec![effective.clone()]).not_eq(lit("")));
        let dated = base.clone().filter(dated_expr.clone())?;
        let eligible = match as_of {
            // In force on the day: a date up to it, or a date-time on it (`2020-01-01T09:00` sorts
            // after `2020-01-01`, before `2020-01-01` followed by the last character there is).
            Some(date) => dated
                .clone()
                .filter(effective.clone().lt(lit(format!("{date}\u{10FFFF}"))))?,
            None => dated.clone(),
        };
        let latest = eligible.clone().aggregate(
            vec![key.clone().alias("__tally_key")],
            vec![max(effective.clone()).alias("__tally_in_force")],
        )?;
        let eligible = eligible.with_column("__tally_effective", effective.clone())?;
        let mut reduced = eligible
            .join(
                latest,
                JoinType::LeftSemi,
                &[self.key_column, "__tally_effective"],
                &["__tally_key", "__tally_in_force"],
                None,
            )?
            .drop_columns(&["__tally_effective"])?;
        if let Some(id) = &self.id {
            // Two revisions taking effect on the same day: the one with the greater id (e-Gov's
            // ids end with the amending law, numbered in order) is the one in force.
            let last = reduced.clone().aggregate(
                vec![key.clone().alias("__tally_key")],
                vec![max(id.clone()).alias("__tally_last")],
            )?;
            let reduced_id = reduced.with_column("__tally_id", id.clone())?;
            reduced = reduced_id
                .join(
                    last,
                    JoinType::LeftSemi,
                    &[self.key_column, "__tally_id"],
                    &["__tally_key", "__tally_last"],
                    None,
                )?
                .drop_columns(&["__tally_id"])?;
        }
        let undated = base
            .clone()
            .filter(std::ops::Not::not(dated_expr.clone()))?;
        if as_of.is_none() {
            // Without a date, what states no date for its only revision is that revision (an
            // unknown date is older than any known one, as the law plugin orders them).
            let dated_keys = dated
                .clone()
                .aggregate(vec![key.clone().alias("__tally_key")], vec![])?;
            let alone = undated.clone().join(
                dated_keys,
                JoinType::LeftAnti,
                &[self.key_column],
                &["__tally_key"],
                None,
            )?;
            reduced = reduced.union(alone)?;
        }
        Ok(Kept {
            reduced,
            dated,
            undated,
        })
    }

    /// The revisions `reduced` holds (at most 100): what each revises, its id, its date.
    async fn read(
        &self,
        reduced: &DataFrame,
    ) -> datafusion::error::Result<Vec<(String, Option<String>, Option<String>)>> {
        use datafusion::prelude::{ident, lit};
        let mut read = Vec::new();
        let id = match &self.id {
            Some(id) => id.clone(),
            None => lit(datafusion::common::ScalarValue::Utf8(None)),
        };
        for batch in reduced
            .clone()
            .aggregate(
                vec![
                    self.label.clone().alias("l"),
                    id.alias("i"),
                    self.effective.clone().alias("e"),
                ],
                vec![],
            )?
            .sort(vec![
                ident("l").sort(true, true),
                ident("e").sort(true, true),
            ])?
            .limit(0, Some(100))?
            .collect()
            .await?
        {
            for r in 0..batch.num_rows() {
                read.push((
                    cell(batch.column(0), r).unwrap_or_default(),
                    cell(batch.column(1), r),
                    cell(batch.column(2), r),
                ));
            }
        }
        Ok(read)
    }

    /// What had no revision in force on `date` among the `dated` records (at most 100), with
    /// the day its first revision takes effect.
    async fn not_yet(
        &self,
        dated: &DataFrame,
        date: &str,
    ) -> datafusion::error::Result<Vec<(String, String)>> {
        use datafusion::functions_aggregate::expr_fn::{max, min};
        use datafusion::prelude::{ident, lit};
        let mut not_yet = Vec::new();
        // By what is revised, not by its name: a title may change between revisions.
        for batch in dated
            .clone()
            .aggregate(
                vec![self.key.clone().alias("k")],
                vec![
                    max(self.label.clone()).alias("l"),
                    min(self.effective.clone()).alias("first"),
                ],
            )?
            .select(vec![ident("l"), ident("first")])?
            .filter(ident("first").gt_eq(lit(format!("{date}\u{10FFFF}"))))?
            .sort(vec![ident("l").sort(true, true)])?
            .limit(0, Some(100))?
            .collect()
            .await?
        {
            for r in 0..batch.num_rows() {
                if let (Some(l), Some(first)) = (cell(batch.column(0), r), cell(batch.column(1), r))
                {
                    not_yet.push((l, first));
                }
            }
        }
        Ok(not_yet)
    }

    /// What the `undated` records revise (at most 100): left out of a call with `as_of`.
    async fn undated(&self, undated: DataFrame) -> datafusion::error::Result<Vec<String>> {
        use datafusion::prelude::ident;
        let mut left_out = Vec::new();
        for batch in undated
            .aggregate(vec![self.label.clone().alias("l")], vec![])?
            .sort(vec![ident("l").sort(true, true)])?
            .limit(0, Some(100))?
            .collect()
            .await?
        {
            for r in 0..batch.num_rows() {
                if let Some(l) = cell(batch.column(0), r) {
                    left_out.push(l);
                }
            }
        }
        Ok(left_out)
    }
}

/// The revisions a call read, as a step of its provenance; what had none in force, and
/// what has no date, as warnings.
fn say_in_force(provenance: &mut Provenance, in_force: &InForce) {
    use crate::envelope::TransformationType;
    let read: Vec<String> = in_force
        .read
        .iter()
        .map(|(what, id, date)| match (id, date) {
            (Some(id), Some(date)) => format!("{what}: revision {id}, in force from {date}"),
            (None, Some(date)) => format!("{what}: the revision in force from {date}"),
            _ => what.clone(),
        })
        .collect();
    let which = match &in_force.as_of {
        Some(date) => format!("kept the revisions in force on {date} (as_of)"),
        None => "kept the latest revision of each (no as_of)".to_string(),
    };
    provenance.step(
        TransformationType::Filter,
        if read.is_empty() {
            format!("{which}: none")
        } else {
            format!("{which}: {}", read.join("; "))
        },
    );
    if let Some(date) = &in_force.as_of {
        for (what, first) in &in_force.not_yet {
            provenance.warn(format!(
                "no revision of {what} was in force on {date}: its earliest revision served takes effect on {first}"
            ));
        }
    }
    for what in &in_force.undated {
        provenance.warn(format!(
            "{what}: its text does not say from which date it is in force (its revision is unknown), so it is left out of this answer, which reads the revisions in force on a date"
        ));
    }
}

/// Labels of a plan's conditions, in the order their expressions were built.
pub trait HasConditions {
    fn labels(&self, def: &DatasetDef) -> Vec<String>;
}

/// What a call reads besides its filters, for weighing its dataset's files against a
/// preparation under way.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reads<'p> {
    /// Fields read whole: groups, measures, order.
    pub fields: &'p [FieldId],
    /// Computed measures read (each reads its own fields).
    pub computed: usize,
    /// The fields `q` searches, when the call has a `q` (none named: every text field).
    pub q: Option<&'p [FieldId]>,
}

/// The work of a call over `def` with `filters` and `reads`: the fields whose every value it
/// reads, and of them the text fields searched for a substring.
pub fn work(def: &DatasetDef, filters: &[Filter], reads: Reads<'_>) -> Work {
    let mut fields: std::collections::BTreeSet<FieldId> = reads.fields.iter().copied().collect();
    let mut searched = std::collections::BTreeSet::new();
    let text = |f: &FieldId| !def.fields[*f].data_type.is_numeric();
    for f in filters {
        fields.insert(f.field);
        if matches!(f.op, Op::Contains(_) | Op::NotContains(_)) && text(&f.field) {
            searched.insert(f.field);
        }
    }
    if let Some(q) = reads.q {
        let all: Vec<FieldId>;
        let q = if q.is_empty() {
            all = crate::plan::searched_by_default(def);
            &all
        } else {
            q
        };
        for f in q {
            fields.insert(*f);
            if text(f) {
                searched.insert(*f);
            }
        }
    }
    Work {
        // A computed measure reads two fields (a ratio's parts), at most.
        fields: fields.len() + 2 * reads.computed,
        searched: searched.len(),
    }
}

/// A period as a condition compares it: a year or month as an integer, a month or date as
/// text (`2020-04`, `2020-04-01`).
pub(crate) fn period_of(value: &datafusion::common::ScalarValue) -> Option<Scalar> {
    use datafusion::common::ScalarValue as V;
    Some(match value {
        V::Int8(Some(v)) => Scalar::Int(i64::from(*v)),
        V::Int16(Some(v)) => Scalar::Int(i64::from(*v)),
        V::Int32(Some(v)) => Scalar::Int(i64::from(*v)),
        V::Int64(Some(v)) => Scalar::Int(*v),
        V::UInt8(Some(v)) => Scalar::Int(i64::from(*v)),
        V::UInt16(Some(v)) => Scalar::Int(i64::from(*v)),
        V::UInt32(Some(v)) => Scalar::Int(i64::from(*v)),
        V::UInt64(Some(v)) => Scalar::Int(i64::try_from(*v).ok()?),
        V::Utf8(Some(t)) | V::LargeUtf8(Some(t)) | V::Utf8View(Some(t)) => Scalar::Str(t.clone()),
        V::Date32(Some(_)) | V::Date64(Some(_)) => Scalar::Str(value.to_string()),
        _ => return None,
    })
}
