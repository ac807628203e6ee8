//! A ready task whose dependencies are not done is skipped, and says which.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pegasus_tasks::{NewTask, Readiness, TaskError, TaskState};

#[test]
fn skip_names_each_unfinished_dependency_with_its_state() {
    let (_dir, store) = project();
    let a = task_in(&store, TaskState::Running);
    let b = task_in(&store, TaskState::Done);
    let c = task_in(&store, TaskState::Ready);
    let t = store
        .create(
            NewTask {
                depends_on: vec![a.id.clone(), b.id.clone(), c.id.clone()],
                ..new_task("after a, b and c")
            },
            "user",
        )
        .unwrap();
    store.freeze(&t.id, spec("g"), "user").unwrap();
    store
        .transition(&t.id, TaskState::Planned, TaskState::Ready, "user", "")
        .unwrap();
    assert_eq!(
        store.readiness(&t.id).unwrap(),
        Readiness::Skip {
            waiting_on: vec![format!("{} (running)", a.id), format!("{} (ready)", c.id)]
        }
    );
    // The runner cannot start it behind the scheduler's back either.
    let err = store
        .transition(&t.id, TaskState::Ready, TaskState::Running, "w", "")
        .unwrap_err();
    assert!(matches!(err, TaskError::Waiting { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "task {} waits on {} (running), {} (ready): finish those first",
            t.id, a.id, c.id
        )
    );

    // Finish them and it may go.
    store
        .transition(&a.id, TaskState::Running, TaskState::Done, "w", "")
        .unwrap();
    store
        .transition(&c.id, TaskState::Ready, TaskState::Running, "w", "")
        .unwrap();
    store
        .transition(&c.id, TaskState::Running, TaskState::Done, "w", "")
        .unwrap();
    assert_eq!(store.readiness(&t.id).unwrap(), Readiness::Go);
    store
        .transition(&t.id, TaskState::Ready, TaskState::Running, "w", "")
        .unwrap();
}

#[test]
fn a_task_without_dependencies_is_go() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Ready);
    assert_eq!(store.readiness(&t.id).unwrap(), Readiness::Go);
}

#[test]
fn a_cancelled_dependency_keeps_blocking() {
    let (_dir, store) = project();
    let a = task_in(&store, TaskState::Cancelled);
    let t = store
        .create(
            NewTask {
                depends_on: vec![a.id.clone()],
                ..new_task("x")
            },
            "u",
        )
        .unwrap();
    assert_eq!(
        store.readiness(&t.id).unwrap(),
        Readiness::Skip {
            waiting_on: vec![format!("{} (cancelled)", a.id)]
        }
    );
}
