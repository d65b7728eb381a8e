//! The real survey, with the reference definition unchanged, against an independent
//! computation (the checks are in `survey.rs`), prepared and read from its file at every call.

use std::path::Path;

use tally_engine::{Engine, Limits};
use tally_storage::dataset::Serving;

fn opened(serving: Serving) -> impl Fn(&Path) -> Engine {
    move |dir| {
        Engine::open_with(
            dir,
            Limits {
                serving,
                ..Default::default()
            },
        )
    }
}

#[test]
fn survey_matches_plain_sql() {
    crate::survey::matches_plain_sql(&opened(Serving::Prepared));
}

/// The same checks with the survey read from its file at every call.
#[test]
fn survey_matches_plain_sql_read_at_every_call() {
    crate::survey::matches_plain_sql(&opened(Serving::Streaming));
}

#[test]
fn survey_answers_a_model_gets_right() {
    crate::survey::answers_a_model_gets_right(&opened(Serving::Prepared));
}

/// The same checks with the survey read from its file at every call.
#[test]
fn survey_answers_a_model_gets_right_read_at_every_call() {
    crate::survey::answers_a_model_gets_right(&opened(Serving::Streaming));
}

/// The survey in `folder` inspected read from its file, with `call_memory_bytes` a call.
fn inspected(
    folder: &std::path::Path,
    call_memory_bytes: usize,
    detail: &str,
) -> serde_json::Value {
    let engine = Engine::open_with(
        folder,
        Limits {
            serving: Serving::Streaming,
            call_memory_bytes,
            ..Default::default()
        },
    );
    let out = crate::fixture::block_on(engine.call(
        tally_semantic::Tool::InspectDataset,
        &serde_json::json!({"dataset_id": "survey", "detail": detail}),
    ))
    .unwrap_or_else(|e| panic!("{}", e.to_json()));
    out["data"].clone()
}

/// A field whose values do not fit one call's memory even counted alone (75,071 names in
/// 1 MiB) is described without them, and says so, in the field and in the warnings: its
/// values are never left out in silence, and the rest of the description is given.
#[test]
fn survey_fields_whose_values_do_not_fit_a_call_say_so() {
    let Some((tmp, _)) = crate::survey::survey_folder() else {
        return;
    };
    let inspect = |call_memory_bytes, detail| inspected(tmp.path(), call_memory_bytes, detail);
    let unlisted = |data: &serde_json::Value| -> Vec<String> {
        data["definition_warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w.as_str())
            .filter(|w| w.contains("are not listed"))
            .map(str::to_string)
            .collect()
    };
    for detail in ["full", "compact"] {
        let small = inspect(1024 * 1024, detail);
        let said = unlisted(&small);
        assert!(
            said.iter().any(|w| w.contains("`手続名`")),
            "{detail}: {said:?}"
        );
        for f in small["fields"].as_array().expect("fields") {
            let name = f["name"].as_str().expect("name");
            if said.iter().any(|w| w.contains(&format!("`{name}`"))) {
                let note = f["values"]["note"].as_str().unwrap_or_default();
                assert!(note.contains("are not listed"), "{detail}: {f}");
                assert!(f["values"].get("top_values").is_none(), "{detail}: {f}");
            }
        }
        assert!(unlisted(&inspect(Limits::default().call_memory_bytes, detail)).is_empty());
    }
}

/// Read from its file with too little memory for every field's values at once, the survey is
/// inspected a field at a time, and described as with the default budget (in one pass). The
/// budget, 12 MiB, lies between what the widest field needs alone (手続名, 75k names: at
/// 8 MiB it is described without them, and says so) and what every field needs at once (the one
/// pass fits at 16 MiB), as measured when this test was written.
#[test]
fn survey_inspected_a_field_at_a_time_when_one_pass_does_not_fit() {
    let Some((tmp, _)) = crate::survey::survey_folder() else {
        return;
    };
    let inspect = |call_memory_bytes| inspected(tmp.path(), call_memory_bytes, "full");
    let small = inspect(12 * 1024 * 1024);
    assert!(
        small["fields"].as_array().is_some_and(|f| f.len() == 38),
        "{small}"
    );
    assert_eq!(small, inspect(Limits::default().call_memory_bytes));
}
