//! spawn_subagent: nested loops with depth and count limits, billed to the parent task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{call, calls, ctx_with, send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::StopKind;
use pegasus_proto::llm::Block;
use serde_json::json;

fn has_tool(req: &pegasus_proto::llm::ChatRequest, name: &str) -> bool {
    req.tools.iter().any(|t| t.name == name)
}

#[tokio::test]
async fn nested_subagents_stop_at_the_depth_limit_and_bill_the_parent_task() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[(
            "p1",
            "spawn_subagent",
            json!({"task": "research X"}),
        )]))
        .push(calls(&[(
            "s1",
            "spawn_subagent",
            json!({"task": "dig deeper"}),
        )]))
        .push(text("deep result"))
        .push(text("mid result"))
        .push(text("top answer"));
    let mut s = settings();
    s.max_subagent_depth = 2;
    let (mut agent, _rx) = fx.open(model.clone(), s);
    send(&mut agent, "m", "find out about X");
    let out = agent.run().await.unwrap();
    assert_eq!(out.stop, StopKind::Answered);
    assert_eq!(out.text, "top answer");

    let reqs = model.requests();
    assert_eq!(reqs.len(), 5);
    for r in &reqs {
        assert_eq!(
            r.meta.task.as_deref(),
            Some(out.task_id.as_str()),
            "subagent spend is the parent's"
        );
    }
    // Depth 1: a focused sub-agent that may still delegate.
    assert!(reqs[1].system.starts_with("You are a focused sub-agent"));
    assert!(reqs[1].system.contains("You work on the demo project."));
    assert_eq!(reqs[1].messages.len(), 1);
    assert_eq!(
        reqs[1].messages[0].content,
        vec![Block::Text {
            text: "research X".into()
        }]
    );
    assert!(has_tool(&reqs[1], "spawn_subagent"));
    // Depth 2 = max: no spawn_subagent any more.
    assert!(reqs[2].system.starts_with("You are a focused sub-agent."));
    assert!(!has_tool(&reqs[2], "spawn_subagent"));
    assert_eq!(reqs[2].tools.len(), 12);
    // Results flow back up.
    assert!(
        matches!(&reqs[3].messages[2].content[0], Block::ToolResult { content, is_error: false, .. } if content == "deep result")
    );
    assert!(
        matches!(&reqs[4].messages[2].content[0], Block::ToolResult { content, is_error: false, .. } if content == "mid result")
    );
    // Subagent turns are not in the project's session.
    let loaded = pegasus_store::load_session(&fx.dir).unwrap();
    assert_eq!(loaded.records.len(), 5);
}

#[tokio::test]
async fn the_per_task_count_is_enforced() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[
            ("a", "spawn_subagent", json!({"task": "one"})),
            ("b", "spawn_subagent", json!({"task": "two"})),
        ]))
        .push(text("sub one done"))
        .push(text("final"));
    let mut s = settings();
    s.max_subagents_per_task = 1;
    let (mut agent, _rx) = fx.open(model.clone(), s);
    send(&mut agent, "m", "delegate twice");
    agent.run().await.unwrap();
    let reqs = model.requests();
    assert_eq!(reqs.len(), 3);
    let results = &reqs[2].messages[2].content;
    assert!(
        matches!(&results[0], Block::ToolResult { content, is_error: false, .. } if content == "sub one done")
    );
    assert!(
        matches!(&results[1], Block::ToolResult { content, is_error: true, .. } if content.contains("max_subagents_per_task"))
    );

    // The count is per task: the next task may spawn again.
    model
        .push(calls(&[("c", "spawn_subagent", json!({"task": "three"}))]))
        .push(text("sub three"))
        .push(text("ok"));
    send(&mut agent, "m2", "again");
    agent.run().await.unwrap();
    let last = model.requests().pop().unwrap();
    assert!(matches!(
        &last.messages.last().unwrap().content[0],
        Block::ToolResult {
            is_error: false,
            ..
        }
    ));
}

#[tokio::test]
async fn spawning_beyond_the_depth_limit_is_a_tool_error() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = settings();
    s.max_subagent_depth = 2;
    let (mut ctx, _rx) = ctx_with(tmp.path(), tmp.path(), ScriptedModel::new(), s);
    ctx.depth = 2;
    let out = call(&ctx, "spawn_subagent", json!({"task": "x"})).await;
    assert!(
        out.is_error && out.content.contains("at most 2 deep"),
        "{out:?}"
    );
    ctx.depth = 0;
    let out = call(&ctx, "spawn_subagent", json!({"task": ""})).await;
    assert!(out.is_error);
    // A subagent whose model fails reports that as a tool error.
    let out = call(&ctx, "spawn_subagent", json!({"task": "x"})).await;
    assert!(
        out.is_error && out.content.contains("did not finish"),
        "{out:?}"
    );
}

/// A sub-agent spawned with a role works as it: the role's prompt (seed 001 §3.3) and only the
/// tools the role allows — a researcher gets no exec and no file writes.
#[tokio::test]
async fn a_role_subagent_gets_the_role_prompt_and_only_its_tools() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[(
            "p1",
            "spawn_subagent",
            json!({"task": "survey the options", "role": "researcher"}),
        )]))
        .push(text("survey done"))
        .push(text("top answer"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m", "look into it");
    let out = agent.run().await.unwrap();
    assert_eq!(out.text, "top answer");
    let reqs = model.requests();
    let sub = &reqs[1];
    assert_eq!(sub.meta.role.as_deref(), Some("researcher"));
    assert!(
        sub.system.contains("# Your Task") && sub.system.contains("survey the options"),
        "{}",
        sub.system
    );
    assert!(sub.system.contains("You work on the demo project."));
    for forbidden in ["exec", "write_file", "edit_file", "spawn_subagent"] {
        assert!(!has_tool(sub, forbidden), "researcher sees {forbidden}");
    }
    assert!(has_tool(sub, "read_file"));
    // An unknown role is a tool error for the model, not a crash.
    let model = ScriptedModel::new();
    model
        .push(calls(&[(
            "p1",
            "spawn_subagent",
            json!({"task": "x", "role": "astronaut"}),
        )]))
        .push(text("ok"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m2", "again");
    agent.run().await.unwrap();
    let reqs = model.requests();
    assert!(
        matches!(&reqs[1].messages.last().unwrap().content[0], Block::ToolResult { is_error: true, content, .. } if content.contains("astronaut"))
    );
}

/// Issue 32 (8): a sub-agent gets at most its parent's tools. A parent whose role has no
/// `exec` and no file writes spawns a sub-agent without a role, then one with a role that
/// would have them: neither sees a tool the parent lacks.
#[tokio::test]
async fn a_subagent_never_gets_a_tool_its_parent_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new();
    model
        .push(calls(&[("p1", "spawn_subagent", json!({"task": "do it"}))]))
        .push(text("sub done"))
        .push(calls(&[(
            "p2",
            "spawn_subagent",
            json!({"task": "code it", "role": "coder"}),
        )]))
        .push(text("coder done"))
        .push(text("top answer"));
    let (ctx, _rx) = ctx_with(tmp.path(), tmp.path(), model.clone(), settings());
    let restricted = pegasus_agent::ToolSet::project_tools()
        .only(|n| !matches!(n, "exec" | "write_file" | "edit_file" | "memory_write"));
    let parent_tools: Vec<String> = restricted.names();
    let spec = pegasus_agent::agent_loop::LoopSpec {
        system: "parent",
        tools: &restricted,
        ctx: &ctx,
        session: None,
        role: Some("reviewer".into()),
        cancelled: None,
        compactor: None,
        instructions: None,
    };
    let mut transcript = vec![pegasus_proto::llm::Message {
        role: pegasus_proto::llm::Role::User,
        content: vec![Block::Text { text: "go".into() }],
    }];
    let end = pegasus_agent::agent_loop::run_loop(spec, &mut transcript)
        .await
        .unwrap();
    assert_eq!(end.text, "top answer");
    let reqs = model.requests();
    let (plain, coder) = (&reqs[1], &reqs[3]);
    assert!(plain.system.starts_with("You are a focused sub-agent"));
    assert_eq!(coder.meta.role.as_deref(), Some("coder"));
    for sub in [plain, coder] {
        for t in &sub.tools {
            assert!(parent_tools.contains(&t.name), "a sub-agent got {}", t.name);
        }
        for forbidden in [
            "exec",
            "write_file",
            "edit_file",
            "memory_write",
            "ask_user",
        ] {
            assert!(!has_tool(sub, forbidden), "a sub-agent sees {forbidden}");
        }
    }
    assert!(has_tool(plain, "read_file") && has_tool(plain, "spawn_subagent"));
}
