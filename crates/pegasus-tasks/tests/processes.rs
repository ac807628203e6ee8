//! The compare-and-set holds across real processes: this test binary re-runs itself twice as
//! racers (selected by an environment variable) that fire the same transition at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use pegasus_tasks::{TaskError, TaskState, TaskStore};

const RACER_ENV: &str = "PEGASUS_TASKS_RACER";

/// In a racer process: wait for the go file, try `ready -> running`, print the outcome.
/// In a normal test run it does nothing.
#[test]
fn racer_child() {
    let Ok(spec) = std::env::var(RACER_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, '|');
    let (dir, id, go) = (
        PathBuf::from(parts.next().unwrap()),
        parts.next().unwrap().to_string(),
        PathBuf::from(parts.next().unwrap()),
    );
    let store = TaskStore::open(&dir, PROJECT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !go.exists() {
        assert!(Instant::now() < deadline, "no go signal");
        std::thread::sleep(Duration::from_micros(200));
    }
    match store.transition(&id, TaskState::Ready, TaskState::Running, "racer", "") {
        Ok(_) => println!("RACE-RESULT win"),
        Err(TaskError::Conflict { .. }) => println!("RACE-RESULT conflict"),
        Err(e) => println!("RACE-RESULT error {e}"),
    }
}

#[test]
fn two_processes_racing_the_same_transition_one_wins_one_conflicts() {
    let exe = std::env::current_exe().unwrap();
    let (dir, store) = project();
    for round in 0..8 {
        let t = task_in(&store, TaskState::Ready);
        let go = dir.path().join(format!("go-{round}"));
        let children: Vec<_> = (0..2)
            .map(|_| {
                Command::new(&exe)
                    .args(["--exact", "racer_child", "--nocapture", "--test-threads=1"])
                    .env(
                        RACER_ENV,
                        format!("{}|{}|{}", dir.path().display(), t.id, go.display()),
                    )
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::fs::write(&go, b"").unwrap();
        let mut outcomes: Vec<String> = children
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                // libtest prints `test racer_child ... ` on the same line first.
                text.lines()
                    .find_map(|l| l.split_once("RACE-RESULT ").map(|(_, r)| r.to_string()))
                    .unwrap_or_else(|| {
                        format!("no result: {text} {}", String::from_utf8_lossy(&out.stderr))
                    })
            })
            .collect();
        outcomes.sort();
        assert_eq!(outcomes, vec!["conflict", "win"], "round {round}");
        assert_eq!(store.get(&t.id).unwrap().state, TaskState::Running);
    }
}
