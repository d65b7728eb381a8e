//! Findings of an attacker's probe ("one gate for what a caller may see and how much it may
//! cost"), each a test named after what broke: an answer to check of any size, a recorded
//! cursor `verify_answer` re-signed where `query_records` refuses it, a corrupt page that the
//! check of a dataset passed, and `inspect_dataset` on a decompression bomb.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use tally_engine::{Engine, EngineError, Limits};
use tally_semantic::Tool;

use crate::fixture::{block_on, datasets_dir, engine};

fn call(engine: &Engine, tool: Tool, arguments: Value) -> Result<Value, EngineError> {
    block_on(engine.call(tool, &arguments))
}

/// A page of `query_records` on the fixture, at the cursor given.
fn page(cursor: Option<&str>) -> Value {
    let mut arguments = json!({ "dataset_id": "fixture", "select": ["手続ID"], "limit": 2 });
    if let Some(c) = cursor {
        arguments["cursor"] = json!(c);
    }
    call(engine(), Tool::QueryRecords, arguments).expect("a page")
}

/// The answer with its recorded call's cursor replaced, and its `resultHash` made again (what
/// anyone can do: the hash is not a signature).
fn with_cursor(mut answer: Value, cursor: &str) -> Value {
    answer["provenance"]["query"]["arguments"]["cursor"] = json!(cursor);
    let hash = tally_engine::envelope::result_hash(&answer["data"], &answer["provenance"]["query"]);
    answer["provenance"]["resultHash"] = json!(hash);
    answer
}

/// `cursor` with its offset rewritten, its signature kept (so it no longer matches).
fn edited(cursor: &str, offset: usize) -> String {
    let (body, tag) = cursor.split_once('.').expect("a signed cursor");
    let mut payload: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).expect("base64")).expect("json");
    payload["o"] = json!(offset);
    format!(
        "{}.{tag}",
        URL_SAFE_NO_PAD.encode(payload.to_string().as_bytes())
    )
}

fn verify(engine: &Engine, answer: &Value) -> Result<Value, EngineError> {
    call(engine, Tool::VerifyAnswer, json!({ "envelope": answer }))
}

/// Regression (finding 2): `verify_answer` re-signed a recorded cursor and ran it, so a
/// cursor whose offset was edited (with the answer's data and hash made to match) checked as
/// `identical`, though `query_records` refuses that very cursor. Now the recorded cursor goes
/// through the same check as every `query_records` cursor, and is refused for the same reason.
#[test]
fn verify_refuses_an_edited_cursor_as_query_records_does() {
    let first = page(None);
    let second_cursor = first["data"]["next_cursor"]
        .as_str()
        .expect("a second page");
    let second = page(Some(second_cursor));
    let third_cursor = second["data"]["next_cursor"]
        .as_str()
        .expect("a third page");
    let third = page(Some(third_cursor));

    // A genuine page checks as identical in the process whose key signed it.
    let checked = verify(engine(), &second).expect("a check");
    assert_eq!(checked["data"]["status"], "identical", "{checked}");

    // The third page's data, claimed for the second page's cursor with its offset edited to
    // the third page's: consistent data, a consistent hash, a cursor no process issued.
    let forged = edited(second_cursor, 4);
    let refused = call(
        engine(),
        Tool::QueryRecords,
        json!({ "dataset_id": "fixture", "select": ["手続ID"], "limit": 2, "cursor": forged }),
    )
    .expect_err("query_records refuses an edited cursor");
    let EngineError::Request(refusal) = refused else {
        panic!("a refusal of the caller's input: {refused:?}")
    };
    assert_eq!(refusal.code, tally_semantic::ErrorCode::InvalidCursor);
    let checked = verify(engine(), &with_cursor(third.clone(), &forged)).expect("a check");
    let data = &checked["data"];
    assert_eq!(data["status"], "not_reproducible", "{checked}");
    let reasons = data["reasons"].to_string();
    assert!(
        reasons.contains(&refusal.message),
        "verify gives query_records' reason ({}): {reasons}",
        refusal.message
    );

    // A cursor signed by another key (another server process, or forged) likewise.
    let (body, _) = third_cursor.split_once('.').expect("a signed cursor");
    let foreign = format!("{body}.{}", URL_SAFE_NO_PAD.encode([7u8; 16]));
    let checked = verify(engine(), &with_cursor(third, &foreign)).expect("a check");
    assert_eq!(checked["data"]["status"], "not_reproducible", "{checked}");
    assert!(
        checked["data"]["reasons"]
            .to_string()
            .contains("not issued by this server process or was edited"),
        "{checked}"
    );
}

/// An engine over the fixture whose answers to check may have at most `cap` bytes.
fn capped(cap: usize) -> Engine {
    Engine::open_with(
        datasets_dir(),
        Limits {
            max_envelope_bytes: cap,
            ..Limits::default()
        },
    )
}

/// Regression (finding 1): an answer to check was read whatever its size (a 320 MB envelope
/// took 8 GB). The answer handed to `verify_answer` (an object, or its JSON text) is refused
/// past `max_envelope_bytes`, saying the cap and the flag that raises it.
#[test]
fn verify_refuses_an_envelope_past_its_size_cap() {
    let answer = page(None);
    let size = serde_json::to_string(&answer).expect("json").len();
    let engine = capped(size - 1);
    for sent in [answer.clone(), json!(answer.to_string())] {
        let e = verify(&engine, &sent).expect_err("past the cap");
        let EngineError::Limit { message, hint } = &e else {
            panic!("a limit: {e:?}")
        };
        assert!(message.contains(&(size - 1).to_string()), "{message}");
        assert!(hint.contains("--max-envelope-bytes"), "{hint}");
    }
    // At the cap it is checked.
    let checked = verify(&capped(size), &answer).expect("a check");
    assert_eq!(checked["data"]["status"], "identical", "{checked}");
}

/// Regression (finding 1): JSON nested past serde_json's recursion limit is refused in
/// words (what was wrong), not as an internal error or the parser's message alone.
#[test]
fn an_envelope_nested_too_deep_is_refused_in_words() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let e = tally_engine::verify::read_envelope(&deep, 1 << 20).expect_err("too deep");
    let EngineError::Request(refusal) = &e else {
        panic!("a refusal of the input: {e:?}")
    };
    assert!(
        refusal.message.contains("deeper than 128"),
        "{}",
        refusal.message
    );
    let e = verify(engine(), &json!(deep)).expect_err("too deep");
    assert!(matches!(e, EngineError::Request(_)), "{e:?}");
    // Brackets inside strings are text, not nesting.
    let text = json!({ "data": "[".repeat(500), "provenance": {} }).to_string();
    assert!(tally_engine::verify::read_envelope(&text, 1 << 20).is_ok());
}

/// A Parquet file (`id` text, `n` Int64; zstd, no dictionary) whose `n` data page has the
/// start of its compressed body overwritten (neither the page header nor the footer): the
/// footer reads and the page headers check out, the page does not decode. (Bytes flipped
/// further into a zstd body may still decompress, to other values: the frame's magic number,
/// right after the page header, is what a decoder always checks.)
pub fn write_corrupt_page(path: &std::path::Path) {
    use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::basic::{Compression, ZstdLevel};
    use datafusion::parquet::file::properties::WriterProperties;
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};

    let rows = 4096i64;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("n", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(StringArray::from(
                (0..rows).map(|i| format!("r{i}")).collect::<Vec<_>>(),
            )) as ArrayRef,
            Arc::new(Int64Array::from(
                (0..rows).map(|i| (i * 7919) % 1000).collect::<Vec<_>>(),
            )),
        ],
    )
    .expect("batch");
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(false)
        .build();
    let file = std::fs::File::create(path).expect("file");
    let mut writer = ArrowWriter::try_new(file, schema, Some(props)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");

    let reader = SerializedFileReader::new(std::fs::File::open(path).expect("file")).expect("read");
    let column = reader.metadata().row_group(0).column(1).clone();
    let start = column.data_page_offset() as usize;
    let end = start + column.compressed_size() as usize;
    let mut bytes = std::fs::read(path).expect("bytes");
    // The zstd frame of the page body begins after the page header with its magic number.
    let body = bytes[start..end]
        .windows(4)
        .position(|w| w == [0x28, 0xb5, 0x2f, 0xfd])
        .map(|at| start + at)
        .expect("a zstd frame in the page");
    for b in &mut bytes[body..body + 16] {
        *b ^= 0x5a;
    }
    std::fs::write(path, bytes).expect("corrupted");
}

/// Regression (finding 3): `tally check` read footers only, so a file whose pages are
/// corrupt passed it and failed every query. Reading every page of a dataset (what every
/// check now does) fails on it, naming the file, the column and why.
#[test]
fn a_corrupt_page_fails_reading_every_page_with_its_file_and_column() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().join("corrupt");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(
        folder.join("dataset.yaml"),
        "title: corrupt\nfields:\n- {name: id, role: id}\n- {name: n, role: measure, data_type: integer}\n",
    )
    .expect("yaml");
    write_corrupt_page(&folder.join("data.parquet"));
    let options = tally_storage::catalog::Options {
        memory_budget: 256 << 20,
        ..Default::default()
    };
    let ds = tally_storage::catalog::register(&folder, "corrupt", "corrupt/dataset.yaml", &options)
        .expect("the footer is sound")
        .expect("served");
    let budget = tally_storage::memory::Budget::new(256 << 20);
    let reason = tally_storage::catalog::read_every_page(&ds, &budget).expect_err("a corrupt page");
    assert!(reason.contains("data.parquet"), "{reason}");
    assert!(reason.contains("column `n`"), "{reason}");
    assert!(reason.contains("does not decode"), "{reason}");
    assert_eq!(budget.used(), 0, "what was held is given back");
    // And it is the file every query fails on.
    let engine = Arc::new(Engine::open_with(
        dir.path(),
        Limits {
            memory_budget_bytes: 256 << 20,
            ..Limits::default()
        },
    ));
    let failed = call(
        &engine,
        Tool::SummarizeRecords,
        json!({ "dataset_id": "corrupt", "metrics": ["sum:n"] }),
    );
    assert!(failed.is_err(), "{failed:?}");
}

/// A datasets directory holding `bomb`: 1.5M copies of one 2 KiB string (dictionary-encoded,
/// zstd; 3 GB once every value is decoded, a few hundred KB on disk), as
/// `host/server/tests/it/e2e.rs` writes `bomb-text.parquet` for the e2e suite.
fn bomb_dir() -> &'static std::path::Path {
    use datafusion::arrow::array::{ArrayRef, DictionaryArray, Int32Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::basic::{Compression, ZstdLevel};
    use datafusion::parquet::file::properties::WriterProperties;

    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let folder = dir.path().join("bomb");
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(
            folder.join("dataset.yaml"),
            "title: bomb\nfields:\n- {name: s, role: dim}\n",
        )
        .expect("yaml");
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            false,
        )]));
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(4 * 1024 * 1024))
            .build();
        let file = std::fs::File::create(folder.join("data.parquet")).expect("file");
        let mut writer =
            ArrowWriter::try_new(file, Arc::clone(&schema), Some(props)).expect("writer");
        let text = "y".repeat(2048);
        for _ in 0..3 {
            let keys = Int32Array::from(vec![0i32; 500_000]);
            let values = Arc::new(StringArray::from(vec![text.as_str()]));
            let dict: DictionaryArray<Int32Type> =
                DictionaryArray::try_new(keys, values).expect("dictionary");
            let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(dict) as ArrayRef])
                .expect("batch");
            writer.write(&batch).expect("write");
        }
        writer.close().expect("close");
        dir
    })
    .path()
}

/// A bomb whose prepared table does not fit the memory budget is read from its files by every
/// call, `inspect_dataset` too (within the call's memory and deadline): refusing it would leave
/// every dataset larger than the budget without a description.
#[test]
fn inspect_of_a_bomb_whose_table_does_not_fit_reads_the_files_as_query_records_does() {
    let engine = Arc::new(Engine::open_with(
        bomb_dir(),
        Limits {
            // 1.5M records need about 9 MiB prepared: more than this budget.
            memory_budget_bytes: 4 << 20,
            call_timeout: std::time::Duration::from_secs(120),
            ..Limits::default()
        },
    ));
    let page = block_on(crate::fixture::answer(
        &engine,
        Tool::QueryRecords,
        json!({ "dataset_id": "bomb", "limit": 2 }),
    ))
    .expect("query_records reads a page of the files");
    assert_eq!(page["data"]["total"], 1_500_000, "{page}");
    // A dataset larger than the budget is described from its files, as it is queried (a
    // refusal would leave every dataset over the budget without a description).
    let started = std::time::Instant::now();
    let described = block_on(crate::fixture::answer(
        &engine,
        Tool::InspectDataset,
        json!({ "dataset_id": "bomb" }),
    ))
    .expect("described from the files");
    assert_eq!(described["data"]["record_count"], 1_500_000);
    let field = &described["data"]["fields"][0];
    assert_eq!(field["values"]["distinct_count"], 1, "{field}");
    println!(
        "a 3 GB bomb described from its files in {:?}",
        started.elapsed()
    );
}

/// Regression (finding 4): a bomb whose table fits the budget, large enough to be prepared in
/// the background: the first `inspect_dataset` decoded every value from the files while the
/// preparation read them too, and ran into its deadline. It waits for the prepared table (one
/// dictionary value, 1.5M codes) and describes the data from it.
#[test]
fn inspect_of_a_bomb_being_prepared_describes_it_from_its_table() {
    let engine = Arc::new(Engine::open_with(
        bomb_dir(),
        Limits {
            memory_budget_bytes: 256 << 20,
            ..Limits::default()
        },
    ));
    let described = block_on(crate::fixture::answer(
        &engine,
        Tool::InspectDataset,
        json!({ "dataset_id": "bomb" }),
    ))
    .expect("described");
    let data = &described["data"];
    assert_eq!(data["record_count"], 1_500_000, "{data}");
    let field = &data["fields"][0];
    assert_eq!(field["fill_rate"], 1.0, "{field}");
    assert_eq!(field["values"]["distinct_count"], 1, "{field}");
}

/// Cursors of one datasets directory are signed with one key kept in its cache (so a page of
/// a server is checked by `tally verify` in another process, and edited cursors are refused
/// by every process alike): made once, private, read back the same; a cache directory other
/// users may write gives no key.
#[test]
fn the_cursor_key_is_kept_private_in_the_cache_and_read_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = tally_storage::cache::Cache::new(dir.path().join("cache"));
    let first = cache.cursor_key().expect("a key is made");
    assert_eq!(cache.cursor_key(), Some(first), "the same key read back");
    let again = tally_storage::cache::Cache::new(dir.path().join("cache"));
    assert_eq!(
        again.cursor_key(),
        Some(first),
        "another process reads the same key"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("cache/cursor.key"))
            .expect("key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "readable by its owner only: {mode:o}");
        let open = dir.path().join("open");
        std::fs::create_dir(&open).expect("dir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert_eq!(tally_storage::cache::Cache::new(&open).cursor_key(), None);
    }
}
