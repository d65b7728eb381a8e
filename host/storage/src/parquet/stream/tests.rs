//! What a call reads of objects ([`CallReads`]), counted at the store.

use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::Expr;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use super::shared::{chunk_dictionary_encoded, dictionary_type};
use super::*;
use crate::object::ObjectFile;
use crate::parquet::reads::CallReads;

/// An object store in memory that counts the reads asked of it (each a request to a
/// real store).
#[derive(Debug, Default)]
struct Counted {
    inner: InMemory,
    gets: AtomicUsize,
}

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "counted {}", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

const OBJECTS: usize = 3;
const GROUPS: usize = 3;

/// A Parquet file of `GROUPS` row groups: a ministry, a kind (some null) and a count.
fn parquet(seed: usize) -> Vec<u8> {
    let rows = 40 * GROUPS;
    let schema = Arc::new(Schema::new(vec![
        Field::new("ministry", DataType::Utf8, true),
        Field::new("kind", DataType::Utf8, true),
        Field::new("count", DataType::Int64, true),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|r| format!("省{}", (r + seed) % 7)),
            )),
            Arc::new(StringArray::from_iter(
                (0..rows).map(|r| (r % 5 != 0).then(|| format!("kind {}", r % 3))),
            )),
            Arc::new(Int64Array::from_iter(
                (0..rows).map(|r| (r % 4 != 0).then_some((r * seed) as i64)),
            )),
        ],
    )
    .unwrap();
    let mut out = Vec::new();
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(40))
        .build();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    out
}

/// Objects in a counting store, registered (footers read) as a stream of the dataset.
fn objects() -> (Arc<Counted>, ParquetStream, usize) {
    let store = Arc::new(Counted::default());
    let dyn_store: Arc<dyn ObjectStore> = Arc::clone(&store) as Arc<dyn ObjectStore>;
    let mut files = Vec::new();
    let mut offset = 0;
    let mut size = 0;
    for i in 0..OBJECTS {
        let location = ObjectPath::from(format!("tree/part-{i}.parquet"));
        let meta = crate::object::wait({
            let store = Arc::clone(&dyn_store);
            let location = location.clone();
            async move {
                store.put(&location, parquet(i + 1).into()).await?;
                store.head(&location).await
            }
        })
        .unwrap()
        .unwrap();
        let object = ObjectFile {
            store: Arc::clone(&dyn_store),
            url: format!("s3://bucket/{location}"),
            location,
            etag: meta.e_tag,
            version: meta.version,
            size: meta.size,
            modified: Some(meta.last_modified.into()),
        };
        let footer =
            tally_plugin_parquet::read_footer_of(&object.message_path(), &object, object.modified)
                .unwrap();
        assert_eq!(footer.metadata.num_row_groups(), GROUPS);
        let rows = footer.num_rows;
        size += footer.size as usize;
        files.push(StreamFile::new(
            object.url.clone(),
            footer,
            offset,
            Vec::new(),
            Some(Arc::new(object)),
        ));
        offset += rows;
    }
    let fields = vec![
        ("ministry".to_string(), DataType::Utf8),
        ("kind".to_string(), DataType::Utf8),
        ("count".to_string(), DataType::Int64),
    ];
    let budget = crate::memory::Budget::new(1 << 30);
    let stream =
        ParquetStream::new("survey", &fields, &[], files, Vec::new(), None, &budget).unwrap();
    (store, stream, size)
}

/// A call's context, keeping what it reads of objects when `call_memory` is given.
fn call(call_memory: Option<usize>) -> SessionContext {
    let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
    let mut config = SessionConfig::new().with_target_partitions(1);
    if let Some(memory) = call_memory {
        config = config.with_extension(Arc::new(CallReads::new(&runtime.memory_pool, memory)));
    }
    SessionContext::new_with_config_rt(config, runtime)
}

/// What an inspection asks: one pass for every field's fill and statistics, then each
/// field's values, the last with a condition (which a scan tests against statistics and
/// page indexes).
async fn inspect_like(ctx: &SessionContext, stream: &ParquetStream) -> Vec<String> {
    let mut out = Vec::new();
    for sql in [
        "SELECT count(*), count(ministry), count(kind), count(count), sum(count), min(count), max(count) FROM t",
        "SELECT ministry, count(*) FROM t GROUP BY ministry ORDER BY ministry",
        "SELECT kind, count(*) FROM t GROUP BY kind ORDER BY kind",
        "SELECT kind, count(*) FROM t WHERE kind IS NOT NULL AND kind <> '' GROUP BY kind ORDER BY kind",
    ] {
        // A table per scan, as each of an inspection's plans takes one.
        let _ = ctx.deregister_table("t");
        ctx.register_table("t", stream.table().0).unwrap();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        out.push(
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .unwrap()
                .to_string(),
        );
    }
    out
}

/// A chunk counts as dictionary-encoded only with a dictionary page and every data page
/// so: a column written without a dictionary does not.
#[test]
fn a_chunk_is_dictionary_encoded_only_when_every_data_page_is() {
    use datafusion::parquet::file::metadata::ParquetMetaDataReader;
    use datafusion::parquet::schema::types::ColumnPath;
    let schema = Arc::new(Schema::new(vec![
        Field::new("coded", DataType::Utf8, true),
        Field::new("plain", DataType::Utf8, true),
    ]));
    let values = || StringArray::from_iter_values((0..100).map(|r| format!("省{}", r % 7)));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(values()), Arc::new(values())],
    )
    .unwrap();
    let mut out = Vec::new();
    let properties = WriterProperties::builder()
        .set_column_dictionary_enabled(ColumnPath::from("plain"), false)
        .build();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let meta = ParquetMetaDataReader::new()
        .parse_and_finish(&bytes::Bytes::from(out))
        .unwrap();
    let group = meta.row_group(0);
    assert!(chunk_dictionary_encoded(group.column(0)));
    assert!(!chunk_dictionary_encoded(group.column(1)));
}

/// Text fields asked for as dictionaries come as dictionary arrays with the same values
/// as the views a plain scan gives; a field a condition names is read as views all the
/// same, and the other text field as a dictionary beside it.
#[test]
fn text_fields_read_as_dictionaries_hold_the_values_views_hold() {
    use datafusion::arrow::array::AsArray;
    let (_, stream, _) = objects();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (table, _) = stream.table();
    let table = (table.as_ref() as &dyn std::any::Any)
        .downcast_ref::<StreamTable>()
        .expect("a Parquet stream's table");
    // Batches of 10 rows: each row group of 40 comes in four.
    let ctx = SessionContext::new_with_config(
        SessionConfig::new()
            .with_target_partitions(1)
            .with_batch_size(10),
    );
    let state = ctx.state();
    let run = |dictionaries: &[usize], filters: Vec<Expr>| {
        runtime.block_on(async {
            let plan = table
                .scan_with(&state, &[0, 1, 2], dictionaries, &filters, None)
                .await
                .unwrap();
            let schema = plan.schema();
            let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
                .await
                .unwrap();
            let text: Vec<Vec<Option<String>>> = (0..2)
                .map(|c| {
                    batches
                        .iter()
                        .flat_map(|b| {
                            let column =
                                datafusion::arrow::compute::cast(b.column(c), &DataType::Utf8)
                                    .unwrap();
                            column
                                .as_string::<i32>()
                                .iter()
                                .map(|v| v.map(str::to_string))
                                .collect::<Vec<_>>()
                        })
                        .collect()
                })
                .collect();
            let types: Vec<DataType> = schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect();
            for b in &batches {
                for (column, want) in b.columns().iter().zip(&types) {
                    assert_eq!(column.data_type(), want, "a batch in its scan's type");
                }
            }
            // Read as the chunk's dictionary, not cast batch by batch: the batches of a
            // row group share one dictionary's values.
            if types[0] == dictionary_type() {
                assert!(batches.len() >= 8, "{} batches", batches.len());
                for pair in batches.chunks(4) {
                    let values: Vec<_> = pair
                        .iter()
                        .map(|b| {
                            b.column(0)
                                .as_dictionary::<datafusion::arrow::datatypes::UInt32Type>()
                                .values()
                                .to_data()
                        })
                        .collect();
                    assert!(
                        values.windows(2).all(|w| w[0].ptr_eq(&w[1])),
                        "the batches of one row group hold one dictionary"
                    );
                }
            }
            (types, text)
        })
    };
    let (plain_types, plain) = run(&[], Vec::new());
    assert_eq!(plain_types[0], DataType::Utf8);
    let (types, both) = run(&[0, 1], Vec::new());
    assert_eq!(types[0], dictionary_type());
    assert_eq!(types[1], dictionary_type());
    assert_eq!(types[2], DataType::Int64);
    assert_eq!(both, plain);
    // A condition on `kind`: read as text, tested on the text; `ministry` a dictionary.
    let named = datafusion::prelude::col("kind").is_not_null();
    let (types, filtered) = run(&[0, 1], vec![named]);
    assert_eq!(types[0], dictionary_type());
    assert_eq!(types[1], DataType::Utf8);
    assert_eq!(filtered, plain, "the condition prunes nothing here");
}

#[test]
fn a_call_reads_each_chunk_of_an_object_once_whatever_its_scans() {
    let (store, stream, _) = objects();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let gets = || store.gets.load(Ordering::Relaxed);

    // Without keeping: every scan reads every row group of every object again.
    let start = gets();
    let plain = runtime.block_on(inspect_like(&call(None), &stream));
    let per_scan = gets() - start;
    assert!(per_scan >= 4 * OBJECTS * GROUPS, "{per_scan} requests");

    // Kept: the first scan reads each object's chunks ahead, by one request; the other
    // scans (a condition among them) read nothing more, nor does the same series again.
    let ctx = call(Some(512 << 20));
    let start = gets();
    let kept = runtime.block_on(inspect_like(&ctx, &stream));
    let first = gets() - start;
    assert_eq!(kept, plain, "the same answers");
    assert!(
        first <= 2 * OBJECTS,
        "{first} requests for {OBJECTS} objects (page indexes at most once each)"
    );
    let again = runtime.block_on(inspect_like(&ctx, &stream));
    assert_eq!(again, plain);
    assert_eq!(gets() - start, first, "nothing read twice in one call");
    let reads = ctx.state().config().get_extension::<CallReads>().unwrap();
    assert!(reads.held() > 0);

    // A call that may keep nothing reads as before, with the same answers.
    let start = gets();
    assert_eq!(
        runtime.block_on(inspect_like(&call(Some(0)), &stream)),
        plain
    );
    assert_eq!(gets() - start, per_scan);
}

#[test]
fn what_a_call_keeps_is_held_from_its_memory_and_given_back_with_it() {
    let (store, stream, size) = objects();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let gets = || store.gets.load(Ordering::Relaxed);
    let start = gets();
    let plain = runtime.block_on(inspect_like(&call(None), &stream));
    let per_scan = gets() - start;

    let ctx = call(Some(8 * size));
    assert_eq!(runtime.block_on(inspect_like(&ctx, &stream)), plain);
    let reads = ctx.state().config().get_extension::<CallReads>().unwrap();
    assert!(reads.held() > 0 && reads.held() <= size, "{}", reads.held());
    let pool = Arc::clone(&ctx.runtime_env().memory_pool);
    assert_eq!(pool.reserved(), reads.held(), "held from the call's memory");
    drop(reads);
    drop(ctx);
    assert_eq!(pool.reserved(), 0, "given back with the call");

    // Objects larger than what the call may keep (an eighth of its memory): read scan by
    // scan as before, nothing held.
    let ctx = call(Some(8 * size - 8));
    let start = gets();
    assert_eq!(runtime.block_on(inspect_like(&ctx, &stream)), plain);
    assert_eq!(gets() - start, per_scan);
    let reads = ctx.state().config().get_extension::<CallReads>().unwrap();
    assert_eq!(reads.held(), 0);
}

#[test]
fn an_object_replaced_under_a_call_fails_its_read_ahead_as_its_own_read_would() {
    let (store, stream, _) = objects();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let location = ObjectPath::from("tree/part-1.parquet");
    runtime
        .block_on(store.inner.put(&location, parquet(9).into()))
        .unwrap();
    let error = |ctx: SessionContext| {
        runtime.block_on(async {
            ctx.register_table("t", stream.table().0).unwrap();
            let df = ctx.sql("SELECT sum(count) FROM t").await.unwrap();
            df.collect().await.unwrap_err().to_string()
        })
    };
    let plain = error(call(None));
    assert!(
        plain.contains("part-1.parquet") && plain.contains("changed"),
        "{plain}"
    );
    assert_eq!(error(call(Some(512 << 20))), plain);
}
