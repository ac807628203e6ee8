//! A planner's split (DESIGN.md §10 `plan:`): subtasks created ready with their dependencies, the
//! parent waiting for them, and every malformed plan refused before anything is written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pegasus_tasks::{fold, Readiness, RepoSnapshot, Step, TaskError, TaskState};

fn step(goal: &str, deps: &[usize]) -> Step {
    Step {
        goal: goal.into(),
        acceptance: vec![format!("{goal} works")],
        depends_on: deps.to_vec(),
        ..Step::default()
    }
}

fn done(store: &pegasus_tasks::TaskStore, id: &str) {
    store
        .transition(id, TaskState::Ready, TaskState::Running, "w", "")
        .unwrap();
    store
        .transition(id, TaskState::Running, TaskState::Done, "w", "")
        .unwrap();
}

#[test]
fn a_split_makes_ready_subtasks_in_order_and_the_parent_waits_for_them() {
    let (_dir, store) = project();
    let mut parent_spec = spec("build the parser and its CLI");
    parent_spec.repos = vec![RepoSnapshot {
        id: "app".into(),
        path: "/nowhere".into(),
        head: Some("abc".into()),
        branch: Some("main".into()),
    }];
    let p = store.create(new_task("parser"), "user").unwrap();
    store.freeze(&p.id, parent_spec, "user").unwrap();
    store
        .transition(&p.id, TaskState::Planned, TaskState::Ready, "user", "")
        .unwrap();

    let subs = store
        .split(
            &p.id,
            &[
                step("lexer", &[]),
                step("parser", &[1]),
                step("cli", &[1, 2, 2]),
            ],
            "planner",
        )
        .unwrap();
    assert_eq!(subs.len(), 3);
    let ids: Vec<String> = subs.iter().map(|t| t.id.clone()).collect();
    for (i, t) in subs.iter().enumerate() {
        let t = store.get(&t.id).unwrap();
        assert_eq!(t.state, TaskState::Ready);
        assert_eq!(t.parent.as_deref(), Some(p.id.as_str()));
        assert_eq!(t.kind, "code");
        let s = t.spec.unwrap();
        assert_eq!(s.role.as_deref(), Some("coder"));
        assert_eq!(s.repos[0].id, "app");
        assert_eq!(
            s.repos[0].head, None,
            "a subtask starts from the base as it is then"
        );
        assert!(s.constraints.contains(&"no network".to_string()));
        assert!(s.constraints.contains(&format!(
            "This is step {} of 3 of task {}: build the parser and its CLI",
            i + 1,
            p.id
        )));
    }
    assert_eq!(store.get(&ids[0]).unwrap().depends_on, Vec::<String>::new());
    assert_eq!(store.get(&ids[1]).unwrap().depends_on, vec![ids[0].clone()]);
    assert_eq!(
        store.get(&ids[2]).unwrap().depends_on,
        vec![ids[0].clone(), ids[1].clone()],
        "each once"
    );
    assert_eq!(store.get(&ids[2]).unwrap().title, "cli");

    // The parent stays ready, waiting on all three; the subtasks go in dependency order.
    let parent = store.get(&p.id).unwrap();
    assert_eq!(
        (parent.state, parent.subtasks.clone()),
        (TaskState::Ready, ids.clone())
    );
    assert!(
        matches!(store.readiness(&p.id).unwrap(), Readiness::Skip { waiting_on } if waiting_on.len() == 3)
    );
    assert!(matches!(
        store.readiness(&ids[1]).unwrap(),
        Readiness::Skip { .. }
    ));
    assert_eq!(store.readiness(&ids[0]).unwrap(), Readiness::Go);
    for id in &ids {
        assert_eq!(store.readiness(id).unwrap(), Readiness::Go);
        done(&store, id);
    }
    assert_eq!(store.readiness(&p.id).unwrap(), Readiness::Go);

    // The files say the same as the store: a fold of the parent's events has its subtasks.
    let events = store.history(&p.id).unwrap();
    assert_eq!(fold(&events).unwrap().subtasks, ids);
    // And the index survives a rebuild.
    std::fs::remove_file(store.index_path()).unwrap();
    let listed = store.list().unwrap();
    assert_eq!(
        listed
            .iter()
            .filter(|t| t.parent.as_deref() == Some(p.id.as_str()))
            .count(),
        3
    );
}

#[test]
fn a_bad_plan_or_a_task_not_ready_is_refused_and_nothing_is_written() {
    let (_dir, store) = project();
    let p = task_in(&store, TaskState::Ready);
    let before = store.list().unwrap().len();
    let err = store
        .split(&p.id, &[step("a", &[]), step("b", &[2])], "planner")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("task {}: step 2 depends on step 2: a step may depend only on steps before it, numbered from 1", p.id)
    );
    assert_eq!(store.list().unwrap().len(), before);
    assert!(store.get(&p.id).unwrap().subtasks.is_empty());

    let running = task_in(&store, TaskState::Running);
    assert!(matches!(
        store.split(&running.id, &[step("a", &[])], "planner"),
        Err(TaskError::Conflict { .. })
    ));

    store
        .split(&p.id, &[step("a", &[]), step("b", &[1])], "planner")
        .unwrap();
    let again = store
        .split(&p.id, &[step("c", &[])], "planner")
        .unwrap_err();
    assert!(
        again.to_string().contains("is already split into"),
        "{again}"
    );
}
