//! Datasets of several Parquet files: a glob, or a folder read as a Hive-partitioned tree.
//! Their answers equal the same rows in one file; conditions on partition columns leave the
//! other files unread (said in the transformations); the envelope cites every file read with
//! a hash anyone can recompute; hot reload sees files come and go.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tally_engine::Engine;
use tally_semantic::Tool;
use tally_storage::backend::sha256_hex;

use crate::fixture::{block_on, fixture_rows, fixture_yaml, write_dataset, write_parquet};

const PARTITION: &str = "所管府省庁";

/// The fixture with a year field added (an integer kept in folder names in `hive`).
fn yaml_with_year(data_file: &str) -> String {
    let yaml = fixture_yaml().replace(
        "computed_measures:",
        "- name: 年度\n  role: dim\n  data_type: integer\ncomputed_measures:",
    );
    format!("{yaml}\ndata_file: {data_file}\n")
}

fn rows_with_year() -> Vec<Vec<Value>> {
    fixture_rows()
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.push(json!(if i < 7 { 2023 } else { 2024 }));
            r
        })
        .collect()
}

/// Writes three datasets of the same rows: `one` (one file), `glob` (`parts/*.parquet`, the
/// rows cut in three files in order) and `hive` (`data/年度=…/所管府省庁=…/part-0.parquet`).
fn setup() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let datasets = tmp.path().join("datasets");
    let rows = rows_with_year();
    write_dataset(
        &datasets.join("one"),
        &yaml_with_year("data.parquet"),
        &rows,
    );

    let glob = datasets.join("glob");
    let yaml = yaml_with_year("parts/*.parquet");
    std::fs::create_dir_all(&glob).expect("folder");
    std::fs::write(glob.join("dataset.yaml"), &yaml).expect("yaml");
    for (i, chunk) in rows.chunks(5).enumerate() {
        write_parquet(
            &glob.join(format!("parts/part-{i}.parquet")),
            &yaml,
            chunk,
            &[],
        );
    }
    std::fs::write(glob.join("parts/README.txt"), "not data").expect("stray file");

    let hive = datasets.join("hive");
    let yaml = yaml_with_year("data/");
    std::fs::create_dir_all(&hive).expect("folder");
    std::fs::write(hive.join("dataset.yaml"), &yaml).expect("yaml");
    let fields = ["年度", PARTITION];
    let year = rows[0].len() - 1;
    let mut groups: std::collections::BTreeMap<(i64, String), Vec<Vec<Value>>> = Default::default();
    for r in &rows {
        let ministry = r[1]
            .as_str()
            .unwrap_or("__HIVE_DEFAULT_PARTITION__")
            .to_string();
        groups
            .entry((r[year].as_i64().expect("year"), ministry))
            .or_default()
            .push(r.clone());
    }
    for ((y, m), part) in &groups {
        write_parquet(
            &hive.join(format!("data/年度={y}/{PARTITION}={m}/part-0.parquet")),
            &yaml,
            part,
            &fields,
        );
    }
    std::fs::write(hive.join("data/_SUCCESS"), "").expect("marker");
    (tmp, datasets)
}

fn call(engine: &Engine, tool: Tool, args: Value) -> Value {
    block_on(engine.call(tool, &args)).unwrap_or_else(|e| panic!("{args}: {e}"))
}

fn extract(envelope: &Value) -> String {
    envelope["provenance"]["transformations"]
        .as_array()
        .expect("transformations")
        .iter()
        .filter_map(|t| t["description"].as_str())
        .find(|d| d.starts_with("read "))
        .expect("an extract step")
        .to_string()
}

/// What must be equal between the datasets: the rows, their columns and the totals.
fn answer(envelope: &Value) -> Value {
    let data = &envelope["data"];
    json!({
        "columns": data["columns"],
        "rows": data["rows"],
        "total": data["total"],
        "total_group_count": data["total_group_count"],
        "total_records": data["total_records"],
    })
}

#[test]
fn a_set_of_files_answers_as_the_same_rows_in_one_file() {
    let (_tmp, datasets) = setup();
    let engine = Engine::open(&datasets);
    // Read from the files at every call, the sets answer the same too.
    let streaming = Engine::open_with(
        &datasets,
        tally_engine::Limits {
            serving: tally_storage::dataset::Serving::Streaming,
            ..Default::default()
        },
    );
    let calls = [
        (
            Tool::SummarizeRecords,
            json!({ "group_by": [PARTITION], "metrics": ["count", "sum:総手続件数", "avg:オンライン率"] }),
        ),
        (
            Tool::SummarizeRecords,
            json!({ "group_by": ["年度", "オンライン化の実施状況"], "metrics": ["count", "avg:処理日数"] }),
        ),
        (
            Tool::SummarizeRecords,
            json!({ "group_by": ["申請に関連する士業"], "where": { "年度": 2024 }, "metrics": ["count"] }),
        ),
        (
            Tool::QueryRecords,
            json!({ "order_by": ["手続ID"], "limit": 100 }),
        ),
        (
            Tool::QueryRecords,
            json!({ "where": { PARTITION: ["総務省", "財務省"] }, "order_by": ["-総手続件数", "手続ID"], "select": ["手続ID", PARTITION, "年度"] }),
        ),
        (
            Tool::QueryRecords,
            json!({ "q": "申請", "order_by": ["手続ID"], "select": ["手続ID", "年度"] }),
        ),
    ];
    for (tool, args) in calls {
        let on_engine = |engine: &Engine, id: &str| {
            let mut a = args.clone();
            a["dataset_id"] = json!(id);
            answer(&call(engine, tool, a))
        };
        let on = |id: &str| on_engine(&engine, id);
        let one = on("one");
        assert!(
            one["total"].as_u64().or(one["total_records"].as_u64()) > Some(0),
            "{args}: {one}"
        );
        assert_eq!(on("glob"), one, "glob, {args}");
        assert_eq!(on("hive"), one, "hive, {args}");
        for id in ["one", "glob", "hive"] {
            assert_eq!(
                on_engine(&streaming, id),
                one,
                "{id} read at every call, {args}"
            );
        }
    }
    // Cut in order, the glob's files keep the records' order: the default order is the same.
    let default = |id: &str| {
        answer(&call(
            &engine,
            Tool::QueryRecords,
            json!({ "dataset_id": id, "limit": 100 }),
        ))
    };
    assert_eq!(default("glob"), default("one"));
}

#[test]
fn partition_columns_are_typed_and_described() {
    let (_tmp, datasets) = setup();
    let engine = Engine::open(&datasets);
    let summary = call(
        &engine,
        Tool::SummarizeRecords,
        json!({ "dataset_id": "hive", "group_by": ["年度"], "metrics": ["count"], "order_by": ["年度"] }),
    );
    // Group keys are typed as the column is, as for a year in one file: a year is a number.
    assert_eq!(summary["data"]["rows"], json!([[2023, 7], [2024, 5]]));
    // A null partition (`__HIVE_DEFAULT_PARTITION__`) is a missing value, as in one file.
    let missing = call(
        &engine,
        Tool::QueryRecords,
        json!({ "dataset_id": "hive", "where": { PARTITION: { "$not_empty": false } }, "select": ["手続ID"] }),
    );
    let expected = call(
        &engine,
        Tool::QueryRecords,
        json!({ "dataset_id": "one", "where": { PARTITION: { "$not_empty": false } }, "select": ["手続ID"] }),
    );
    assert_eq!(answer(&missing), answer(&expected));
    assert!(missing["data"]["total"].as_u64() > Some(0));
}

#[test]
fn conditions_on_partition_columns_leave_the_other_files_unread() {
    let (_tmp, datasets) = setup();
    let hive = datasets.join("hive");
    let files = parquet_files(&hive);
    assert_eq!(files.len(), 7, "{files:?}");
    // A fresh engine: nothing prepared whole yet, so the condition shapes what is read.
    let engine = Engine::open(&datasets);
    let one_ministry = call(
        &engine,
        Tool::QueryRecords,
        json!({ "dataset_id": "hive", "where": { PARTITION: ["総務省"], "年度": 2023 }, "select": ["手続ID"] }),
    );
    let step = extract(&one_ministry);
    assert!(
        step.contains("from 1 of the 7 files of `data/`")
            && step.contains("the other 6 were not read")
            && step.contains("`所管府省庁` = \"総務省\"")
            && step.contains("`年度` = \"2023\""),
        "{step}"
    );
    let [file] = files_matching(&files, &["年度=2023/", "=総務省/"])[..] else {
        panic!("one file of 総務省 in 2023: {files:?}");
    };
    let source = &one_ministry["provenance"]["sources"][0];
    assert_eq!(source["contentHash"], json!(file_hash(&hive, file)));

    // Two files: the hash of their `sha256sum` listing, in path order.
    let two = call(
        &engine,
        Tool::SummarizeRecords,
        json!({ "dataset_id": "hive", "where": { PARTITION: ["総務省", "財務省"], "年度": [2023] }, "metrics": ["count"] }),
    );
    let read = files_matching(&files, &["年度=2023/"])
        .into_iter()
        .filter(|f| f.contains("=総務省/") || f.contains("=財務省/"))
        .collect::<Vec<_>>();
    assert_eq!(read.len(), 2, "{read:?}");
    let listing: String = read
        .iter()
        .map(|f| {
            format!(
                "{}  {f}\n",
                file_hash(&hive, f).trim_start_matches("sha256:")
            )
        })
        .collect();
    assert_eq!(
        two["provenance"]["sources"][0]["contentHash"],
        json!(sha256_hex(listing.as_bytes()))
    );
    let step = extract(&two);
    assert!(
        step.contains("from 2 of the 7 files") && step.contains("`sha256sum` listing"),
        "{step}"
    );
    // The counts are those of the whole data with the same conditions.
    let whole = call(
        &engine,
        Tool::SummarizeRecords,
        json!({ "dataset_id": "one", "where": { PARTITION: ["総務省", "財務省"], "年度": [2023] }, "metrics": ["count"] }),
    );
    assert_eq!(two["data"]["rows"], whole["data"]["rows"]);

    // Once the whole data is prepared, calls are answered from it: no file is read again.
    call(
        &engine,
        Tool::QueryRecords,
        json!({ "dataset_id": "hive", "limit": 1 }),
    );
    let after = call(
        &engine,
        Tool::QueryRecords,
        json!({ "dataset_id": "hive", "where": { PARTITION: ["総務省"], "年度": 2023 }, "select": ["手続ID"] }),
    );
    assert_eq!(answer(&after), answer(&one_ministry));
    assert!(
        extract(&after).contains("from data/年度="),
        "{}",
        extract(&after)
    );

    // Read from the files at every call, the same files are left unread, and said so.
    let streaming = Engine::open_with(
        &datasets,
        tally_engine::Limits {
            serving: tally_storage::dataset::Serving::Streaming,
            ..Default::default()
        },
    );
    let streamed = call(
        &streaming,
        Tool::QueryRecords,
        json!({ "dataset_id": "hive", "where": { PARTITION: ["総務省"], "年度": 2023 }, "select": ["手続ID"] }),
    );
    assert_eq!(answer(&streamed), answer(&one_ministry));
    let step = extract(&streamed);
    assert!(
        step.contains("from 1 of the 7 files of `data/`")
            && step.contains("read from the files at this call: its one row group"),
        "{step}"
    );
    assert_eq!(
        streamed["provenance"]["sources"][0]["contentHash"],
        json!(file_hash(&hive, file))
    );
}

/// Ranges on an integer partition column leave the files outside them unread too, both
/// when the rest is prepared and when it is read at every call; the answers are those of
/// the same rows in one file.
#[test]
fn ranges_on_integer_partition_columns_leave_files_unread() {
    let (_tmp, datasets) = setup();
    let files = parquet_files(&datasets.join("hive"));
    let in_2024 = files_matching(&files, &["年度=2024/"]).len();
    let in_2023 = files_matching(&files, &["年度=2023/"]).len();
    assert!(in_2024 > 0 && in_2023 > 0, "{files:?}");
    for serving in [
        tally_storage::dataset::Serving::Auto,
        tally_storage::dataset::Serving::Streaming,
    ] {
        // A fresh engine each time: nothing prepared whole, so the condition shapes what is read.
        let engine = || {
            Engine::open_with(
                &datasets,
                tally_engine::Limits {
                    serving,
                    ..Default::default()
                },
            )
        };
        for (condition, read, said) in [
            (json!({ "$gte": 2024 }), in_2024, "`年度` ≥ 2024"),
            (json!({ "$gt": 2023.5 }), in_2024, "`年度` > 2023.5"),
            (json!({ "$lt": 2024 }), in_2023, "`年度` < 2024"),
            (json!({ "$lte": 2023 }), in_2023, "`年度` ≤ 2023"),
        ] {
            let args = |id: &str| json!({ "dataset_id": id, "where": { "年度": condition.clone() }, "group_by": [PARTITION], "metrics": ["count", "sum:総手続件数"] });
            let hive = call(&engine(), Tool::SummarizeRecords, args("hive"));
            let one = call(&engine(), Tool::SummarizeRecords, args("one"));
            assert_eq!(answer(&hive), answer(&one), "{serving:?} {condition}");
            let step = extract(&hive);
            assert!(
                step.contains(&format!("from {read} of the 7 files of `data/`"))
                    && step.contains(said),
                "{serving:?} {condition}: {step}"
            );
        }
        // A range no file satisfies: nothing is read and nothing matches.
        let none = call(
            &engine(),
            Tool::QueryRecords,
            json!({ "dataset_id": "hive", "where": { "年度": { "$gt": 2030 } } }),
        );
        assert_eq!(none["data"]["total"], json!(0), "{none}");
        // A range on a column that is not a partition column prunes nothing.
        let all = call(
            &engine(),
            Tool::QueryRecords,
            json!({ "dataset_id": "hive", "where": { "総手続件数": { "$gte": 0 } }, "select": ["手続ID"] }),
        );
        assert!(
            !extract(&all).contains("were not read"),
            "{}",
            extract(&all)
        );
    }
}

#[test]
fn files_of_a_set_that_do_not_fit_together_are_refused_with_the_reason() {
    let (_tmp, datasets) = setup();
    let glob = datasets.join("glob");
    let yaml = std::fs::read_to_string(glob.join("dataset.yaml")).expect("yaml");
    write_parquet(
        &glob.join("parts/part-9.parquet"),
        &yaml,
        &fixture_rows()[..1],
        &["備考"],
    );
    let engine = Engine::open(&datasets);
    let listed = call(&engine, Tool::ListDatasets, json!({}));
    let broken = listed["data"]["broken_datasets"].to_string();
    assert!(
        broken.contains(
            "the files of `parts/*.parquet` do not have the same columns: `parts/part-9.parquet` lacks column `備考` (Utf8), which `parts/part-0.parquet` has"
        ),
        "{broken}"
    );
    assert!(broken.contains("\"glob\""), "{broken}");
}

#[test]
fn hot_reload_sees_files_added_to_and_removed_from_a_set() {
    let (_tmp, datasets) = setup();
    let glob = datasets.join("glob");
    let engine = Engine::open(&datasets);
    let total = |engine: &Engine| {
        call(
            engine,
            Tool::QueryRecords,
            json!({ "dataset_id": "glob", "limit": 1 }),
        )["data"]["total"]
            .as_u64()
            .expect("total")
    };
    assert_eq!(total(&engine), 12);
    let yaml = std::fs::read_to_string(glob.join("dataset.yaml")).expect("yaml");
    let mut extra = rows_with_year()[..2].to_vec();
    extra[0][0] = json!("P90");
    extra[1][0] = json!("P91");
    write_parquet(&glob.join("parts/part-3.parquet"), &yaml, &extra, &[]);
    let (changes, _) = engine.reload(Duration::ZERO);
    assert_eq!(changes.updated, vec!["glob".to_string()], "{changes:?}");
    assert_eq!(total(&engine), 14);
    std::fs::remove_file(glob.join("parts/part-0.parquet")).expect("removed");
    engine.reload(Duration::ZERO);
    assert_eq!(total(&engine), 9);
}

/// The Parquet files of a dataset folder, relative and in path order.
fn parquet_files(folder: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![folder.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("dir").flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "parquet") {
                out.push(
                    path.strip_prefix(folder)
                        .expect("inside")
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

fn files_matching<'a>(files: &'a [String], parts: &[&str]) -> Vec<&'a String> {
    files
        .iter()
        .filter(|f| parts.iter().all(|p| f.contains(p)))
        .collect()
}

fn file_hash(folder: &Path, relative: &str) -> String {
    sha256_hex(&std::fs::read(folder.join(relative)).expect("file"))
}
