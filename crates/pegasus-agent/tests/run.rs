//! A run: model turns and tool calls are persisted in order, the task is recorded, events flow.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{calls, events, send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::transcript::check_valid;
use pegasus_agent::{AgentError, StopKind, Tool, ToolCtx, ToolFuture, ToolOutput, ToolSet};
use pegasus_proto::llm::{Block, Role as LRole};
use pegasus_store::{load_session, ContentBlock, Role, SessionRecord};
use serde_json::json;

fn roles(records: &[SessionRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| match r {
            SessionRecord::Meta { .. } => "meta".to_string(),
            SessionRecord::Message(m) => format!("{:?}", m.role).to_lowercase(),
            SessionRecord::Compaction { .. } => "compaction".to_string(),
            SessionRecord::Crash { .. } => "crash".to_string(),
            SessionRecord::Hook { .. } => "hook".to_string(),
        })
        .collect()
}

#[tokio::test]
async fn two_tool_calls_then_an_answer_are_persisted_and_recorded() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[
            ("t1", "write_file", json!({"path": "a.txt", "content": "A"})),
            ("t2", "read_file", json!({"path": "a.txt"})),
        ]))
        .push(text("The file says A."));
    let (mut agent, mut rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m1", "Write a.txt and read it back");
    let out = agent.run().await.unwrap();

    assert_eq!(out.stop, StopKind::Answered);
    assert_eq!(out.text, "The file says A.");
    assert_eq!(out.turns, 2);
    assert!((out.cost_usd - 0.02).abs() < 1e-9, "{}", out.cost_usd);

    let loaded = load_session(&fx.dir).unwrap();
    assert_eq!(
        roles(&loaded.records),
        ["meta", "user", "assistant", "tool", "assistant"]
    );
    let SessionRecord::Message(m) = &loaded.records[1] else {
        panic!()
    };
    assert_eq!(
        (m.id.as_deref(), m.from.as_ref()),
        (Some("m1"), Some(&pegasus_proto::Channel::Cli))
    );
    let SessionRecord::Message(m) = &loaded.records[2] else {
        panic!()
    };
    assert_eq!(m.model.as_deref(), Some("fake/model"));
    assert!(
        matches!(&m.content[0], ContentBlock::ToolUse { input, .. } if input["path"] == "a.txt")
    );
    let SessionRecord::Message(m) = &loaded.records[3] else {
        panic!()
    };
    assert_eq!(m.role, Role::Tool);
    assert_eq!(m.content.len(), 2);
    // The write ran before the read the model listed after it.
    assert!(
        matches!(&m.content[1], ContentBlock::ToolResult { tool_use_id, content, is_error: false } if tool_use_id == "t2" && content == "A")
    );

    let tasks = fx.tasks().list().unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].id, out.task_id);
    assert_eq!(tasks[0].title, "Write a.txt and read it back");
    assert_eq!(tasks[0].state, pegasus_tasks::TaskState::Done);
    assert_eq!(
        tasks[0].spec_version, 1,
        "a message's task runs from a frozen spec"
    );
    let states: Vec<&str> = fx
        .tasks()
        .history(&tasks[0].id)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e {
            pegasus_tasks::TaskEvent::Transition { to, .. } => Some(to.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(states, ["planned", "ready", "running", "done"]);

    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.meta.task.as_deref(), Some(out.task_id.as_str()));
        assert_eq!(r.meta.project.as_deref(), Some("demo"));
        assert_eq!(r.model, "fake/model");
        assert_eq!(r.tools.len(), 14);
        assert!(r
            .system
            .starts_with("You work on the demo project.\n\n## Skills\n"));
        assert!(r.system.contains("\n\n## Memory\n"));
        check_valid(&r.messages).unwrap();
    }
    assert_eq!(reqs[1].messages.len(), 3);
    check_valid(agent.transcript()).unwrap();

    let all: Vec<pegasus_agent::Notice> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    let kinds: Vec<String> = all
        .iter()
        .filter_map(|n| match n {
            pegasus_agent::Notice::Event(e) if e.kind() != "task_stage" => {
                Some(e.kind().to_string())
            }
            _ => None,
        })
        .collect();
    // A message's task is created already running (one batch, one sync): one task event to
    // start, one to end; each tool call says when it starts (the write, then the read it
    // waits for) and when the turn's calls are done.
    assert_eq!(
        kinds,
        [
            "task",
            "model_response",
            "tool_start",
            "tool_start",
            "tool_call",
            "tool_call",
            "model_response",
            "task"
        ]
    );
}

#[tokio::test]
async fn unknown_tools_and_bad_json_go_back_to_the_model() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(Ok(common::response(
            vec![
                Block::ToolUse {
                    id: "a".into(),
                    name: "launch_rockets".into(),
                    input_json: "{}".into(),
                },
                Block::ToolUse {
                    id: "b".into(),
                    name: "read_file".into(),
                    input_json: "{not json".into(),
                },
                Block::ToolUse {
                    id: "c".into(),
                    name: "read_file".into(),
                    input_json: "[1]".into(),
                },
            ],
            pegasus_proto::llm::StopReason::ToolUse,
        )))
        .push(text("sorry"));
    let (mut agent, mut rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m1", "go");
    let out = agent.run().await.unwrap();
    assert_eq!(out.stop, StopKind::Answered);
    let results = &model.requests()[1].messages[2].content;
    let errs: Vec<(bool, String)> = results
        .iter()
        .map(|b| match b {
            Block::ToolResult {
                is_error, content, ..
            } => (*is_error, content.clone()),
            _ => panic!(),
        })
        .collect();
    assert!(errs.iter().all(|(e, _)| *e));
    assert!(errs[0].1.contains("unknown tool `launch_rockets`"));
    assert!(errs[1].1.contains("not valid JSON"));
    assert!(errs[2].1.contains("JSON object"));
    let tool_events = events(&mut rx, "tool_call");
    assert_eq!(tool_events.len(), 3);
    assert!(matches!(
        tool_events[0],
        pegasus_proto::WorkerEvent::ToolCall { is_error: true, .. }
    ));
    // The raw bad arguments survive a reload as the model wrote them.
    let t = pegasus_agent::transcript::rebuild(&load_session(&fx.dir).unwrap().records);
    assert!(
        matches!(&t[1].content[1], Block::ToolUse { input_json, .. } if input_json == "{not json")
    );
}

/// A read-only tool that sleeps, to see calls overlap.
struct Slow;
impl Tool for Slow {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        pegasus_proto::llm::ToolSpec {
            name: "slow".into(),
            description: "sleeps".into(),
            input_schema_json: "{}".into(),
        }
    }
    fn concurrent(&self) -> bool {
        true
    }
    fn call<'a>(&'a self, input: serde_json::Value, _ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let ms = input["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ToolOutput::ok(format!("slept {ms}"))
        })
    }
}

#[tokio::test]
async fn concurrent_calls_overlap_and_results_keep_call_order() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[
            ("a", "slow", json!({"ms": 400})),
            ("b", "slow", json!({"ms": 10})),
            ("c", "slow", json!({"ms": 400})),
        ]))
        .push(text("ok"));
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let mut agent = pegasus_agent::Agent::open(
        &pegasus_agent::Desk::open(&fx.dir, "demo", tx).unwrap(),
        &fx.workdir,
        "base".into(),
        fx.global_skills.clone(),
        ToolSet::new(vec![Arc::new(Slow)]),
        model.clone(),
        settings(),
    )
    .unwrap();
    send(&mut agent, "m", "go");
    let t0 = Instant::now();
    agent.run().await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(750),
        "{:?}",
        t0.elapsed()
    );
    let ids: Vec<String> = model.requests()[1].messages[2]
        .content
        .iter()
        .map(|b| match b {
            Block::ToolResult {
                tool_use_id,
                content,
                ..
            } => format!("{tool_use_id}:{content}"),
            _ => panic!(),
        })
        .collect();
    assert_eq!(ids, ["a:slept 400", "b:slept 10", "c:slept 400"]);
}

#[tokio::test]
async fn run_without_a_message_is_refused_and_messages_merge_between_runs() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(text("one")).push(text("two"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    assert!(matches!(agent.run().await, Err(AgentError::NothingQueued)));
    send(&mut agent, "m1", "first");
    agent.run().await.unwrap();
    assert!(!agent.has_queued());
    send(&mut agent, "m2", "second");
    send(&mut agent, "m3", "third");
    let out = agent.run().await.unwrap();
    assert_eq!(out.text, "two");
    let req = &model.requests()[1];
    check_valid(&req.messages).unwrap();
    assert_eq!(req.messages.len(), 3);
    assert_eq!(req.messages[2].role, LRole::User);
    assert_eq!(req.messages[2].content.len(), 2);
    assert_eq!(fx.tasks().list().unwrap()[0].title, "second third");
}

#[tokio::test]
async fn a_reopened_agent_continues_the_same_conversation() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[("t1", "list_dir", json!({"path": "."}))]))
        .push(text("empty"))
        .push(text("still here"));
    {
        let (mut agent, _rx) = fx.open(model.clone(), settings());
        send(&mut agent, "m1", "look");
        agent.run().await.unwrap();
    }
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    assert_eq!(agent.transcript().len(), 4);
    send(&mut agent, "m2", "again");
    agent.run().await.unwrap();
    let req = model.requests().pop().unwrap();
    assert_eq!(req.messages.len(), 5);
    check_valid(&req.messages).unwrap();
}
