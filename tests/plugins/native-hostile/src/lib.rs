//! Panics as its dataset's `config.mode` says: `construct`, `scan`, `stream` (after one
//! batch); `pending` gives a stream that never yields a batch (and never blocks its thread);
//! `ok` serves three rows, and so does `chatty`, which also writes to stdout (a line that
//! looks like a JSON-RPC answer among them) as it is built and as it scans. Every mode says
//! on stderr what it is about to do.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Result;
use datafusion::datasource::TableType;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use tally_plugin_api::native::{Context, StreamExec};

#[derive(Debug)]
struct Hostile {
    mode: String,
    schema: SchemaRef,
}

fn batch(schema: &SchemaRef) -> RecordBatch {
    let names: ArrayRef = Arc::new(StringArray::from(vec!["alpha", "beta", "gamma"]));
    let n: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
    RecordBatch::try_new(Arc::clone(schema), vec![names, n]).expect("fits the schema")
}

#[async_trait]
impl TableProvider for Hostile {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        eprintln!("hostile native plugin: scanning in mode {}", self.mode);
        if self.mode == "chatty" {
            println!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"forged":true}}}}"#);
            println!("hostile native plugin: a line on stdout while scanning");
        }
        if self.mode == "scan" {
            panic!("hostile native plugin: panic in scan");
        }
        let full = batch(&self.schema);
        let data = match projection {
            Some(p) => full.project(p)?,
            None => full,
        };
        let schema = data.schema();
        if self.mode == "pending" {
            let stream_schema = Arc::clone(&schema);
            return Ok(Arc::new(StreamExec::new(
                "hostile pending stream",
                schema,
                move || {
                    Box::pin(RecordBatchStreamAdapter::new(
                        Arc::clone(&stream_schema),
                        futures::stream::pending(),
                    ))
                },
            )));
        }
        if self.mode == "stream" {
            let stream_schema = Arc::clone(&schema);
            return Ok(Arc::new(StreamExec::new(
                "hostile stream",
                schema,
                move || {
                    let first = data.clone();
                    let items = futures::stream::iter(0..2).map(move |i| {
                        if i == 1 {
                            panic!("hostile native plugin: panic in the middle of a stream");
                        }
                        Ok(first.clone())
                    });
                    Box::pin(RecordBatchStreamAdapter::new(
                        Arc::clone(&stream_schema),
                        items,
                    ))
                },
            )));
        }
        Ok(Arc::new(StreamExec::batches(
            "hostile rows",
            schema,
            vec![data],
        )))
    }
}

use futures::StreamExt;

fn construct(context: &Context) -> std::result::Result<Arc<dyn TableProvider>, String> {
    let mode = context
        .config
        .get("mode")
        .and_then(|m| m.as_str())
        .unwrap_or("ok")
        .to_string();
    eprintln!("hostile native plugin: building in mode {mode}");
    if mode == "chatty" {
        println!("hostile native plugin: a line on stdout while being built");
    }
    if mode == "construct" {
        panic!("hostile native plugin: panic while being built");
    }
    Ok(Arc::new(Hostile {
        mode,
        schema: Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ])),
    }))
}

tally_plugin_api::export_native_plugin!("hostile", construct);
