//! The planner of a call in cluster mode: DataFusion's plan, then what reads files sent to
//! the cluster, cut at its lowest exchanges so that a call is one stage there.

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::common::Result as DfResult;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    ExecutionPlan, Partitioning, displayable, replace_children_if_necessary,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};

use super::call::{ClusterCall, of_session};
use super::scan::ScanExec;

/// The planner of a call in cluster mode: DataFusion's, then the plan sent to the cluster
/// when it scans files (a plan over a prepared table, or another backend's, stays here).
#[derive(Debug)]
pub struct ClusterPlanner;

#[async_trait::async_trait]
impl datafusion::execution::context::QueryPlanner for ClusterPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = DefaultPhysicalPlanner::default()
            .create_physical_plan(logical_plan, session)
            .await?;
        let Some(call) = of_session(session) else {
            return Ok(plan);
        };
        if !scans_files(&plan) {
            return Ok(plan);
        }
        if let Some(cut) = cut_at_exchanges(&plan, &scans_files, &mut |part| send(part, &call))? {
            tracing::debug!(plan = %displayable(cut.as_ref()).indent(true), "plan cut at its exchanges");
            return Ok(cut);
        }
        Ok(send(plan, &call))
    }
}

/// `plan` run on the cluster, or `plan` itself (said) when it cannot be sent.
fn send(plan: Arc<dyn ExecutionPlan>, call: &Arc<ClusterCall>) -> Arc<dyn ExecutionPlan> {
    // Text grouped on the executors' own codes (the server's live in its memory).
    let sent = crate::coded::group_on_codes(Arc::clone(&plan), &crate::coded::counts_capped)
        .unwrap_or_else(|e| {
            tracing::debug!(error = %e, "text grouped as text on the cluster");
            Arc::clone(&plan)
        });
    tracing::debug!(plan = %displayable(sent.as_ref()).indent(true), "sent to the cluster");
    match call.cluster.distribute(sent, Arc::clone(call)) {
        Ok(remote) => remote,
        Err(why) => {
            tracing::info!(%why, "plan computed on this server");
            call.ran_here(why);
            plan
        }
    }
}

/// The plan with what lies below its lowest exchanges sent to the cluster, and the exchanges
/// and all above them computed here; `None` when the plan has no exchange to cut at, or one
/// whose input is heavy to bring here (rows hashed for a join, not the partial groups of an
/// aggregate), so that it is sent whole.
///
/// Ballista runs each exchange as a stage of its own: the tasks below it write their output
/// to the executors' disks and report, then the stage above is scheduled, run, and its
/// output fetched. For the partial groups of an aggregate, or each partition's first rows in
/// order, that costs a stage's round trip and a shuffle to move a few rows. Cut at the lowest
/// exchanges, a call is one stage on the cluster (the scan, its conditions, the partial
/// groups: the work that grows with the data), and those rows come straight to the server,
/// which merges them as it merges its own partitions. A merge that keeps an order becomes a
/// sort of the rows brought, with the same limit: they come as one stream, partition after
/// partition.
///
/// `reads` says whether a part reads files (only such a part is sent); `send` sends a part,
/// returning it unchanged when it stays here.
fn cut_at_exchanges(
    plan: &Arc<dyn ExecutionPlan>,
    reads: &dyn Fn(&Arc<dyn ExecutionPlan>) -> bool,
    send: &mut dyn FnMut(Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan>,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    let mut heavy = false;
    let cut = Arc::clone(plan).transform_down(|node| {
        if !is_exchange(&node) {
            return Ok(Transformed::no(node));
        }
        let input = Arc::clone(node.children()[0]);
        if has_exchange(&input) {
            return Ok(Transformed::no(node));
        }
        if !reads(&input) {
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
        }
        if !light_exchange(&node) {
            heavy = true;
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Stop));
        }
        let remote = send(Arc::clone(&input));
        if Arc::ptr_eq(&remote, &input) {
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
        }
        let here: Arc<dyn ExecutionPlan> = match node.downcast_ref::<SortPreservingMergeExec>() {
            Some(merge) => {
                Arc::new(SortExec::new(merge.expr().clone(), remote).with_fetch(merge.fetch()))
            }
            None => replace_children_if_necessary(node, vec![remote])?,
        };
        Ok(Transformed::new(here, true, TreeNodeRecursion::Jump))
    })?;
    // A part that reads files but is below no exchange (or was not sent) would run here: the
    // plan is then sent whole, as it would be without exchanges.
    Ok((!heavy && cut.transformed && !reads(&cut.data)).then_some(cut.data))
}

/// A node where Ballista ends one stage and starts another.
fn is_exchange(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.is::<CoalescePartitionsExec>()
        || node.is::<SortPreservingMergeExec>()
        || node
            .downcast_ref::<RepartitionExec>()
            .is_some_and(|r| matches!(r.partitioning(), Partitioning::Hash(..)))
}

/// Whether `plan` has an exchange anywhere in it.
fn has_exchange(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        found = is_exchange(node);
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// Whether what flows through `exchange` is little enough to bring to the server: a merge of
/// partitions (an ordered one only with a limit: without, the server would sort every row
/// brought, where the executors merge sorted streams), or the hashing of an aggregate's
/// partial groups (a hash of rows, as a join makes, is not).
fn light_exchange(exchange: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(merge) = exchange.downcast_ref::<SortPreservingMergeExec>() {
        return merge.fetch().is_some();
    }
    if !exchange.is::<RepartitionExec>() {
        return true;
    }
    exchange.children()[0]
        .downcast_ref::<AggregateExec>()
        .is_some_and(|a| *a.mode() == AggregateMode::Partial)
}

/// Whether a plan reads files through a [`ScanExec`] (what the cluster can take).
fn scans_files(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if node.is::<ScanExec>() {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::datatypes::DataType;
    use datafusion::execution::{SendableRecordBatchStream, TaskContext};
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_plan::{DisplayAs, DisplayFormatType, PlanProperties};
    use datafusion::prelude::SessionConfig;

    use super::*;

    /// A part "sent" in the cut tests: run here as the cluster runs it (its partitions one
    /// stream), its plan hidden as `ClusterExec` hides it.
    #[derive(Debug)]
    struct Sent {
        plan: Arc<dyn ExecutionPlan>,
        properties: Arc<PlanProperties>,
    }

    impl DisplayAs for Sent {
        fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "Sent")
        }
    }

    impl ExecutionPlan for Sent {
        fn name(&self) -> &str {
            "Sent"
        }
        fn properties(&self) -> &Arc<PlanProperties> {
            &self.properties
        }
        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            Vec::new()
        }
        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
        ) -> DfResult<TreeNodeRecursion> {
            Ok(TreeNodeRecursion::Continue)
        }
        fn with_new_children(
            self: Arc<Self>,
            _children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> DfResult<Arc<dyn ExecutionPlan>> {
            Ok(self)
        }
        fn execute(
            &self,
            _partition: usize,
            context: Arc<TaskContext>,
        ) -> DfResult<SendableRecordBatchStream> {
            CoalescePartitionsExec::new(Arc::clone(&self.plan)).execute(0, context)
        }
    }

    fn reads_memory(plan: &Arc<dyn ExecutionPlan>) -> bool {
        let mut found = false;
        let _ = plan.apply(|node| {
            found = node.name() == "DataSourceExec";
            Ok(if found {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        });
        found
    }

    /// The plan of `sql` cut at its exchanges (with the parts sent), and its answer beside the
    /// uncut plan's, as text.
    async fn cut_and_run(
        ctx: &datafusion::prelude::SessionContext,
        sql: &str,
    ) -> (
        Option<Arc<dyn ExecutionPlan>>,
        Vec<Arc<dyn ExecutionPlan>>,
        String,
        String,
    ) {
        use datafusion::arrow::util::pretty::pretty_format_batches;
        use datafusion::physical_plan::collect;
        // Two plans of the same call: a plan's state (a top-k's shared filter) is for one run.
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let again = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let mut sent = Vec::new();
        let cut = cut_at_exchanges(&plan, &reads_memory, &mut |part| {
            sent.push(Arc::clone(&part));
            let properties = Arc::new(PlanProperties::new(
                datafusion::physical_expr::EquivalenceProperties::new(part.schema()),
                Partitioning::UnknownPartitioning(1),
                datafusion::physical_plan::execution_plan::EmissionType::Final,
                datafusion::physical_plan::execution_plan::Boundedness::Bounded,
            ));
            Arc::new(Sent {
                plan: part,
                properties,
            })
        })
        .unwrap();
        let whole = collect(again, ctx.task_ctx()).await.unwrap();
        let parted = match &cut {
            Some(cut) => collect(Arc::clone(cut), ctx.task_ctx()).await.unwrap(),
            None => whole.clone(),
        };
        (
            cut,
            sent,
            pretty_format_batches(&whole).unwrap().to_string(),
            pretty_format_batches(&parted).unwrap().to_string(),
        )
    }

    #[tokio::test]
    async fn a_plan_is_cut_at_its_lowest_exchanges_into_one_stage_and_answers_the_same() {
        use datafusion::arrow::array::{Int64Array, StringArray};
        use datafusion::arrow::datatypes::{Field, Schema};
        use datafusion::datasource::MemTable;
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        // Four partitions, each with every key, so each key's groups are merged from all.
        let partitions = (0..4)
            .map(|p| {
                let keys: Vec<String> = (0..40).map(|i| format!("k{}", (i * 7 + p) % 13)).collect();
                let values: Vec<i64> = (0..40).map(|i| i * 10 + p).collect();
                vec![
                    RecordBatch::try_new(
                        Arc::clone(&schema),
                        vec![
                            Arc::new(StringArray::from(keys)),
                            Arc::new(Int64Array::from(values)),
                        ],
                    )
                    .unwrap(),
                ]
            })
            .collect();
        let ctx = datafusion::prelude::SessionContext::new_with_config(
            SessionConfig::new().with_target_partitions(4),
        );
        ctx.register_table(
            "t",
            Arc::new(MemTable::try_new(schema, partitions).unwrap()),
        )
        .unwrap();
        for sql in [
            "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k HAVING count(*) > 10 ORDER BY n DESC, k LIMIT 5",
            "SELECT k, v FROM t WHERE v > 100 ORDER BY v DESC, k LIMIT 7",
            "SELECT count(*) AS n, sum(v) AS s FROM t WHERE v % 3 = 0",
            "SELECT count(DISTINCT k) AS n FROM t",
        ] {
            let (cut, sent, whole, parted) = cut_and_run(&ctx, sql).await;
            let cut = cut.unwrap_or_else(|| panic!("{sql}: not cut"));
            assert_eq!(parted, whole, "{sql}");
            assert!(!sent.is_empty(), "{sql}");
            for part in &sent {
                assert!(!has_exchange(part), "{sql}: a part sent is one stage");
                assert!(reads_memory(part), "{sql}");
            }
            assert!(!reads_memory(&cut), "{sql}: nothing reads here");
        }
        // Every row in order, without a limit: the executors merge it (sent whole).
        let (cut, _, whole, parted) =
            cut_and_run(&ctx, "SELECT k, v FROM t WHERE v > 100 ORDER BY v DESC, k").await;
        assert!(cut.is_none());
        assert_eq!(parted, whole);
        // A join hashes rows, not partial groups: sent whole.
        let (cut, _, whole, parted) = cut_and_run(
            &ctx,
            "SELECT a.k, count(*) AS n FROM t a JOIN t b ON a.v = b.v + 1 GROUP BY a.k ORDER BY a.k",
        )
        .await;
        assert!(cut.is_none());
        assert_eq!(parted, whole);
    }
}
