//! Transitions are compare-and-set across threads and across store instances (as two
//! processes would hold them): of two identical moves raced at once, exactly one wins.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Barrier};
use std::thread;

use common::*;
use pegasus_tasks::{TaskError, TaskState, TaskStore};

const ROUNDS: usize = 40;

/// Races `ready -> running` on one task from two threads using `a` and `b`; returns
/// (wins, conflicts).
fn race(a: TaskStore, b: TaskStore, id: String) -> (usize, usize) {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = [a, b]
        .into_iter()
        .map(|store| {
            let barrier = Arc::clone(&barrier);
            let id = id.clone();
            thread::spawn(move || {
                barrier.wait();
                store.transition(&id, TaskState::Ready, TaskState::Running, "racer", "")
            })
        })
        .collect();
    let mut wins = 0;
    let mut conflicts = 0;
    for h in handles {
        match h.join().unwrap() {
            Ok(t) => {
                assert_eq!(t.state, TaskState::Running);
                wins += 1;
            }
            Err(TaskError::Conflict {
                expected, actual, ..
            }) => {
                assert_eq!((expected, actual), (TaskState::Ready, TaskState::Running));
                conflicts += 1;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    (wins, conflicts)
}

fn assert_one_transition_logged(store: &TaskStore, id: &str) {
    let moves = store
        .history(id)
        .unwrap()
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                pegasus_tasks::TaskEvent::Transition {
                    to: TaskState::Running,
                    ..
                }
            )
        })
        .count();
    assert_eq!(moves, 1, "exactly one ready->running in the log of {id}");
}

#[test]
fn two_threads_racing_the_same_transition_one_wins_one_conflicts() {
    let (_dir, store) = project();
    for _ in 0..ROUNDS {
        let t = task_in(&store, TaskState::Ready);
        assert_eq!(race(store.clone(), store.clone(), t.id.clone()), (1, 1));
        assert_eq!(store.get(&t.id).unwrap().state, TaskState::Running);
        assert_one_transition_logged(&store, &t.id);
    }
}

#[test]
fn two_store_instances_on_one_folder_behave_like_two_processes() {
    let (dir, first) = project();
    let second = TaskStore::open(dir.path(), PROJECT).unwrap();
    for _ in 0..ROUNDS {
        let t = task_in(&first, TaskState::Ready);
        assert_eq!(race(first.clone(), second.clone(), t.id.clone()), (1, 1));
        assert_eq!(second.get(&t.id).unwrap().state, TaskState::Running);
        assert_one_transition_logged(&first, &t.id);
    }
    // Both see the same index too.
    assert_eq!(first.list().unwrap(), second.list().unwrap());
    assert_eq!(first.list().unwrap().len(), ROUNDS);
}

#[test]
fn concurrent_creates_from_many_threads_all_land_in_the_index() {
    let (dir, store) = project();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let store = TaskStore::open(dir.path(), PROJECT).unwrap();
            thread::spawn(move || {
                (0..5)
                    .map(|j| {
                        store
                            .create(new_task(&format!("t{i}.{j}")), "u")
                            .unwrap()
                            .id
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ids: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40);
    // The index alone (no repair needed) already holds every task.
    let index = std::fs::read_to_string(store.index_path()).unwrap();
    assert_eq!(index.lines().count(), 40);
    assert_eq!(store.list().unwrap().len(), 40);
}
