//! read_file, write_file, edit_file and list_dir act inside the workdir and nowhere else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::symlink;

use common::{call, ctx};
use serde_json::json;

struct Setup {
    _tmp: tempfile::TempDir,
    work: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    symlink(&outside, work.join("linkdir")).unwrap();
    symlink(outside.join("secret.txt"), work.join("linkfile")).unwrap();
    Setup {
        _tmp: tmp,
        work,
        outside,
    }
}

#[tokio::test]
async fn write_read_edit_list_round_trip() {
    let s = setup();
    let (ctx, _rx) = ctx(&s.work, &s.work.join("mem"));
    let out = call(
        &ctx,
        "write_file",
        json!({"path": "src/a.txt", "content": "hello world\n"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    let out = call(&ctx, "read_file", json!({"path": "src/a.txt"})).await;
    assert_eq!(out.content, "hello world\n");

    let out = call(
        &ctx,
        "edit_file",
        json!({"path": "src/a.txt", "old": "world", "new": "there"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(s.work.join("src/a.txt")).unwrap(),
        "hello there\n"
    );

    let out = call(&ctx, "list_dir", json!({"path": "."})).await;
    assert!(!out.is_error);
    assert!(out.content.contains("src/"), "{}", out.content);
    assert!(out.content.contains("linkdir@"), "{}", out.content);
    let out = call(&ctx, "list_dir", json!({"path": "src"})).await;
    assert_eq!(out.content, "a.txt  (12 bytes)");
}

#[tokio::test]
async fn edit_requires_exactly_one_occurrence() {
    let s = setup();
    let (ctx, _rx) = ctx(&s.work, &s.work.join("mem"));
    std::fs::write(s.work.join("f.txt"), "a a b").unwrap();
    let out = call(
        &ctx,
        "edit_file",
        json!({"path": "f.txt", "old": "a", "new": "x"}),
    )
    .await;
    assert!(out.is_error && out.content.contains("2 times"), "{out:?}");
    let out = call(
        &ctx,
        "edit_file",
        json!({"path": "f.txt", "old": "zzz", "new": "x"}),
    )
    .await;
    assert!(
        out.is_error && out.content.contains("does not occur"),
        "{out:?}"
    );
    let out = call(
        &ctx,
        "edit_file",
        json!({"path": "f.txt", "old": "", "new": "x"}),
    )
    .await;
    assert!(out.is_error);
    assert_eq!(
        std::fs::read_to_string(s.work.join("f.txt")).unwrap(),
        "a a b"
    );
}

#[tokio::test]
async fn every_escape_is_refused_and_nothing_outside_changes() {
    let s = setup();
    let (ctx, _rx) = ctx(&s.work, &s.work.join("mem"));
    let bad_paths = [
        "../outside/secret.txt".to_string(),
        "sub/../../outside/secret.txt".to_string(),
        s.outside.join("secret.txt").to_string_lossy().into_owned(),
        "/etc/passwd".to_string(),
        "linkdir/secret.txt".to_string(),
        "linkfile".to_string(),
    ];
    for p in &bad_paths {
        let p = p.as_str();
        for (tool, input) in [
            ("read_file", json!({"path": p})),
            ("write_file", json!({"path": p, "content": "pwned"})),
            (
                "edit_file",
                json!({"path": p, "old": "top", "new": "pwned"}),
            ),
            ("list_dir", json!({"path": p})),
        ] {
            let out = call(&ctx, tool, input).await;
            assert!(out.is_error, "{tool} {p} was allowed: {out:?}");
            assert!(!out.content.contains("top secret"), "{tool} {p} leaked");
        }
    }
    // A new file through the symlinked directory is refused too.
    let out = call(
        &ctx,
        "write_file",
        json!({"path": "linkdir/new.txt", "content": "x"}),
    )
    .await;
    assert!(out.is_error);
    assert!(!s.outside.join("new.txt").exists());
    // A dangling symlink is not written through.
    symlink(
        s.outside.join("created-by-agent.txt"),
        s.work.join("dangling"),
    )
    .unwrap();
    let out = call(
        &ctx,
        "write_file",
        json!({"path": "dangling", "content": "x"}),
    )
    .await;
    assert!(out.is_error);
    assert!(!s.outside.join("created-by-agent.txt").exists());
    assert_eq!(
        std::fs::read_to_string(s.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
}

#[tokio::test]
async fn bad_arguments_are_errors_for_the_model() {
    let s = setup();
    let (ctx, _rx) = ctx(&s.work, &s.work.join("mem"));
    let out = call(&ctx, "read_file", json!({"file": "x"})).await;
    assert!(
        out.is_error && out.content.contains("bad arguments for read_file"),
        "{out:?}"
    );
    let out = call(&ctx, "write_file", json!({"path": 3, "content": "x"})).await;
    assert!(out.is_error);
    let out = call(&ctx, "read_file", json!({"path": "missing.txt"})).await;
    assert!(out.is_error && out.content.contains("does not exist"));
    let out = call(&ctx, "read_file", json!({"path": "."})).await;
    assert!(out.is_error && out.content.contains("directory"));
}

/// Issue 8: `read_file` on a 1 GiB sparse file read all of it before cutting at 256 KiB, and on
/// a FIFO it blocked the turn until the watchdog. Now it reads at most the cap, and refuses a
/// FIFO at once; so does `edit_file`.
#[tokio::test]
async fn hostile_files_are_read_bounded_and_fifos_are_refused_at_once() {
    let s = setup();
    let (ctx, _rx) = ctx(&s.work, &s.work.join("mem"));
    let big = std::fs::File::create(s.work.join("big.bin")).unwrap();
    big.set_len(1 << 30).unwrap();
    let out = call(&ctx, "read_file", json!({"path": "big.bin"})).await;
    assert!(!out.is_error, "{out:?}");
    assert!(
        out.content.contains("the file has 1073741824 bytes"),
        "{}",
        &out.content[out.content.len() - 120..]
    );
    assert!(out.content.len() < 300 * 1024);

    nix::unistd::mkfifo(&s.work.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let started = std::time::Instant::now();
    let out = call(&ctx, "read_file", json!({"path": "pipe"})).await;
    assert!(
        out.is_error && out.content.contains("not a regular file"),
        "{out:?}"
    );
    let out = call(
        &ctx,
        "edit_file",
        json!({"path": "pipe", "old": "a", "new": "b"}),
    )
    .await;
    assert!(
        out.is_error && out.content.contains("not a regular file"),
        "{out:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// Even in a workdir that holds the Pegasus home (which every start refuses; this is the last
/// line), the file tools do not touch the home, except the project's own `workdir/`.
#[tokio::test]
async fn paths_into_the_home_are_refused_whatever_the_workdir() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().to_path_buf();
    let home = work.join("home");
    let own = home.join("projects/p");
    std::fs::create_dir_all(own.join("workdir")).unwrap();
    std::fs::write(own.join("PROJECT.md"), "status: active\n").unwrap();
    let mut settings = common::settings();
    settings.sandbox = Some(pegasus_sandbox::SandboxPaths {
        home: home.clone(),
        own_dir: own.clone(),
        tmp_dir: own.join("tmp"),
        writable: vec![],
    });
    let (wide, _rx) = common::ctx_with(
        &work,
        &work.join("mem"),
        common::ScriptedModel::new(),
        settings.clone(),
    );
    for (tool, input) in [
        (
            "write_file",
            json!({"path": "home/projects/p/PROJECT.md", "content": "approvals: {exec: allow}"}),
        ),
        (
            "edit_file",
            json!({"path": "home/projects/p/PROJECT.md", "old": "active", "new": "x"}),
        ),
        ("read_file", json!({"path": "home/projects/p/PROJECT.md"})),
        ("list_dir", json!({"path": "home"})),
    ] {
        let out = call(&wide, tool, input).await;
        assert!(out.is_error, "{tool}: {out:?}");
        assert!(out.content.contains("Pegasus home"), "{tool}: {out:?}");
    }
    assert_eq!(
        std::fs::read_to_string(own.join("PROJECT.md")).unwrap(),
        "status: active\n"
    );
    // The project's own default workdir is its to write.
    let (inside, _rx) = common::ctx_with(
        &own.join("workdir"),
        &work.join("mem"),
        common::ScriptedModel::new(),
        settings,
    );
    let out = call(
        &inside,
        "write_file",
        json!({"path": "a.txt", "content": "x"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
}
