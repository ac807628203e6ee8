//! A child subreaper adopts a `setsid` escapee of a command and the sweep kills and reaps it,
//! while the children it started on purpose live on. The subreaper role runs in a fresh copy
//! of this test binary, so the flag and the sweep touch nothing of the harness.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pegasus_sandbox::adopted::{become_subreaper, kill_adopted, spawn_known};
use std::process::Command;

const ROLE: &str = "PEGASUS_ADOPTED_TEST_ROLE";

fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                })
                == Some(parent)
        })
        .collect()
}

fn subreaper_role() {
    become_subreaper().unwrap();
    let mut known =
        spawn_known(|| Command::new("sleep").arg("30").spawn(), |c| Some(c.id())).unwrap();
    let status = Command::new("sh")
        .args([
            "-c",
            "setsid sleep 86311 >/dev/null 2>&1 </dev/null & sleep 0.2",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let me = std::process::id();
    assert_eq!(children_of(me).len(), 2, "the escapee was adopted");
    assert_eq!(kill_adopted(), 1);
    assert_eq!(
        children_of(me),
        vec![known.id()],
        "the known child lives on"
    );
    known.kill().unwrap();
    known.wait().unwrap();
}

#[test]
fn an_escaped_grandchild_is_adopted_killed_and_reaped_while_known_children_live() {
    if std::env::var_os(ROLE).is_some() {
        return subreaper_role();
    }
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_escaped_grandchild_is_adopted_killed_and_reaped_while_known_children_live",
            "--test-threads=1",
        ])
        .env(ROLE, "1")
        .status()
        .unwrap();
    assert!(status.success());
}
