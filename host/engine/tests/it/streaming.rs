//! Data read from its files at every call (the path that serves data over the memory budget)
//! answers exactly as the prepared table does: a differential test on random data with nulls,
//! empty groups and multi-value cells, written in many small row groups and pages; and
//! conditions leave row groups unread, which the extract step says.

use serde_json::{Value, json};
use tally_engine::{Engine, Limits};
use tally_semantic::Tool;
use tally_storage::dataset::Serving;

use crate::differential::{YAML, as_json, random_rows};
use crate::fixture::{block_on, write_parquet_with};

fn small_groups() -> datafusion::parquet::file::properties::WriterProperties {
    datafusion::parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(64))
        .set_data_page_row_count_limit(16)
        .set_write_batch_size(16)
        .build()
}

fn engine(dir: &std::path::Path, serving: Serving) -> Engine {
    engine_in(dir, serving, 1)
}

/// An engine that reads every table in `partitions` partitions (one: none is large).
fn engine_in(dir: &std::path::Path, serving: Serving, partitions: usize) -> Engine {
    Engine::open_with(
        dir,
        Limits {
            serving,
            partitions,
            partition_rows: if partitions > 1 { 0 } else { usize::MAX },
            ..Default::default()
        },
    )
}

/// The partitions a call's scan of the whole of `dataset` runs in.
fn partitions_scanned(engine: &Engine, dataset: &str) -> usize {
    block_on(async {
        let ds = std::sync::Arc::clone(
            engine
                .view(tally_engine::Caller::everyone("tests"))
                .dataset(dataset)
                .expect("served"),
        );
        let prepared = ds.prepared(engine).await.expect("prepared");
        let call = tally_engine::CallCtx::new(
            engine,
            tally_engine::Caller::everyone("tests"),
            std::time::Duration::from_secs(10),
            Vec::new(),
        );
        let cx = tally_engine::Cx {
            engine,
            call: &call,
        };
        let ctx = cx.call_context(prepared.rows).expect("context");
        let plan = ctx
            .read_table(prepared.table().provider)
            .expect("table")
            .create_physical_plan()
            .await
            .expect("plan");
        plan.properties().partitioning.partition_count()
    })
}

/// The envelope with what differs between runs and paths taken out: the generation time, and
/// the extract step's words on how the data was read (returned apart).
fn comparable(mut envelope: Value) -> (Value, Vec<String>) {
    let mut said = Vec::new();
    if let Some(p) = envelope.get_mut("provenance") {
        p["generatedAt"] = json!("<generatedAt>");
        if let Some(steps) = p["transformations"].as_array_mut() {
            for t in steps {
                if let Some(d) = t["description"].as_str()
                    && let Some(at) = d.rfind(" (")
                    && (d[at..].contains("prepared in memory")
                        || d[at..].contains("read from the files at this call"))
                {
                    said.push(d[at..].to_string());
                    t["description"] = json!(d[..at].to_string());
                }
            }
        }
    }
    (envelope, said)
}

fn call(engine: &Engine, tool: Tool, args: &Value) -> Value {
    match block_on(engine.call(tool, args)) {
        Ok(v) => v,
        Err(e) => e.to_json(),
    }
}

#[test]
fn read_at_every_call_answers_as_prepared() {
    for seed in [3u64, 11, 99] {
        answers_agree(seed, 700, small_groups(), &[(Serving::Streaming, 1)], 200);
    }
}

/// Split between partitions, a prepared table (its chunks) and files read at every call
/// (their row groups) answer as one partition does.
#[test]
fn partitions_answer_as_one() {
    let groups = datafusion::parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(4096))
        .build();
    answers_agree(
        7,
        3 * tally_storage::store::CHUNK_ROWS + 500,
        groups,
        &[
            (Serving::Prepared, 3),
            (Serving::Streaming, 3),
            (Serving::Streaming, 1),
        ],
        24,
    );
}

/// The answers of a prepared table in one partition and of each of `others` (how it is
/// served, in how many partitions) to the same calls, on `count` random rows, are the same.
#[expect(
    clippy::too_many_lines,
    reason = "one list of calls, each compared across the ways a table is served"
)]
fn answers_agree(
    seed: u64,
    count: usize,
    props: datafusion::parquet::file::properties::WriterProperties,
    others: &[(Serving, usize)],
    pages: usize,
) {
    {
        let rows = random_rows(seed, count);
        let tmp = tempfile::tempdir().expect("tmp");
        let folder = tmp.path().join("random");
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(folder.join("dataset.yaml"), YAML).expect("yaml");
        let json_rows = as_json(&rows);
        write_parquet_with(
            &folder.join("data.parquet"),
            YAML,
            &json_rows,
            &[],
            Some(props),
        );
        let prepared = engine(tmp.path(), Serving::Prepared);
        let others: Vec<(Serving, usize, Engine)> = others
            .iter()
            .map(|(s, p)| (*s, *p, engine_in(tmp.path(), *s, *p)))
            .collect();
        assert_eq!(partitions_scanned(&prepared, "random"), 1);
        for (serving, partitions, other) in &others {
            assert_eq!(
                partitions_scanned(other, "random"),
                *partitions,
                "{serving:?}"
            );
        }
        let d = |v: Value| {
            let mut v = v;
            v["dataset_id"] = json!("random");
            v
        };
        let mut calls: Vec<(Tool, Value)> = vec![
            (
                Tool::SummarizeRecords,
                d(
                    json!({"group_by": ["grp"], "metrics": ["count", "sum:n", "avg:v", "min:n", "max:v", "avg:share", "avg:ratio"]}),
                ),
            ),
            (
                Tool::SummarizeRecords,
                d(json!({"group_by": ["status"], "where": {"n": {"$gte": 500}}})),
            ),
            (Tool::SummarizeRecords, d(json!({"group_by": ["tags"]}))),
            // Keys grouped on codes numbered as the files are read, ordered by their values.
            (
                Tool::SummarizeRecords,
                d(
                    json!({"group_by": ["tags", "status"], "order_by": ["tags", "-status"], "metrics": ["count", "avg:share"]}),
                ),
            ),
            (
                Tool::SummarizeRecords,
                d(json!({"group_by": ["status"], "order_by": ["status"], "limit": 2})),
            ),
            (
                Tool::SummarizeRecords,
                d(
                    json!({"group_by": ["grp", "tags"], "where": {"tags": ["x", "z"]}, "metrics": ["count", "sum:d"]}),
                ),
            ),
            (
                Tool::SummarizeRecords,
                d(
                    json!({"group_by": ["grp", "status"], "having": {"count": {"$gte": 5}}, "order_by": ["grp"]}),
                ),
            ),
            (
                Tool::SummarizeRecords,
                d(json!({"metrics": ["count", "avg:share"], "where": {"status": ["1 done"]}})),
            ),
            (
                Tool::SummarizeRecords,
                d(json!({"group_by": ["grp"], "where": {"grp": "Z"}})),
            ),
            (
                Tool::QueryRecords,
                d(json!({"where": {"grp": ["A", "B"]}, "order_by": ["-n"], "limit": 7})),
            ),
            (
                Tool::QueryRecords,
                d(json!({"q": "y", "select": ["id", "tags"], "limit": 500})),
            ),
            (
                Tool::QueryRecords,
                d(json!({"where": {"tags": {"$contains": "z"}}, "limit": 500})),
            ),
            (
                Tool::QueryRecords,
                d(
                    json!({"where": {"grp": {"$ne": "A"}, "n": {"$lt": 100}}, "order_by": ["v"], "limit": 500}),
                ),
            ),
            (
                Tool::QueryRecords,
                d(json!({"where": {"v": {"$not_empty": false}}, "limit": 500})),
            ),
            (
                Tool::QueryRecords,
                d(json!({"where": {"grp": "a"}, "limit": 3})),
            ),
            (
                Tool::QueryRecords,
                d(json!({"where": {"id": ["r5", "r77", "r699", "nope"]}})),
            ),
            (
                Tool::QueryRecords,
                d(json!({"order_by": ["-v", "n"], "limit": 20})),
            ),
            (Tool::InspectDataset, d(json!({"detail": "full"}))),
        ];
        // Pages after the first, through the cursors each path gives.
        let mut i = 0;
        while i < calls.len() {
            let (tool, args) = calls[i].clone();
            let a = call(&prepared, tool, &args);
            let (a, said_a) = comparable(a);
            let listed = a.get("data").is_some() && tool != Tool::InspectDataset;
            if listed {
                assert!(
                    said_a.iter().all(|s| s.contains("prepared in memory")),
                    "{said_a:?}"
                );
            }
            for (serving, partitions, other) in &others {
                let (b, said_b) = comparable(call(other, tool, &args));
                assert_eq!(
                    a,
                    b,
                    "seed {seed}: {} {args} answers differently {serving:?} in {partitions} partitions",
                    tool.name()
                );
                let words = match serving {
                    Serving::Streaming => "row group",
                    _ => "prepared in memory",
                };
                if listed {
                    assert!(
                        !said_b.is_empty() && said_b.iter().all(|s| s.contains(words)),
                        "{said_b:?}"
                    );
                }
            }
            if tool == Tool::QueryRecords
                && let Some(cursor) = a["data"]["next_cursor"].as_str()
                && i < pages
            {
                let mut next = args.clone();
                next["cursor"] = json!(cursor);
                calls.push((tool, next));
            }
            i += 1;
        }
    }
}

#[test]
fn conditions_leave_row_groups_unread() {
    // Sorted by `n`, each row group holds its own range of values: a condition on `n` rules
    // most of them out by their statistics.
    let mut rows = random_rows(5, 640);
    rows.sort_by_key(|r| r.n.unwrap_or(-1));
    let tmp = tempfile::tempdir().expect("tmp");
    let folder = tmp.path().join("random");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(folder.join("dataset.yaml"), YAML).expect("yaml");
    let json_rows = as_json(&rows);
    write_parquet_with(
        &folder.join("data.parquet"),
        YAML,
        &json_rows,
        &[],
        Some(small_groups()),
    );
    let streamed = engine(tmp.path(), Serving::Streaming);
    let prepared = engine(tmp.path(), Serving::Prepared);
    let args = json!({"dataset_id": "random", "where": {"n": {"$gte": 950}}, "order_by": ["n"], "limit": 500});
    let out = call(&streamed, Tool::QueryRecords, &args);
    let extract = out["provenance"]["transformations"][0]["description"]
        .as_str()
        .expect("an extract step")
        .to_string();
    let (read, of) = {
        let at = extract.find("call: ").expect("the counts") + "call: ".len();
        let words: Vec<&str> = extract[at..].split(' ').collect();
        (
            words[0].parse::<usize>().expect("read"),
            words[2].parse::<usize>().expect("of"),
        )
    };
    assert_eq!(of, 10, "640 records in groups of 64: {extract}");
    assert!(
        read <= 2,
        "statistics rule out the groups below 950: {extract}"
    );
    let (a, _) = comparable(out);
    let (b, _) = comparable(call(&prepared, Tool::QueryRecords, &args));
    assert_eq!(a, b, "the same records");
    assert!(a["data"]["total"].as_u64().expect("total") > 0);

    // Without a condition nothing is ruled out, and the step says so plainly.
    let all = call(
        &streamed,
        Tool::QueryRecords,
        &json!({"dataset_id": "random", "limit": 1}),
    );
    let extract = all["provenance"]["transformations"][0]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(
        extract.contains("read from the files at this call: all 10 row groups)"),
        "{extract}"
    );
}

/// The caps hold for a whole summary however many partitions it runs in: the groups of all
/// partitions together, and the rows exploding adds beyond one per record (a summary that
/// explodes nothing reads any number of records, and one whose records have one part each
/// explodes any number: a table of more records than the explode cap is not refused).
#[test]
fn the_caps_hold_across_partitions_and_count_exploded_rows_only() {
    let chunk = tally_storage::store::CHUNK_ROWS;
    let count = 3 * chunk + 10;
    let rows = random_rows(5, count);
    let tmp = tempfile::tempdir().expect("tmp");
    let folder = tmp.path().join("random");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(folder.join("dataset.yaml"), YAML).expect("yaml");
    let mut json_rows = as_json(&rows);
    for (i, r) in json_rows.iter_mut().enumerate() {
        // A group of its own for every record.
        r[1] = json!(format!("g{i}"));
    }
    write_parquet_with(&folder.join("data.parquet"), YAML, &json_rows, &[], None);
    // The same records with at most one part each: exploding them adds no row.
    let single = tmp.path().join("single");
    std::fs::create_dir_all(&single).expect("folder");
    std::fs::write(single.join("dataset.yaml"), YAML).expect("yaml");
    for r in &mut json_rows {
        r[3] = if r[3].is_null() {
            json!(null)
        } else {
            json!("x")
        };
    }
    write_parquet_with(&single.join("data.parquet"), YAML, &json_rows, &[], None);
    let cap = 2 * chunk;
    for (serving, partitions) in [
        (Serving::Prepared, 1),
        (Serving::Prepared, 3),
        (Serving::Streaming, 1),
    ] {
        let engine = Engine::open_with(
            tmp.path(),
            Limits {
                serving,
                partitions,
                partition_rows: 0,
                max_explode_rows: 100,
                max_groups: cap,
                ..Default::default()
            },
        );
        assert_eq!(partitions_scanned(&engine, "random"), partitions);
        // One group a record: in three partitions (four chunks: two, two and none) no
        // partition holds more groups than the cap, all of them together do.
        let wide = block_on(engine.call(
            Tool::SummarizeRecords,
            &json!({"dataset_id": "random", "group_by": ["grp"]}),
        ));
        let err = wide.expect_err("past the group cap").to_json();
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(&format!("more than {cap} groups"))),
            "{serving:?} in {partitions}: {err}"
        );
        let plain = call(
            &engine,
            Tool::SummarizeRecords,
            &json!({"dataset_id": "random", "group_by": ["status"], "metrics": ["count", "sum:n"]}),
        );
        assert_eq!(
            plain["data"]["total_records"],
            json!(count),
            "{serving:?}: {plain}"
        );
        let exploded = block_on(engine.call(
            Tool::SummarizeRecords,
            &json!({"dataset_id": "random", "group_by": ["tags"], "explode": ["tags"]}),
        ));
        let err = exploded.expect_err("past the cap").to_json();
        assert_eq!(err["error"]["code"], json!("limit_exceeded"), "{err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("more than 100 rows beyond one per record")),
            "{err}"
        );
        // Far more records than the cap, each of one part: nothing beyond one row per record.
        let one_each = call(
            &engine,
            Tool::SummarizeRecords,
            &json!({"dataset_id": "single", "group_by": ["tags"], "explode": ["tags"]}),
        );
        assert_eq!(
            one_each["data"]["total_records"],
            json!(count),
            "{serving:?}: {one_each}"
        );
    }
}

/// Read from its files, a summary that only counts is grouped by whole cells before it
/// explodes; with more distinct cells than a summary may hold groups, it explodes record by
/// record instead. The answers are the same, and those of the prepared table.
#[test]
fn an_exploded_count_is_the_same_grouped_first_or_record_by_record() {
    let dir = crate::fixture::datasets_dir();
    let answer = |serving: Serving, max_groups: usize, arguments: &Value| -> Value {
        let engine = Engine::open_with(
            dir,
            Limits {
                serving,
                max_groups,
                ..Default::default()
            },
        );
        call(&engine, Tool::SummarizeRecords, arguments)["data"].clone()
    };
    let field = "手続が行われるイベント(個人)";
    for arguments in [
        json!({"dataset_id": "fixture", "group_by": [field]}),
        json!({"dataset_id": "fixture", "group_by": [field], "having": {"count": {"$gte": 2}}}),
    ] {
        let prepared = answer(Serving::Prepared, 100_000, &arguments);
        assert!(
            prepared["rows"].as_array().is_some_and(|r| !r.is_empty()),
            "{prepared}"
        );
        // The fixture's field has 9 distinct cells (null and blank among them) and 6 parts:
        // under a cap of 8 or 6 groups, its records are exploded one by one.
        for max_groups in [100_000, 8, 6] {
            assert_eq!(
                answer(Serving::Streaming, max_groups, &arguments),
                prepared,
                "{arguments} under a cap of {max_groups} groups"
            );
        }
    }
    // With a second key, coded on a prepared table (a dim with a codelist): grouped first from
    // the files, record by record on the prepared table's codes, the same answer.
    for arguments in [
        json!({"dataset_id": "fixture", "group_by": [field, "所管府省庁"]}),
        json!({"dataset_id": "fixture", "group_by": [field, "所管府省庁"], "order_by": ["所管府省庁"]}),
    ] {
        let prepared = answer(Serving::Prepared, 100_000, &arguments);
        assert!(
            prepared["rows"].as_array().is_some_and(|r| !r.is_empty()),
            "{prepared}"
        );
        assert_eq!(
            answer(Serving::Streaming, 100_000, &arguments),
            prepared,
            "{arguments}"
        );
    }
}
