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
