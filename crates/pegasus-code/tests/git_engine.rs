//! The git engine against real repositories in temp dirs, with the real `git`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pegasus_code::worktree::{self, commit_all, merge_base_in};
use pegasus_code::{recover, safe_merge, Checks, MergeIn, MergeOutcome, Repo, TaskFate};

fn sh(dir: &Path, cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "u")
        .env("GIT_AUTHOR_EMAIL", "u@x")
        .env("GIT_COMMITTER_NAME", "u")
        .env("GIT_COMMITTER_EMAIL", "u@x")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repo with one commit on `main` (a.txt, b.txt) and a `.env` that is not tracked.
fn new_repo(parent: &Path, name: &str) -> PathBuf {
    let root = parent.join(name);
    std::fs::create_dir_all(&root).unwrap();
    sh(&root, "git init -q -b main && printf 'one\\n' > a.txt && printf 'bee\\n' > b.txt && git add -A && git commit -q -m init");
    std::fs::write(root.join(".env"), "SECRET=1\n").unwrap();
    root
}

fn checks(verify: &[&str]) -> Checks {
    Checks {
        hydrate: None,
        verify: verify.iter().map(|s| s.to_string()).collect(),
        timeout: Duration::from_secs(30),
        output_cap: 10_000,
        env_file: ".env".into(),
        sandbox: None,
    }
}

fn head(root: &Path, r: &str) -> String {
    sh(root, &format!("git rev-parse {r}"))
}

#[test]
fn a_task_goes_from_worktree_to_merged_main_and_is_cleaned_up() {
    let tmp = tempfile::tempdir().unwrap();
    let root = new_repo(tmp.path(), "app");
    let repo = Repo::open("app", &root, "main").unwrap();
    let start = head(&root, "main");
    let tree = worktree::create(&repo, "t1", "proj", &start, ".env").unwrap();
    assert!(tree.created);
    assert_eq!(tree.branch, "pegasus/task-t1");
    assert_eq!(
        tree.path,
        root.canonicalize()
            .unwrap()
            .join(".pegasus/worktrees/task-t1")
    );
    // Locked with a reason naming the task and project; .env linked; excludes in the common
    // dir, not in .gitignore.
    let list = sh(&root, "git worktree list --porcelain");
    assert!(
        list.contains("locked pegasus task t1 project proj"),
        "{list}"
    );
    assert!(std::fs::symlink_metadata(tree.path.join(".env"))
        .unwrap()
        .file_type()
        .is_symlink());
    let exclude = std::fs::read_to_string(root.join(".git/info/exclude")).unwrap();
    assert!(exclude.contains("/.pegasus/") && exclude.contains("/.env"));
    assert!(!root.join(".gitignore").exists());
    assert_eq!(
        sh(&root, "git status --porcelain"),
        "",
        "the main checkout stays clean"
    );

    std::fs::write(tree.path.join("a.txt"), "one\ntwo\n").unwrap();
    let c = commit_all(&tree.path, "task t1").unwrap();
    assert!(c.is_some());
    assert_eq!(
        commit_all(&tree.path, "again").unwrap(),
        None,
        "nothing left to commit"
    );
    let files = sh(&tree.path, "git show --name-only --format= HEAD");
    assert_eq!(files, "a.txt", ".env never committed");

    // main moves meanwhile (another change, no conflict): merged in cleanly.
    sh(
        &root,
        "printf 'bee\\nsee\\n' > b.txt && git commit -q -am 'user change'",
    );
    assert_eq!(
        merge_base_in(&tree.path, "refs/heads/main", true).unwrap(),
        MergeIn::Clean
    );

    let out = safe_merge(
        std::slice::from_ref(&repo),
        "t1",
        "proj",
        "add two",
        &checks(&["grep -q two a.txt", "grep -q see b.txt"]),
    )
    .unwrap();
    let MergeOutcome::Merged(m) = out else {
        panic!("{out:?}")
    };
    assert_eq!(m[0].0, "app");
    assert_eq!(head(&root, "main"), m[0].1);
    // main is checked out in the user's (clean) worktree: fast-forwarded, files updated, clean.
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert_eq!(sh(&root, "git status --porcelain"), "");
    assert!(!repo.staging_worktree("t1").exists());

    worktree::remove(&repo, "t1", true).unwrap();
    assert!(!tree.path.exists());
    assert_eq!(sh(&root, "git branch --list 'pegasus/*'"), "");
    assert_eq!(
        sh(&root, "git worktree list --porcelain | grep -c '^worktree'"),
        "1"
    );
    // Idempotent: a cleanup resumed after a crash finds nothing to do.
    worktree::remove(&repo, "t1", true).unwrap();
}

#[test]
fn failing_verify_conflicts_and_a_dirty_main_leave_main_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let root = new_repo(tmp.path(), "app");
    let repo = Repo::open("app", &root, "main").unwrap();
    let start = head(&root, "main");

    // Verify fails on the merged result.
    let t = worktree::create(&repo, "v", "p", &start, ".env").unwrap();
    std::fs::write(t.path.join("a.txt"), "broken\n").unwrap();
    commit_all(&t.path, "v").unwrap();
    let out = safe_merge(
        std::slice::from_ref(&repo),
        "v",
        "p",
        "v",
        &checks(&["grep -q one a.txt"]),
    )
    .unwrap();
    assert!(
        matches!(out, MergeOutcome::VerifyFailed { ref log, .. } if log.contains("exit 1")),
        "{out:?}"
    );
    assert_eq!(head(&root, "main"), start);

    // Conflict: main changed the same line.
    let c = worktree::create(&repo, "c", "p", &start, ".env").unwrap();
    std::fs::write(c.path.join("a.txt"), "task\n").unwrap();
    commit_all(&c.path, "c").unwrap();
    sh(
        &root,
        "printf 'user\\n' > a.txt && git commit -q -am 'user edit'",
    );
    let main_now = head(&root, "main");
    let MergeIn::Conflict(files) = merge_base_in(&c.path, "refs/heads/main", true).unwrap() else {
        panic!()
    };
    assert_eq!(files, vec!["a.txt"]);
    assert_eq!(sh(&c.path, "git status --porcelain"), "", "merge aborted");
    // Left for the agent instead: markers in the file; resolving and committing concludes it.
    let MergeIn::Conflict(_) = merge_base_in(&c.path, "refs/heads/main", false).unwrap() else {
        panic!()
    };
    assert!(std::fs::read_to_string(c.path.join("a.txt"))
        .unwrap()
        .contains("<<<<<<<"));
    std::fs::write(c.path.join("a.txt"), "user\ntask\n").unwrap();
    commit_all(&c.path, "resolved").unwrap();
    assert_eq!(
        merge_base_in(&c.path, "refs/heads/main", true).unwrap(),
        MergeIn::Clean
    );
    sh(
        &c.path,
        "git reset -q --hard HEAD~1 && git merge -q --abort 2>/dev/null; true",
    );
    let out = safe_merge(std::slice::from_ref(&repo), "c", "p", "c", &checks(&[])).unwrap();
    assert_eq!(
        out,
        MergeOutcome::Conflict {
            repo: "app".into(),
            files: vec!["a.txt".into()]
        }
    );
    assert_eq!(head(&root, "main"), main_now);

    // Dirty checked-out main: blocked, nothing touched (the user's edit included).
    let d = worktree::create(&repo, "d", "p", &main_now, ".env").unwrap();
    std::fs::write(d.path.join("new.txt"), "n\n").unwrap();
    commit_all(&d.path, "d").unwrap();
    std::fs::write(root.join("b.txt"), "local edit\n").unwrap();
    let out = safe_merge(std::slice::from_ref(&repo), "d", "p", "d", &checks(&[])).unwrap();
    assert!(
        matches!(out, MergeOutcome::Blocked { ref reason, .. } if reason.contains("main worktree has local changes")),
        "{out:?}"
    );
    assert_eq!(head(&root, "main"), main_now);
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "local edit\n"
    );
    // Cleaned: now it merges.
    sh(&root, "git checkout -q -- b.txt");
    assert!(matches!(
        safe_merge(std::slice::from_ref(&repo), "d", "p", "d", &checks(&[])).unwrap(),
        MergeOutcome::Merged(_)
    ));
    assert!(root.join("new.txt").exists());
}

#[test]
fn a_base_not_checked_out_moves_by_compare_and_set() {
    let tmp = tempfile::tempdir().unwrap();
    let root = new_repo(tmp.path(), "app");
    sh(&root, "git checkout -q -b feature");
    let repo = Repo::open("app", &root, "main").unwrap();
    let start = head(&root, "main");
    let t = worktree::create(&repo, "x", "p", &start, ".env").unwrap();
    std::fs::write(t.path.join("x.txt"), "x\n").unwrap();
    commit_all(&t.path, "x").unwrap();
    let MergeOutcome::Merged(m) = safe_merge(
        std::slice::from_ref(&repo),
        "x",
        "p",
        "x",
        &checks(&["test -f x.txt"]),
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(head(&root, "main"), m[0].1);
    assert_eq!(
        head(&root, "HEAD"),
        start,
        "the user's feature checkout is not touched"
    );
    assert!(!root.join("x.txt").exists());
    assert_eq!(sh(&root, "git status --porcelain"), "");
}

#[test]
fn multi_repo_tasks_merge_all_or_none() {
    let tmp = tempfile::tempdir().unwrap();
    let a = new_repo(tmp.path(), "a");
    let b = new_repo(tmp.path(), "b");
    let ra = Repo::open("a", &a, "main").unwrap();
    let rb = Repo::open("b", &b, "main").unwrap();
    let (sa, sb) = (head(&a, "main"), head(&b, "main"));
    for (r, s) in [(&ra, &sa), (&rb, &sb)] {
        let t = worktree::create(r, "m", "p", s, ".env").unwrap();
        std::fs::write(t.path.join("m.txt"), format!("{}\n", r.id)).unwrap();
        commit_all(&t.path, "m").unwrap();
    }
    // Verify passes in a, fails in b: neither moves.
    let out = safe_merge(
        &[ra.clone(), rb.clone()],
        "m",
        "p",
        "m",
        &checks(&["grep -q a m.txt"]),
    )
    .unwrap();
    assert!(
        matches!(out, MergeOutcome::VerifyFailed { ref repo, .. } if repo == "b"),
        "{out:?}"
    );
    assert_eq!(
        (head(&a, "main"), head(&b, "main")),
        (sa.clone(), sb.clone())
    );
    // Dirty b: neither moves either.
    std::fs::write(b.join("a.txt"), "dirty\n").unwrap();
    let out = safe_merge(
        &[ra.clone(), rb.clone()],
        "m",
        "p",
        "m",
        &checks(&["test -f m.txt"]),
    )
    .unwrap();
    assert!(
        matches!(out, MergeOutcome::Blocked { ref repo, .. } if repo == "b"),
        "{out:?}"
    );
    assert_eq!(
        (head(&a, "main"), head(&b, "main")),
        (sa.clone(), sb.clone())
    );
    sh(&b, "git checkout -q -- a.txt");
    let out = safe_merge(
        &[ra.clone(), rb.clone()],
        "m",
        "p",
        "m",
        &checks(&["test -f m.txt"]),
    )
    .unwrap();
    assert!(
        matches!(out, MergeOutcome::Merged(ref m) if m.len() == 2),
        "{out:?}"
    );
    assert_ne!(head(&a, "main"), sa);
    assert_ne!(head(&b, "main"), sb);
}

#[test]
fn parallel_worktree_creation_in_one_repo_has_no_lock_errors_or_orphans() {
    let tmp = tempfile::tempdir().unwrap();
    let root = new_repo(tmp.path(), "app");
    let repo = Repo::open("app", &root, "main").unwrap();
    let start = head(&root, "main");
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let repo = repo.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                worktree::create(
                    &repo,
                    &format!("p{i}"),
                    if i % 2 == 0 { "one" } else { "two" },
                    &start,
                    ".env",
                )
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let branches = sh(&root, "git branch --list 'pegasus/*' | wc -l");
    let trees = sh(&root, "git worktree list --porcelain | grep -c '^worktree'");
    assert_eq!((branches.as_str(), trees.as_str()), ("12", "13"));
}

#[test]
fn resuming_after_a_crash_mid_create_and_boot_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let root = new_repo(tmp.path(), "app");
    let repo = Repo::open("app", &root, "main").unwrap();
    let start = head(&root, "main");

    // A folder git does not know (crash between mkdir and registration): cleared and made.
    std::fs::create_dir_all(repo.task_worktree("r")).unwrap();
    std::fs::write(repo.task_worktree("r").join("junk"), "x").unwrap();
    let t = worktree::create(&repo, "r", "p", &start, ".env").unwrap();
    assert!(t.created && !t.path.join("junk").exists());
    std::fs::write(t.path.join("r.txt"), "r\n").unwrap();
    commit_all(&t.path, "r").unwrap();
    // The folder deleted behind git's back: resumed from the branch, commits kept.
    std::fs::remove_dir_all(&t.path).unwrap();
    let t2 = worktree::create(&repo, "r", "p", &start, ".env").unwrap();
    assert!(!t2.created);
    assert!(t2.path.join("r.txt").exists());

    // Boot: "r" failed (unmerged work: worktree removed, branch kept); "merged" is over and
    // already in main (branch deleted); "live" keeps everything; "other" belongs to another
    // project (untouched even though this project thinks nothing of it).
    let m = worktree::create(&repo, "merged", "p", &start, ".env").unwrap();
    let _ = m;
    let live = worktree::create(&repo, "live", "p", &start, ".env").unwrap();
    let other = worktree::create(&repo, "other", "q", &start, ".env").unwrap();
    std::fs::create_dir_all(repo.staging_worktree("r")).unwrap();
    let fate = |t: &str| match t {
        "r" | "merged" => TaskFate::Over,
        "live" => TaskFate::Live,
        _ => TaskFate::Foreign,
    };
    let rec = recover(&repo, "p", &fate).unwrap();
    assert!(!t2.path.exists() && !m.path.exists() && !repo.staging_worktree("r").exists());
    assert!(live.path.exists() && other.path.exists());
    assert_eq!(rec.kept.len(), 1);
    assert_eq!(rec.kept[0].branch, "pegasus/task-r");
    assert_eq!(
        rec.deleted_branches,
        vec!["pegasus/task-merged".to_string()]
    );
    let branches = sh(
        &root,
        "git branch --list 'pegasus/*' --format='%(refname:short)' | sort | tr '\\n' ' '",
    );
    assert_eq!(
        branches,
        "pegasus/task-live pegasus/task-other pegasus/task-r"
    );
}

#[test]
fn refusals_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let root = new_repo(tmp.path(), "app");
    let e = Repo::open("app", &root, "develop").unwrap_err().to_string();
    assert!(
        e.contains("base branch `develop` does not exist") && e.contains("branch:"),
        "{e}"
    );
    let plain = tmp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let e = Repo::open("x", &plain, "main").unwrap_err().to_string();
    assert!(e.contains("not a git repository"), "{e}");
    let e = Repo::open("x", &tmp.path().join("missing"), "main")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not usable"), "{e}");
}

/// A worktree's snapshot changes with anything a commit could take (a tracked file changed, a
/// file added, a commit) and with nothing else (an ignored file, a file changed and restored).
#[test]
fn a_snapshot_sees_every_change_a_commit_could_take() {
    let tmp = tempfile::tempdir().unwrap();
    let root = new_repo(tmp.path(), "app");
    let repo = Repo::open("app", &root, "main").unwrap();
    let tree = worktree::create(&repo, "t1", "proj", &head(&root, "main"), ".env").unwrap();
    let w = &tree.path;
    std::fs::write(w.join(".gitignore"), "build/\n").unwrap();
    std::fs::write(w.join("a.txt"), "changed by the agent\n").unwrap();
    let snap = || worktree::snapshot(w).unwrap();
    // A tracked file left modified (the checks may do that): changing it again is seen.
    let before = snap();
    assert_eq!(snap(), before, "nothing changed");
    std::fs::create_dir_all(w.join("build")).unwrap();
    std::fs::write(w.join("build/out"), "ignored").unwrap();
    assert_eq!(snap(), before, "an ignored file is not part of the change");
    std::fs::write(w.join("a.txt"), "changed by the reviewer\n").unwrap();
    assert_ne!(snap(), before, "a tracked file changed again");
    std::fs::write(w.join("a.txt"), "changed by the agent\n").unwrap();
    assert_eq!(snap(), before, "restored");
    std::fs::write(w.join("new.txt"), "x").unwrap();
    assert_ne!(snap(), before, "a file added");
    std::fs::remove_file(w.join("new.txt")).unwrap();
    std::fs::remove_file(w.join("b.txt")).unwrap();
    assert_ne!(snap(), before, "a file deleted");
    sh(w, "git checkout -q -- b.txt");
    assert_eq!(snap(), before);
    commit_all(w, "a commit").unwrap();
    assert_ne!(snap(), before, "a commit");
}

/// Issue 22: whatever the worktree's files say, git runs none of the model's programs, and a
/// `.git` that is no longer the one Pegasus made stops git there (`tampered`).
#[test]
fn git_runs_no_program_of_the_worktree_and_a_swapped_git_is_tampered() {
    let tmp = tempfile::tempdir().unwrap();
    let root = new_repo(tmp.path(), "app");
    let pwned = tmp.path().join("pwned");
    let script = tmp.path().join("run.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch {}\ncat\n", pwned.display()),
    )
    .unwrap();
    sh(tmp.path(), "chmod +x run.sh");
    let s = script.display();
    // The repository's own configuration names programs: none of them runs for Pegasus.
    sh(
        &root,
        &format!(
            "cp {s} .git/hooks/pre-commit; cp {s} .git/hooks/post-checkout; \
             git config core.fsmonitor {s}; git config filter.x.clean {s}; git config filter.x.required true; \
             git config diff.external {s}; git config merge.x.driver {s}"
        ),
    );
    let repo = Repo::open("app", &root, "main").unwrap();
    let tree = worktree::create(&repo, "t1", "proj", &head(&root, "main"), ".env").unwrap();
    std::fs::write(
        tree.path.join(".gitattributes"),
        "* filter=x diff=x merge=x\n",
    )
    .unwrap();
    std::fs::write(tree.path.join("a.txt"), "changed\n").unwrap();
    assert!(commit_all(&tree.path, "t").unwrap().is_some());
    let _ = worktree::changed_files(&tree.path, &head(&root, "main")).unwrap();
    let _ = worktree::diff(&tree.path, &head(&root, "main")).unwrap();
    assert!(
        !pwned.exists(),
        "a program of the repository's configuration ran"
    );

    // The model replaces the worktree's .git with a gitfile naming a repository of its own.
    let evil = tmp.path().join("evil");
    sh(
        tmp.path(),
        &format!("git init -q evil && git -C evil config core.fsmonitor {s} && git -C evil config core.hooksPath {}", tmp.path().display()),
    );
    std::fs::remove_file(tree.path.join(".git")).unwrap();
    std::fs::write(
        tree.path.join(".git"),
        format!("gitdir: {}/.git\n", evil.display()),
    )
    .unwrap();
    std::fs::write(tree.path.join("b.txt"), "again\n").unwrap();
    let err = commit_all(&tree.path, "t2").unwrap_err();
    assert!(err.to_string().starts_with("tampered:"), "{err}");
    assert!(!pwned.exists(), "the model's repository ran its program");

    // A directory in its place, after a restart (a new pin): refused too.
    std::fs::remove_file(tree.path.join(".git")).unwrap();
    std::fs::create_dir(tree.path.join(".git")).unwrap();
    let err = worktree::create(&repo, "t1", "proj", &head(&root, "main"), ".env").unwrap_err();
    assert!(err.to_string().starts_with("tampered:"), "{err}");
    assert!(!pwned.exists());
}

/// Issue 22 (review): a submodule's `.git` file in the task worktree is the model's to write;
/// pointed at a repository of its own, git entering the submodule would run that
/// repository's configuration. Every git step first checks each populated submodule still
/// names git's own folder.
#[test]
fn a_submodule_whose_git_file_was_redirected_is_tampered() {
    let tmp = tempfile::tempdir().unwrap();
    let sub = new_repo(tmp.path(), "sub");
    let root = new_repo(tmp.path(), "app");
    sh(
        &root,
        &format!(
            "git -c protocol.file.allow=always submodule add -q {} sub && git commit -q -m sub",
            sub.display()
        ),
    );
    let repo = Repo::open("app", &root, "main").unwrap();
    let tree = worktree::create(&repo, "t1", "proj", &head(&root, "main"), ".env").unwrap();
    sh(
        &tree.path,
        "git -c protocol.file.allow=always submodule update -q --init",
    );
    std::fs::write(tree.path.join("a.txt"), "two\n").unwrap();
    assert!(
        commit_all(&tree.path, "with a populated submodule")
            .unwrap()
            .is_some(),
        "git's own submodule .git file is fine"
    );
    sh(tmp.path(), "git init -q evil");
    std::fs::write(
        tree.path.join("sub/.git"),
        format!("gitdir: {}/evil/.git\n", tmp.path().display()),
    )
    .unwrap();
    std::fs::write(tree.path.join("a.txt"), "three\n").unwrap();
    let err = commit_all(&tree.path, "t").unwrap_err();
    assert!(err.to_string().starts_with("tampered:"), "{err}");
}
