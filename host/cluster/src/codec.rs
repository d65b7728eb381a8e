//! How Tally's plans travel to a Ballista cluster: its scans of files ([`ScanExec`]) as
//! their description, and its functions by name. Everything else is Ballista's and
//! DataFusion's own encoding.
//!
//! The scheduler decodes a plan to split it into stages and never executes a scan; an
//! executor decodes its stage's plan and, when it runs a scan, rebuilds the table from the
//! description (`tally_storage::cluster`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use ballista_core::serde::BallistaPhysicalExtensionCodec;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::{DataFusionError, Result as DfResult, TableReference};
use datafusion::datasource::TableProvider;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, Extension, LogicalPlan, ScalarUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;
use tally_engine::first_rows::{FIRST_ROWS, Order, first_rows_udaf, order_of};
use tally_engine::groups::{CAPPED_COUNT, Caps, capped_count, caps_of};
use tally_storage::cluster::ScanExec;
use tally_storage::coded::{LOCAL_CODE, LOCAL_VALUE, LocalCodes, code_udf, table_of, value_udf};
use tally_storage::memory::Budget;
use tally_storage::source::{SourceFile, TableSource};
use tally_storage::udf::Functions;
use tally_storage::value_counts::{VALUE_COUNTS, value_counts_udaf};

/// The first bytes of a Tally node (Ballista's own nodes are protobuf messages, which never
/// start with them).
const SCAN_MAGIC: &[u8] = b"\xfftally-scan-1\n";
/// What a Tally function's definition holds (its name says which).
const UDF_MAGIC: &[u8] = b"tally-udf-1";
/// What begins the bytes of a lookup function: its table as JSON follows.
const LOOKUP_MAGIC: &[u8] = b"tally-lookup-1:";
/// What a capped count's definition starts with; its caps (groups, rows) follow, each as
/// eight little-endian bytes.
const CAPPED_MAGIC: &[u8] = b"tally-capped-count-1";
/// What precedes the token of an executor's code table (and the text type a value gives).
const LOCAL_MAGIC: &[u8] = b"tally-local-codes-1";
/// What precedes the order of a `tally_first_rows` in a plan.
const FIRST_ROWS_MAGIC: &[u8] = b"tally-first-rows-1";

/// A scan of files as it travels.
#[derive(Clone, PartialEq, Message)]
pub struct ScanNode {
    #[prost(string, tag = "1")]
    pub dataset: String,
    #[prost(string, tag = "2")]
    pub definition: String,
    #[prost(message, optional, tag = "3")]
    pub source_schema: Option<datafusion_proto_common::Schema>,
    #[prost(string, repeated, tag = "4")]
    pub keys: Vec<String>,
    /// The files (JSON: where each is, its size, offset, rows and footer hash).
    #[prost(string, tag = "5")]
    pub files: String,
    #[prost(message, repeated, tag = "6")]
    pub values: Vec<FileValues>,
    #[prost(bool, tag = "7")]
    pub projected: bool,
    #[prost(uint64, repeated, tag = "8")]
    pub projection: Vec<u64>,
    #[prost(message, repeated, tag = "9")]
    pub filters: Vec<datafusion_proto::protobuf::LogicalExprNode>,
    #[prost(uint64, optional, tag = "10")]
    pub limit: Option<u64>,
    #[prost(uint64, tag = "11")]
    pub target_partitions: u64,
    #[prost(message, optional, tag = "12")]
    pub schema: Option<datafusion_proto_common::Schema>,
    #[prost(uint64, tag = "13")]
    pub partitions: u64,
}

/// One file's partition key values.
#[derive(Clone, PartialEq, Message)]
pub struct FileValues {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<datafusion_proto_common::ScalarValue>,
}

fn internal(what: &str, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Internal(format!("{what}: {e}"))
}

/// DataFusion's scalar functions, its nested ones included, by name and alias.
fn builtin_functions() -> &'static HashMap<String, Arc<ScalarUDF>> {
    static FUNCTIONS: OnceLock<HashMap<String, Arc<ScalarUDF>>> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        let mut by_name = HashMap::new();
        for f in datafusion::functions::all_default_functions()
            .into_iter()
            .chain(datafusion::functions_nested::all_default_nested_functions())
        {
            for alias in f.aliases() {
                by_name.insert(alias.clone(), Arc::clone(&f));
            }
            by_name.insert(f.name().to_string(), f);
        }
        by_name
    })
}

/// Tally's codec on the cluster: its scans and functions, then Ballista's nodes.
#[derive(Debug)]
pub struct TallyCodec {
    ballista: BallistaPhysicalExtensionCodec,
    /// What the scans an executor runs draw their reads from.
    budget: Arc<Budget>,
}

impl TallyCodec {
    /// The codec of a process whose scans draw from `budget` (the scheduler never runs one).
    pub fn new(budget: Arc<Budget>) -> TallyCodec {
        TallyCodec {
            ballista: BallistaPhysicalExtensionCodec::default(),
            budget,
        }
    }

    fn encode_scan(&self, scan: &ScanExec, buf: &mut Vec<u8>) -> DfResult<()> {
        let source = &scan.source;
        let to_schema = |s: &Schema| {
            datafusion_proto_common::Schema::try_from(s).map_err(|e| internal("a schema", e))
        };
        let mut values = Vec::with_capacity(source.values.len());
        for file in &source.values {
            let mut out = Vec::with_capacity(file.len());
            for v in file {
                out.push(
                    datafusion_proto_common::ScalarValue::try_from(v)
                        .map_err(|e| internal("a partition value", e))?,
                );
            }
            values.push(FileValues { values: out });
        }
        let filters = scan
            .filters
            .iter()
            .map(|f| {
                datafusion_proto::logical_plan::to_proto::serialize_expr(f, &FunctionCodec)
                    .map_err(|e| internal("a condition", e))
            })
            .collect::<DfResult<Vec<_>>>()?;
        let node = ScanNode {
            dataset: source.dataset.clone(),
            definition: source.definition.to_string(),
            source_schema: Some(to_schema(&source.source_schema)?),
            keys: source.keys.clone(),
            files: serde_json::to_string(&source.files).map_err(|e| internal("the files", e))?,
            values,
            projected: scan.projection.is_some(),
            projection: scan
                .projection
                .iter()
                .flatten()
                .map(|i| *i as u64)
                .collect(),
            filters,
            limit: scan.limit.map(|l| l as u64),
            target_partitions: scan.target_partitions as u64,
            schema: Some(to_schema(&scan.schema())?),
            partitions: scan.scan_partitions as u64,
        };
        buf.extend_from_slice(SCAN_MAGIC);
        node.encode(buf).map_err(|e| internal("a scan", e))
    }

    fn decode_scan(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let node = ScanNode::decode(buf).map_err(|e| internal("a scan", e))?;
        let [marker] = inputs else {
            return Err(DataFusionError::Internal(
                "a scan without its partition marker".into(),
            ));
        };
        let schema = |s: &Option<datafusion_proto_common::Schema>| -> DfResult<Arc<Schema>> {
            let s = s
                .as_ref()
                .ok_or_else(|| DataFusionError::Internal("a scan without its schema".into()))?;
            Ok(Arc::new(
                Schema::try_from(s).map_err(|e| internal("a schema", e))?,
            ))
        };
        let files: Vec<SourceFile> =
            serde_json::from_str(&node.files).map_err(|e| internal("the files", e))?;
        let values = node
            .values
            .iter()
            .map(|f| {
                f.values
                    .iter()
                    .map(|v| {
                        datafusion::common::ScalarValue::try_from(v)
                            .map_err(|e| internal("a partition value", e))
                    })
                    .collect::<DfResult<Vec<_>>>()
            })
            .collect::<DfResult<Vec<_>>>()?;
        if values.len() != files.len() {
            return Err(DataFusionError::Internal(
                "a scan whose files and partition values differ in number".into(),
            ));
        }
        let filters = node
            .filters
            .iter()
            .map(|f| {
                datafusion_proto::logical_plan::from_proto::parse_expr(f, ctx, &FunctionCodec)
                    .map_err(|e| internal("a condition", e))
            })
            .collect::<DfResult<Vec<_>>>()?;
        let source = Arc::new(TableSource {
            dataset: node.dataset,
            definition: Arc::from(node.definition.as_str()),
            source_schema: schema(&node.source_schema)?,
            keys: node.keys,
            files,
            values,
        });
        Ok(Arc::new(ScanExec::remote(
            source,
            node.projected
                .then(|| node.projection.iter().map(|i| *i as usize).collect()),
            filters,
            node.limit.map(|l| l as usize),
            node.target_partitions as usize,
            schema(&node.schema)?,
            node.partitions as usize,
            Arc::clone(marker),
            Arc::clone(&self.budget),
        )))
    }
}

impl PhysicalExtensionCodec for TallyCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        match buf.strip_prefix(SCAN_MAGIC) {
            Some(scan) => self.decode_scan(scan, inputs, ctx),
            None => self.ballista.try_decode(buf, inputs, ctx, proto_converter),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        match node.downcast_ref::<ScanExec>() {
            Some(scan) => self.encode_scan(scan, buf),
            None => self.ballista.try_encode(node, buf, proto_converter),
        }
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
        FunctionCodec.try_decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        FunctionCodec.try_encode_udf(node, buf)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<AggregateUDF>> {
        if name == CAPPED_COUNT
            && let Some(caps) = buf.strip_prefix(CAPPED_MAGIC)
            && let Ok(caps) = <[u8; 16]>::try_from(caps)
        {
            let number = |at: usize| {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(&caps[at..at + 8]);
                u64::from_le_bytes(bytes)
            };
            return Ok(Arc::new(capped_count(Caps {
                groups: usize::try_from(number(0)).unwrap_or(usize::MAX),
                rows: number(8),
            })));
        }
        if name == FIRST_ROWS
            && let Some(order) = buf
                .strip_prefix(FIRST_ROWS_MAGIC)
                .and_then(Order::from_bytes)
        {
            return Ok(Arc::new(first_rows_udaf(order)));
        }
        if name == VALUE_COUNTS && buf.is_empty() {
            return Ok(Arc::new(value_counts_udaf()));
        }
        if buf.is_empty()
            && let Some(udaf) = datafusion::functions_aggregate::all_default_aggregate_functions()
                .into_iter()
                .find(|f| f.name() == name || f.aliases().iter().any(|a| a == name))
        {
            return Ok(udaf);
        }
        Err(DataFusionError::NotImplemented(format!(
            "aggregate function `{name}` is not one this executor knows (is it the same Tally version as the server?)"
        )))
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        // The count that stops at the caps goes with its caps; on each executor its
        // accumulators count what that task reads and holds (the server checks the groups of
        // the whole answer again).
        if let Some(caps) = caps_of(node) {
            buf.extend_from_slice(CAPPED_MAGIC);
            buf.extend_from_slice(&(caps.groups as u64).to_le_bytes());
            buf.extend_from_slice(&caps.rows.to_le_bytes());
            return Ok(());
        }
        // The first rows in order go with their order and how many.
        if let Some(order) = order_of(node) {
            buf.extend_from_slice(FIRST_ROWS_MAGIC);
            buf.extend_from_slice(&order.to_bytes());
            return Ok(());
        }
        // The value counts carry nothing but their name.
        if Functions::is_tally(node.name()) && node.name() != VALUE_COUNTS {
            return Err(DataFusionError::NotImplemented(format!(
                "aggregate function `{}` cannot be sent to a cluster",
                node.name()
            )));
        }
        Ok(())
    }
}

/// Tally's functions by name, in plans and in the conditions of scans. A function that
/// carries more than its name (a prepared table's part index) cannot be sent: encoding it
/// fails, and the plan is computed on the server.
#[derive(Debug)]
pub struct FunctionCodec;

impl LogicalExtensionCodec for FunctionCodec {
    fn try_decode(
        &self,
        _buf: &[u8],
        _inputs: &[LogicalPlan],
        _ctx: &TaskContext,
    ) -> DfResult<Extension> {
        Err(DataFusionError::NotImplemented(
            "Tally sends no logical plans".into(),
        ))
    }

    fn try_encode(&self, _node: &Extension, _buf: &mut Vec<u8>) -> DfResult<()> {
        Err(DataFusionError::NotImplemented(
            "Tally sends no logical plans".into(),
        ))
    }

    fn try_decode_table_provider(
        &self,
        _buf: &[u8],
        _table_ref: &TableReference,
        _schema: datafusion::arrow::datatypes::SchemaRef,
        _ctx: &TaskContext,
    ) -> DfResult<Arc<dyn TableProvider>> {
        Err(DataFusionError::NotImplemented(
            "Tally sends no logical plans".into(),
        ))
    }

    fn try_encode_table_provider(
        &self,
        _table_ref: &TableReference,
        _node: Arc<dyn TableProvider>,
        _buf: &mut Vec<u8>,
    ) -> DfResult<()> {
        Err(DataFusionError::NotImplemented(
            "Tally sends no logical plans".into(),
        ))
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
        if buf == UDF_MAGIC
            && let Some(udf) = Functions::by_name(name)
        {
            return Ok(udf);
        }
        // An executor's codes for text it groups: one table per token, in this process.
        if (name == LOCAL_CODE || name == LOCAL_VALUE)
            && let Some(rest) = buf.strip_prefix(LOCAL_MAGIC)
            && let Some((token, out)) = rest.split_first_chunk::<8>()
        {
            let table = LocalCodes::of_token(u64::from_le_bytes(*token));
            return Ok(Arc::new(match (name, out) {
                (LOCAL_CODE, []) => code_udf(&table),
                (LOCAL_VALUE, [0]) => value_udf(&table, DataType::Utf8),
                (LOCAL_VALUE, [1]) => value_udf(&table, DataType::Utf8View),
                _ => {
                    return Err(DataFusionError::NotImplemented(format!(
                        "function `{name}` with these bytes is not one this executor knows (is it the same Tally version as the server?)"
                    )));
                }
            }));
        }
        // A looked-up field's table travels with the plan that maps by it.
        if name == tally_storage::udf::LOOKUP
            && let Some(table) = buf.strip_prefix(LOOKUP_MAGIC)
        {
            let table = tally_storage::udf::LookupTable::from_json(table)?;
            return Ok(Arc::new(Functions::lookup_udf(&Arc::new(table))));
        }
        // Ballista's executors know DataFusion's scalar functions but not its nested ones
        // (parts of multi-value fields are lists): every built-in is found by its name.
        if buf.is_empty()
            && let Some(udf) = builtin_functions().get(name)
        {
            return Ok(Arc::clone(udf));
        }
        Err(DataFusionError::NotImplemented(format!(
            "function `{name}` is not one this executor knows (is it the same Tally version as the server?)"
        )))
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        if Functions::by_name(node.name()).is_some() {
            buf.extend_from_slice(UDF_MAGIC);
            return Ok(());
        }
        if let Some((token, out)) = table_of(node) {
            buf.extend_from_slice(LOCAL_MAGIC);
            buf.extend_from_slice(&token.to_le_bytes());
            match out {
                None => {}
                Some(DataType::Utf8) => buf.push(0),
                Some(DataType::Utf8View) => buf.push(1),
                Some(other) => {
                    return Err(DataFusionError::NotImplemented(format!(
                        "function `{}` giving {other}",
                        node.name()
                    )));
                }
            }
            return Ok(());
        }
        if let Some(table) = Functions::lookup_table(node) {
            buf.extend_from_slice(LOOKUP_MAGIC);
            buf.extend_from_slice(&table.to_json());
            return Ok(());
        }
        if Functions::is_tally(node.name()) {
            return Err(DataFusionError::NotImplemented(format!(
                "function `{}` uses a prepared table's index, which lives in the server's memory",
                node.name()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_first_rows_travel_and_malformed_bytes_are_refused() {
        use datafusion::arrow::datatypes::DataType;
        use tally_engine::first_rows::{Order, first_rows_udaf, order_of};
        use tally_storage::coded::{LocalCodes, code_udf, table_of, value_udf};
        let codec = TallyCodec::new(Budget::new(1 << 20));

        // The code and value functions of one table decode to one table, by its token.
        let table = LocalCodes::of_token(0x5eed_0000_0000_0042);
        let mut code = Vec::new();
        codec.try_encode_udf(&code_udf(&table), &mut code).unwrap();
        let mut value = Vec::new();
        codec
            .try_encode_udf(&value_udf(&table, DataType::Utf8View), &mut value)
            .unwrap();
        drop(table);
        let code = codec.try_decode_udf(LOCAL_CODE, &code).unwrap();
        let value = codec.try_decode_udf(LOCAL_VALUE, &value).unwrap();
        let (a, _) = table_of(&code).unwrap();
        let (b, out) = table_of(&value).unwrap();
        assert_eq!((a, b), (0x5eed_0000_0000_0042, 0x5eed_0000_0000_0042));
        assert_eq!(out, Some(&DataType::Utf8View));

        // The first rows go with their order.
        let order = Order {
            n: 25,
            descending: vec![true, false],
        };
        let mut bytes = Vec::new();
        codec
            .try_encode_udaf(&first_rows_udaf(order.clone()), &mut bytes)
            .unwrap();
        let back = codec.try_decode_udaf(FIRST_ROWS, &bytes).unwrap();
        assert_eq!(order_of(&back), Some(&order));

        // Malformed bytes are refused, naming the function.
        for (name, bad) in [
            (LOCAL_CODE, b"tally-local-codes-1\x01".to_vec()),
            (LOCAL_VALUE, [LOCAL_MAGIC, &[0u8; 8], &[9u8]].concat()),
            (LOCAL_CODE, b"junk".to_vec()),
        ] {
            let e = codec.try_decode_udf(name, &bad).unwrap_err().to_string();
            assert!(e.contains(name), "{name}: {e}");
        }
        for bad in [
            b"tally-first-rows-1\x01\x02".to_vec(),
            [FIRST_ROWS_MAGIC, &25u64.to_le_bytes(), &[7u8]].concat(),
        ] {
            let e = codec
                .try_decode_udaf(FIRST_ROWS, &bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains(FIRST_ROWS), "{e}");
        }
    }
}
