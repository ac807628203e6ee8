//! Project lifecycle through the real daemon: create, suspend, resume, complete, archive, and
//! every refused transition (DESIGN.md §4).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::time::Duration;

#[test]
fn create_writes_the_contract_and_starts_a_worker_process() {
    let home = Home::new();
    let _d = home.start();
    // A workdir beside the home (`/tmp` itself would contain it, which is refused).
    let beside = tempfile::tempdir().unwrap();
    let workdir = beside.path().to_str().unwrap().to_string();
    home.ctl_ok(&[
        "project",
        "create",
        "alpha",
        "--goal",
        "Ship the thing",
        "--background",
        "It matters",
        "--constraints",
        "Be careful",
        "--model",
        "openai/gpt-4o",
        "--workdir",
        &workdir,
    ]);
    let pid = home.ready_worker("alpha", None);
    assert!(alive(pid));
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(cmdline.contains("project-worker"), "{cmdline}");
    assert!(cmdline.contains("projects/alpha"), "{cmdline}");

    let md = home.project_md("alpha");
    assert!(md.starts_with("---\n"), "{md}");
    let inner = pegasus_store::split_frontmatter(&md).unwrap().yaml;
    let front: serde_json::Value = serde_norway::from_str(inner).unwrap();
    assert_eq!(front["name"], "alpha");
    assert_eq!(front["status"], "active");
    assert_eq!(front["model"], "openai/gpt-4o");
    assert_eq!(front["workdir"], workdir.as_str());
    assert!(front["suspended"].is_null() && front["completed"].is_null());
    let created = front["created"].as_str().unwrap();
    assert!(chrono_like(created), "created = {created}");
    for section in [
        "## Goal\n\nShip the thing",
        "## Background\n\nIt matters",
        "## Constraints\n\nBe careful",
    ] {
        assert!(md.contains(section), "missing {section:?} in\n{md}");
    }
    for dir in [
        "session",
        "tasks",
        "memory/facts",
        "memory/episodes",
        "skills",
        "artifacts",
    ] {
        assert!(
            home.project_dir("alpha").join(dir).is_dir(),
            "missing {dir}"
        );
    }
    // The worker's environment carries nothing but the allowlist.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    for var in String::from_utf8_lossy(&environ)
        .split('\0')
        .filter(|v| !v.is_empty())
    {
        let key = var.split('=').next().unwrap();
        assert!(
            [
                "PATH",
                "HOME",
                "USER",
                "LANG",
                "LC_ALL",
                "TZ",
                "TMPDIR",
                "PEGASUS_LOG",
                "RUST_BACKTRACE",
                // pegasusd's own pid, set by the spawn (not inherited): the worker arms
                // PR_SET_PDEATHSIG against it.
                "PEGASUS_SUPERVISOR_PID",
                // Where its project's cgroup is (DESIGN.md §12 limits), set by the spawn.
                "PEGASUS_CGROUP",
            ]
            .contains(&key),
            "unexpected variable {key} in the worker's environment"
        );
    }
}

/// `2026-02-28T10:00:00Z`-shaped.
fn chrono_like(s: &str) -> bool {
    s.len() == 20 && s.ends_with('Z') && s.as_bytes()[10] == b'T'
}

#[test]
fn suspend_resume_complete_archive_drive_the_worker_and_the_file() {
    let home = Home::new();
    let _d = home.start();
    let first = home.create("beta");

    home.ctl_ok(&["project", "suspend", "beta"]);
    poll(
        Duration::from_secs(5),
        "the suspended worker to exit",
        || (!alive(first)).then_some(()),
    );
    let md = home.project_md("beta");
    assert!(md.contains("status: suspended"), "{md}");
    assert!(
        !md.contains("suspended: null"),
        "suspended timestamp not written:\n{md}"
    );
    let show = home.json(&["project", "show", "beta"]);
    assert_eq!(show["status"], "suspended");
    assert!(show["worker_pid"].is_null());
    assert!(show["suspended"].is_string());

    home.ctl_ok(&["project", "resume", "beta"]);
    let second = home.ready_worker("beta", Some(first as u64));
    assert!(alive(second));
    assert!(home.project_md("beta").contains("status: active"));

    home.ctl_ok(&["project", "complete", "beta"]);
    poll(
        Duration::from_secs(5),
        "the completed worker to exit",
        || (!alive(second)).then_some(()),
    );
    let md = home.project_md("beta");
    assert!(
        md.contains("status: completed") && !md.contains("completed: null"),
        "{md}"
    );

    home.ctl_ok(&["project", "archive", "beta"]);
    assert!(home.project_md("beta").contains("status: archived"));
    // Archiving deletes nothing.
    assert!(home.project_dir("beta").join("session").is_dir());
    let list = home.json(&["project", "list"]);
    let row = &list.as_array().unwrap()[0];
    assert_eq!(row["name"], "beta");
    assert_eq!(row["status"], "archived");
    assert!(row["worker_pid"].is_null());
    assert!(row["cost_usd"].is_number());
    assert!(row.get("model").is_some());
}

#[test]
fn suspend_from_suspended_to_completed_is_allowed() {
    let home = Home::new();
    let _d = home.start();
    home.create("gamma");
    home.ctl_ok(&["project", "suspend", "gamma"]);
    home.ctl_ok(&["project", "complete", "gamma"]);
    assert!(home.project_md("gamma").contains("status: completed"));
}

/// Brings project `name` to `status` through allowed transitions.
fn reach(home: &Home, name: &str, status: &str) {
    home.create(name);
    let path: &[&str] = match status {
        "active" => &[],
        "suspended" => &["suspend"],
        "completed" => &["complete"],
        "archived" => &["complete", "archive"],
        _ => unreachable!(),
    };
    for verb in path {
        home.ctl_ok(&["project", verb, name]);
    }
}

#[test]
fn every_refused_transition_says_cannot_verb_project_it_is_status() {
    let home = Home::new();
    let _d = home.start();
    let refused: &[(&str, &[&str])] = &[
        ("active", &["resume", "archive"]),
        ("suspended", &["suspend", "archive"]),
        ("completed", &["suspend", "resume", "complete"]),
        ("archived", &["suspend", "resume", "complete", "archive"]),
    ];
    for (status, verbs) in refused {
        let name = format!("p-{status}");
        reach(&home, &name, status);
        let before = home.project_md(&name);
        for verb in *verbs {
            let out = home.ctl(&["project", verb, &name]);
            assert_eq!(out.status.code(), Some(1), "{verb} on {status} should fail");
            let err = String::from_utf8_lossy(&out.stderr);
            let want = format!("cannot {verb} project {name}: it is {status}");
            assert!(err.contains(&want), "stderr {err:?} lacks {want:?}");
            assert_eq!(err.trim().lines().count(), 1, "one line: {err:?}");
            assert_eq!(
                home.project_md(&name),
                before,
                "a refused {verb} changed the file"
            );
        }
    }
}

#[test]
fn bad_input_gets_one_clear_line_and_the_documented_exit_code() {
    let home = Home::new();
    // Daemon down: commands that need it exit 3, read-only ones work from the files.
    let out = home.ctl(&["status"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("start it with `pegasusd"));
    assert_eq!(
        home.ctl(&["project", "create", "x", "--goal", "g"])
            .status
            .code(),
        Some(3)
    );
    // Usage errors exit 2.
    assert_eq!(home.ctl(&["project", "frobnicate"]).status.code(), Some(2));
    assert_eq!(home.ctl(&["project", "create", "x"]).status.code(), Some(2));

    let _d = home.start();
    let too_long = "x".repeat(64);
    for bad in [
        "Upper",
        "under_score",
        "has space",
        "a/b",
        "..",
        too_long.as_str(),
    ] {
        let out = home.ctl(&["project", "create", bad, "--goal", "g"]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("name"),
            "{bad}"
        );
    }
    home.create("dup");
    let out = home.ctl(&["project", "create", "dup", "--goal", "g"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    let out = home.ctl(&["project", "suspend", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
}

#[test]
fn read_only_commands_work_from_the_files_when_the_daemon_is_down() {
    let home = Home::new();
    let mut d = home.start();
    home.create("delta");
    home.create("epsilon");
    home.ctl_ok(&["project", "suspend", "epsilon"]);
    d.kill9();
    let list = home.json(&["project", "list"]);
    let names: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].clone(),
                p["status"].clone(),
                p["worker_pid"].clone(),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![
            ("delta".into(), "active".into(), serde_json::Value::Null),
            (
                "epsilon".into(),
                "suspended".into(),
                serde_json::Value::Null
            )
        ]
    );
    let only = home.json(&["project", "list", "--status", "suspended"]);
    assert_eq!(only.as_array().unwrap().len(), 1);
    let show = home.json(&["project", "show", "delta"]);
    assert_eq!(show["goal"], "Goal of delta");
    let table = home.ctl_ok(&["project", "list"]);
    assert!(table.starts_with("NAME"), "{table}");
}

#[test]
fn stop_and_sigterm_stop_every_worker_and_exit_zero() {
    let home = Home::new();
    let mut d = home.start();
    let a = home.create("one");
    let b = home.create("two");
    let out = home.ctl_ok(&["stop"]);
    assert!(out.contains("stopped"), "{out}");
    assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!alive(a) && !alive(b), "workers outlived a graceful stop");
    assert!(!home.path().join("run/pegasusd.sock").exists());

    let mut d = home.start();
    let a = home.ready_worker("one", None);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!alive(a));
    // A graceful stop changes no project's status: both come back.
    let _d = home.start();
    home.ready_worker("one", None);
    home.ready_worker("two", None);
}
