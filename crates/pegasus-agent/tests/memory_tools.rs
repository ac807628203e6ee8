//! The memory tools work inside memory/ only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{call, ctx};
use serde_json::json;

#[tokio::test]
async fn write_append_read_list() {
    let tmp = tempfile::tempdir().unwrap();
    let mem = tmp.path().join("memory");
    let (ctx, _rx) = ctx(tmp.path(), &mem);
    let out = call(&ctx, "memory_list", json!({})).await;
    assert_eq!(out.content, "(memory is empty)");
    assert!(
        !call(
            &ctx,
            "memory_write",
            json!({"path": "facts/stack.md", "content": "# Stack\nRust"})
        )
        .await
        .is_error
    );
    assert!(
        !call(
            &ctx,
            "memory_append",
            json!({"path": "facts/stack.md", "content": "tokio"})
        )
        .await
        .is_error
    );
    assert!(
        !call(
            &ctx,
            "memory_append",
            json!({"path": "facts/new.md", "content": "first"})
        )
        .await
        .is_error
    );
    let out = call(&ctx, "memory_read", json!({"path": "facts/stack.md"})).await;
    assert_eq!(out.content, "# Stack\nRust\ntokio\n");
    let out = call(&ctx, "memory_list", json!({})).await;
    assert_eq!(out.content, "facts/new.md: first\nfacts/stack.md: # Stack");
}

#[tokio::test]
async fn memory_paths_cannot_leave_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let mem = tmp.path().join("memory");
    std::fs::create_dir_all(&mem).unwrap();
    std::fs::write(tmp.path().join("PROJECT.md"), "keep").unwrap();
    std::os::unix::fs::symlink(tmp.path(), mem.join("up")).unwrap();
    let (ctx, _rx) = ctx(tmp.path(), &mem);
    for p in [
        "../PROJECT.md",
        "/etc/passwd",
        "up/PROJECT.md",
        "facts/../../PROJECT.md",
    ] {
        assert!(
            call(&ctx, "memory_read", json!({"path": p})).await.is_error,
            "{p}"
        );
        assert!(
            call(&ctx, "memory_write", json!({"path": p, "content": "x"}))
                .await
                .is_error,
            "{p}"
        );
        assert!(
            call(&ctx, "memory_append", json!({"path": p, "content": "x"}))
                .await
                .is_error,
            "{p}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("PROJECT.md")).unwrap(),
        "keep"
    );
}

#[tokio::test]
async fn notify_reaches_the_supervisor() {
    let tmp = tempfile::tempdir().unwrap();
    let (ctx, mut rx) = ctx(tmp.path(), tmp.path());
    let out = call(&ctx, "notify", json!({"text": "halfway there"})).await;
    assert!(!out.is_error);
    match rx.try_recv().unwrap() {
        pegasus_agent::Notice::Notify { text } => assert_eq!(text, "halfway there"),
        other => panic!("{other:?}"),
    }
    assert!(call(&ctx, "notify", json!({})).await.is_error);
}
