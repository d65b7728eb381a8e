//! Unit tests of the tasks: running tasks and kept results within their bounds, results let
//! go to make room, questions, cancellation and time-to-live.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, InputRequest, TaskPayload, TaskStatus,
};
use rmcp::task_manager::TaskExit;
use serde_json::json;
use tally_engine::storage::Budget;

use super::bounds::Bounds;
use super::{ALLOWANCE, Full, Tasks, unknown};

fn answer(bytes: usize) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text("x".repeat(bytes))])
}

fn refused(result: &CallToolResult) -> Option<String> {
    (result.is_error == Some(true)).then(|| format!("{:?}", result.content))
}

fn small(running_per_caller: usize, running: usize) -> Bounds {
    Bounds {
        running_per_caller,
        running,
        results_per_caller: 3,
        result_bytes_per_caller: 1 << 20,
        results: 5,
        result_bytes: 1 << 20,
    }
}

fn tasks(bounds: Bounds) -> Tasks {
    Tasks::with_bounds(Budget::new(1 << 30), 1 << 20, bounds)
}

/// Starts a task of `caller` answering `bytes` at once, or when `gate` opens.
fn start(
    tasks: &Tasks,
    caller: &str,
    bytes: usize,
    gate: Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<String, Full> {
    tasks
        .spawn(
            caller,
            Duration::from_secs(60),
            "started".into(),
            move |context| {
                Box::pin(async move {
                    if let Some(mut gate) = gate {
                        tokio::select! {
                            _ = gate.wait_for(|open| *open) => {}
                            () = context.cancelled() => return Err(TaskExit::Cancelled),
                        }
                    }
                    Ok(answer(bytes))
                })
            },
        )
        .map(|task| task.task_id)
}

async fn settled(tasks: &Tasks, caller: &str, id: &str) -> DetailedTask {
    for _ in 0..500 {
        let got = tasks.get(caller, id).expect("known");
        if got.status().is_terminal() {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("task {id} did not settle");
}

#[test]
fn a_kept_result_is_held_in_the_memory_budget_until_the_task_is_let_go() {
    let budget = Budget::new(1 << 20);
    let tasks = Tasks::with_bounds(Arc::clone(&budget), 1 << 20, small(2, 4));
    let (kept, held) = tasks.inner.keep(answer(10_000));
    assert!(refused(&kept).is_none());
    let size = serde_json::to_vec(&kept).unwrap().len();
    assert_eq!(budget.used(), size);
    drop(held);
    assert_eq!(budget.used(), 0);
}

#[test]
fn a_result_past_its_bound_or_the_budget_is_kept_as_a_refusal() {
    let budget = Budget::new(1 << 20);
    let tasks = Tasks::with_bounds(Arc::clone(&budget), 1_000, small(2, 4));
    let (too_large, _) = tasks.inner.keep(answer(5_000));
    let message = refused(&too_large).expect("refused");
    assert!(
        message.contains("keeps at most 1000") && message.contains("limit_exceeded"),
        "{message}"
    );
    assert_eq!(budget.used(), 0);

    // The budget is held by data but for 2,000 bytes.
    let mut data = budget.reservation("a prepared table");
    data.resize((1 << 20) - 2_000).unwrap();
    let tasks = Tasks::with_bounds(Arc::clone(&budget), 1 << 20, small(2, 4));
    let (no_room, _) = tasks.inner.keep(answer(5_000));
    let message = refused(&no_room).expect("refused");
    assert!(message.contains("cannot be kept"), "{message}");
    assert_eq!(budget.used(), (1 << 20) - 2_000);
}

#[test]
fn the_bound_is_the_rows_bound_and_as_much_again() {
    let budget = Budget::new(1 << 30);
    let bound = |rows| Tasks::new(Arc::clone(&budget), rows).inner.max_result_bytes;
    assert_eq!(bound(4 << 20), 8 << 20);
    assert_eq!(bound(1_000), 1_000 + ALLOWANCE);
    assert_eq!(bound(10 << 20), 20 << 20);
    // A caller may always keep one result of the largest size.
    let large = Tasks::new(Arc::clone(&budget), 64 << 20).inner.bounds;
    assert_eq!(large.result_bytes_per_caller, 128 << 20);
    assert!(large.result_bytes >= large.result_bytes_per_caller);
}

/// Regression (issue 54, "first come holds the slots"): a finished task held its slot
/// for twice its time-to-live, so a caller's ninth task was refused.
#[tokio::test]
async fn a_finished_task_frees_its_place_at_once() {
    let tasks = tasks(small(2, 4));
    for _ in 0..10 {
        let id = start(&tasks, "a", 10, None).expect("room: the others finished");
        assert_eq!(
            settled(&tasks, "a", &id).await.status(),
            TaskStatus::Completed
        );
    }
}

#[tokio::test]
async fn running_tasks_are_bounded_per_caller_and_in_all_and_say_when_they_free() {
    let tasks = tasks(small(2, 3));
    let (open, gate) = tokio::sync::watch::channel(false);
    let a1 = start(&tasks, "a", 10, Some(gate.clone())).unwrap();
    let a2 = start(&tasks, "a", 10, Some(gate.clone())).unwrap();
    let mine = start(&tasks, "a", 10, Some(gate.clone())).unwrap_err();
    assert!(
        mine.message.contains("your 2 running tasks")
            && mine.message.contains(&a1)
            && mine.message.contains(&a2)
            && mine.message.contains("RUNNING_PER_CALLER")
            && mine.message.contains("stops within ")
            && mine.message.contains(" s at the latest")
            && mine.hint.contains("tasks/cancel"),
        "{mine:?}"
    );
    start(&tasks, "b", 10, Some(gate.clone())).expect("b has its own share");
    let all = start(&tasks, "c", 10, Some(gate.clone())).unwrap_err();
    assert!(
        all.message.contains("the server runs 3 tasks") && all.message.contains("RUNNING_IN_ALL"),
        "{all:?}"
    );
    // A cancelled task frees its place once its work has stopped.
    tasks.cancel("a", &a1).unwrap();
    assert_eq!(
        settled(&tasks, "a", &a1).await.status(),
        TaskStatus::Cancelled
    );
    start(&tasks, "c", 10, Some(gate.clone())).expect("room again");
    open.send(true).unwrap();
    assert_eq!(
        settled(&tasks, "a", &a2).await.status(),
        TaskStatus::Completed
    );
}

#[tokio::test]
async fn cancelling_a_finished_task_deletes_it_and_gives_back_its_memory() {
    let budget = Budget::new(1 << 30);
    let tasks = Tasks::with_bounds(Arc::clone(&budget), 1 << 20, small(2, 4));
    let id = start(&tasks, "a", 10_000, None).unwrap();
    settled(&tasks, "a", &id).await;
    assert!(budget.used() > 10_000);
    // Another caller cannot delete it: to it the id is unknown.
    assert_eq!(
        tasks.cancel("b", &id).unwrap_err().message,
        unknown(&id).message
    );
    tasks.cancel("a", &id).unwrap();
    assert_eq!(budget.used(), 0);
    let gone = tasks.get("a", &id).unwrap_err();
    assert_eq!(gone.message, unknown(&id).message);
    assert!(tasks.cancel("a", &id).is_err(), "deleted: unknown now");
}

#[tokio::test]
async fn kept_results_are_bounded_per_caller_oldest_let_go_first() {
    let tasks = tasks(small(2, 8));
    let mut ids = Vec::new();
    for _ in 0..5 {
        let id = start(&tasks, "a", 10, None).unwrap();
        settled(&tasks, "a", &id).await;
        ids.push(id);
    }
    // Three kept: the two oldest let go, and said so to their owner only.
    for id in &ids[..2] {
        let gone = tasks.get("a", id).unwrap_err();
        assert!(
            gone.message.contains("was let go to make room")
                && gone.message.contains("RESULTS_PER_CALLER"),
            "{}",
            gone.message
        );
        assert_eq!(tasks.get("b", id).unwrap_err().message, unknown(id).message);
    }
    for id in &ids[2..] {
        assert_eq!(tasks.get("a", id).unwrap().status(), TaskStatus::Completed);
    }
    // tasks/cancel of a result let go: gone as asked, and unknown from then on.
    tasks.cancel("a", &ids[0]).unwrap();
    assert_eq!(
        tasks.get("a", &ids[0]).unwrap_err().message,
        unknown(&ids[0]).message
    );
}

#[tokio::test]
async fn past_the_server_bound_the_largest_keeper_lets_go_first() {
    let tasks = tasks(Bounds {
        results_per_caller: 4,
        results: 5,
        ..small(2, 8)
    });
    let mut of_a = Vec::new();
    for _ in 0..4 {
        let id = start(&tasks, "a", 10, None).unwrap();
        settled(&tasks, "a", &id).await;
        of_a.push(id);
    }
    let b1 = start(&tasks, "b", 10, None).unwrap();
    settled(&tasks, "b", &b1).await;
    // The server's sixth result: `a` keeps the most, and lets go of its oldest.
    let b2 = start(&tasks, "b", 10, None).unwrap();
    settled(&tasks, "b", &b2).await;
    let gone = tasks.get("a", &of_a[0]).unwrap_err();
    assert!(gone.message.contains("RESULTS_IN_ALL"), "{}", gone.message);
    for id in [&b1, &b2] {
        assert!(tasks.get("b", id).is_ok());
    }
    assert!(tasks.get("a", &of_a[1]).is_ok());
}

#[tokio::test]
async fn a_question_is_shown_until_answered_or_withdrawn() {
    let tasks = tasks(small(2, 4));
    let question: InputRequest = serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {"message": "which?", "requestedSchema": {"type": "object", "properties": {}}}
    }))
    .unwrap();
    let id = tasks
        .spawn("a", Duration::from_secs(60), "asking".into(), move |c| {
            Box::pin(async move {
                // Not answered in time: withdrawn, then answered.
                let late = tokio::time::timeout(
                    Duration::from_millis(50),
                    c.request_input("first", question.clone()),
                )
                .await;
                assert!(late.is_err());
                c.set_status_message("asking again");
                let answer = c.request_input("second", question).await?;
                Ok(CallToolResult::success(vec![ContentBlock::text(
                    answer.to_string(),
                )]))
            })
        })
        .unwrap()
        .task_id;
    let mut seen_first = false;
    loop {
        let got = tasks.get("a", &id).unwrap();
        if let TaskPayload::InputRequired { input_requests } = &got.payload {
            seen_first |= input_requests.contains_key("first");
            if input_requests.contains_key("second") {
                assert_eq!(input_requests.len(), 1, "the first was withdrawn");
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(seen_first);
    tasks
        .update("a", &id, [("second".to_string(), json!("yes"))])
        .unwrap();
    let done = settled(&tasks, "a", &id).await;
    assert_eq!(done.status(), TaskStatus::Completed);
}
