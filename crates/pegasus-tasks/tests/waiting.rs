//! What waits for the user, read through pegasusd's cache: the same lines as a fresh read,
//! after every change of the task index, whoever wrote it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pegasus_tasks::{waiting_on_user, TaskState, TaskStore, WaitingCache};

fn lines(cache: &WaitingCache, store: &TaskStore) -> Vec<String> {
    let got = cache.lines(store.project_dir(), "web");
    assert_eq!(
        got,
        waiting_on_user(store.project_dir(), "web"),
        "cache and files disagree"
    );
    got
}

fn mv(store: &TaskStore, id: &str, from: TaskState, to: TaskState, reason: &str) {
    store.transition(id, from, to, "test", reason).unwrap();
}

#[test]
fn the_cache_follows_every_change_of_the_index() {
    let (_dir, store) = project();
    let cache = WaitingCache::default();
    assert!(
        lines(&cache, &store).is_empty(),
        "no index yet: nothing waits"
    );

    let t = task_in(&store, TaskState::Running);
    assert!(lines(&cache, &store).is_empty());
    mv(
        &store,
        &t.id,
        TaskState::Running,
        TaskState::Blocked,
        "budget",
    );
    assert_eq!(
        lines(&cache, &store),
        vec![format!("web: task {} is blocked: budget", t.id)]
    );
    // Unchanged: served again (and still equal to the files).
    assert_eq!(lines(&cache, &store).len(), 1);

    // A second task blocked right after, and the first one moved on: both seen at once.
    let u = task_in(&store, TaskState::Running);
    mv(
        &store,
        &u.id,
        TaskState::Running,
        TaskState::Blocked,
        "asks",
    );
    mv(
        &store,
        &t.id,
        TaskState::Blocked,
        TaskState::Ready,
        "raised",
    );
    assert_eq!(
        lines(&cache, &store),
        vec![format!("web: task {} is blocked: asks", u.id)]
    );

    // The index removed (a project emptied by hand): nothing waits, nothing is kept.
    std::fs::remove_file(store.index_path()).unwrap();
    assert!(cache.lines(store.project_dir(), "web").is_empty());
}
