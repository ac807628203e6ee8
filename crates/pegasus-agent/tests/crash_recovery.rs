//! After a crash mid-tool, the agent reopens with a valid transcript and a failed task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;

use common::{send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::transcript::check_valid;
use pegasus_proto::llm::{Block, Role};
use pegasus_store::{
    ContentBlock, Role as SRole, Session, SessionMessage, SessionRecord, CANCELLED_TOOL_RESULT,
};

fn msg(role: SRole, content: Vec<ContentBlock>) -> SessionRecord {
    SessionRecord::Message(SessionMessage::new(role, content))
}

#[tokio::test]
async fn dangling_tool_use_and_mid_turn_message_rebuild_valid() {
    let fx = Fixture::new();
    // What a worker killed during `exec` leaves: the call persisted, no result, and a message
    // that the host recorded while the tool was running; then a torn line.
    let mut s = Session::open(&fx.dir, "demo").unwrap();
    s.append_turn(&[msg(
        SRole::User,
        vec![ContentBlock::Text {
            text: "build it".into(),
        }],
    )])
    .unwrap();
    s.append_turn(&[msg(
        SRole::Assistant,
        vec![
            ContentBlock::Text {
                text: "building".into(),
            },
            ContentBlock::ToolUse {
                id: "t1".into(),
                name: "exec".into(),
                input: serde_json::json!({"command": "make"}),
            },
        ],
    )])
    .unwrap();
    s.append_turn(&[msg(
        SRole::User,
        vec![ContentBlock::Text {
            text: "how is it going?".into(),
        }],
    )])
    .unwrap();
    drop(s);
    let path = pegasus_store::session_file(&fx.dir);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"type\":\"mess")
        .unwrap();
    // And a task that was running.
    use pegasus_tasks::{NewTask, TaskSpec, TaskState, TaskStore};
    let tasks = TaskStore::open(&fx.dir, "p").unwrap();
    let old = tasks
        .create(
            NewTask {
                title: "build it".into(),
                ..NewTask::default()
            },
            "test",
        )
        .unwrap();
    let t = &old;
    let spec = TaskSpec {
        goal: "build it".into(),
        constraints: vec![],
        acceptance: vec![],
        role: None,
        model_policy: None,
        repos: vec![],
        budget_usd: None,
    };
    tasks.freeze(&t.id, spec, "test").unwrap();
    tasks
        .transition(&t.id, TaskState::Planned, TaskState::Ready, "test", "")
        .unwrap();
    tasks
        .transition(&t.id, TaskState::Ready, TaskState::Running, "test", "")
        .unwrap();

    let model = ScriptedModel::new();
    model.push(text(
        "The build was interrupted; starting again would be next.",
    ));
    let (mut agent, mut rx) = fx.open(model.clone(), settings());

    let t = agent.transcript();
    check_valid(t).unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t[1].role, Role::Assistant);
    assert_eq!(
        t[2].content,
        vec![
            Block::ToolResult {
                tool_use_id: "t1".into(),
                content: CANCELLED_TOOL_RESULT.into(),
                is_error: true
            },
            Block::Text {
                text: "how is it going?".into()
            },
        ]
    );

    let entry = fx.tasks().get(&old.id).unwrap();
    assert_eq!(
        (entry.state.as_str(), entry.stop_reason.as_deref()),
        ("failed", Some("process restarted"))
    );
    let ev = common::events(&mut rx, "task");
    assert!(
        matches!(&ev[0], pegasus_proto::WorkerEvent::Task { state: pegasus_proto::TaskState::Failed, reason: Some(r), .. } if r == "process restarted"),
        "{ev:?}"
    );

    // The torn line was cut, and the next run sends a valid transcript.
    send(&mut agent, "m2", "status?");
    agent.run().await.unwrap();
    let req = model.requests().pop().unwrap();
    check_valid(&req.messages).unwrap();
    assert_eq!(req.messages.len(), 3);
    let loaded = pegasus_store::load_session(&fx.dir).unwrap();
    assert_eq!(loaded.skipped, 0);
    assert!(!loaded.torn_tail);
}
