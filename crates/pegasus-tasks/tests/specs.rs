//! Spec freezing, its version history, the freeze-after-ready rule, replay, and repo HEAD
//! snapshots.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use pegasus_tasks::{project_repos, RepoSnapshot, TaskError, TaskState, TaskStore};

#[test]
fn freeze_plans_a_draft_then_makes_new_versions_and_keeps_them_all() {
    let (_dir, store) = project();
    let t = store.create(new_task("write docs"), "user").unwrap();
    assert_eq!((t.state, t.spec_version), (TaskState::Draft, 0));
    let v1 = store.freeze(&t.id, spec("first goal"), "user").unwrap();
    assert_eq!((v1.state, v1.spec_version), (TaskState::Planned, 1));
    let v2 = store.freeze(&t.id, spec("second goal"), "user").unwrap();
    assert_eq!((v2.state, v2.spec_version), (TaskState::Planned, 2));
    assert_eq!(v2.spec.as_ref().unwrap().goal, "second goal");
    let history = store.spec_history(&t.id).unwrap();
    assert_eq!(
        history
            .iter()
            .map(|(v, s)| (*v, s.goal.as_str()))
            .collect::<Vec<_>>(),
        vec![(1, "first goal"), (2, "second goal")]
    );
    assert_eq!(store.get(&t.id).unwrap(), v2);
}

#[test]
fn freeze_after_ready_is_refused_and_changes_nothing() {
    let (_dir, store) = project();
    for state in [
        TaskState::Ready,
        TaskState::Running,
        TaskState::Done,
        TaskState::Failed,
    ] {
        let t = task_in(&store, state);
        let err = store
            .freeze(&t.id, spec("changed my mind"), "user")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the spec of task {} is frozen: create a new task or replay it",
                t.id
            )
        );
        assert_eq!(store.spec_history(&t.id).unwrap().len(), 1);
        assert_eq!(store.get(&t.id).unwrap(), t);
    }
}

#[test]
fn a_spec_needs_a_goal() {
    let (_dir, store) = project();
    let t = store.create(new_task("x"), "user").unwrap();
    let err = store.freeze(&t.id, spec(" "), "user").unwrap_err();
    assert!(matches!(err, TaskError::Invalid(_)), "{err}");
}

#[test]
fn replay_reproduces_the_frozen_spec_byte_for_byte() {
    let (_dir, store) = project();
    let src = store.create(new_task("deploy"), "user").unwrap();
    store.freeze(&src.id, spec("old goal"), "user").unwrap();
    let mut latest = spec("deploy v2.1 to staging");
    latest.repos = vec![RepoSnapshot {
        id: "api".into(),
        path: "/nonexistent/api".into(),
        head: None,
        branch: None,
    }];
    let src = store.freeze(&src.id, latest, "user").unwrap();
    let src = store
        .transition(&src.id, TaskState::Planned, TaskState::Ready, "user", "")
        .unwrap();
    let src = store
        .transition(&src.id, TaskState::Ready, TaskState::Running, "w", "")
        .unwrap();
    let src = store
        .transition(&src.id, TaskState::Running, TaskState::Failed, "w", "boom")
        .unwrap();

    let copy = store.replay(&src.id, "user").unwrap();
    assert_ne!(copy.id, src.id);
    assert_eq!(copy.replay_of.as_deref(), Some(src.id.as_str()));
    assert_eq!((copy.state, copy.spec_version), (TaskState::Planned, 1));
    assert_eq!(copy.title, src.title);
    assert_eq!(
        serde_json::to_string(&copy.spec).unwrap(),
        serde_json::to_string(&src.spec).unwrap()
    );
    // The same from disk, after a fresh fold.
    let reread = store.get(&copy.id).unwrap();
    assert_eq!(
        serde_json::to_string(&reread.spec).unwrap(),
        serde_json::to_string(&src.spec).unwrap()
    );
    // The source is untouched.
    assert_eq!(store.get(&src.id).unwrap(), src);
    // A replay can start right away.
    store
        .transition(&copy.id, TaskState::Planned, TaskState::Ready, "user", "")
        .unwrap();
}

#[test]
fn replay_of_an_unfrozen_task_is_refused() {
    let (_dir, store) = project();
    let t = store.create(new_task("x"), "user").unwrap();
    assert!(matches!(
        store.replay(&t.id, "user").unwrap_err(),
        TaskError::NotFrozen(_)
    ));
}

fn git(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn project_repos_snapshot_the_head_of_every_repo_and_freeze_keeps_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("demo");
    std::fs::create_dir(&dir).unwrap();
    let store = TaskStore::open(&dir, "demo").unwrap();
    let repo = dir.join("repo");
    std::fs::create_dir(&repo).unwrap();
    if !git(&repo, &["init", "-q"]) {
        eprintln!("git is not available; skipping the snapshot test");
        return;
    }
    std::fs::write(repo.join("a.txt"), "hello\n").unwrap();
    assert!(git(&repo, &["add", "a.txt"]));
    assert!(git(&repo, &["commit", "-q", "-m", "first"]));
    let head = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let plain = dir.join("plain");
    std::fs::create_dir(&plain).unwrap();
    // Relative to the project folder, as PROJECT.md writes it.
    let md = format!(
        "---\nname: demo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\nrepos:\n  - {{id: app, path: repo}}\n  - {{id: docs, path: {}}}\n---\n## Goal\nShip it.\n",
        plain.display()
    );
    std::fs::write(dir.join("PROJECT.md"), md).unwrap();

    let t = store.create(new_task("x"), "user").unwrap();
    let mut s = spec("touch the repo");
    s.repos = project_repos(&dir, pegasus_code::git::repo_rev).unwrap();
    let t = store.freeze(&t.id, s, "user").unwrap();
    let repos = &t.spec.as_ref().unwrap().repos;
    assert_eq!(repos[0].head.as_deref(), Some(head.as_str()));
    assert_eq!(repos[0].path, "repo");
    assert_eq!(repos[1].head, None, "a plain folder has no commit");

    // A later commit does not change the frozen snapshot.
    std::fs::write(repo.join("a.txt"), "changed\n").unwrap();
    assert!(git(&repo, &["commit", "-q", "-am", "second"]));
    let again = store.get(&t.id).unwrap();
    assert_eq!(
        again.spec.unwrap().repos[0].head.as_deref(),
        Some(head.as_str())
    );
}

#[test]
fn project_repos_come_from_project_md() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("demo");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("PROJECT.md"),
        "---\nname: demo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\nrepos:\n  - {id: app, path: app, role: main}\n  - {id: infra, path: /srv/infra, role: ops}\n---\n## Goal\nShip it.\n",
    )
    .unwrap();
    let repos = project_repos(&dir, pegasus_code::git::repo_rev).unwrap();
    assert_eq!(
        repos,
        vec![
            RepoSnapshot {
                id: "app".into(),
                path: "app".into(),
                head: None,
                branch: None,
            },
            RepoSnapshot {
                id: "infra".into(),
                path: "/srv/infra".into(),
                head: None,
                branch: None,
            },
        ]
    );
    // A project with no repos key has none.
    let store = TaskStore::open(&dir, "demo").unwrap();
    drop(store);
    std::fs::write(
        dir.join("PROJECT.md"),
        "---\nname: demo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\n---\n",
    )
    .unwrap();
    assert!(project_repos(&dir, pegasus_code::git::repo_rev)
        .unwrap()
        .is_empty());
}
