//! One daemon per home: the PID lock (DESIGN.md §2, §11).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::process::Command;

#[test]
fn a_second_pegasusd_on_the_same_home_exits_1_naming_the_first_pid() {
    let home = Home::new();
    let d = home.start();
    home.create("keep");
    let out = Command::new(PEGASUSD)
        .arg("--home")
        .arg(home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("pid {}", d.pid)), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // The loser touched nothing: the first daemon still answers and its socket is intact.
    home.ready_worker("keep", None);
    assert_eq!(home.json(&["status"])["pid"], d.pid);
}

#[test]
fn a_home_whose_socket_path_is_too_long_is_refused_clearly() {
    let base = tempfile::Builder::new()
        .prefix("pg")
        .tempdir_in("/tmp")
        .unwrap();
    let long = base.path().join("x".repeat(100));
    let out = Command::new(PEGASUSD)
        .arg("--home")
        .arg(&long)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shorter --home"), "{err}");
}

#[test]
fn pegasus_home_environment_variable_selects_the_home() {
    let home = Home::new();
    let mut child = Command::new(PEGASUSD)
        .env("PEGASUS_HOME", home.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    poll(
        std::time::Duration::from_secs(10),
        "the daemon on $PEGASUS_HOME",
        || {
            let out = Command::new(PEGASUSCTL)
                .env("PEGASUS_HOME", home.path())
                .arg("status")
                .output()
                .unwrap();
            out.status.success().then_some(())
        },
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
