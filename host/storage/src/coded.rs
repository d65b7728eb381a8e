//! Text grouped on codes on a cluster's executors.
//!
//! One server groups text read from its files on integer codes it numbers as the call reads
//! the values (a call's [`StreamCodes`]), then turns the codes back into text: a row is a
//! lookup of its 16-byte view instead of a hash and a compare of its text. A plan sent to a
//! cluster cannot carry that table (it lives in the server's memory, and each executor reads
//! other rows), so there each partial aggregation grouped the text itself, and a summary
//! by a text field cost an executor's task nearly twice what a partition costs one server.
//!
//! [`group_on_codes`] rewrites the partial aggregations of a plan about to be sent: each text
//! key is grouped on `tally_local_code(key)`, a code in a table of the executor's own, and a
//! projection above turns the codes back into the key's text with `tally_local_value(code)`,
//! so what leaves the task (and what the server merges) is exactly what it was. The two
//! functions of one aggregation name their table by a token that travels with the plan;
//! where the plan is decoded, one table is made per token and shared by both (and by the
//! tasks of the plan on that executor), and it goes when the plan does.
//!
//! Unlike one server's codes, null keeps its own place (a null code): `""` and null are two
//! groups, as they are when text is grouped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::expressions::Column;
use datafusion::physical_plan::projection::ProjectionExec;

use crate::udf::StreamCodes;

/// The name of the count that stops at a summary's caps (`tally_engine::groups`): an
/// aggregation counting with it holds at most the cap's groups, so its code table does too.
pub const CAPPED_COUNT: &str = "tally_count_capped";

/// The name of the function giving a text's code.
pub const LOCAL_CODE: &str = "tally_local_code";
/// The name of the function giving a code's text.
pub const LOCAL_VALUE: &str = "tally_local_value";

/// A code table named by a token (see the module's documentation).
#[derive(Debug)]
pub struct LocalCodes {
    token: u64,
    codes: StreamCodes,
}

/// The tables alive in this process, by token.
fn tables() -> &'static Mutex<HashMap<u64, Weak<LocalCodes>>> {
    static TABLES: OnceLock<Mutex<HashMap<u64, Weak<LocalCodes>>>> = OnceLock::new();
    TABLES.get_or_init(Mutex::default)
}

impl LocalCodes {
    /// A table under a token no other table of any process has (at least in practice: 64
    /// random bits).
    fn fresh() -> Arc<LocalCodes> {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        LocalCodes::of_token(hasher.finish())
    }

    /// The table named `token` in this process, made when none is alive.
    pub fn of_token(token: u64) -> Arc<LocalCodes> {
        let mut tables = tables().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(table) = tables.get(&token).and_then(Weak::upgrade) {
            return table;
        }
        tables.retain(|_, t| t.strong_count() > 0);
        let table = Arc::new(LocalCodes {
            token,
            codes: StreamCodes::default(),
        });
        tables.insert(token, Arc::downgrade(&table));
        table
    }

    pub fn token(&self) -> u64 {
        self.token
    }
}

/// `tally_local_code(text)` over `table`.
pub fn code_udf(table: &Arc<LocalCodes>) -> ScalarUDF {
    ScalarUDF::new_from_impl(LocalCode {
        signature: Signature::any(1, Volatility::Immutable),
        table: Arc::clone(table),
    })
}

/// `tally_local_value(code)` over `table`, giving text of type `out` (`Utf8` or `Utf8View`).
pub fn value_udf(table: &Arc<LocalCodes>, out: DataType) -> ScalarUDF {
    ScalarUDF::new_from_impl(LocalValue {
        signature: Signature::exact(vec![DataType::UInt32], Volatility::Immutable),
        table: Arc::clone(table),
        out,
    })
}

/// The table of a `tally_local_code` or `tally_local_value`, and the text type the latter
/// gives, when `udf` is one of them (what travels with a plan).
pub fn table_of(udf: &ScalarUDF) -> Option<(u64, Option<&DataType>)> {
    let inner = udf.inner().as_ref();
    if let Some(code) = inner.downcast_ref::<LocalCode>() {
        return Some((code.table.token, None));
    }
    inner
        .downcast_ref::<LocalValue>()
        .map(|value| (value.table.token, Some(&value.out)))
}

/// Whether a key of this type is grouped on codes.
fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::Utf8View)
}

#[derive(Debug)]
struct LocalCode {
    signature: Signature,
    table: Arc<LocalCodes>,
}

impl PartialEq for LocalCode {
    fn eq(&self, other: &Self) -> bool {
        self.table.token == other.table.token
    }
}
impl Eq for LocalCode {}
impl std::hash::Hash for LocalCode {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.table.token.hash(state);
    }
}

impl ScalarUDFImpl for LocalCode {
    fn name(&self) -> &str {
        LOCAL_CODE
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::UInt32)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(Field::new(LOCAL_CODE, DataType::UInt32, nullable)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [text] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{LOCAL_CODE} takes 1 argument"
            )));
        };
        let text = text.to_array(args.number_rows)?;
        if !is_text(text.data_type()) {
            return Err(DataFusionError::Internal(format!(
                "{LOCAL_CODE} of {} values",
                text.data_type()
            )));
        }
        // The table's codes give null and "" alike 0; null keeps its place here.
        let codes = self.table.codes.code_array(&text)?;
        let codes = UInt32Array::new(codes.values().clone(), text.nulls().cloned());
        Ok(ColumnarValue::Array(Arc::new(codes)))
    }
}

#[derive(Debug)]
struct LocalValue {
    signature: Signature,
    table: Arc<LocalCodes>,
    out: DataType,
}

impl PartialEq for LocalValue {
    fn eq(&self, other: &Self) -> bool {
        self.table.token == other.table.token && self.out == other.out
    }
}
impl Eq for LocalValue {}
impl std::hash::Hash for LocalValue {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.table.token.hash(state);
        self.out.hash(state);
    }
}

impl ScalarUDFImpl for LocalValue {
    fn name(&self) -> &str {
        LOCAL_VALUE
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.out.clone())
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(Field::new(
            LOCAL_VALUE,
            self.out.clone(),
            nullable,
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [codes] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{LOCAL_VALUE} takes 1 argument"
            )));
        };
        let codes = codes.to_array(args.number_rows)?;
        let Some(codes) = codes.as_primitive_opt::<datafusion::arrow::datatypes::UInt32Type>()
        else {
            return Err(DataFusionError::Internal(format!(
                "{LOCAL_VALUE} of {} values",
                codes.data_type()
            )));
        };
        let text: ArrayRef = Arc::new(self.table.codes.values_of(codes)?);
        Ok(ColumnarValue::Array(cast(&text, &self.out)?))
    }
}

/// Whether `aggregate` counts with [`CAPPED_COUNT`], so that its groups (and the values of a
/// code table made for it) are bounded by the summary's cap: a code table keeps every value
/// it met for as long as the plan lives, where DataFusion stops grouping rows whose keys are
/// nearly all distinct (and holds none of them), so only bounded aggregations are coded.
pub fn counts_capped(aggregate: &AggregateExec) -> bool {
    aggregate
        .aggr_expr()
        .iter()
        .any(|a| a.fun().name() == CAPPED_COUNT)
}

/// `plan` with each partial aggregation that groups by text and that `only` accepts grouping
/// on codes instead (see the module's documentation); what each gives is unchanged, in names,
/// types and values. An aggregation with grouping sets or a limit on its groups is left as it
/// is.
pub fn group_on_codes(
    plan: Arc<dyn ExecutionPlan>,
    only: &dyn Fn(&AggregateExec) -> bool,
) -> Result<Arc<dyn ExecutionPlan>> {
    let config = Arc::new(ConfigOptions::default());
    plan.transform_up(|node| {
        let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
            return Ok(Transformed::no(node));
        };
        if *aggregate.mode() != AggregateMode::Partial
            || !aggregate.group_expr().is_single()
            || aggregate.limit_options().is_some()
            || !only(aggregate)
        {
            return Ok(Transformed::no(node));
        }
        let input = aggregate.input().schema();
        let keys = aggregate.group_expr().expr();
        let text: Vec<bool> = keys
            .iter()
            .map(|(e, _)| e.data_type(&input).is_ok_and(|t| is_text(&t)))
            .collect();
        if !text.contains(&true) {
            return Ok(Transformed::no(node));
        }
        let table = LocalCodes::fresh();
        let code = Arc::new(code_udf(&table));
        let grouped = keys
            .iter()
            .zip(&text)
            .map(|((e, name), &text)| {
                let e: Arc<dyn PhysicalExpr> = if text {
                    Arc::new(ScalarFunctionExpr::try_new(
                        Arc::clone(&code),
                        vec![Arc::clone(e)],
                        &input,
                        Arc::clone(&config),
                    )?)
                } else {
                    Arc::clone(e)
                };
                Ok((e, name.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let coded = Arc::new(AggregateExec::try_new(
            AggregateMode::Partial,
            PhysicalGroupBy::new_single(grouped),
            aggregate.aggr_expr().to_vec(),
            aggregate.filter_expr().to_vec(),
            Arc::clone(aggregate.input()),
            aggregate.input_schema(),
        )?);
        let coded_schema = coded.schema();
        let wanted = node.schema();
        let columns = wanted
            .fields()
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(field.name(), i));
                let e: Arc<dyn PhysicalExpr> = if text.get(i) == Some(&true) {
                    Arc::new(ScalarFunctionExpr::try_new(
                        Arc::new(value_udf(&table, field.data_type().clone())),
                        vec![column],
                        &coded_schema,
                        Arc::clone(&config),
                    )?)
                } else {
                    column
                };
                Ok((e, field.name().clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let projected: Arc<dyn ExecutionPlan> = Arc::new(ProjectionExec::try_new(columns, coded)?);
        // What leaves must be what left: the aggregation above merges it as it was planned.
        if projected.schema().fields() != wanted.fields() {
            return Ok(Transformed::no(node));
        }
        Ok(Transformed::yes(projected))
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringViewArray};
    use datafusion::arrow::datatypes::Schema;
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::datasource::MemTable;
    use datafusion::logical_expr::AggregateUDF;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    fn sorted(batches: &[RecordBatch]) -> Vec<String> {
        let text = pretty_format_batches(batches).unwrap().to_string();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with('|'))
            .skip(1)
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    #[tokio::test]
    async fn text_grouped_on_codes_gives_the_same_groups_with_null_and_blank_apart() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Utf8View, true),
            Field::new("b", DataType::Utf8, false),
            Field::new("n", DataType::Int64, true),
        ]));
        let long = "a value longer than twelve bytes";
        let batch = |a: Vec<Option<&str>>, b: Vec<&str>, n: Vec<i64>| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(StringViewArray::from(a)),
                    Arc::new(datafusion::arrow::array::StringArray::from(b)),
                    Arc::new(Int64Array::from(n)),
                ],
            )
            .unwrap()
        };
        let partitions = vec![
            vec![batch(
                vec![Some("x"), None, Some(""), Some(long), Some("x")],
                vec!["p", "p", "q", "p", "q"],
                vec![1, 2, 3, 4, 5],
            )],
            vec![batch(
                vec![Some(long), Some(""), None, Some("y")],
                vec!["p", "q", "q", "p"],
                vec![10, 20, 30, 40],
            )],
        ];
        let ctx = SessionContext::new();
        ctx.register_table(
            "t",
            Arc::new(MemTable::try_new(Arc::clone(&schema), partitions).unwrap()),
        )
        .unwrap();
        ctx.register_udaf(AggregateUDF::from(Capped(Signature::any(
            1,
            Volatility::Immutable,
        ))));
        // A count that is not stopped at a cap is left as it is: its groups are not bounded.
        let uncapped = ctx
            .sql("SELECT a, b, count(*) AS c FROM t GROUP BY a, b")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert!(!counts_capped_anywhere(&uncapped));
        let left = group_on_codes(Arc::clone(&uncapped), &counts_capped).unwrap();
        assert!(Arc::ptr_eq(&left, &uncapped));

        let df = ctx
            .sql(&format!(
                "SELECT a, b, {CAPPED_COUNT}(1) AS c, sum(n) AS s FROM t GROUP BY a, b"
            ))
            .await
            .unwrap();
        let plan = df.create_physical_plan().await.unwrap();
        let expected = sorted(&collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap());
        assert!(counts_capped_anywhere(&plan));
        let coded = group_on_codes(Arc::clone(&plan), &counts_capped).unwrap();
        let shown = datafusion::physical_plan::displayable(coded.as_ref())
            .indent(true)
            .to_string();
        assert_eq!(shown.matches(LOCAL_CODE).count(), 2, "{shown}");
        assert_eq!(shown.matches(LOCAL_VALUE).count(), 2, "{shown}");
        assert_eq!(coded.schema(), plan.schema());
        let got = sorted(&collect(coded, ctx.task_ctx()).await.unwrap());
        assert_eq!(got, expected);
        // Null and "" are groups of their own: ("", q) twice beside (null, q).
        assert_eq!(expected.len(), 7, "{expected:?}");
    }

    /// A count under the capped count's name (the engine's own stops at its caps).
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct Capped(Signature);

    impl datafusion::logical_expr::AggregateUDFImpl for Capped {
        fn name(&self) -> &str {
            CAPPED_COUNT
        }
        fn signature(&self) -> &Signature {
            &self.0
        }
        fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
            Ok(DataType::Int64)
        }
        fn accumulator(
            &self,
            args: datafusion::logical_expr::function::AccumulatorArgs,
        ) -> Result<Box<dyn datafusion::logical_expr::Accumulator>> {
            datafusion::functions_aggregate::count::count_udaf().accumulator(args)
        }
        fn state_fields(
            &self,
            args: datafusion::logical_expr::function::StateFieldsArgs,
        ) -> Result<Vec<FieldRef>> {
            datafusion::functions_aggregate::count::count_udaf().state_fields(args)
        }
    }

    fn counts_capped_anywhere(plan: &Arc<dyn ExecutionPlan>) -> bool {
        let mut found = false;
        plan.apply(|node| {
            if let Some(a) = node.downcast_ref::<AggregateExec>() {
                found |= counts_capped(a);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        found
    }

    #[test]
    fn the_functions_of_one_token_share_a_table() {
        let a = LocalCodes::fresh();
        let b = LocalCodes::of_token(a.token());
        assert!(Arc::ptr_eq(&a, &b));
        assert_ne!(LocalCodes::fresh().token(), a.token());
        let value = value_udf(&a, DataType::Utf8View);
        assert_eq!(
            table_of(&value),
            Some((a.token(), Some(&DataType::Utf8View)))
        );
        assert_eq!(table_of(&code_udf(&a)), Some((a.token(), None)));
    }
}
