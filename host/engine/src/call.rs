//! One call on one dataset, in the phases `query_records` and `summarize_records` share:
//! [`Call::open`] (the data prepared for the call's conditions, the values matched to the
//! data) → the tool's own execute and shape → [`Call::cite`] (hints, the call as resolved,
//! the source referenced, the read and normalize steps).

use std::sync::Arc;

use datafusion::logical_expr::Expr;
use datafusion::prelude::{DataFrame, SessionContext};
use serde_json::Value;
use tally_semantic::DatasetDef;
use tally_semantic::resolve::{Filter, Resolution};

use crate::Engine;
use crate::dataset::{Dataset, Prepared};
use crate::envelope::Provenance;
use crate::error::EngineError;
use crate::meta::{self, unknown_value_hints};
use crate::plan::{Planner, conjunction};
use crate::results::Context;

/// A call's data and the means to plan over it.
pub struct Call<'a> {
    pub engine: &'a Engine,
    pub ds: &'a Dataset,
    /// The data, prepared for the conditions the backend applies itself.
    pub prepared: Arc<Prepared>,
    pub planner: Planner<'a>,
    pub ctx: SessionContext,
    /// The call's table before its conditions.
    pub base: DataFrame,
    /// The table it reads (with what its scans read of files, when it reads them).
    pub table: crate::dataset::CallTable,
    /// What matching the call's values to the data corrected or found missing.
    value_warnings: Vec<String>,
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
    /// value read in another form is recorded in `resolved`).
    pub async fn open(
        engine: &'a Engine,
        ds: &'a Dataset,
        filters: &mut [Filter],
        resolved: &mut Vec<Resolution>,
    ) -> Result<Call<'a>, EngineError> {
        let def = &ds.def;
        let prepared = ds.prepared_for(engine, &ds.pushdown(filters)).await?;
        let ctx = engine.call_context(prepared.rows)?;
        let value_warnings =
            crate::values::match_data(&ctx, &prepared, def, filters, resolved).await?;
        let table = prepared.table();
        let base = ctx.read_table(Arc::clone(&table.provider))?;
        Ok(Call {
            engine,
            ds,
            prepared,
            planner: Planner {
                def,
                functions: engine.functions(),
            },
            ctx,
            base,
            table,
            value_warnings,
        })
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
        let cluster = self
            .ctx
            .state()
            .config()
            .get_extension::<crate::cluster::ClusterCall>();
        meta::read_and_normalized(
            provenance,
            self.ds,
            &self.prepared,
            &self.table,
            resolved,
            cluster.as_deref(),
        );
        Ok(())
    }

    /// What a call that found nothing (or named values the data lacks) is told, each hint
    /// also a warning: the nearest values of a field for a value it does not hold and, when
    /// asked, which single condition excludes everything.
    async fn hints(
        &self,
        provenance: &mut Provenance,
        asked: Asked<'_>,
    ) -> Result<Vec<String>, EngineError> {
        let mut hints = unknown_value_hints(
            &self.ctx,
            &self.prepared,
            self.def(),
            asked.filters,
            asked.nothing_matched,
        )
        .await?;
        if asked.ask_conditions {
            // Conditions the backend applied itself shaped the table searched; which
            // condition excludes everything is asked of all the data.
            let all = if self.prepared.pushed.is_empty() {
                self.base.clone()
            } else {
                self.ctx
                    .read_table(self.ds.prepared(self.engine).await?.table().provider)?
            };
            hints.extend(zero_hit_hints(&self.planner, asked.plan, &all, asked.conditions).await?);
        }
        for h in &hints {
            provenance.warn(h.clone());
        }
        Ok(hints)
    }
}

/// When nothing matched: which single condition, if dropped, would let records through.
async fn zero_hit_hints(
    planner: &Planner<'_>,
    plan: &(dyn HasConditions + Sync),
    base: &DataFrame,
    conditions: &[Expr],
) -> Result<Vec<String>, EngineError> {
    let labels = plan.labels(planner.def);
    let mut hints = Vec::new();
    if conditions.len() == 1 {
        hints.push(format!(
            "no record matches {}; loosen or remove it",
            labels[0]
        ));
        return Ok(hints);
    }
    for (i, label) in labels.iter().enumerate() {
        let others: Vec<_> = conditions
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, e)| e.clone())
            .collect();
        let df = match conjunction(others) {
            Some(e) => base.clone().filter(e)?,
            None => base.clone(),
        };
        let n = df.count().await?;
        if n > 0 {
            hints.push(format!(
                "without {label} the other conditions match {n} records"
            ));
        }
    }
    if hints.is_empty() {
        hints.push("no single condition explains the empty result; several conditions exclude every record".to_string());
    }
    Ok(hints)
}

/// Labels of a plan's conditions, in the order their expressions were built.
pub trait HasConditions {
    fn labels(&self, def: &DatasetDef) -> Vec<String>;
}
