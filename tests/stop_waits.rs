//! `pegasusctl stop` returns only once pegasusd has exited (issue 37), with a progress line
//! while a worker finishes its model call; meanwhile `status` and a second `pegasusd` both say
//! it is stopping (never "not running"); `--no-wait` returns at once. Real binaries, a real
//! worker held mid-call by the fake provider.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule};
use std::{
    process::{Command, Stdio},
    time::Duration,
};

/// A fake whose answer to a message holding "slow" outlasts the worker's graceful stop (5 s in
/// `fake_home`) many times over.
fn slow_fake() -> FakeLlm {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("slow".into()),
        Reply::Fault(Fault::Delay {
            ms: 60_000,
            then: Box::new(Reply::Text("late".into())),
        }),
    ));
    fake
}

#[test]
fn stop_waits_for_the_exit_and_status_and_a_second_daemon_agree_meanwhile() {
    let fake = slow_fake();
    let home = fake_home(&fake, "");
    let d = home.start_fake();
    home.create("web");
    home.ctl_ok(&["project", "send", "web", "a slow question"]);
    poll(Duration::from_secs(10), "the worker's model call", || {
        (fake.request_count() >= 1).then_some(())
    });

    let stop = Command::new(PEGASUSCTL)
        .arg("--home")
        .arg(home.path())
        .arg("stop")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While it stops: `status` says so (exit 1, not 3), and so does a second pegasusd.
    let line = poll(Duration::from_secs(10), "status to say stopping", || {
        let out = home.ctl(&["status"]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_ne!(
            out.status.code(),
            Some(3),
            "not running while it stops: {err}"
        );
        (out.status.code() == Some(1)).then_some(err)
    });
    assert!(
        line.contains(&format!("pegasusd (pid {}) is stopping", d.pid)),
        "{line}"
    );
    let mut second = Command::new(PEGASUSD)
        .arg("--home")
        .arg(home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let exited = poll(
        Duration::from_secs(10),
        "the second pegasusd to exit",
        || second.try_wait().unwrap(),
    );
    let mut said = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(exited.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("pegasusd (pid {}) is stopping", d.pid)),
        "{said}"
    );

    let out = stop.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "pegasusd stopped");
    assert!(
        stderr.contains("is stopping: waiting for its workers"),
        "a progress line: {stderr}"
    );
    // Returned only once pegasusd is gone: now `status` says not running, and it starts again.
    assert!(
        !alive(d.pid),
        "stop returned while pegasusd {} lives",
        d.pid
    );
    assert_eq!(home.ctl(&["status"]).status.code(), Some(3));
    drop(d);

    let mut d = home.start_fake();
    let quick = home.ctl_ok(&["stop", "--no-wait"]);
    assert!(quick.contains("pegasusd is stopping"), "{quick}");
    assert_eq!(d.wait_exit(Duration::from_secs(20)), Some(0));
}

/// The workers are stopped together, not one after another: three projects each held mid-call
/// past their graceful stop (5 s in `fake_home`) cost one drain, so pegasusd is gone well
/// before three drains (15 s) could have passed.
#[test]
fn stop_drains_every_worker_at_once() {
    let fake = slow_fake();
    let home = fake_home(&fake, "");
    let mut d = home.start_fake();
    for name in ["one", "two", "three"] {
        home.create(name);
        home.ctl_ok(&["project", "send", name, "a slow question"]);
    }
    poll(Duration::from_secs(20), "three held model calls", || {
        (fake.request_count() >= 3).then_some(())
    });
    let started = std::time::Instant::now();
    home.ctl_ok(&["stop", "--no-wait"]);
    assert_eq!(d.wait_exit(Duration::from_secs(30)), Some(0));
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(11),
        "three workers held past their 5 s drain took {took:?} to stop: one after another"
    );
}
