//! Code projects end to end (DESIGN.md §10): tasks that change real git repositories in worktrees,
//! verified and merged safely, through the real daemon, worker and CLI, with the fake LLM
//! driving the agent's file tools over real HTTP and the real `git`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

fn task(home: &Home, id: &str) -> Value {
    home.json(&["task", "show", id])["task"].clone()
}

fn wait_state(home: &Home, id: &str, state: &str) -> Value {
    poll(
        Duration::from_secs(30),
        &format!("task {id} {state}"),
        || {
            let t = task(home, id);
            (t["state"] == state).then_some(t)
        },
    )
}

fn add(home: &Home, project: &str, goal: &str, repos: &[&str]) -> String {
    let mut args = vec!["task", "add", project, "--goal", goal];
    for r in repos {
        args.push("--repo");
        args.push(r);
    }
    home.json(&args)["id"].as_str().unwrap().to_string()
}

fn history(home: &Home, id: &str) -> Vec<(String, String, String)> {
    home.json(&["task", "show", id])["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "transition" || e.get("from").is_some())
        .map(|e| {
            (
                e["from"].as_str().unwrap_or_default().to_string(),
                e["to"].as_str().unwrap_or_default().to_string(),
                e["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn write(path: &str, content: &str) -> Reply {
    Reply::Tools(vec![ToolCall::new(
        "write_file",
        json!({"path": path, "content": content}),
    )])
}

fn user(t: &str) -> Match {
    Match::LastUserTextContains(t.into())
}

/// After any write, the agent says it is done.
fn answer_after_writes(fake: &FakeLlm) {
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("wrote".into()),
        Reply::Text("changed the files".into()),
    ));
}

fn branches(repo: &Path) -> String {
    sh(
        repo,
        "git branch --list 'pegasus/*' --format='%(refname:short)'",
    )
}

#[test]
fn a_task_goes_from_task_add_through_a_failed_verify_to_merged_main() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    answer_after_writes(&fake);
    fake.add_rule(Rule::new(
        user("The checks failed"),
        write("a.txt", "fixed\n"),
    ));
    fake.add_rule(Rule::new(user("fix alpha"), write("a.txt", "broken\n")));
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("cp");
    configure(
        &home,
        "cp",
        &format!(
            "{}verify:\n  - grep -q fixed a.txt\n",
            repos_yaml(&[("app", &app)])
        ),
    );

    let id = add(&home, "cp", "fix alpha", &["app"]);
    let done = wait_state(&home, &id, "done");
    // main was advanced to a merge that carries the fix; the user's checkout follows (clean).
    assert_eq!(sh(&app, "cat a.txt"), "fixed");
    assert_eq!(sh(&app, "git status --porcelain"), "");
    assert!(sh(&app, "git log --format=%s -1").starts_with("Merge pegasus/task-"));
    // The first attempt failed verify and went back to the agent; the second passed.
    let h = history(&home, &id);
    let moves: Vec<(&str, &str)> = h.iter().map(|(f, t, _)| (f.as_str(), t.as_str())).collect();
    for want in [
        ("running", "verifying"),
        ("verifying", "running"),
        ("verifying", "verified"),
        ("verified", "done"),
    ] {
        assert!(moves.contains(&want), "{want:?} in {h:?}");
    }
    assert!(
        h.iter().any(|(_, _, r)| r.contains("verify failed in app")),
        "{h:?}"
    );
    // Cleaned up in order: no worktree, no branch.
    assert_eq!(branches(&app), "");
    assert_eq!(sh(&app, "git worktree list | wc -l"), "1");
    // Artifacts: the diff, the verify log, the summary, listed by `task show`.
    let artifacts: Vec<String> = done["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(
        artifacts.iter().any(|a| a.ends_with("diff-app.patch")),
        "{artifacts:?}"
    );
    let diff = std::fs::read_to_string(
        home.project_dir("cp")
            .join(artifacts.iter().find(|a| a.ends_with(".patch")).unwrap()),
    )
    .unwrap();
    assert!(diff.contains("+fixed"), "{diff}");
    assert!(artifacts
        .iter()
        .all(|a| a.contains("artifacts/") && a.contains(&id)));
    let shown = home.ctl_ok(&["task", "show", &id]);
    assert!(shown.contains("diff-app.patch"), "{shown}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[test]
fn a_verify_that_keeps_failing_fails_the_task_and_leaves_main_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let before = sh(&app, "git rev-parse main");
    let fake = FakeLlm::start().unwrap();
    answer_after_writes(&fake);
    fake.add_rule(Rule::new(Match::Any, write("a.txt", "still broken\n")));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("cp");
    configure(
        &home,
        "cp",
        &format!(
            "{}verify: grep -q fixed a.txt\nmax_attempts: 2\n",
            repos_yaml(&[("app", &app)])
        ),
    );
    let id = add(&home, "cp", "fix alpha", &["app"]);
    let failed = wait_state(&home, &id, "failed");
    assert!(
        failed["stop_reason"]
            .as_str()
            .unwrap()
            .contains("after 2 attempts"),
        "{failed}"
    );
    assert_eq!(sh(&app, "git rev-parse main"), before);
    assert_eq!(sh(&app, "cat a.txt"), "alpha");
    // Its branch holds unmerged work: kept, and `project show` lists it.
    assert_eq!(branches(&app), format!("pegasus/task-{id}"));
    let shown = home.ctl_ok(&["project", "show", "cp"]);
    assert!(
        shown.contains(&format!("app: pegasus/task-{id} (task {id})")),
        "{shown}"
    );
}

#[test]
fn manual_merge_waits_and_a_dirty_main_or_a_conflict_blocks_it() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    answer_after_writes(&fake);
    fake.add_rule(Rule::new(user("change alpha"), write("a.txt", "task\n")));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("cp");
    configure(
        &home,
        "cp",
        &format!(
            "{}verify: test -s a.txt\nmerge: manual\n",
            repos_yaml(&[("app", &app)])
        ),
    );
    let id = add(&home, "cp", "change alpha", &["app"]);
    // "merge pending" is written with the move to verified: never one without the other.
    let verified = wait_state(&home, &id, "verified");
    assert_eq!(verified["merge"], "pending", "{verified}");
    let shown = home.ctl_ok(&["task", "show", &id]);
    assert!(shown.contains("merge pending"), "{shown}");
    let status = home.ctl_ok(&["status"]);
    assert!(
        status.contains(&format!("task {id} is verified, merge pending")),
        "{status}"
    );
    let before = sh(&app, "git rev-parse main");

    // A dirty checked-out main: blocked, saying so; the user's edit is untouched.
    std::fs::write(app.join("b.txt"), "local edit\n").unwrap();
    home.ctl_ok(&["task", "merge", &id]);
    let blocked = wait_state(&home, &id, "blocked");
    assert!(
        blocked["stop_reason"]
            .as_str()
            .unwrap()
            .contains("main worktree has local changes"),
        "{blocked}"
    );
    assert_eq!(sh(&app, "git rev-parse main"), before);
    assert_eq!(sh(&app, "cat b.txt"), "local edit");

    // The user commits a change to the same line: the merge now conflicts, blocked with the file.
    sh(
        &app,
        "git checkout -q -- b.txt && echo user > a.txt && git commit -q -am 'user edit'",
    );
    let user_head = sh(&app, "git rev-parse main");
    home.ctl_ok(&["task", "merge", &id]);
    let blocked = poll(Duration::from_secs(30), "conflict", || {
        let t = task(&home, &id);
        (t["state"] == "blocked"
            && t["stop_reason"]
                .as_str()
                .unwrap_or("")
                .contains("merge conflict"))
        .then_some(t)
    });
    assert!(
        blocked["stop_reason"].as_str().unwrap().contains("a.txt"),
        "{blocked}"
    );
    assert_eq!(sh(&app, "git rev-parse main"), user_head);

    // Undone: the merge lands.
    sh(&app, "git reset -q --hard HEAD~1");
    home.ctl_ok(&["task", "merge", &id]);
    wait_state(&home, &id, "done");
    assert_eq!(sh(&app, "cat a.txt"), "task");
    assert_eq!(branches(&app), "");
    // A task that is not verified cannot be merged.
    let err = home.ctl_fails(&["task", "merge", &id]);
    assert!(err.contains("only a verified code task"), "{err}");
}

#[test]
fn a_multi_repo_task_merges_all_repos_or_none() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let lib = repo(tmp.path(), "lib");
    let fake = FakeLlm::start().unwrap();
    answer_after_writes(&fake);
    fake.add_rule(Rule::new(
        user("both repos"),
        Reply::Tools(vec![
            ToolCall::new("write_file", json!({"path": "ok.txt", "content": "app\n"})),
            ToolCall::new(
                "write_file",
                json!({"path": "lib:ok.txt", "content": "lib\n"}),
            ),
        ]),
    ));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("cp");
    configure(
        &home,
        "cp",
        &format!(
            "{}verify: test -f ok.txt\nmerge: manual\n",
            repos_yaml(&[("app", &app), ("lib", &lib)])
        ),
    );
    let id = add(&home, "cp", "touch both repos", &["app", "lib"]);
    wait_state(&home, &id, "verified");
    let (a0, l0) = (
        sh(&app, "git rev-parse main"),
        sh(&lib, "git rev-parse main"),
    );
    // lib's checkout is dirty: neither repo moves.
    std::fs::write(lib.join("a.txt"), "dirty\n").unwrap();
    home.ctl_ok(&["task", "merge", &id]);
    let b = wait_state(&home, &id, "blocked");
    assert!(
        b["stop_reason"].as_str().unwrap().starts_with("lib:"),
        "{b}"
    );
    assert_eq!(
        (
            sh(&app, "git rev-parse main"),
            sh(&lib, "git rev-parse main")
        ),
        (a0.clone(), l0.clone())
    );
    assert!(!app.join("ok.txt").exists());
    sh(&lib, "git checkout -q -- a.txt");
    home.ctl_ok(&["task", "merge", &id]);
    wait_state(&home, &id, "done");
    assert_eq!(sh(&app, "cat ok.txt"), "app");
    assert_eq!(sh(&lib, "cat ok.txt"), "lib");
}

#[test]
fn two_projects_change_one_repo_at_once_without_lock_errors_or_orphans() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    answer_after_writes(&fake);
    fake.add_rule(Rule::new(user("write one"), write("one.txt", "1\n")));
    fake.add_rule(Rule::new(user("write two"), write("two.txt", "2\n")));
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("p1");
    home.create("p2");
    let keys = format!("{}verify: test -f a.txt\n", repos_yaml(&[("app", &app)]));
    configure(&home, "p1", &keys);
    configure(&home, "p2", &keys);
    let t1 = add(&home, "p1", "write one", &["app"]);
    let t2 = add(&home, "p2", "write two", &["app"]);
    wait_state(&home, &t1, "done");
    wait_state(&home, &t2, "done");
    assert_eq!(sh(&app, "cat one.txt two.txt"), "1\n2");
    assert_eq!(branches(&app), "");
    assert_eq!(sh(&app, "git worktree list | wc -l"), "1");
    assert_eq!(sh(&app, "git status --porcelain"), "");
}

#[test]
fn kill_9_of_the_worker_mid_verify_and_of_the_daemon_mid_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    answer_after_writes(&fake);
    fake.add_rule(Rule::new(user("slow verify"), write("v.txt", "v\n")));
    fake.add_rule(Rule::new(user("slow merge"), write("m.txt", "m\n")));
    let home = fake_home(&fake, "");
    let mut d = home.start_fake();
    let pid = home.create("cp");
    // Verify is confined like `exec`: besides its worktree it may write only the project's
    // temp dir, so its marks go there.
    let marks = home.project_dir("cp").join("tmp");
    std::fs::create_dir_all(&marks).unwrap();
    // Verify hangs (once) in the task worktree of the first task, and in the staging worktree
    // of the second: the places to be killed in.
    let m = marks.display();
    let verify = format!(
        "verify: \"if [ -f v.txt ] && pwd | grep -q '/task-' && [ ! -e {m}/v ]; then touch {m}/v; sleep 60; fi; if [ -f m.txt ] && pwd | grep -q '/staging-' && [ ! -e {m}/m ]; then touch {m}/m; sleep 60; fi; true\"\n"
    );
    configure(
        &home,
        "cp",
        &format!("{}{verify}", repos_yaml(&[("app", &app)])),
    );
    let before = sh(&app, "git rev-parse main");

    // 1. The worker dies mid-verify: the task fails (process restarted); on its boot the
    //    worktree is removed, the branch (with the task's commit) kept and listed; main intact.
    let t1 = add(&home, "cp", "slow verify", &["app"]);
    poll(Duration::from_secs(30), "verify to start", || {
        marks.join("v").exists().then_some(())
    });
    kill9(pid);
    let failed = wait_state(&home, &t1, "failed");
    assert_eq!(failed["stop_reason"], "process restarted");
    home.ready_worker("cp", Some(pid as u64));
    let wt = app.join(format!(".pegasus/worktrees/task-{t1}"));
    poll(
        Duration::from_secs(30),
        "the dead task's worktree removed",
        || (!wt.exists()).then_some(()),
    );
    assert_eq!(branches(&app), format!("pegasus/task-{t1}"));
    assert_eq!(sh(&app, "git rev-parse main"), before);
    let shown = home.ctl_ok(&["project", "show", "cp"]);
    assert!(shown.contains(&format!("pegasus/task-{t1}")), "{shown}");

    // 2. The daemon dies mid-merge (verify in staging): main untouched; on restart the merge is
    //    done again, once, and everything is cleaned up.
    let t2 = add(&home, "cp", "slow merge", &["app"]);
    poll(
        Duration::from_secs(30),
        "the staging verify to start",
        || marks.join("m").exists().then_some(()),
    );
    assert_eq!(task(&home, &t2)["state"], "verified");
    d.kill9();
    assert_eq!(
        sh(&app, "git rev-parse main"),
        before,
        "main untouched mid-merge"
    );
    let _d2 = home.start_fake();
    wait_state(&home, &t2, "done");
    assert_eq!(
        sh(&app, "git rev-list --count main"),
        "3",
        "init + task commit + one merge"
    );
    assert_eq!(sh(&app, "cat m.txt"), "m");
    assert!(!app
        .join(format!(".pegasus/worktrees/staging-{t2}"))
        .exists());
    assert_eq!(branches(&app), format!("pegasus/task-{t1}"));
    assert_eq!(sh(&app, "git status --porcelain"), "");
}

fn exec(command: &str) -> Reply {
    Reply::Tools(vec![ToolCall::new("exec", json!({ "command": command }))])
}

/// Issue 22 (high): in its worktree the model replaced `.git` (a gitfile naming a repository
/// it wrote, or a new repository in its place) configured to run its programs, and Pegasus's
/// own `git add` / `commit` / `merge` ran them unconfined. Now `write_file` refuses `.git`, the
/// command's `.git` is read-only, git never finds its repository through `.git`, runs no hook,
/// fsmonitor or filter of the repository's, and a `.git` that changed fails the task.
#[test]
fn a_model_cannot_turn_pegasus_git_against_it() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let pwned = tmp.path().join("pwned");
    let p = pwned.display();
    let fake = FakeLlm::start().unwrap();
    let attack = format!(
        "E=$TMPDIR/evil; git init -q $E; printf '#!/bin/sh\\ntouch {p}\\ncat\\n' > $E/run.sh; chmod +x $E/run.sh; \
         cp $E/run.sh $E/pre-commit; cp $E/run.sh $E/post-merge; \
         git -C $E config core.fsmonitor $E/run.sh; git -C $E config core.hooksPath $E; \
         git -C $E config filter.x.clean $E/run.sh; echo '* filter=x' > .gitattributes; \
         rm -f .git; echo rm-rc=$?; printf 'gitdir: %s/.git\\n' $E > .git; echo swap-rc=$?; \
         rm -rf .git; mkdir .git; echo dir-rc=$?; echo attack-done"
    );
    fake.add_rule(
        Rule::new(
            Match::All(vec![user("swap git"), Match::NoToolResultYet]),
            Reply::Tools(vec![
                ToolCall::new(
                    "write_file",
                    json!({"path": ".git", "content": "gitdir: /tmp\n"}),
                ),
                ToolCall::new(
                    "write_file",
                    json!({"path": "sub/../.GIT/config", "content": "x"}),
                ),
                ToolCall::new("exec", json!({ "command": attack })),
            ]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("attack-done".into()),
        Reply::Text("swapped".into()),
    ));
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("cp");
    // A hook and a filter of the repository's own: Pegasus runs neither on the model's files.
    sh(
        &app,
        &format!("printf '#!/bin/sh\\ntouch {p}\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; git config filter.x.clean 'sh -c \"touch {p}; cat\"'"),
    );
    configure(&home, "cp", &repos_yaml(&[("app", &app)]));
    let id = add(&home, "cp", "swap git", &["app"]);
    let end = poll(Duration::from_secs(30), "the task to end", || {
        let t = task(&home, &id);
        matches!(t["state"].as_str(), Some("done" | "failed")).then_some(t)
    });
    assert!(!pwned.exists(), "a program the model chose ran: {end}");
    let sent = fake.requests();
    let results: String = sent.iter().map(|r| r.body.to_string()).collect();
    assert!(
        results.contains("the file tools do not write there"),
        "{results}"
    );
    if pegasus_sandbox::probe().namespaces {
        // The swap itself failed: the worktree's .git was read-only for the command.
        assert!(!results.contains("swap-rc=0"), "{results}");
        assert_eq!(end["state"], "done", "{end}");
    } else {
        // Without namespaces the swap succeeds, and the task fails instead of running it.
        assert!(
            end["state"] == "done"
                || end["stop_reason"]
                    .as_str()
                    .unwrap_or("")
                    .contains("tampered"),
            "{end}"
        );
    }
    // main holds no .git of the model's, and the user's repository config is as it was.
    let tree = sh(&app, "git ls-tree -r --name-only main");
    assert!(!tree.to_lowercase().contains(".git/"), "{tree}");
    assert_eq!(sh(&app, "git config --get core.hooksPath || true"), "");
    assert_eq!(sh(&app, "git config --get core.fsmonitor || true"), "");
}

/// Issue 22 (medium): a task committed links to `/etc/passwd` and the user's config, verify
/// passed, and main fast-forwarded to them. Now such links never reach a commit: the task goes
/// back to the agent with the reason, and merges once they are gone.
#[test]
fn links_out_of_the_repository_go_back_to_the_agent_and_never_reach_main() {
    let tmp = tempfile::tempdir().unwrap();
    let app = repo(tmp.path(), "app");
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(
        Rule::new(
            Match::All(vec![user("add links"), Match::NoToolResultYet]),
            exec("ln -s /etc/passwd passwd && ln -s ../../../../../config.yml cfg && ln -s a.txt fine && mkdir -p d && ln -s ../.git/config d/g \
                  && mkdir -p d1/d2/d3 && ln -s ../../.. d1/d2/d3/up && ln -s d1/d2/d3/up/../../../etc/passwd esc \
                  && git init -q nested && git -C nested -c user.name=m -c user.email=m@x commit -q --allow-empty -m n && echo made"),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("made".into()),
        Reply::Text("linked".into()),
    ));
    fake.add_rule(
        Rule::new(
            user("Pegasus does not commit these"),
            exec("rm -rf passwd cfg d/g esc nested && echo removed"),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("removed".into()),
        Reply::Text("removed them".into()),
    ));
    main_agent_rule(&fake);
    let home = fake_home(&fake, "");
    let _d = home.start_fake();
    home.create("cp");
    configure(&home, "cp", &repos_yaml(&[("app", &app)]));
    let id = add(&home, "cp", "add links", &["app"]);
    wait_state(&home, &id, "done");
    let h = history(&home, &id);
    assert!(
        h.iter()
            .any(|(_, _, r)| r.contains("entries Pegasus does not commit in repo app")),
        "{h:?}"
    );
    let tree = sh(&app, "git ls-tree -r main --format='%(objectmode) %(path)'");
    assert!(
        tree.contains("120000 fine"),
        "the link inside stays: {tree}"
    );
    assert!(
        tree.contains("120000 d1/d2/d3/up"),
        "a link to the top stays: {tree}"
    );
    // What the agent was told names each refused entry.
    let told: String = fake.requests().iter().map(|r| r.body.to_string()).collect();
    for named in [
        "esc (a link to",
        "nested (a nested git repository)",
        "passwd (a link to /etc/passwd",
    ] {
        assert!(told.contains(named), "{named}");
    }
    for gone in ["passwd", "cfg", "d/g", "esc", "nested"] {
        assert!(!tree.contains(&format!(" {gone}")), "{gone}: {tree}");
    }
}
