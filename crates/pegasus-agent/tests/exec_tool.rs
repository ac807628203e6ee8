//! exec runs in the workdir, reports the exit code, caps output, and kills its whole process
//! group on timeout and on cancel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{call, ctx_with, settings, ScriptedModel};
use serde_json::json;

/// Live (non-zombie) processes whose process group is `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // fields[0] = state, fields[2] = pgrp
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            out.push(pid);
        }
    }
    out
}

/// Waits up to 5 s for the group to be gone.
fn wait_group_gone(pgid: i32) -> Vec<i32> {
    let start = Instant::now();
    loop {
        let left = group_members(pgid);
        if left.is_empty() || start.elapsed() > Duration::from_secs(5) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_pid(path: &std::path::Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(p) = s.trim().parse() {
                return p;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(5), "no pid file");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn setup(exec_timeout_s: u64, cap: usize) -> (tempfile::TempDir, pegasus_agent::ToolCtx) {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = settings();
    s.exec_timeout_s = exec_timeout_s;
    s.exec_output_cap = cap;
    let (ctx, _rx) = ctx_with(tmp.path(), &tmp.path().join("mem"), ScriptedModel::new(), s);
    (tmp, ctx)
}

#[tokio::test]
async fn output_and_exit_code_in_the_workdir() {
    let (tmp, ctx) = setup(30, 65536);
    std::fs::write(tmp.path().join("here.txt"), "").unwrap();
    let out = call(&ctx, "exec", json!({"command": "ls; echo to-stderr >&2"})).await;
    assert!(!out.is_error, "{out:?}");
    assert!(out.content.starts_with("exit code: 0\n"), "{}", out.content);
    assert!(out.content.contains("here.txt"));
    assert!(out.content.contains("to-stderr"));
    let out = call(&ctx, "exec", json!({"command": "echo failing; exit 3"})).await;
    assert!(out.is_error);
    assert!(
        out.content.starts_with("exit code: 3\nfailing"),
        "{}",
        out.content
    );
    assert!(call(&ctx, "exec", json!({})).await.is_error);
    assert!(call(&ctx, "exec", json!({"command": "  "})).await.is_error);
}

#[tokio::test]
async fn output_is_capped_and_says_so() {
    let (_tmp, ctx) = setup(30, 1000);
    let out = call(
        &ctx,
        "exec",
        json!({"command": "head -c 5000 /dev/zero | tr '\\0' z"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.content.matches('z').count(), 1000);
    assert!(
        out.content.contains("output truncated: 5000 bytes"),
        "{}",
        out.content
    );
}

// On the multi-threaded runtime a worker uses, too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_whole_group() {
    let (tmp, ctx) = setup(30, 65536);
    let pidfile = tmp.path().join("pgid");
    let started = Instant::now();
    let out = call(
        &ctx,
        "exec",
        json!({"command": format!("echo $$ > {}; echo started; sleep 30 & sleep 30", pidfile.display()), "timeout_s": 1}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(out.is_error);
    assert!(
        out.content.contains("timed out after 1 s"),
        "{}",
        out.content
    );
    assert!(out.content.contains("started"), "{}", out.content);
    let pgid = read_pid(&pidfile);
    assert_eq!(wait_group_gone(pgid), Vec::<i32>::new());
}

#[tokio::test]
async fn the_configured_timeout_caps_the_requested_one() {
    let (_tmp, ctx) = setup(1, 65536);
    let started = Instant::now();
    let out = call(
        &ctx,
        "exec",
        json!({"command": "sleep 20", "timeout_s": 600}),
    )
    .await;
    assert!(
        out.is_error && out.content.contains("timed out after 1 s"),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn background_jobs_do_not_outlive_the_command() {
    let (tmp, ctx) = setup(30, 65536);
    let pidfile = tmp.path().join("pgid");
    let started = Instant::now();
    let out = call(
        &ctx,
        "exec",
        json!({"command": format!("echo $$ > {}; sleep 30 & echo done", pidfile.display())}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!out.is_error, "{out:?}");
    assert!(out.content.contains("done"));
    assert_eq!(wait_group_gone(read_pid(&pidfile)), Vec::<i32>::new());
}

#[tokio::test]
async fn cancelling_the_call_kills_the_group() {
    let (tmp, ctx) = setup(30, 65536);
    let pidfile = tmp.path().join("pgid");
    let input = json!({"command": format!("echo $$ > {}; sleep 30 & sleep 30", pidfile.display())});
    let tool = pegasus_agent::ToolSet::project_tools().get("exec").unwrap();
    let fut = tool.call(input, &ctx);
    // Dropping the future mid-run is what a cancelled task does.
    let res = tokio::time::timeout(Duration::from_millis(500), fut).await;
    assert!(res.is_err(), "the command should still have been running");
    let pgid = read_pid(&pidfile);
    assert_eq!(wait_group_gone(pgid), Vec::<i32>::new());
}
