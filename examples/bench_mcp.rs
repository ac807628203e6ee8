//! MCP tool-call overhead: `cargo run --release --example bench_mcp`.
//!
//! Builds `examples/mcp_test_server` (release) first, then, in one tokio runtime like a worker's:
//! 1,000 calls of `mcp__t__echo` through the worker's MCP hub (`pegasus_worker::mcp`: the
//! `Tool` the agent calls → rmcp over the server's stdio → the reply rendered for the model),
//! against 1,000 calls of the built-in `read_file` on a small file through the same `Tool`
//! interface. Reports medians and p99 and the overhead an MCP call adds. See docs/PERFORMANCE.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pegasus_agent::{AgentSettings, ToolCtx, ToolSet};
use pegasus_proto::llm::{ChatFuture, ChatModel, ChatRequest, LlmError};
use pegasus_store::McpServerConfig;

const CALLS: usize = 1000;

struct NoModel;
impl ChatModel for NoModel {
    fn chat(&self, _req: ChatRequest) -> ChatFuture<'_> {
        Box::pin(async { Err(LlmError::Other("no model in this benchmark".into())) })
    }
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (us(v[v.len() / 2]), us(v[v.len() * 99 / 100]))
}

fn main() {
    let exe = std::env::current_exe().unwrap();
    let examples = exe.parent().unwrap().to_path_buf();
    if let Some(cargo) = std::env::var_os("CARGO") {
        let release = examples.parent().is_some_and(|d| d.ends_with("release"));
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "--example", "mcp_test_server"]);
        if release {
            cmd.arg("--release");
        }
        assert!(
            cmd.status().unwrap().success(),
            "building mcp_test_server failed"
        );
    }
    let server = examples.join("mcp_test_server");
    assert!(server.exists(), "{} is missing", server.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("small.txt"), "hello\n").unwrap();
        let mut servers = BTreeMap::new();
        servers.insert(
            "t".to_string(),
            McpServerConfig {
                command: server.display().to_string(),
                args: vec![],
                env: BTreeMap::new(),
                timeout_s: Some(30),
                eager: false,
                writable: vec![],
            },
        );
        let hub = pegasus_worker::mcp::McpHub::new(servers, dir.path(), dir.path(), None, None);
        let t0 = Instant::now();
        let tools = ToolSet::project_tools().with(hub.tools().await);
        let start = t0.elapsed();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = ToolCtx {
            workdir: dir.path().to_path_buf(),
            memory_dir: dir.path().join("memory"),
            skill_dirs: vec![],
            notices: tx,
            task_id: Some("bench".into()),
            depth: 0,
            settings: AgentSettings::default(),
            model: Arc::new(NoModel),
            project_overview: String::new(),
            subagents_spawned: Arc::new(AtomicU32::new(0)),
            repos: vec![],
        };
        let echo = tools.get("mcp__t__echo").expect("the echo tool is offered");
        let read = tools.get("read_file").unwrap();
        // Warm-up.
        for _ in 0..50 {
            assert!(!echo.call(serde_json::json!({"text": "hi"}), &ctx).await.is_error);
            assert!(!read.call(serde_json::json!({"path": "small.txt"}), &ctx).await.is_error);
        }
        let (mut m, mut b) = (Vec::with_capacity(CALLS), Vec::with_capacity(CALLS));
        for _ in 0..CALLS {
            let t = Instant::now();
            let out = echo.call(serde_json::json!({"text": "hi"}), &ctx).await;
            m.push(t.elapsed());
            assert_eq!(out.content, "echo: hi");
            let t = Instant::now();
            let out = read.call(serde_json::json!({"path": "small.txt"}), &ctx).await;
            b.push(t.elapsed());
            assert!(!out.is_error);
        }
        // The same without the logging notification the echo tool sends first.
        let pid = tools.get("mcp__t__pid").unwrap();
        let mut q = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let t = Instant::now();
            let out = pid.call(serde_json::json!({}), &ctx).await;
            q.push(t.elapsed());
            assert!(!out.is_error);
        }
        let (qm, q99) = stats(q);
        let (mm, m99) = stats(m);
        let (bm, b99) = stats(b);
        println!("== bench_mcp report");
        println!(
            "server start + handshake + tools/list: {:.1} ms",
            start.as_secs_f64() * 1e3
        );
        println!(
            "{CALLS} calls: mcp__t__echo median {mm:.0} µs (p99 {m99:.0}); built-in read_file median {bm:.0} µs (p99 {b99:.0}); an MCP call adds {:.0} µs",
            mm - bm
        );
        println!("{CALLS} calls: mcp__t__pid (no notification first) median {qm:.0} µs (p99 {q99:.0})");
    });
}
