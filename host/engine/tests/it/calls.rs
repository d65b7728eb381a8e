//! Perturbed calls on the real survey (`tests/data/survey_calls.jsonl`), each labelled by hand
//! with what it must come out as: the count plain SQL gives over the same Parquet file, the
//! forms or codes disclosed, the warnings said, the missing group last. Widths typed as the
//! minority or the majority form, `$ne`/`$nin` against every form, a code number in every
//! form, missing keys in both directions, cells of several codes. Prints the counts; fails on
//! any case that does not come out as labelled. Skipped when the reference is absent, failing
//! under `CI=true`.

use datafusion::prelude::{ParquetReadOptions, SessionContext};
use serde_json::Value;
use tally_engine::Engine;
use tally_semantic::Tool;
use tally_storage::dataset::Serving;

use crate::fixture::{block_on, data_dir};
use crate::survey::{sql_count, survey_folder};

fn cases() -> Vec<Value> {
    std::fs::read_to_string(data_dir().join("survey_calls.jsonl"))
        .expect("survey_calls.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// What is wrong with one case's answer, if anything.
async fn check(ctx: &SessionContext, case: &Value, out: &Value) -> Vec<String> {
    let expect = &case["expect"];
    let mut misses = Vec::new();
    if let Some(sql) = expect["count_sql"].as_str() {
        let want = sql_count(ctx, sql).await;
        let got = if case["tool"] == "query_records" {
            out["data"]["total"].as_i64()
        } else {
            out["data"]["rows"][0][0].as_i64()
        };
        if got != Some(want) {
            misses.push(format!("count {got:?}, SQL says {want}"));
        }
    }
    for (key, at) in [
        ("resolved_include", &out["data"]["resolved_fields"]),
        ("warnings_include", &out["provenance"]["warnings"]),
    ] {
        let said = at.to_string();
        for want in expect[key].as_array().into_iter().flatten() {
            let want = want.as_str().unwrap_or_default();
            if !said.contains(want) {
                misses.push(format!("{key} `{want}` not in {said}"));
            }
        }
    }
    if expect["null_key_last"] == Value::Bool(true) {
        let rows = out["data"]["rows"].as_array().cloned().unwrap_or_default();
        let nulls: Vec<usize> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r[0].is_null())
            .map(|(i, _)| i)
            .collect();
        if rows.len() < 2 || nulls != [rows.len() - 1] {
            misses.push(format!(
                "the null group is not last alone: at {nulls:?} of {}",
                rows.len()
            ));
        }
    }
    misses
}

fn run(serving: Serving) {
    // The tests' one cursor key, before any cursor is made (golden pages hold their cursors).
    tally_engine::cursor::derive_key(b"tally engine tests");
    let Some((tmp, parquet)) = survey_folder() else {
        return;
    };
    let engine = Engine::open_with(
        tmp.path(),
        tally_engine::Limits {
            serving,
            ..Default::default()
        },
    );
    block_on(async {
        engine
            .prepare(&tally_engine::Caller::operator(), "survey")
            .await;
        let ctx = SessionContext::new();
        ctx.register_parquet(
            "t",
            parquet.to_string_lossy().as_ref(),
            ParquetReadOptions::default(),
        )
        .await
        .expect("register");
        let cases = cases();
        let mut failed = Vec::new();
        for case in &cases {
            let tool = Tool::ALL
                .into_iter()
                .find(|t| case["tool"] == t.name())
                .expect("a tool");
            let misses = match engine.call(tool, &case["arguments"]).await {
                Ok(out) => check(&ctx, case, &out).await,
                Err(e) => vec![format!("refused: {}", e.to_json())],
            };
            if !misses.is_empty() {
                failed.push(format!("{}: {}", case["id"], misses.join("; ")));
            }
        }
        println!(
            "survey calls ({serving:?}): {} of {} as labelled",
            cases.len() - failed.len(),
            cases.len()
        );
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    });
}

#[test]
fn perturbed_calls_on_the_real_survey_come_out_as_labelled() {
    run(Serving::Prepared);
}

/// The same calls with the survey read from its file at every call.
#[test]
fn perturbed_calls_on_the_real_survey_read_at_every_call() {
    run(Serving::Streaming);
}
