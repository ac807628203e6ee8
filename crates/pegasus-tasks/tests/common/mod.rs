//! Helpers shared by the integration tests: a throwaway project folder and tasks brought to a
//! given state through the public API only.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use pegasus_tasks::{NewTask, Task, TaskSpec, TaskState, TaskStore};
use tempfile::TempDir;

pub const PROJECT: &str = "demo";

/// A project folder in a temp dir and its store.
pub fn project() -> (TempDir, TaskStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::open(dir.path(), PROJECT).unwrap();
    (dir, store)
}

pub fn new_task(title: &str) -> NewTask {
    NewTask {
        title: title.into(),
        kind: "code".into(),
        ..NewTask::default()
    }
}

pub fn spec(goal: &str) -> TaskSpec {
    TaskSpec {
        goal: goal.into(),
        constraints: vec!["no network".into()],
        acceptance: vec!["tests pass".into()],
        role: Some("coder".into()),
        model_policy: Some("anthropic/claude-sonnet-4-5".into()),
        repos: vec![],
        budget_usd: None,
    }
}

/// The shortest legal path from draft to each state.
pub fn path_to(state: TaskState) -> Vec<TaskState> {
    use TaskState::*;
    match state {
        Draft => vec![],
        Planned => vec![Planned],
        Ready => vec![Planned, Ready],
        Running => vec![Planned, Ready, Running],
        Verifying => vec![Planned, Ready, Running, Verifying],
        Verified => vec![Planned, Ready, Running, Verifying, Verified],
        Done => vec![Planned, Ready, Running, Verifying, Verified, Done],
        Failed => vec![Planned, Ready, Running, Failed],
        Cancelled => vec![Cancelled],
        Blocked => vec![Planned, Ready, Running, Blocked],
    }
}

/// A task brought to `state` (planned via a real freeze).
pub fn task_in(store: &TaskStore, state: TaskState) -> Task {
    let mut t = store.create(new_task("a task"), "test").unwrap();
    for to in path_to(state) {
        t = if to == TaskState::Planned {
            store.freeze(&t.id, spec("do the thing"), "test").unwrap()
        } else {
            store
                .transition(&t.id, t.state, to, "test", "step")
                .unwrap()
        };
    }
    assert_eq!(t.state, state);
    t
}
