//! The cache of prepared tables: built once, mapped across restarts, never served for
//! another version, rebuilt when damaged, safe to share between servers.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tally_engine::Engine;
use tally_semantic::Tool;
use tally_storage::cache::Cache;

use crate::fixture::{block_on, fixture_rows, fixture_yaml, write_dataset};

/// A datasets directory holding a copy of the fixture, and a cache directory beside it.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let datasets = tmp.path().join("datasets");
    write_fixture(&datasets.join("fixture"), &fixture_rows());
    let cache = tmp.path().join("cache");
    (tmp, datasets, cache)
}

fn write_fixture(dir: &Path, rows: &[Vec<Value>]) {
    write_dataset(dir, &fixture_yaml(), rows);
}

fn engine(datasets: &Path, cache: &Path) -> Engine {
    Engine::open(datasets).with_cache(Some(Cache::new(cache)))
}

fn summarize(engine: &Engine) -> Value {
    block_on(engine.call(
        Tool::SummarizeRecords,
        &json!({ "dataset_id": "fixture", "group_by": ["所管府省庁"], "metrics": ["count", "sum:総手続件数"] }),
    ))
    .expect("summary")
}

fn mapped(envelope: &Value) -> bool {
    envelope["provenance"]["transformations"]
        .as_array()
        .expect("transformations")
        .iter()
        .any(|t| {
            t["description"]
                .as_str()
                .is_some_and(|d| d.contains("mapped from the cache"))
        })
}

/// The cache's entries (finished files only).
fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "arrow"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Waits for the background write of an entry.
fn wait_for_entries(cache: &Path, n: usize) -> Vec<PathBuf> {
    let start = Instant::now();
    loop {
        let found = entries(cache);
        if found.len() == n || start.elapsed() > Duration::from_secs(30) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn data(envelope: &Value) -> &Value {
    &envelope["data"]
}

#[test]
fn built_once_and_mapped_after_a_restart() {
    let (_tmp, datasets, cache) = setup();
    let first = summarize(&engine(&datasets, &cache));
    assert!(!mapped(&first), "the first start prepares");
    let written = wait_for_entries(&cache, 1);
    assert_eq!(written.len(), 1, "one entry: {written:?}");
    let modified = std::fs::metadata(&written[0])
        .and_then(|m| m.modified())
        .ok();

    let restarted = engine(&datasets, &cache);
    let second = summarize(&restarted);
    assert!(mapped(&second), "a restart maps: {second:#}");
    assert_eq!(data(&first), data(&second), "same answer");
    assert_eq!(
        first["provenance"]["sources"], second["provenance"]["sources"],
        "same sources, same content hash"
    );
    // Mapped, not written again: once no preparation of the restarted engine is running,
    // the one entry is the first one, untouched.
    block_on(restarted.finish_preparations(Duration::from_secs(30)));
    assert_eq!(entries(&cache), written);
    assert_eq!(
        std::fs::metadata(&written[0])
            .and_then(|m| m.modified())
            .ok(),
        modified
    );

    // Every tool answers the same from the mapped table.
    let fresh = Engine::open(&datasets);
    for (tool, args) in [
        (
            Tool::InspectDataset,
            json!({ "dataset_id": "fixture", "detail": "full" }),
        ),
        (
            Tool::QueryRecords,
            json!({ "dataset_id": "fixture", "q": "申請", "order_by": ["-総手続件数"] }),
        ),
        (
            Tool::SummarizeRecords,
            json!({ "dataset_id": "fixture", "group_by": ["手続類型"], "metrics": ["count", "avg:オンライン率"], "explode": [] }),
        ),
    ] {
        let a = block_on(fresh.call(tool, &args)).expect("prepared answer");
        let b = block_on(engine(&datasets, &cache).call(tool, &args)).expect("mapped answer");
        assert_eq!(data(&a), data(&b), "{} answers the same", tool.name());
    }
}

#[test]
fn a_changed_data_file_is_prepared_anew_and_its_old_entry_removed() {
    let (_tmp, datasets, cache) = setup();
    let before = summarize(&engine(&datasets, &cache));
    let old = wait_for_entries(&cache, 1);
    let mut rows = fixture_rows();
    rows.truncate(rows.len() - 2);
    write_fixture(&datasets.join("fixture"), &rows);
    let after = summarize(&engine(&datasets, &cache));
    assert!(
        !mapped(&after),
        "another version is never served from the old entry"
    );
    assert_ne!(
        data(&before)["total_records"],
        data(&after)["total_records"]
    );
    let start = Instant::now();
    while entries(&cache) == old && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let now = entries(&cache);
    assert_eq!(now.len(), 1, "the old version's entry is gone: {now:?}");
    assert_ne!(now, old);
    assert!(mapped(&summarize(&engine(&datasets, &cache))));
}

#[test]
fn a_changed_definition_is_another_version() {
    let (_tmp, datasets, cache) = setup();
    summarize(&engine(&datasets, &cache));
    wait_for_entries(&cache, 1);
    let yaml = fixture_yaml().replace("試験用の架空データ。", "試験用の架空データ（改訂）。");
    assert_ne!(
        yaml,
        fixture_yaml(),
        "the fixture has the note this test edits"
    );
    std::fs::write(datasets.join("fixture/dataset.yaml"), yaml).expect("yaml");
    assert!(!mapped(&summarize(&engine(&datasets, &cache))));
}

#[test]
fn a_touched_but_unchanged_data_file_is_still_mapped() {
    let (_tmp, datasets, cache) = setup();
    summarize(&engine(&datasets, &cache));
    wait_for_entries(&cache, 1);
    let file = datasets.join("fixture/data.parquet");
    let bytes = std::fs::read(&file).expect("data");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&file, &bytes).expect("rewritten");
    assert!(
        mapped(&summarize(&engine(&datasets, &cache))),
        "the same bytes, hashed again, still match"
    );
}

#[test]
fn a_damaged_entry_is_detected_and_rebuilt() {
    type Spoil = fn(&Path);
    let damage: [(&str, Spoil); 4] = [
        ("truncated", |p| {
            let bytes = std::fs::read(p).expect("entry");
            std::fs::write(p, &bytes[..bytes.len() / 2]).expect("truncate");
        }),
        ("garbage", |p| {
            let len = std::fs::metadata(p).expect("entry").len() as usize;
            std::fs::write(p, vec![0x5a; len]).expect("garbage");
        }),
        ("empty", |p| std::fs::write(p, b"").expect("empty")),
        // The frame intact, one number changed: found by the column's checksum when a call
        // first reads it, and that call is answered from the data prepared anew.
        ("a value changed", |p| {
            let mut bytes = std::fs::read(p).expect("entry");
            let value = 5000i64.to_le_bytes();
            let at: Vec<usize> = bytes
                .windows(8)
                .enumerate()
                .filter(|(_, w)| *w == value)
                .map(|(i, _)| i)
                .collect();
            assert_eq!(at.len(), 1, "the fixture's 5000 is stored once");
            bytes[at[0]..at[0] + 8].copy_from_slice(&5001i64.to_le_bytes());
            std::fs::write(p, bytes).expect("spoiled");
        }),
    ];
    for (what, spoil) in damage {
        let (_tmp, datasets, cache) = setup();
        let first = summarize(&engine(&datasets, &cache));
        let written = wait_for_entries(&cache, 1);
        spoil(&written[0]);
        let second = summarize(&engine(&datasets, &cache));
        assert!(!mapped(&second), "{what}: a damaged entry is not served");
        assert_eq!(data(&first), data(&second), "{what}: prepared anew");
        // Rewritten whole, then mapped again.
        let start = Instant::now();
        loop {
            let again = summarize(&engine(&datasets, &cache));
            if mapped(&again) {
                assert_eq!(data(&first), data(&again));
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{what}: the entry was not rebuilt"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn servers_sharing_a_cache_do_not_corrupt_it() {
    let (_tmp, datasets, cache) = setup();
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| summarize(&engine(&datasets, &cache))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a server"))
            .collect()
    });
    for a in &answers[1..] {
        assert_eq!(data(a), data(&answers[0]));
    }
    // Whoever renamed last, the one entry is whole.
    std::thread::sleep(Duration::from_millis(500));
    let found = wait_for_entries(&cache, 1);
    assert_eq!(found.len(), 1, "{found:?}");
    let leftovers: Vec<_> = std::fs::read_dir(&cache)
        .expect("cache dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary file is left");
    let again = summarize(&engine(&datasets, &cache));
    assert!(mapped(&again));
    assert_eq!(data(&again), data(&answers[0]));
}

/// The cache directory is made private; one other users may write is not used (an entry
/// there could have been planted), and a cache path that is not a directory is not either.
/// The answer is the same either way: only the cache is given up.
#[cfg(unix)]
#[test]
fn a_cache_others_could_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let (_tmp, datasets, cache) = setup();
    let expected = summarize(&Engine::open(&datasets));
    summarize(&engine(&datasets, &cache));
    wait_for_entries(&cache, 1);
    let mode = std::fs::metadata(&cache)
        .expect("cache dir")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "made private: {mode:o}");

    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let shared = summarize(&engine(&datasets, &cache));
    assert!(
        !mapped(&shared),
        "an entry in a directory others can write is not served"
    );
    assert_eq!(data(&shared), data(&expected));

    let (_tmp2, datasets2, _) = setup();
    let file = datasets2.parent().expect("tmp").join("not-a-dir");
    std::fs::write(&file, b"x").expect("a file");
    let answer = summarize(&engine(&datasets2, &file));
    assert!(!mapped(&answer));
    assert_eq!(data(&answer), data(&expected));
    assert_eq!(
        std::fs::read(&file).expect("untouched"),
        b"x",
        "nothing lost"
    );
}

/// Entries of versions the catalog no longer serves are removed: at start, and when a reload
/// finds a dataset removed or changed.
#[test]
fn entries_of_versions_no_longer_served_are_removed() {
    let (_tmp, datasets, cache) = setup();
    let engine = engine(&datasets, &cache);
    summarize(&engine);
    assert_eq!(wait_for_entries(&cache, 1).len(), 1);
    // Another dataset's entry, left by a version this directory no longer has.
    write_fixture(&datasets.join("second"), &fixture_rows());
    let engine = self::engine(&datasets, &cache);
    block_on(engine.call(
        Tool::QueryRecords,
        &json!({ "dataset_id": "second", "limit": 1 }),
    ))
    .expect("answer");
    assert_eq!(wait_for_entries(&cache, 2).len(), 2);
    std::fs::remove_dir_all(datasets.join("second")).expect("removed");
    let (changes, _) = engine.reload(Duration::ZERO);
    assert_eq!(changes.removed, vec!["second".to_string()]);
    assert_eq!(
        entries(&cache).len(),
        1,
        "the removed dataset's entry is gone"
    );

    // A restart after the data changed, with no call yet: the old version's entry is gone.
    let mut rows = fixture_rows();
    rows.truncate(3);
    write_fixture(&datasets.join("fixture"), &rows);
    let _restarted = self::engine(&datasets, &cache);
    assert_eq!(entries(&cache), Vec::<PathBuf>::new());
}

/// A table larger than the memory budget is read from its files at every call even with a
/// cache: no entry is written for it (by a call, or by the command line's preparation), so
/// no cache entry grows past the budget.
#[test]
fn data_over_the_budget_is_read_from_its_files_and_not_cached() {
    use crate::differential::{YAML, as_json, random_rows};
    let tmp = tempfile::tempdir().expect("temp dir");
    let datasets = tmp.path().join("datasets");
    let folder = datasets.join("random");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(folder.join("dataset.yaml"), YAML).expect("yaml");
    // About 48 bytes a record prepared: 200,000 records would hold 9.6 MB, over 8 MiB.
    let rows = as_json(&random_rows(1, 200_000));
    let groups = datafusion::parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(16_384))
        .build();
    crate::fixture::write_parquet_with(
        &folder.join("data.parquet"),
        YAML,
        &rows,
        &[],
        Some(groups),
    );
    let cache = tmp.path().join("cache");
    let engine = Engine::open_with(
        &datasets,
        tally_engine::Limits {
            memory_budget_bytes: 8 << 20,
            ..Default::default()
        },
    )
    .with_cache(Some(Cache::new(&cache)));
    // The command line prepares before its call, unless the data is read from its files.
    block_on(engine.prepare(&tally_engine::Caller::operator(), "random"));
    for _ in 0..2 {
        let out = block_on(engine.call(
            Tool::SummarizeRecords,
            &json!({ "dataset_id": "random", "group_by": ["grp"], "metrics": ["count"] }),
        ))
        .expect("summary");
        assert_eq!(out["data"]["total_records"], json!(200_000));
        let extract = out["provenance"]["transformations"][0]["description"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(extract.contains("read from the files"), "{extract}");
    }
    // No preparation runs that could still write an entry.
    block_on(engine.finish_preparations(Duration::from_secs(30)));
    assert!(entries(&cache).is_empty(), "{:?}", entries(&cache));
}

/// Integer and number columns stored narrower than their prepared type (`Int32`, `UInt32`,
/// `Float32`), as the reference survey stores its counts. Widening such a column leaves a
/// validity bitmap on it even where none of its values is null; the Arrow file drops that
/// bitmap, so a checksum taken over it never matched the column read back, and every call
/// that read such a column from a fresh entry failed as "damaged" (and so on, prepared anew
/// each time). The last chunk (a single batch read, not concatenated) has no nulls, the
/// first chunk has some: the shape of `総手続件数` in the survey.
#[test]
fn a_widened_number_column_without_nulls_in_a_chunk_matches_its_checksum() {
    use datafusion::arrow::array::{ArrayRef, Float32Array, Int32Array, StringArray, UInt32Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::parquet::arrow::ArrowWriter;
    use std::sync::Arc;
    use tally_storage::store::CHUNK_ROWS;

    const YAML: &str = r#"
title: narrow
fields:
- {name: id, role: id}
- {name: grp, role: dim}
- {name: n, role: measure, data_type: integer}
- {name: u, role: measure, data_type: integer}
- {name: v, role: measure, data_type: number}
"#;
    let tmp = tempfile::tempdir().expect("temp dir");
    let datasets = tmp.path().join("datasets");
    let folder = datasets.join("narrow");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(folder.join("dataset.yaml"), YAML).expect("yaml");
    let rows = CHUNK_ROWS + 1000;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            (0..rows).map(|r| format!("r{r}")),
        )),
        Arc::new(StringArray::from_iter_values(
            (0..rows).map(|r| ["a", "b", "c"][r % 3]),
        )),
        Arc::new(Int32Array::from_iter((0..rows).map(|r| {
            (r >= CHUNK_ROWS || r % 100 != 0).then_some((r % 7) as i32)
        }))),
        Arc::new(UInt32Array::from_iter_values(
            (0..rows).map(|r| (r % 5) as u32),
        )),
        Arc::new(Float32Array::from_iter_values(
            (0..rows).map(|r| (r % 4) as f32 / 2.0),
        )),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("grp", DataType::Utf8, false),
        Field::new("n", DataType::Int32, true),
        Field::new("u", DataType::UInt32, true),
        Field::new("v", DataType::Float32, true),
    ]));
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch");
    let file = std::fs::File::create(folder.join("data.parquet")).expect("parquet file");
    let mut writer = ArrowWriter::try_new(file, schema, None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");

    let cache = tmp.path().join("cache");
    let calls = [
        (
            Tool::InspectDataset,
            json!({ "dataset_id": "narrow", "detail": "full" }),
        ),
        (
            Tool::SummarizeRecords,
            json!({ "dataset_id": "narrow", "group_by": ["grp"], "metrics": ["count", "sum:n", "sum:u", "sum:v"] }),
        ),
    ];
    let uncached = Engine::open(&datasets);
    // The first start prepares into the cache as the command line does and serves the entry
    // it has just written; a restart maps it. Both read every column back through its
    // checksum.
    for start in ["first start", "restart"] {
        let cached = engine(&datasets, &cache);
        if start == "first start" {
            block_on(cached.prepare(&tally_engine::Caller::operator(), "narrow"));
        }
        for (tool, args) in &calls {
            let expected = block_on(uncached.call(*tool, args)).expect("answer without a cache");
            let got = block_on(cached.call(*tool, args))
                .unwrap_or_else(|e| panic!("{start}: {} from the cache: {e:?}", tool.name()));
            // Inspection does not say where its table came from; a summary does.
            if *tool == Tool::SummarizeRecords {
                let served = &got["provenance"]["transformations"];
                assert!(
                    served.to_string().contains("the cache"),
                    "{start}: served from the cache: {served}"
                );
            }
            assert_eq!(data(&got), data(&expected), "{start}: {}", tool.name());
        }
        assert_eq!(entries(&cache).len(), 1, "{start}: the entry kept");
    }
}

/// The folded forms a search reads (issue 39's index, kept beside the dictionaries) are
/// checked like every column: one changed is found when a search first reads them; that
/// search is answered all the same (each record tested, as the files are), and the next call
/// is answered from the data prepared anew, as before the damage.
#[test]
fn a_damaged_folded_form_is_found_by_its_checksum() {
    let (_tmp, datasets, cache) = setup();
    let search = |engine: &Engine| {
        block_on(engine.call(
            Tool::QueryRecords,
            &json!({ "dataset_id": "fixture", "q": "RETURN filing", "limit": 5 }),
        ))
        .expect("search")
    };
    let first = search(&engine(&datasets, &cache));
    assert!(first["data"]["total"].as_u64() > Some(0), "{first}");
    let written = wait_for_entries(&cache, 1);
    let mut bytes = std::fs::read(&written[0]).expect("entry");
    let folded = b"tax return filing";
    let at: Vec<usize> = bytes
        .windows(folded.len())
        .enumerate()
        .filter(|(_, w)| *w == folded)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the folded form is stored once");
    bytes[at[0] + folded.len() - 1] = b'x';
    std::fs::write(&written[0], bytes).expect("spoiled");
    let engine = engine(&datasets, &cache);
    let second = search(&engine);
    assert_eq!(
        data(&first),
        data(&second),
        "the damaged search answered record by record"
    );
    let third = search(&engine);
    assert!(!mapped(&third), "a damaged entry is not served again");
    assert_eq!(data(&first), data(&third), "prepared anew");
}
