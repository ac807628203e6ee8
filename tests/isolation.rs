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
    let d = home.start_fake();
    // Every environment it can see, and pegasusd's by its pid (its parent's parent's, where
    // commands shared pegasusd's PID namespace).
    script_exec(
        &fake,
        &format!(
            "for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' <$e; done 2>/dev/null; \
             echo visible=$(ls -d /proc/[0-9]* | wc -l); \
             cat /proc/{pid}/environ /proc/{pid}/maps >/dev/null; echo direct-rc=$?",
            pid = d.pid
        ),
    );
    home.create("snoop");
    assert_eq!(
        home.ctl_ok(&["project", "send", "snoop", "attack", "--wait"])
            .trim(),
        "attack finished"
    );
    let seen = last_tool_result(&fake);
    assert!(
        !seen.contains(FAKE_KEY),
        "the key reached the model: {seen}"
    );
    if pegasus_sandbox::probe().namespaces {
        // Its own PID namespace: pegasusd is not even there to be read.
        assert!(
            seen.contains("direct-rc=") && !seen.contains("direct-rc=0"),
            "{seen}"
        );
        let visible: usize = seen
            .rsplit("visible=")
            .next()
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count: {seen}"));
        assert!(visible <= 6, "it sees {visible} processes: {seen}");
    }
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

/// DESIGN.md §6: a model-run command writes only beneath its workdir and private temp dir, cannot
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
    let d = home.start_fake();
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
             kill -0 {pid}; echo signal-rc=$?",
            pid = d.pid
        ),
    );
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
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"skipped: an isolation test: this kernel has no Landlock\n",
        );
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
    // Not there to be signalled (its own PID namespace), or refused by Landlock's scope.
    assert!(
        seen.contains("kill: No such process") || seen.contains("kill: Operation not permitted"),
        "{seen}"
    );
    assert!(!seen.contains("default_model"), "the config leaked: {seen}");
    assert!(seen.contains("Permission denied"), "{seen}");
}

/// Issue 22 (high): a command that dropped the exec marker (`env -i`) and left its group and
/// session (`setsid`) survived a kill -9 of pegasusd, and the next pegasusd answered its
/// `pegasusctl` (it was no longer a descendant). Now it lives in the PID namespace of its
/// command: refused by the control socket while it lives, and dead within a second of its
/// worker, pegasusd down and nobody sweeping.
#[test]
fn a_marker_less_survivor_dies_with_its_worker_and_never_drives_a_daemon() {
    let fake = FakeLlm::start().unwrap();
    let home = fake_home(&fake, "");
    let ctl = env!("CARGO_BIN_EXE_pegasusctl");
    let h = home.path().display().to_string();
    let log = home.project_dir("runaway").join("tmp").join("survivor.log");
    let l = log.display();
    script_exec(
        &fake,
        &format!(
            "env -i setsid sh -c 'while :; do {ctl} --home {h} status >> {l} 2>&1; echo rc=$? >> {l}; sleep 0.1; done' </dev/null >/dev/null 2>&1 & sleep 30"
        ),
    );
    let mut d = home.start_fake();
    home.create("runaway");
    home.ctl_ok(&["project", "send", "runaway", "attack"]);
    let text = poll(Duration::from_secs(20), "the survivor to try twice", || {
        let t = std::fs::read_to_string(&log).ok()?;
        (t.matches("rc=").count() >= 2).then_some(t)
    });
    assert!(
        text.contains("cannot be used from inside a Pegasus project") && !text.contains("rc=0"),
        "{text}"
    );
    let survivors: Vec<u32> = processes_with("survivor.log")
        .into_iter()
        .filter(|p| std::fs::read(format!("/proc/{p}/environ")).is_ok_and(|e| e.is_empty()))
        .collect();
    assert!(!survivors.is_empty(), "the marker-less loop was not found");
    d.kill9();
    // No pegasusd, no sweep: the kernel ends the namespace when the worker dies.
    poll(
        Duration::from_secs(1),
        "the survivor to die within 1 s of its worker",
        || survivors.iter().all(|p| !alive(*p)).then_some(()),
    );
    let _d = home.start_fake();
    home.ready_worker("runaway", None);
    let after = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !after.contains("rc=0"),
        "a survivor drove the daemon: {after}"
    );
}
