//! The periods a call's conditions are held against are read under a bound: a time field of
//! more than `MAX_PERIODS` distinct periods is answered unchecked (said), never held whole.

use serde_json::{Value, json};
use tally_engine::Engine;
use tally_engine::call::MAX_PERIODS;
use tally_semantic::Tool;

use crate::fixture::{block_on, write_dataset};

const YAML: &str = "title: 多すぎる期間\nretrieved_at: \"2026-12-01\"\nfields:\n- {name: 地域, role: dim}\n- {name: 年, role: time, grain: year}\n- {name: 件数, role: measure, data_type: integer, aggregation: flow}\n";

fn call(engine: &Engine, args: Value) -> Value {
    match block_on(engine.call(Tool::SummarizeRecords, &args)) {
        Ok(v) => v,
        Err(e) => e.to_json(),
    }
}

#[test]
fn a_time_field_past_the_bound_is_answered_unchecked_and_said() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let over = MAX_PERIODS as i64 + 1;
    let rows: Vec<Vec<Value>> = (0..over)
        .map(|i| vec![json!("東"), json!(1000 + i), json!(1)])
        .collect();
    write_dataset(&tmp.path().join("many"), YAML, &rows);
    let few: Vec<Vec<Value>> = (0..3)
        .map(|i| vec![json!("東"), json!(2018 + i), json!(1)])
        .collect();
    write_dataset(&tmp.path().join("few"), YAML, &few);
    let engine = Engine::open(tmp.path());

    // Under the bound a period the data lacks is refused, naming the periods there are.
    let refused = call(
        &engine,
        json!({"dataset_id": "few", "metrics": ["sum:件数"], "where": {"年": 2030}}),
    );
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("2018–2020 (3 periods, none missing)"),
        "{refused:#}"
    );

    // Past it the call is answered (no record matches) and the unchecked condition is said.
    let answered = call(
        &engine,
        json!({"dataset_id": "many", "metrics": ["sum:件数"], "where": {"年": 999_999}}),
    );
    assert!(answered.get("error").is_none(), "{answered:#}");
    let warnings = answered["provenance"]["warnings"].to_string();
    assert!(
        warnings.contains(&format!("more than {MAX_PERIODS} periods")),
        "{warnings}"
    );
    // "previous" needs the periods: refused, saying why.
    let previous = call(
        &engine,
        json!({"dataset_id": "many", "metrics": ["sum:件数"], "where": {"年": "previous"}}),
    );
    let message = previous["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("more than {MAX_PERIODS} periods")),
        "{previous:#}"
    );
}
