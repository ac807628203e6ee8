//! Crash recovery with real `kill -9`: of a worker (restart, backoff, crash loop) and of the
//! daemon itself (no orphans, restart resumes exactly the active projects, nothing lost).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::time::Duration;

#[test]
fn kill_9_of_a_worker_gets_a_new_worker_within_2s_and_the_crash_recorded() {
    let home = Home::new();
    let _d = home.start();
    let first = home.create("alpha");
    let other = home.create("bystander");
    kill9(first);
    let second = poll(Duration::from_secs(2), "a new worker pid", || {
        let p = home.json(&["project", "show", "alpha"]);
        let pid = p["worker_pid"].as_u64()?;
        (pid != first as u64).then_some(pid as u32)
    });
    assert!(alive(second));
    let p = home.json(&["project", "show", "alpha"]);
    assert_eq!(p["restarts"], 1);
    assert_eq!(p["last_crash"], "signal 9 (SIGKILL)");
    assert!(p["last_crash_at"].is_string());
    let crashes = std::fs::read_to_string(home.project_dir("alpha").join("crashes.jsonl")).unwrap();
    assert!(crashes.contains("signal 9"), "{crashes}");
    // Nobody else noticed.
    assert!(alive(other));
    assert_eq!(home.json(&["project", "show", "bystander"])["restarts"], 0);
    // The new worker works.
    home.ready_worker("alpha", Some(first as u64));
    home.ctl_ok(&["project", "send", "alpha", "still there?"]);
}

#[test]
fn six_quick_kills_make_a_crash_loop_that_only_resume_ends() {
    let home = Home::new();
    let _d = home.start();
    let mut pid = home.create("looper");
    for i in 1..=6 {
        kill9(pid);
        if i == 6 {
            break;
        }
        pid = poll(Duration::from_secs(10), "a restarted worker", || {
            let p = home.json(&["project", "show", "looper"]);
            let new = p["worker_pid"].as_u64()?;
            (new != pid as u64).then_some(new as u32)
        });
    }
    poll(Duration::from_secs(5), "the crash-looping state", || {
        (home.json(&["project", "show", "looper"])["worker_state"] == "crash-looping").then_some(())
    });
    let status = home.json(&["status"]);
    let row = status["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "looper")
        .unwrap()
        .clone();
    assert_eq!(row["worker_state"], "crash-looping");
    assert_eq!(row["restarts"], 6);
    assert!(row["worker_pid"].is_null());
    // No more restarts: it stays down while we look again and again.
    for _ in 0..10 {
        let p = home.json(&["project", "show", "looper"]);
        assert!(p["worker_pid"].is_null() && p["worker_state"] == "crash-looping");
    }
    let out = home.ctl(&["project", "send", "looper", "hello?"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("crash-looping"));
    // PROJECT.md still says active: a daemon restart would try again.
    assert!(home.project_md("looper").contains("status: active"));

    home.ctl_ok(&["project", "resume", "looper"]);
    let back = home.ready_worker("looper", None);
    assert!(alive(back));
}

#[test]
fn kill_9_of_pegasusd_leaves_no_orphans_and_a_restart_resumes_exactly_the_active_projects() {
    let home = Home::new();
    let mut d = home.start();
    let a = home.create("act-one");
    let b = home.create("act-two");
    let s = home.create("sus");
    home.create("done");
    home.create("old");
    home.ctl_ok(&["project", "suspend", "sus"]);
    home.ctl_ok(&["project", "complete", "done"]);
    home.ctl_ok(&["project", "complete", "old"]);
    home.ctl_ok(&["project", "archive", "old"]);
    poll(
        Duration::from_secs(5),
        "the suspended worker to exit",
        || (!alive(s)).then_some(()),
    );
    for i in 0..5 {
        home.ctl_ok(&["project", "send", "act-one", &format!("message {i}")]);
    }

    d.kill9();
    for pid in [a, b] {
        poll(
            Duration::from_secs(2),
            &format!("worker {pid} to die with its supervisor"),
            || (!alive(pid)).then_some(()),
        );
    }
    // The pid file and the sockets are still there, stale; they must not stop a restart.
    assert!(home.path().join("pegasusd.pid").exists());
    assert!(home.path().join("run/pegasusd.sock").exists());

    let _d = home.start();
    let a2 = home.ready_worker("act-one", None);
    let b2 = home.ready_worker("act-two", None);
    assert!(a2 != a && b2 != b);
    let list = home.json(&["project", "list"]);
    for p in list.as_array().unwrap() {
        let has_worker = !p["worker_pid"].is_null();
        assert_eq!(has_worker, p["status"] == "active", "{p}");
    }
    // Messages acknowledged before the kill are in the session file, and it loads clean.
    let loaded = pegasus_store::load_session(&home.project_dir("act-one")).unwrap();
    assert_eq!(loaded.skipped, 0);
    assert!(!loaded.torn_tail);
    let texts: Vec<String> = loaded
        .records
        .iter()
        .filter_map(|r| match r {
            // What the user sent. (A message's task that was still `ready` when pegasusd died
            // runs after the restart and records its goal again, as a message from `task`.)
            pegasus_store::SessionRecord::Message(m)
                if m.from == Some(pegasus_proto::Channel::Cli) =>
            {
                match &m.content[0] {
                    pegasus_store::ContentBlock::Text { text } => Some(text.clone()),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        (0..5).map(|i| format!("message {i}")).collect::<Vec<_>>()
    );
    // And the restarted worker keeps appending to the same session.
    home.ctl_ok(&["project", "send", "act-one", "after restart"]);
    let loaded = pegasus_store::load_session(&home.project_dir("act-one")).unwrap();
    let from_cli = |l: &pegasus_store::LoadedSession| {
        l.records
            .iter()
            .filter(|r| matches!(r, pegasus_store::SessionRecord::Message(m) if m.from == Some(pegasus_proto::Channel::Cli)))
            .count()
    };
    assert_eq!(from_cli(&loaded), 6, "5 messages before the kill + 1 after");
}

#[test]
fn a_hung_worker_is_killed_after_the_shutdown_timeout() {
    let home = Home::with_config("workers:\n  shutdown_timeout_s: 1\n");
    let _d = home.start();
    let pid = home.create("hung");
    // A stopped process cannot answer Shutdown; only the process-group kill ends it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    home.ctl_ok(&["project", "suspend", "hung"]);
    assert!(
        !alive(pid),
        "suspend returned while the hung worker still lives"
    );
    let show = home.json(&["project", "show", "hung"]);
    assert_eq!(show["status"], "suspended");
    assert_eq!(show["restarts"], 0, "a requested stop is not a crash");
}

/// Issue 8: heartbeats were ignored, so a hung worker (its loop stopped, here by SIGSTOP) was
/// never noticed. Now it is pinged, then killed and restarted like a crash.
#[test]
fn a_hung_worker_that_stops_beating_is_killed_and_restarted() {
    let home = Home::with_config("workers: {heartbeat_interval_s: 0.25}\n");
    let _d = home.start();
    let pid = home.create("frozen");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let new_pid = home.ready_worker("frozen", Some(pid as u64));
    assert_ne!(new_pid, pid);
    assert!(!alive(pid), "the hung worker was killed");
    let show = home.json(&["project", "show", "frozen"]);
    assert_eq!(show["restarts"], 1);
    assert!(
        show["last_crash"].as_str().unwrap().contains("hung"),
        "{show}"
    );
}

/// Issue 8: `workers.idle_suspend_s` was parsed and never acted on.
#[test]
fn an_idle_project_is_suspended_after_idle_suspend_s() {
    let home = Home::with_config("workers: {idle_suspend_s: 1}\n");
    let _d = home.start();
    let pid = home.create("sleepy");
    poll(
        Duration::from_secs(15),
        "the idle project to be suspended",
        || (home.json(&["project", "show", "sleepy"])["status"] == "suspended").then_some(()),
    );
    assert!(home.project_md("sleepy").contains("status: suspended"));
    poll(Duration::from_secs(10), "its worker to exit", || {
        (!alive(pid)).then_some(())
    });
    // Resume brings it back.
    home.ctl_ok(&["project", "resume", "sleepy"]);
    home.ready_worker("sleepy", Some(pid as u64));
}
