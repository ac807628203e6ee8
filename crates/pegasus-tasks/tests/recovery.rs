//! What a crash leaves behind: the restart rule, torn event files, and an index that missed
//! the last write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;

use common::*;
use pegasus_tasks::{
    NewTask, Recovered, Recovery, TaskEvent, TaskState, CRASHED_TWICE_REASON, RERUN_REASON,
    RESTART_REASON, SHUTDOWN_REASON,
};

#[test]
fn restart_fails_running_and_verifying_and_leaves_the_rest() {
    let (_dir, store) = project();
    let tasks: Vec<_> = TaskState::ALL
        .into_iter()
        .map(|s| task_in(&store, s))
        .collect();
    let recovered = store.recover_after_restart().unwrap();
    assert!(recovered.iter().all(|r| r.action == Recovery::Failed));
    let mut failed: Vec<String> = recovered.into_iter().map(|r| r.id).collect();
    failed.sort();
    let mut expected: Vec<String> = tasks
        .iter()
        .filter(|t| matches!(t.state, TaskState::Running | TaskState::Verifying))
        .map(|t| t.id.clone())
        .collect();
    expected.sort();
    assert_eq!(failed, expected);
    for before in &tasks {
        let after = store.get(&before.id).unwrap();
        if expected.contains(&before.id) {
            assert_eq!(after.state, TaskState::Failed);
            assert_eq!(after.stop_reason.as_deref(), Some(RESTART_REASON));
            match store.history(&before.id).unwrap().pop().unwrap() {
                TaskEvent::Transition {
                    from,
                    to,
                    actor,
                    reason,
                    ..
                } => {
                    assert_eq!((from, to), (before.state, TaskState::Failed));
                    assert_eq!(
                        (actor.as_str(), reason.as_str()),
                        ("recovery", "process restarted")
                    );
                }
                other => panic!("{other:?}"),
            }
        } else {
            assert_eq!(&after, before, "{} must be left alone", before.state);
        }
    }
    // The index agrees, and a second restart finds nothing left to fail.
    let listed = store.list().unwrap();
    assert!(listed.iter().all(|t| !t.state.is_interrupted_by_restart()));
    assert!(store.recover_after_restart().unwrap().is_empty());
}

/// A message's task: created running with its message ids, as the agent creates it.
fn message_task(store: &pegasus_tasks::TaskStore, id: &str) -> pegasus_tasks::Task {
    store
        .create_frozen(
            NewTask {
                title: "hello".into(),
                messages: vec![id.into()],
                ..NewTask::default()
            },
            spec("answer hello"),
            TaskState::Running,
            "agent",
            "a message",
        )
        .unwrap()
}

#[test]
fn an_interrupted_message_task_runs_again_once_then_fails_as_crashed_twice() {
    let (_dir, store) = project();
    let plain = task_in(&store, TaskState::Running);
    let m = message_task(&store, "m-1");
    assert_eq!(m.messages, ["m-1"]);
    let got = store.recover_after_restart().unwrap();
    assert!(got.contains(&Recovered {
        id: plain.id.clone(),
        action: Recovery::Failed
    }));
    assert!(got.contains(&Recovered {
        id: m.id.clone(),
        action: Recovery::Rerun
    }));
    let after = store.get(&m.id).unwrap();
    assert_eq!(after.state, TaskState::Ready);
    let reasons: Vec<String> = store
        .history(&m.id)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e {
            TaskEvent::Transition { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert!(reasons.ends_with(&[RESTART_REASON.to_string(), RERUN_REASON.to_string()]));
    // Nothing more to do until it runs again.
    assert!(store.recover_after_restart().unwrap().is_empty());
    // It runs, and the worker dies again: the second time is the last.
    store
        .transition(
            &m.id,
            TaskState::Ready,
            TaskState::Running,
            "agent",
            "started",
        )
        .unwrap();
    assert_eq!(
        store.recover_after_restart().unwrap(),
        vec![Recovered {
            id: m.id.clone(),
            action: Recovery::CrashedTwice
        }]
    );
    let after = store.get(&m.id).unwrap();
    assert_eq!(after.state, TaskState::Failed);
    assert_eq!(after.stop_reason.as_deref(), Some(CRASHED_TWICE_REASON));
    assert!(store.recover_after_restart().unwrap().is_empty());
}

#[test]
fn a_message_task_stopped_by_a_graceful_shutdown_runs_again_after_it() {
    let (_dir, store) = project();
    let m = message_task(&store, "m-2");
    store
        .transition(
            &m.id,
            TaskState::Running,
            TaskState::Failed,
            "agent",
            SHUTDOWN_REASON,
        )
        .unwrap();
    // A plain task stopped the same way stays failed (it is retried by hand).
    let plain = task_in(&store, TaskState::Running);
    store
        .transition(
            &plain.id,
            TaskState::Running,
            TaskState::Failed,
            "agent",
            SHUTDOWN_REASON,
        )
        .unwrap();
    assert_eq!(
        store.recover_after_restart().unwrap(),
        vec![Recovered {
            id: m.id.clone(),
            action: Recovery::Rerun
        }]
    );
    assert_eq!(store.get(&m.id).unwrap().state, TaskState::Ready);
    assert_eq!(store.get(&plain.id).unwrap().state, TaskState::Failed);
    // Stopped again after its re-run: it stays failed (no loop of re-runs).
    store
        .transition(
            &m.id,
            TaskState::Ready,
            TaskState::Running,
            "agent",
            "started",
        )
        .unwrap();
    store
        .transition(
            &m.id,
            TaskState::Running,
            TaskState::Failed,
            "agent",
            SHUTDOWN_REASON,
        )
        .unwrap();
    assert!(store.recover_after_restart().unwrap().is_empty());
    assert_eq!(store.get(&m.id).unwrap().state, TaskState::Failed);
}

#[test]
fn a_torn_last_line_in_an_event_file_still_folds() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Running);
    let path = store.events_path(&t.id).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(br#"{"type":"transition","ts":"2026-01-01T00:00:00Z","from":"running","#)
        .unwrap();
    drop(f);
    assert_eq!(store.get(&t.id).unwrap(), t);
    assert_eq!(store.list().unwrap(), vec![t.clone()]);
    // The next write repairs the tail instead of gluing onto it.
    let t = store
        .transition(&t.id, TaskState::Running, TaskState::Verifying, "w", "")
        .unwrap();
    assert_eq!(store.get(&t.id).unwrap(), t);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    assert!(text
        .lines()
        .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
}

#[test]
fn an_index_that_missed_the_last_event_is_repaired_by_list() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Ready);
    let stale_index = std::fs::read(store.index_path()).unwrap();
    let t = store
        .transition(&t.id, TaskState::Ready, TaskState::Running, "w", "")
        .unwrap();
    // A crash after the event append, before the index rewrite.
    std::fs::write(store.index_path(), &stale_index).unwrap();
    assert_eq!(store.get(&t.id).unwrap().state, TaskState::Running);
    assert_eq!(store.list().unwrap(), vec![t.clone()]);
    let index = std::fs::read_to_string(store.index_path()).unwrap();
    assert!(index.contains("\"state\":\"running\""), "{index}");
}

#[test]
fn a_missing_index_and_one_missing_a_task_are_rebuilt() {
    let (_dir, store) = project();
    let a = task_in(&store, TaskState::Planned);
    let b = task_in(&store, TaskState::Done);
    std::fs::remove_file(store.index_path()).unwrap();
    assert_eq!(store.list().unwrap(), vec![b.clone(), a.clone()]);
    // A crash after create's event, before its index line.
    let index_before = std::fs::read(store.index_path()).unwrap();
    let c = store.create(new_task("third"), "u").unwrap();
    std::fs::write(store.index_path(), &index_before).unwrap();
    assert_eq!(store.list().unwrap(), vec![c.clone(), b.clone(), a.clone()]);
    std::fs::write(store.index_path(), b"garbage\n").unwrap();
    assert_eq!(store.list().unwrap(), vec![c, b, a]);
}

#[test]
fn index_lines_read_as_id_title_state_created() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Ready);
    let index = std::fs::read_to_string(store.index_path()).unwrap();
    let line: serde_json::Value = serde_json::from_str(index.lines().next().unwrap()).unwrap();
    assert_eq!(line["id"], t.id.as_str());
    assert_eq!(line["title"], "a task");
    assert_eq!(line["state"], "ready");
    assert_eq!(line["type"], "code");
    assert!(line["created"].is_string());
}

#[test]
fn an_event_file_left_empty_by_a_crash_is_ignored_by_list() {
    let (_dir, store) = project();
    let t = task_in(&store, TaskState::Draft);
    let day = store
        .events_path(&t.id)
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    std::fs::write(day.join("t-20260101-0a0b0c.jsonl"), b"").unwrap();
    assert_eq!(store.list().unwrap(), vec![t]);
    let err = store.get("t-20260101-0a0b0c");
    assert!(err.is_err());
}

/// A start that finds nothing to recover leaves the index file as it is (no new file, no
/// rename); one whose index is stale or garbage gets it rewritten from the event files.
#[test]
fn restart_rewrites_the_index_only_when_it_changed() {
    use std::os::unix::fs::MetadataExt;
    let (dir, store) = project();
    let done = task_in(&store, TaskState::Done);
    let index = dir.path().join("tasks").join("index.jsonl");
    store.recover_after_restart().unwrap();
    let before = std::fs::read(&index).unwrap();
    let inode = std::fs::metadata(&index).unwrap().ino();
    assert!(store.recover_after_restart().unwrap().is_empty());
    assert_eq!(
        std::fs::metadata(&index).unwrap().ino(),
        inode,
        "rewritten though unchanged"
    );
    assert_eq!(std::fs::read(&index).unwrap(), before);

    std::fs::write(&index, b"{\"not\": \"an index line\"}\n").unwrap();
    assert!(store.recover_after_restart().unwrap().is_empty());
    assert_eq!(std::fs::read(&index).unwrap(), before);
    // A longer file with the right lines as its start is different too.
    let mut longer = before.clone();
    longer.extend_from_slice(b"\n");
    std::fs::write(&index, &longer).unwrap();
    store.recover_after_restart().unwrap();
    assert_eq!(std::fs::read(&index).unwrap(), before);
    assert_eq!(store.get(&done.id).unwrap().state, TaskState::Done);
}
