//! The transition table as enforced by the store: compare-and-set, the freeze gate, and what a
//! move records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pegasus_proto::Stage;
use pegasus_tasks::{check_transition, TaskError, TaskEvent, TaskState, TaskUpdate};

#[test]
fn every_pair_through_the_store_matches_the_table_with_the_exact_error() {
    let (_dir, store) = project();
    for from in TaskState::ALL {
        for to in TaskState::ALL {
            let t = task_in(&store, from);
            let table = check_transition(&t.id, from, to);
            let got = store.transition(&t.id, from, to, "test", "why");
            match table {
                // The table allows it; the freeze gate does not (freeze() is the way).
                Ok(()) if (from, to) == (TaskState::Draft, TaskState::Planned) => {
                    assert!(matches!(got, Err(TaskError::NotFrozen(_))), "{got:?}");
                }
                Ok(()) => {
                    let moved = got.unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
                    assert_eq!(moved.state, to);
                    assert_eq!(store.get(&t.id).unwrap().state, to);
                }
                Err(_) => {
                    let err = got.expect_err("refused");
                    assert_eq!(
                        err.to_string(),
                        format!("cannot move task {} from {from} to {to}", t.id)
                    );
                    // A refusal writes nothing.
                    assert_eq!(store.get(&t.id).unwrap(), t);
                }
            }
        }
    }
}

#[test]
fn stale_expected_state_is_a_conflict_and_changes_nothing() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Running);
    let err = store
        .transition(&t.id, TaskState::Ready, TaskState::Running, "w", "")
        .unwrap_err();
    assert!(matches!(
        err,
        TaskError::Conflict {
            expected: TaskState::Ready,
            actual: TaskState::Running,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        format!("task {} is running, not ready: reload and try again", t.id)
    );
    assert_eq!(store.history(&t.id).unwrap().len(), 1 + 2 + 2);
}

#[test]
fn ready_without_a_frozen_spec_is_refused() {
    let (_dir, store) = project();
    let t = store.create(new_task("unplanned"), "user").unwrap();
    // Skipping the freeze by asking for planned directly is gated the same way.
    let err = store
        .transition(&t.id, TaskState::Draft, TaskState::Planned, "user", "")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("task {} has no frozen spec: freeze it first", t.id)
    );
    // And draft -> ready is not in the table at all.
    let err = store
        .transition(&t.id, TaskState::Draft, TaskState::Ready, "user", "")
        .unwrap_err();
    assert!(matches!(err, TaskError::InvalidTransition { .. }), "{err}");
    assert_eq!(store.get(&t.id).unwrap().state, TaskState::Draft);
}

#[test]
fn each_transition_is_logged_with_actor_reason_and_time() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Ready);
    let before = chrono::Utc::now();
    store
        .transition(
            &t.id,
            TaskState::Ready,
            TaskState::Running,
            "worker",
            "picked up",
        )
        .unwrap();
    let last = store.history(&t.id).unwrap().pop().unwrap();
    match last {
        TaskEvent::Transition {
            ts,
            from,
            to,
            actor,
            reason,
        } => {
            assert_eq!((from, to), (TaskState::Ready, TaskState::Running));
            assert_eq!((actor.as_str(), reason.as_str()), ("worker", "picked up"));
            assert!(ts >= before);
        }
        other => panic!("expected a transition, got {other:?}"),
    }
}

#[test]
fn stop_reason_follows_failed_blocked_cancelled_and_clears_on_retry() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Running);
    let t = store
        .transition(
            &t.id,
            TaskState::Running,
            TaskState::Blocked,
            "agent",
            "budget",
        )
        .unwrap();
    assert_eq!(t.stop_reason.as_deref(), Some("budget"));
    let t = store
        .transition(
            &t.id,
            TaskState::Blocked,
            TaskState::Ready,
            "user",
            "budget raised",
        )
        .unwrap();
    assert_eq!(t.stop_reason, None);
    let t = store
        .transition(
            &t.id,
            TaskState::Ready,
            TaskState::Cancelled,
            "user",
            "not needed",
        )
        .unwrap();
    assert_eq!(t.stop_reason.as_deref(), Some("not needed"));
    assert_eq!(store.get(&t.id).unwrap(), t);
}

#[test]
fn stage_is_only_set_while_running_and_cleared_when_it_stops() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Ready);
    let err = store
        .update(&t.id, TaskUpdate::Stage(Some(Stage::Acting)), "agent")
        .unwrap_err();
    assert!(err.to_string().contains("only set while running"), "{err}");
    store
        .transition(&t.id, TaskState::Ready, TaskState::Running, "w", "")
        .unwrap();
    let t = store
        .update(&t.id, TaskUpdate::Stage(Some(Stage::Reasoning)), "agent")
        .unwrap();
    assert_eq!(t.stage, Some(Stage::Reasoning));
    let t = store
        .transition(
            &t.id,
            TaskState::Running,
            TaskState::Done,
            "agent",
            "answered",
        )
        .unwrap();
    assert_eq!(t.stage, None);
    assert_eq!(store.get(&t.id).unwrap(), t);
}

#[test]
fn updates_are_typed_and_recorded() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Running);
    store
        .update(
            &t.id,
            TaskUpdate::ResultSummary(Some("did it".into())),
            "agent",
        )
        .unwrap();
    store
        .update(
            &t.id,
            TaskUpdate::FilesChanged(vec!["a.rs".into(), "b.rs".into()]),
            "agent",
        )
        .unwrap();
    store
        .update(&t.id, TaskUpdate::Cost(Some(0.25)), "agent")
        .unwrap();
    let err = store
        .update(&t.id, TaskUpdate::Cost(Some(f64::NAN)), "agent")
        .unwrap_err();
    assert!(err.to_string().contains("must be a number >= 0"), "{err}");
    // What a file says is read back typed: a wrong type or an unknown field is refused.
    let err = TaskUpdate::parse(&t.id, "files_changed", &"a.rs".into()).unwrap_err();
    assert!(
        err.to_string().contains("must be a list of strings"),
        "{err}"
    );
    let err = TaskUpdate::parse(&t.id, "state", &"done".into()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("task field `state` cannot be updated"),
        "{err}"
    );
    let got = store.get(&t.id).unwrap();
    assert_eq!(got.result_summary.as_deref(), Some("did it"));
    assert_eq!(got.files_changed, vec!["a.rs", "b.rs"]);
    assert_eq!(got.cost_usd, Some(0.25));
    assert_eq!(got.state, TaskState::Running);
}

#[test]
fn unknown_task_is_not_found_with_a_hint() {
    let (_dir, store) = project();
    for id in ["t-20260101-abcdef", "../../etc/passwd"] {
        let err = store.get(id).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("task {id} not found: see `pegasusctl task list PROJECT`")
        );
    }
}

#[test]
fn bad_new_tasks_are_refused() {
    let (_dir, store) = project();
    let mut t = new_task("  ");
    assert!(store
        .create(t.clone(), "u")
        .unwrap_err()
        .to_string()
        .contains("needs a title"));
    t.title = "x".into();
    t.priority = 4;
    assert!(store
        .create(t.clone(), "u")
        .unwrap_err()
        .to_string()
        .contains("priority 4"));
    t.priority = 0;
    t.depends_on = vec!["t-20260101-000000".into()];
    assert!(matches!(
        store.create(t, "u").unwrap_err(),
        TaskError::NotFound(_)
    ));
}
