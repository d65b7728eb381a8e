//! Integration tests of the cluster path: one binary. Each test starts its own scheduler and
//! executors (`local`) as separate processes on 127.0.0.1.

// The engine's fixture and golden runner, so that the same cases run through a cluster.
#[allow(dead_code)]
#[path = "../../../engine/tests/it/fixture.rs"]
mod fixture;
#[allow(dead_code)]
#[path = "../../../engine/tests/it/golden.rs"]
mod golden;
#[allow(dead_code)]
#[path = "../../../engine/tests/it/survey.rs"]
mod survey;

mod cases;
mod local;
