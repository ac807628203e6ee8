//! A model is outside input: whatever it asks `exec` to run is untrusted (issue 8). These tests
//! let a scripted model try what a hostile one would, through the real daemon, worker and tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;
use std::time::Duration;

/// The model runs `cmd` with `exec` on "attack", then answers with the tool result it saw.
fn script_exec(fake: &FakeLlm, cmd: &str) {
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::LastUserTextContains("attack".into()),
                Match::NoToolResultYet,
            ]),
            Reply::Tools(vec![ToolCall::new("exec", json!({"command": cmd}))]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("attack".into()),
        Reply::Text("attack finished".into()),
    ));
}

/// The text of the last tool result the model was sent.
fn last_tool_result(fake: &FakeLlm) -> String {
    fake.last_request()
        .map(|r| r.body.to_string())
        .unwrap_or_default()
}

#[test]
fn a_model_run_command_cannot_drive_the_control_socket() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    let ctl = env!("CARGO_BIN_EXE_pegasusctl");
    let h = home.path().display().to_string();
    script_exec(
        &fake,
        &format!("{ctl} --home {h} project suspend victim; echo rc=$?; {ctl} --home {h} stop; echo rc=$?"),
    );
    let _d = home.start_fake();
    let victim = home.create("victim");
    home.create("attacker");
    assert_eq!(
        home.ctl_ok(&["project", "send", "attacker", "attack", "--wait"])
            .trim(),
        "attack finished"
    );
    let seen = last_tool_result(&fake);
    assert!(
        seen.contains("cannot be used from inside a Pegasus project") && seen.contains("rc=1"),
        "{seen}"
    );
    // Nothing was stopped or suspended.
    assert_eq!(home.ready_worker("victim", None), victim);
    assert_eq!(
        home.json(&["project", "show", "victim"])["status"],
        "active"
    );
    assert!(home.ctl(&["status"]).status.success());
}

/// Issue 8 (high): pegasusd kept the key in its environment, so a model could read it from
/// `/proc/<pegasusd>/environ` into a tool result, the session and the next provider request.
#[test]
fn a_model_cannot_read_the_api_key_from_pegasusd() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    script_exec(
        &fake,
        "pp=$(awk '{print $4}' /proc/$PPID/stat); echo parent=$pp; tr '\\0' '\\n' </proc/$pp/environ; cat /proc/$pp/cmdline",
    );
    let d = home.start_fake();
    home.create("snoop");
    assert_eq!(
        home.ctl_ok(&["project", "send", "snoop", "attack", "--wait"])
            .trim(),
        "attack finished"
    );
    let seen = last_tool_result(&fake);
    assert!(seen.contains(&format!("parent={}", d.pid)), "{seen}");
    assert!(
        seen.contains("pegasusd"),
        "the read reached pegasusd: {seen}"
    );
    assert!(
        !seen.contains(FAKE_KEY),
        "the key reached the model: {seen}"
    );
    // Not in pegasusd's environment either, for anybody who can read it.
    let environ = std::fs::read(format!("/proc/{}/environ", d.pid)).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&environ).contains(FAKE_KEY));
    // The calls still carried the key (the provider got it).
    assert!(fake
        .requests()
        .iter()
        .all(|r| r.header("x-api-key") == Some(FAKE_KEY)));
}

/// Issue 8 (medium): `setsid sleep … &` left a process that outlived the call, the worker and
/// `pegasusctl stop`. Process-group kill is not containment; a subreaper is.
#[test]
fn a_process_that_escapes_with_setsid_does_not_outlive_its_call() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    script_exec(
        &fake,
        "setsid sleep 86311 >/dev/null 2>&1 </dev/null & sleep 0.5; echo started",
    );
    let _d = home.start_fake();
    home.create("escape");
    assert_eq!(
        home.ctl_ok(&["project", "send", "escape", "attack", "--wait"])
            .trim(),
        "attack finished"
    );
    assert!(last_tool_result(&fake).contains("started"));
    poll(
        std::time::Duration::from_secs(10),
        "the escaped sleep to be gone",
        || processes_with("86311").is_empty().then_some(()),
    );
    // The worker and the daemon are fine.
    home.ready_worker("escape", None);
}

/// Issue 8 (medium): a 17 MB provider reply made a frame over the limit; the task hung
/// `running` until the watchdog. Now the task gets a clear error at once.
#[test]
fn a_reply_too_large_for_a_frame_fails_its_task_with_a_clear_error() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("flood".into()),
        Reply::Text("y".repeat(17 * 1024 * 1024)),
    ));
    let _d = home.start_fake();
    home.create("flooded");
    let started = std::time::Instant::now();
    let err = home.ctl_fails(&["project", "send", "flooded", "flood me", "--wait"]);
    assert!(err.contains("limit"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let tasks = home.json(&["task", "list", "flooded"]);
    assert_eq!(tasks[0]["state"], "failed", "{tasks}");
    // The worker is still the same, healthy process.
    assert_eq!(home.json(&["project", "show", "flooded"])["restarts"], 0);
}

/// SPEC §6: a model-run command writes only beneath its workdir and private temp dir, cannot
/// read the Pegasus home outside its own project (config, ledger, run/, other projects'
/// sessions), and cannot signal pegasusd. Needs a kernel with Landlock; elsewhere the daemon
/// says so once at start and this test checks that line instead.
#[test]
fn a_model_run_command_is_confined_to_its_workdir_and_cannot_read_the_home() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    let h = home.path().display().to_string();
    let outside = std::env::temp_dir().join(format!("pegasus-escape-{}", std::process::id()));
    let _ = std::fs::remove_file(&outside);
    let o = outside.display();
    script_exec(
        &fake,
        &format!(
            "echo in > inside.txt && cat inside.txt; \
             echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; \
             echo out > {o}; echo write-outside-rc=$?; \
             cat {h}/config.yml; echo read-config-rc=$?; \
             cat {h}/projects/other/PROJECT.md; echo read-other-rc=$?; \
             ls {h}/costs/; cat {h}/costs/*; echo read-costs-rc=$?; \
             head -c 20 ../PROJECT.md; echo; echo read-own-rc=$?; \
             head -c 4 /etc/passwd; echo; echo read-etc-rc=$?; \
             pp=$(awk '{{print $4}}' /proc/$PPID/stat); kill -0 $pp; echo signal-rc=$?"
        ),
    );
    let d = home.start_fake();
    home.create("other");
    home.create("jail");
    assert_eq!(
        home.ctl_ok(&["project", "send", "jail", "attack", "--wait"])
            .trim(),
        "attack finished"
    );
    let seen = last_tool_result(&fake);
    if pegasus_sandbox::landlock_abi().is_none() {
        let log = std::fs::read_to_string(
            std::fs::read_dir(home.path().join("logs"))
                .unwrap()
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with("pegasusd.log"))
                .unwrap()
                .path(),
        )
        .unwrap();
        assert!(log.contains("this kernel has no Landlock"), "{log}");
        eprintln!("skipped: this kernel has no Landlock");
        drop(d);
        return;
    }
    // Inside: the workdir and the private temp dir work, and so does reading the system and
    // its own project folder.
    assert!(seen.contains("in\\ntmp\\n"), "{seen}");
    assert!(
        seen.contains("read-own-rc=0") && seen.contains("read-etc-rc=0"),
        "{seen}"
    );
    assert!(seen.contains("---"), "its own PROJECT.md: {seen}");
    // Outside: refused.
    assert!(!outside.exists(), "a command wrote outside its workdir");
    for refused in [
        "write-outside",
        "read-config",
        "read-other",
        "read-costs",
        "signal",
    ] {
        assert!(
            seen.contains(&format!("{refused}-rc=")) && !seen.contains(&format!("{refused}-rc=0")),
            "{refused}: {seen}"
        );
    }
    assert!(seen.contains("kill: Operation not permitted"), "{seen}");
    assert!(!seen.contains("default_model"), "the config leaked: {seen}");
    assert!(seen.contains("Permission denied"), "{seen}");
}

/// What a command started and hid in its own session (`setsid`) while pegasusd and its worker
/// were killed had no subreaper left to catch it: it is killed when pegasusd starts again.
#[test]
fn an_escapee_that_outlived_a_dead_daemon_is_killed_when_it_comes_back() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    let marker = format!("sleep 43.{}", std::process::id());
    script_exec(
        &fake,
        &format!("setsid {marker} >/dev/null 2>&1 </dev/null & sleep 30"),
    );
    let mut d = home.start_fake();
    home.create("runaway");
    home.ctl_ok(&["project", "send", "runaway", "attack"]);
    // The sleep itself, not the shell whose command line also names it.
    let escapee = poll(Duration::from_secs(10), "the escapee to run", || {
        let number = marker.trim_start_matches("sleep ");
        processes_with(number).into_iter().find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
        })
    });
    d.kill9();
    // Nobody is left to sweep: it runs on, re-parented to init.
    assert!(alive(escapee));
    let _d = home.start_fake();
    poll(Duration::from_secs(5), "the escapee to be killed", || {
        (!alive(escapee)).then_some(())
    });
}
