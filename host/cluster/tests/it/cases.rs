//! The engine's golden cases through a cluster: the answers must be those of the single-node
//! path, byte for byte, but for the extract step, which says the cluster read the files.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tally_cluster::{Address, BallistaCluster};
use tally_engine::{Engine, Limits};
use tally_storage::dataset::Serving;

use crate::golden::{as_if_prepared, run_golden};
use crate::local::LocalCluster;

/// An engine over the datasets in `dir` that sends its calls to `cluster`, as `tally serve
/// --cluster` makes it (data read from the files at every call).
pub fn engine_over(dir: &Path, cluster: &LocalCluster) -> Engine {
    let address = Address::parse(&cluster.address()).expect("the cluster's address");
    Engine::open_with(
        dir,
        Limits {
            serving: Serving::Streaming,
            // Two clusters and their engines share the test machine's cores: no deadline
            // should decide these answers.
            call_timeout: std::time::Duration::from_secs(120),
            ..Default::default()
        },
    )
    .with_cluster(
        Arc::new(BallistaCluster::new(address, false)),
        tally_storage::cluster::Split::slots(4),
    )
}

#[test]
fn golden_cases_through_a_cluster_of_two_executors() {
    let cluster = LocalCluster::start(2);
    let engine = engine_over(crate::fixture::datasets_dir(), &cluster);
    let remote = AtomicUsize::new(0);
    let inspections = std::sync::Mutex::new(Vec::new());
    let at = format!("by the cluster at {}", cluster.address());
    let said = |text: String| -> String {
        let (text, inspected) = without_inspect_step(&text, &at);
        if let Some(step) = inspected {
            remote.fetch_add(1, Ordering::Relaxed);
            inspections.lock().unwrap().push(step);
        }
        as_if_prepared(&text, &|how| {
            assert!(
                how.contains(&at) && how.contains("ran on its executors"),
                "the extract step says the cluster read the files: {how}"
            );
            assert!(
                !how.contains("computed on this server"),
                "every plan of the golden cases can be sent: {how}"
            );
            remote.fetch_add(1, Ordering::Relaxed);
        })
    };
    run_golden(&engine, &said, false);
    // Every answer that reads the fixture's rows read them on the cluster.
    assert!(remote.load(Ordering::Relaxed) >= 30);
    // An inspection is one pass over the data (every field's statistics and values in one
    // plan), and one plan per time field for its periods.
    let inspections = inspections.into_inner().unwrap();
    assert!(!inspections.is_empty());
    for step in &inspections {
        let plans: usize = step
            .find(" plan")
            .and_then(|at| step[..at].rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("how many plans an inspection ran: {step}"));
        assert!(
            plans <= 2,
            "an inspection in one pass (and a time field's periods): {step}"
        );
    }
    assert!(
        inspections
            .iter()
            .any(|s| s.contains(" 1 plan ran on its executors")),
        "a dataset without time fields is inspected in one plan: {inspections:?}"
    );
}

/// The real survey's checks (host/engine/tests/it/survey.rs) through a cluster.
#[test]
fn the_real_survey_through_a_cluster_of_two_executors() {
    let cluster = LocalCluster::start(2);
    let open = |dir: &Path| engine_over(dir, &cluster);
    crate::survey::matches_plain_sql(&open);
    crate::survey::answers_a_model_gets_right(&open);
}

/// `text` (an answer, as pretty JSON) without the extract step `inspect_dataset` adds on a
/// cluster (one server adds none), and that step if it had one, checked first: it names the
/// cluster and its plans.
fn without_inspect_step(text: &str, at: &str) -> (String, Option<String>) {
    let mut answer: serde_json::Value = serde_json::from_str(text).expect("an answer in JSON");
    let mut found = None;
    if let Some(steps) = answer
        .pointer_mut("/provenance/transformations")
        .and_then(serde_json::Value::as_array_mut)
    {
        steps.retain(|step| {
            let said = step["description"].as_str().unwrap_or_default();
            let inspected = step["type"] == "extract"
                && said.starts_with("read the ")
                && said.contains("the cluster at ");
            if inspected {
                assert!(
                    said.contains(at) && said.contains("ran on its executors"),
                    "inspect_dataset says the cluster ran its plans: {said}"
                );
                found = Some(said.to_string());
            }
            !inspected
        });
    }
    let mut out = serde_json::to_string_pretty(&answer).expect("json");
    out.push('\n');
    (out, found)
}

/// The extract step of an answer (where its plans ran).
fn extract_step(answer: &serde_json::Value) -> String {
    answer["provenance"]["transformations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["type"] == "extract")
        .filter_map(|t| t["description"].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A summary that only counts the parts of a multi-value field is one job through a cluster
/// (the records grouped by their whole cells there, the groups exploded on the server), and
/// counts what the summary on one server counts; one with another metric explodes every
/// record on the executors, after a job that counts before exploding.
#[test]
fn an_exploded_count_is_one_job_through_a_cluster() {
    use serde_json::json;
    use tally_semantic::Tool;
    let cluster = LocalCluster::start(1);
    let dir = crate::fixture::datasets_dir();
    let engine = engine_over(dir, &cluster);
    let alone = Engine::open_with(
        dir,
        Limits {
            serving: Serving::Streaming,
            ..Default::default()
        },
    );
    let field = "手続が行われるイベント(個人)";
    for (arguments, plans) in [
        (json!({"dataset_id": "fixture", "group_by": [field]}), 1),
        (
            json!({"dataset_id": "fixture", "group_by": [field, "所管府省庁"], "having": {"count": {"$gte": 1}}}),
            1,
        ),
        (
            json!({"dataset_id": "fixture", "group_by": [field], "metrics": ["count", "sum:総手続件数"]}),
            2,
        ),
    ] {
        let through = crate::golden::run_case_on(&engine, Tool::SummarizeRecords, &arguments);
        let here = crate::golden::run_case_on(&alone, Tool::SummarizeRecords, &arguments);
        assert_eq!(through["data"], here["data"], "{arguments}");
        let said = extract_step(&through);
        let ran = if plans == 1 {
            " 1 plan ran on its executors".to_string()
        } else {
            format!(" {plans} plans ran on its executors")
        };
        assert!(said.contains(&ran), "{arguments}: {said}");
    }
}

/// Past `--max-groups` distinct cells, grouping first stops on the executors (their stop
/// reaches the server as text) and the summary explodes record by record: the same answer as
/// one server's under the same cap.
#[test]
fn an_exploded_count_is_the_same_through_a_cluster_past_the_cap() {
    use serde_json::json;
    use tally_semantic::Tool;
    let cluster = LocalCluster::start(1);
    let dir = crate::fixture::datasets_dir();
    let limits = |serving| Limits {
        serving,
        // The fixture's field has 9 distinct cells and 6 parts.
        max_groups: 6,
        call_timeout: std::time::Duration::from_secs(120),
        ..Default::default()
    };
    let address = Address::parse(&cluster.address()).expect("the cluster's address");
    let through = Engine::open_with(dir, limits(Serving::Streaming)).with_cluster(
        Arc::new(BallistaCluster::new(address, false)),
        tally_storage::cluster::Split::slots(4),
    );
    let alone = Engine::open_with(dir, limits(Serving::Prepared));
    let arguments = json!({"dataset_id": "fixture", "group_by": ["手続が行われるイベント(個人)"]});
    let answer = crate::golden::run_case_on(&through, Tool::SummarizeRecords, &arguments);
    let here = crate::golden::run_case_on(&alone, Tool::SummarizeRecords, &arguments);
    assert!(
        answer["data"]["rows"]
            .as_array()
            .is_some_and(|r| r.len() == 6),
        "{answer}"
    );
    assert_eq!(answer["data"], here["data"]);
}

/// A scan is split by what it reads: a count of every record reads no column and runs as one
/// task per slot, a search of a text field reads its chunks and runs in more waves of tasks
/// (here a task's share is one byte, so any read takes every wave); the answers are one
/// server's either way.
#[test]
fn a_scan_is_split_into_tasks_by_what_it_reads() {
    use serde_json::json;
    use tally_semantic::Tool;
    let cluster = LocalCluster::start(2);
    let dir = crate::fixture::datasets_dir();
    let address = Address::parse(&cluster.address()).expect("the cluster's address");
    let split = tally_storage::cluster::Split {
        slots: 2,
        bytes_per_task: 1,
    };
    let limits = |serving| Limits {
        serving,
        call_timeout: std::time::Duration::from_secs(120),
        ..Default::default()
    };
    let through = Engine::open_with(dir, limits(Serving::Streaming))
        .with_cluster(Arc::new(BallistaCluster::new(address, false)), split);
    let alone = Engine::open_with(dir, limits(Serving::Streaming));
    let waves = tally_storage::cluster::Split::MOST_WAVES as usize;
    for (tool, arguments, tasks) in [
        (
            Tool::SummarizeRecords,
            json!({"dataset_id": "fixture", "metrics": ["count"]}),
            2,
        ),
        (
            Tool::SummarizeRecords,
            json!({"dataset_id": "fixture", "where": {"手続名": {"$contains": "届出"}}, "metrics": ["count"]}),
            2 * waves,
        ),
    ] {
        let answer = crate::golden::run_case_on(&through, tool, &arguments);
        let here = crate::golden::run_case_on(&alone, tool, &arguments);
        assert_eq!(answer["data"], here["data"], "{arguments}");
        let said = extract_step(&answer);
        assert!(
            said.contains(&format!(" in {tasks} tasks")),
            "{arguments}: {tasks} tasks expected: {said} in {answer}"
        );
    }
}
