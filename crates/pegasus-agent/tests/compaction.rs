//! Compaction: past 80% of the context window the session is summarised, archived and restarted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, OnceLock};

use common::{calls, send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::transcript::{check_valid, SUMMARY_PREFIX};
use pegasus_agent::{Agent, SessionHandle, Tool, ToolCtx, ToolFuture, ToolOutput, ToolSet};
use pegasus_proto::llm::Block;
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
            pegasus_agent::record_inbound(self.0.get().unwrap(), "late", "user", "late message")
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
    let tools = ToolSet::new(vec![Arc::new(Inbound(handle.clone()))]);
    let agent = Agent::open(
        &fx.dir,
        &fx.workdir,
        "demo",
        "base".into(),
        fx.global_skills.clone(),
        tools,
        model,
        tx,
        s,
    )
    .unwrap();
    let _ = handle.set(agent.session_handle());
    agent
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
        .push(calls(&[("i", "inbound", json!({}))]))
        .push(text("answer one"));
    model.push_for("compaction", text("SUMMARY OF ONE"));
    // Each scripted response uses 120 tokens: over 80% of a 100-token window.
    let mut agent = open(&fx, model.clone(), 100);
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
    agent.enqueue("late", "user", "late message");
    model.push(text("answer two"));
    send(&mut agent, "m2", "second question");
    agent.run().await.unwrap();
    let req = model.loop_requests().pop().unwrap();
    check_valid(&req.messages).unwrap();
    assert_eq!(req.messages.len(), 1);
    assert_eq!(req.messages[0].content.len(), 4);
    // Its compaction attempt had no script and failed: nothing was archived or lost.
    assert_eq!(archives(&fx).len(), 1);
    drop(agent);

    let agent = open(&fx, model.clone(), 100);
    let t = agent.transcript();
    check_valid(t).unwrap();
    assert_eq!(t.len(), 2);
    assert!(matches!(&t[0].content[0], Block::Text { text } if text.starts_with(SUMMARY_PREFIX)));
    assert_eq!(t[0].content.len(), 4, "summary, first, late, second");
}

#[tokio::test]
async fn compaction_gives_up_after_three_failures_in_a_row() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    let mut agent = open(&fx, model.clone(), 100);
    for i in 0..5 {
        model.push(text("a"));
        send(&mut agent, &format!("m{i}"), "q");
        agent.run().await.unwrap();
    }
    let attempts = model
        .requests()
        .iter()
        .filter(|r| r.system.contains("compaction"))
        .count();
    assert_eq!(attempts, 3);
    assert!(archives(&fx).is_empty());
}

#[tokio::test]
async fn no_compaction_below_the_threshold_or_without_a_window() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(text("a"));
    let mut agent = open(&fx, model.clone(), 1000);
    send(&mut agent, "m", "q");
    agent.run().await.unwrap();
    assert_eq!(model.requests().len(), 1);
}
