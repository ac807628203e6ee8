//! The board groups the ten states into todo / in progress / review / done.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pegasus_tasks::{board, find_task, BoardColumn, TaskError, TaskState, TaskStore};

#[test]
fn board_groups_every_state_into_its_column_in_order() {
    let (_dir, store) = project();
    for s in TaskState::ALL {
        task_in(&store, s);
    }
    let tasks = store.list().unwrap();
    let cols = board(&tasks);
    let got: Vec<(BoardColumn, Vec<TaskState>)> = cols
        .iter()
        .map(|(c, ts)| (*c, ts.iter().map(|t| t.state).collect()))
        .collect();
    use TaskState::*;
    // list() is newest first, and the board keeps that order inside a column.
    assert_eq!(
        got,
        vec![
            (BoardColumn::Todo, vec![Blocked, Ready, Planned, Draft]),
            (BoardColumn::InProgress, vec![Running]),
            (BoardColumn::Review, vec![Verified, Verifying]),
            (BoardColumn::Done, vec![Cancelled, Failed, Done]),
        ]
    );
}

#[test]
fn an_empty_board_still_has_four_columns() {
    let cols = board(&[]);
    assert_eq!(
        cols.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        BoardColumn::ALL.to_vec()
    );
    assert!(cols.iter().all(|(_, ts)| ts.is_empty()));
}

#[test]
fn find_task_locates_a_task_in_any_project() {
    let home = tempfile::tempdir().unwrap();
    let projects = home.path().join("projects");
    let mut ids = Vec::new();
    for name in ["alpha", "beta"] {
        let dir = projects.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let store = TaskStore::open(&dir, name).unwrap();
        ids.push((name, task_in(&store, TaskState::Ready).id));
    }
    std::fs::create_dir_all(projects.join("gamma")).unwrap(); // no tasks/ yet
    for (name, id) in &ids {
        let (found, store) = find_task(&projects, id).unwrap();
        assert_eq!(&found, name);
        assert_eq!(store.get(id).unwrap().project, *name);
    }
    assert!(matches!(
        find_task(&projects, "t-20260101-000000").unwrap_err(),
        TaskError::NotFound(_)
    ));
    assert!(
        !projects.join("gamma/tasks").exists(),
        "searching creates nothing"
    );
}
