//! The batched writes: `create_frozen` (a new task frozen and moved on in one append) and
//! `finish` (updates and an end transition in one append), and that they fold to the same task
//! the separate calls give.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pegasus_proto::Stage;
use pegasus_tasks::{TaskError, TaskEvent, TaskState, TaskUpdate};

#[test]
fn create_frozen_records_the_same_events_as_the_separate_calls() {
    let (_dir, store) = project();
    let t = store
        .create_frozen(
            new_task("answer"),
            spec("say hi"),
            TaskState::Running,
            "agent",
            "a message",
        )
        .unwrap();
    assert_eq!((t.state, t.spec_version), (TaskState::Running, 1));
    assert_eq!(store.get(&t.id).unwrap(), t);
    let kinds: Vec<String> = store
        .history(&t.id)
        .unwrap()
        .iter()
        .map(|e| match e {
            TaskEvent::Created { .. } => "created".to_string(),
            TaskEvent::Spec { version, .. } => format!("spec v{version}"),
            TaskEvent::Transition { from, to, .. } => format!("{from}->{to}"),
            TaskEvent::Update { field, .. } => format!("update {field}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "created",
            "spec v1",
            "draft->planned",
            "planned->ready",
            "ready->running"
        ]
    );
    assert_eq!(store.list().unwrap(), vec![t]);
}

#[test]
fn create_frozen_stops_where_asked_and_refuses_other_states_and_empty_goals() {
    let (_dir, store) = project();
    let ready = store
        .create_frozen(new_task("a"), spec("g"), TaskState::Ready, "u", "r")
        .unwrap();
    assert_eq!(ready.state, TaskState::Ready);
    assert!(matches!(
        store.create_frozen(new_task("b"), spec("g"), TaskState::Done, "u", "r"),
        Err(TaskError::Invalid(_))
    ));
    assert!(matches!(
        store.create_frozen(new_task("c"), spec("  "), TaskState::Ready, "u", "r"),
        Err(TaskError::Invalid(_))
    ));
    assert_eq!(store.list().unwrap().len(), 1);
}

#[test]
fn create_frozen_does_not_run_a_task_whose_dependency_is_not_done() {
    let (_dir, store) = project();
    let dep = task_in(&store, TaskState::Ready);
    let mut t = new_task("after");
    t.depends_on = vec![dep.id.clone()];
    assert!(matches!(
        store.create_frozen(t, spec("g"), TaskState::Running, "u", "r"),
        Err(TaskError::Waiting { .. })
    ));
}

#[test]
fn finish_writes_updates_and_the_end_state_together() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Running);
    let before = store.history(&t.id).unwrap().len();
    let done = store
        .finish(
            &t.id,
            &[
                TaskUpdate::ResultSummary(Some("hi".into())),
                TaskUpdate::Cost(Some(0.25)),
            ],
            Some((TaskState::Running, TaskState::Done, "answered")),
            "agent",
        )
        .unwrap();
    assert_eq!(done.state, TaskState::Done);
    assert_eq!(done.result_summary.as_deref(), Some("hi"));
    assert_eq!(done.cost_usd, Some(0.25));
    assert_eq!(store.get(&t.id).unwrap(), done);
    assert_eq!(store.history(&t.id).unwrap().len(), before + 3);
}

#[test]
fn finish_is_all_or_nothing() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Running);
    let before = store.history(&t.id).unwrap().len();
    // The task is not where the caller thinks: nothing is written.
    assert!(matches!(
        store.finish(
            &t.id,
            &[TaskUpdate::ResultSummary(Some("x".into()))],
            Some((TaskState::Ready, TaskState::Done, "answered")),
            "agent",
        ),
        Err(TaskError::Conflict { .. })
    ));
    // A bad value: nothing is written either.
    assert!(store
        .finish(
            &t.id,
            &[
                TaskUpdate::ResultSummary(Some("x".into())),
                TaskUpdate::Cost(Some(-1.0)),
            ],
            Some((TaskState::Running, TaskState::Done, "answered")),
            "agent",
        )
        .is_err());
    assert_eq!(store.history(&t.id).unwrap().len(), before);
    // Updates alone are fine.
    let t2 = store
        .finish(
            &t.id,
            &[TaskUpdate::Stage(Some(Stage::Acting))],
            None,
            "agent",
        )
        .unwrap();
    assert_eq!(t2.state, TaskState::Running);
    assert_eq!(store.history(&t.id).unwrap().len(), before + 1);
}
