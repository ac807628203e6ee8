//! Compaction: past 80% of the context window the session is summarised, archived and restarted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, OnceLock};

use common::{calls, response, send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::transcript::{check_valid, SUMMARY_PREFIX};
use pegasus_agent::{Agent, SessionHandle, Tool, ToolCtx, ToolFuture, ToolOutput, ToolSet};
use pegasus_proto::llm::Block;
use pegasus_proto::llm::{LlmError, StopReason};
use pegasus_store::{load_session, SessionRecord};
use serde_json::json;

/// A tool that records an inbound message, as the host would when one arrives mid-run.
struct Inbound(Arc<OnceLock<SessionHandle>>);
impl Tool for Inbound {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        pegasus_proto::llm::ToolSpec {
            name: "inbound".into(),
            description: String::new(),
            input_schema_json: "{}".into(),
        }
    }
    fn call<'a>(&'a self, _input: serde_json::Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            pegasus_agent::record_inbound(
                self.0.get().unwrap(),
                "late",
                &pegasus_proto::Channel::Cli,
                "late message",
            )
            .unwrap();
            ToolOutput::ok("ok")
        })
    }
}

fn open(fx: &Fixture, model: Arc<ScriptedModel>, window: u64) -> Agent {
    let handle = Arc::new(OnceLock::new());
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let mut s = settings();
    s.context_window = Some(window);
    // Small answers, so a request's own estimate stays far below the test windows.
    s.max_tokens = 64;
    let tools = ToolSet::new(vec![Arc::new(Inbound(handle.clone()))]);
    let agent = Agent::open(
        &pegasus_agent::Desk::open(&fx.dir, "demo", tx).unwrap(),
        &fx.workdir,
        "base".into(),
        fx.global_skills.clone(),
        tools,
        model,
        s,
    )
    .unwrap();
    let _ = handle.set(agent.session_handle());
    agent
}

/// A final answer whose usage reports `input` prompt tokens (the provider's count).
fn used(t: &str, input: u64) -> Result<pegasus_proto::llm::ChatResponse, LlmError> {
    let mut r = response(vec![Block::Text { text: t.into() }], StopReason::EndTurn);
    r.usage.input_tokens = input;
    Ok(r)
}

/// A turn of tool calls whose usage reports `input` prompt tokens.
fn used_calls(
    cs: &[(&str, &str, serde_json::Value)],
    input: u64,
) -> Result<pegasus_proto::llm::ChatResponse, LlmError> {
    let mut r = calls(cs)?;
    r.usage.input_tokens = input;
    Ok(r)
}

fn archives(fx: &Fixture) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(fx.dir.join("session/archive")) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test]
async fn a_full_context_is_summarised_archived_and_restarted() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(used_calls(&[("i", "inbound", json!({}))], 1900))
        .push(used("answer one", 1900));
    model.push_for("compaction", text("SUMMARY OF ONE"));
    // The answer used 1920 tokens: over 80% of a 2000-token window.
    let mut agent = open(&fx, model.clone(), 2000);
    send(&mut agent, "m1", "first question");
    let out = agent.run().await.unwrap();
    assert_eq!(out.text, "answer one");
    assert!(
        (out.cost_usd - 0.03).abs() < 1e-9,
        "summary cost counts: {}",
        out.cost_usd
    );

    let arch = archives(&fx);
    assert_eq!(arch.len(), 1);
    let old = std::fs::read_to_string(&arch[0]).unwrap();
    assert!(old.contains("first question") && old.contains("answer one"));

    let records = load_session(&fx.dir).unwrap().records;
    assert!(matches!(&records[0], SessionRecord::Meta { project, .. } if project == "demo"));
    match &records[1] {
        SessionRecord::Compaction {
            summary, archived, ..
        } => {
            assert_eq!(summary, "SUMMARY OF ONE");
            assert!(archived.starts_with("session/archive/"), "{archived}");
            assert!(fx.dir.join(archived).is_file());
        }
        other => panic!("{other:?}"),
    }
    let texts: Vec<String> = records[2..]
        .iter()
        .map(|r| match r {
            SessionRecord::Message(m) => format!("{:?}", m.content),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts[0].contains("first question"));
    assert!(
        texts[1].contains("late message"),
        "a message recorded during the run is kept"
    );

    let summary_req = model
        .requests()
        .into_iter()
        .find(|r| r.system.contains("compaction"))
        .unwrap();
    assert!(summary_req.tools.is_empty());
    assert_eq!(agent.transcript().len(), 1);
    assert_eq!(
        agent.transcript()[0].content[0],
        Block::Text {
            text: format!("{SUMMARY_PREFIX}SUMMARY OF ONE")
        }
    );

    // The host enqueues the late message; the conversation goes on from the summary, and
    // appends land in the new file.
    agent.enqueue("late", &pegasus_proto::Channel::Cli, "late message");
    model.push(used("answer two", 1900));
    send(&mut agent, "m2", "second question");
    agent.run().await.unwrap();
    let req = model.loop_requests().pop().unwrap();
    check_valid(&req.messages).unwrap();
    assert_eq!(req.messages.len(), 1);
    assert_eq!(req.messages[0].content.len(), 4);
    // Its compaction attempt had no script and failed: nothing was archived or lost.
    assert_eq!(archives(&fx).len(), 1);
    drop(agent);

    let agent = open(&fx, model.clone(), 2000);
    let t = agent.transcript();
    check_valid(t).unwrap();
    assert_eq!(t.len(), 2);
    assert!(matches!(&t[0].content[0], Block::Text { text } if text.starts_with(SUMMARY_PREFIX)));
    assert_eq!(t[0].content.len(), 4, "summary, first, late, second");
}

#[tokio::test]
async fn a_failed_compaction_changes_nothing_and_is_tried_again_by_the_next_task() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    let mut agent = open(&fx, model.clone(), 2000);
    for i in 0..3 {
        model.push(used("a", 1900));
        send(&mut agent, &format!("m{i}"), "q");
        let out = agent.run().await.unwrap();
        assert_eq!(out.text, "a");
    }
    let attempts = model
        .requests()
        .iter()
        .filter(|r| r.system.contains("compaction"))
        .count();
    assert_eq!(attempts, 3, "one attempt after each task");
    assert!(archives(&fx).is_empty());
    check_valid(agent.transcript()).unwrap();
}

#[tokio::test]
async fn a_run_stops_trying_after_three_failed_compactions() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    // Every request of this run is over 80% of the window: each turn would compact first.
    let mut agent = open(&fx, model.clone(), 160);
    for n in 0..5 {
        model.push(calls(&[(&format!("c{n}"), "inbound", json!({"n": n}))]));
    }
    model.push(text("done"));
    send(&mut agent, "m", "q");
    let out = agent.run().await.unwrap();
    assert_eq!(out.text, "done");
    let attempts = model
        .requests()
        .iter()
        .filter(|r| r.system.contains("compaction"))
        .count();
    assert_eq!(
        attempts, 3,
        "no summary call after the third failure of the run"
    );
}

#[tokio::test]
async fn no_compaction_below_the_threshold_or_without_a_window() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(text("a"));
    let mut agent = open(&fx, model.clone(), 1000);
    // 120 tokens used of 1000, and a small request: no reason to compact.
    send(&mut agent, "m", "q");
    agent.run().await.unwrap();
    assert_eq!(model.requests().len(), 1);
}

/// A tool that returns `n` bytes.
struct Big(usize);
impl Tool for Big {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        pegasus_proto::llm::ToolSpec {
            name: "big".into(),
            description: String::new(),
            input_schema_json: "{}".into(),
        }
    }
    fn call<'a>(&'a self, _input: serde_json::Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        let n = self.0;
        Box::pin(async move { ToolOutput::ok(format!("B{}E", "x".repeat(n))) })
    }
}

fn open_big(
    fx: &Fixture,
    model: Arc<ScriptedModel>,
    window: u64,
    result_bytes: usize,
    cap: usize,
) -> Agent {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let mut s = settings();
    s.context_window = Some(window);
    s.max_tokens = 64;
    s.max_tool_result_bytes = cap;
    Agent::open(
        &pegasus_agent::Desk::open(&fx.dir, "demo", tx).unwrap(),
        &fx.workdir,
        "base".into(),
        fx.global_skills.clone(),
        ToolSet::new(vec![Arc::new(Big(result_bytes))]),
        model,
        s,
    )
    .unwrap()
}

fn too_long() -> Result<pegasus_proto::llm::ChatResponse, LlmError> {
    Err(LlmError::ContextTooLong {
        provider: "fa".into(),
        message: "prompt is too long: 210000 tokens > 200000 maximum".into(),
    })
}

fn all_text(m: &pegasus_proto::llm::Message) -> String {
    m.content
        .iter()
        .map(|b| match b {
            Block::Text { text } => text.clone(),
            Block::ToolResult { content, .. } => content.clone(),
            other => format!("{other:?}"),
        })
        .collect::<Vec<_>>()
        .join("|")
}

#[tokio::test]
async fn a_request_nearing_the_window_is_compacted_before_it_is_sent_and_the_task_goes_on() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[
            ("b1", "big", json!({"part": 1})),
            ("b2", "big", json!({"part": 2})),
            ("b3", "big", json!({"part": 3})),
        ]))
        .push(text("finished after the summary"));
    model.push_for("compaction", text("SUMMARY: big was read, it is all x"));
    // Each 7,000-byte result is cut to a quarter of the 2,500-token window (DESIGN.md §6); three of
    // them take the next request past 80% of it.
    let mut agent = open_big(&fx, model.clone(), 2500, 7000, 32 * 1024);
    send(&mut agent, "m", "read the big thing");
    let out = agent.run().await.unwrap();
    assert_eq!(out.text, "finished after the summary");
    assert_eq!(out.stop, pegasus_agent::StopKind::Answered);

    let loop_reqs = model.loop_requests();
    assert_eq!(loop_reqs.len(), 2);
    let first = &loop_reqs[0];
    assert!(
        first.max_tokens <= 2500 / 4,
        "the answer takes at most a quarter"
    );
    let after = &loop_reqs[1];
    check_valid(&after.messages).unwrap();
    assert_eq!(after.messages.len(), 1, "{:?}", after.messages);
    let text = all_text(&after.messages[0]);
    assert!(text.contains("SUMMARY: big was read"), "{text}");
    assert!(
        text.contains("read the big thing"),
        "the request is kept: {text}"
    );
    assert!(
        text.contains(pegasus_agent::compaction::MID_TASK_NOTE),
        "{text}"
    );
    // The task's newest results are kept, cut to what fits: the model need not fetch again.
    assert!(text.contains("kept through the compaction"), "{text}");
    assert!(
        text.contains(r#"### big {"part":3}"#),
        "the newest first: {text}"
    );
    assert!(
        text.contains("cut to fit the context window (2500 tokens)"),
        "{text}"
    );
    let fits = after.estimated_input_tokens() + u64::from(after.max_tokens);
    assert!(fits as f64 <= 0.8 * 2500.0, "{fits}");
    // The summary call itself fitted the window.
    let summary = model
        .requests()
        .into_iter()
        .find(|r| r.system.contains("compaction"))
        .unwrap();
    assert!(summary.estimated_input_tokens() + 64 < 2500);

    // On disk: the compaction, the request with the note, then the final answer.
    assert_eq!(archives(&fx).len(), 1);
    let records = load_session(&fx.dir).unwrap().records;
    assert!(matches!(&records[1], SessionRecord::Compaction { .. }));
    let reloaded = open_big(&fx, ScriptedModel::new(), 2500, 10, 32 * 1024);
    let t = reloaded.transcript();
    check_valid(t).unwrap();
    assert_eq!(t.len(), 2);
    assert!(all_text(&t[1]).contains("finished after the summary"));
}

#[tokio::test]
async fn a_context_length_refusal_compacts_and_retries_once() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(too_long()).push(text("fits now"));
    model.push_for("compaction", text("SUMMARY"));
    // A large window: the estimate sees no problem, the provider does.
    let mut agent = open_big(&fx, model.clone(), 1_000_000, 10, 32 * 1024);
    send(&mut agent, "m", "hello");
    let out = agent.run().await.unwrap();
    assert_eq!(out.text, "fits now");
    assert_eq!(model.loop_requests().len(), 2);
    assert_eq!(archives(&fx).len(), 1);
    let retry = &model.loop_requests()[1];
    assert!(all_text(&retry.messages[0]).starts_with(SUMMARY_PREFIX));
}

#[tokio::test]
async fn a_second_refusal_fails_the_task_with_what_to_do() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(too_long()).push(too_long());
    model.push_for("compaction", text("SUMMARY"));
    let mut agent = open_big(&fx, model.clone(), 1_000_000, 10, 32 * 1024);
    send(&mut agent, "m", "hello");
    let out = agent.run().await.unwrap();
    assert!(matches!(
        out.stop,
        pegasus_agent::StopKind::ContextTooLong(_)
    ));
    assert!(out.text.contains("prompt is too long"), "{}", out.text);
    assert!(out.text.contains("larger context window"), "{}", out.text);
    assert_eq!(model.loop_requests().len(), 2, "one retry, no more");
    let task = fx.tasks().get(&out.task_id).unwrap();
    assert_eq!(task.state, pegasus_tasks::TaskState::Failed);
    assert_eq!(task.stop_reason.as_deref(), Some("context_too_long"));
    check_valid(agent.transcript()).unwrap();
}

#[tokio::test]
async fn one_tool_result_is_capped_with_a_note() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[("b", "big", json!({}))]))
        .push(text("ok"));
    let mut agent = open_big(&fx, model.clone(), 1_000_000, 5 * 1024 * 1024, 4096);
    send(&mut agent, "m", "read it");
    agent.run().await.unwrap();
    let req = &model.loop_requests()[1];
    let result = req
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            Block::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.len() < 4096 + 400, "{}", result.len());
    assert!(result.starts_with("Bxxx") && result.ends_with("xxxE"));
    assert!(result.contains("bytes cut here"), "{result}");
    assert!(result.contains("agent.max_tool_result_bytes"));
    // The session holds the capped result, not 5 MB.
    let size = std::fs::metadata(fx.dir.join("session/current.jsonl"))
        .unwrap()
        .len();
    assert!(size < 64 * 1024, "{size}");
}
