//! AGENTS.md and CLAUDE.md in a run (DESIGN.md §16): the root's in the system prompt, the same
//! on every turn; a nested one joins once after the results of the turn that touched its
//! folder, is persisted with them, and comes back after a compaction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{calls, send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::transcript::check_valid;
use pegasus_agent::AgentSettings;
use pegasus_proto::llm::{Block, Message};
use serde_json::json;

fn texts(messages: &[Message]) -> String {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .map(|b| match b {
            Block::Text { text } => text.clone(),
            Block::ToolResult { content, .. } => content.clone(),
            _ => String::new(),
        })
        .collect::<Vec<_>>()
        .join("|")
}

fn project(fx: &Fixture) {
    let w = &fx.workdir;
    std::fs::create_dir_all(w.join("api")).unwrap();
    std::fs::write(w.join("AGENTS.md"), "ROOT RULES: be brief.\n").unwrap();
    std::fs::write(w.join("api/AGENTS.md"), "API RULES: no unwrap.\n").unwrap();
    std::fs::write(w.join("api/x.txt"), "x").unwrap();
}

#[tokio::test]
async fn a_nested_file_joins_once_after_the_results_and_the_system_prompt_stays_the_same() {
    let fx = Fixture::new();
    project(&fx);
    let model = ScriptedModel::new();
    model
        .push(calls(&[("r1", "read_file", json!({"path": "api/x.txt"}))]))
        .push(calls(&[("r2", "read_file", json!({"path": "api/x.txt"}))]))
        .push(text("read twice"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m1", "read api/x.txt");
    assert_eq!(agent.run().await.unwrap().text, "read twice");

    let reqs = model.loop_requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[0].system.contains("## Project instructions"));
    assert!(reqs[0].system.contains("ROOT RULES: be brief."));
    assert!(!reqs[0].system.contains("API RULES"));
    assert!(
        reqs.iter().all(|r| r.system == reqs[0].system),
        "stable for caching"
    );
    // After the first turn's result, in the same user message.
    let last = reqs[1].messages.last().unwrap();
    assert!(
        matches!(&last.content[0], Block::ToolResult { tool_use_id, .. } if tool_use_id == "r1")
    );
    let Block::Text { text: block } = &last.content[1] else {
        panic!("{last:?}")
    };
    assert!(
        block.starts_with("# Instructions from `api/AGENTS.md` (the workdir)"),
        "{block}"
    );
    assert!(block.ends_with("API RULES: no unwrap."), "{block}");
    check_valid(&reqs[2].messages).unwrap();
    assert_eq!(texts(&reqs[2].messages).matches("API RULES").count(), 1);

    // Persisted: a restart rebuilds it, and the next task does not add it again.
    drop(agent);
    let model = ScriptedModel::new();
    model
        .push(calls(&[("r3", "read_file", json!({"path": "api/x.txt"}))]))
        .push(text("again"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    assert_eq!(texts(agent.transcript()).matches("API RULES").count(), 1);
    send(&mut agent, "m2", "read it again");
    assert_eq!(agent.run().await.unwrap().text, "again");
    let reqs = model.loop_requests();
    assert_eq!(texts(&reqs[1].messages).matches("API RULES").count(), 1);
    assert!(reqs[1].system.contains("ROOT RULES"));
}

#[tokio::test]
async fn a_compaction_in_the_middle_of_a_task_keeps_the_nested_files() {
    let fx = Fixture::new();
    project(&fx);
    for n in 1..=3 {
        std::fs::write(fx.workdir.join(format!("api/big{n}.txt")), "y".repeat(7000)).unwrap();
    }
    let model = ScriptedModel::new();
    model
        .push(calls(&[(
            "r1",
            "read_file",
            json!({"path": "api/big1.txt"}),
        )]))
        .push(calls(&[
            ("r2", "read_file", json!({"path": "api/big2.txt"})),
            ("r3", "read_file", json!({"path": "api/big3.txt"})),
        ]))
        .push(text("finished after the summary"));
    model.push_for("compaction", text("SUMMARY: three files read"));
    let s = AgentSettings {
        context_window: Some(2500),
        ..settings()
    };
    let (mut agent, _rx) = fx.open(model.clone(), s.clone());
    send(&mut agent, "m", "read the big files");
    assert_eq!(
        agent.run().await.unwrap().text,
        "finished after the summary"
    );

    assert!(model
        .requests()
        .iter()
        .any(|r| r.system.contains("compaction")));
    let reqs = model.loop_requests();
    let after = reqs.last().unwrap();
    check_valid(&after.messages).unwrap();
    let all = texts(&after.messages);
    assert!(all.contains("SUMMARY: three files read"), "{all}");
    assert_eq!(all.matches("API RULES: no unwrap.").count(), 1, "{all}");
    assert!(after.system.contains("ROOT RULES"));
    // The session on disk has them after its compaction too.
    drop(agent);
    let (agent, _rx) = fx.open(ScriptedModel::new(), s);
    assert!(texts(agent.transcript()).contains("API RULES: no unwrap."));
}

#[tokio::test]
async fn a_subagent_follows_the_roots_files_and_what_it_touches_joins_its_parent() {
    let fx = Fixture::new();
    project(&fx);
    let model = ScriptedModel::new();
    model
        .push(calls(&[(
            "p1",
            "spawn_subagent",
            json!({"task": "read api/x.txt"}),
        )]))
        .push(calls(&[("s1", "read_file", json!({"path": "api/x.txt"}))]))
        .push(text("it says x"))
        .push(text("the subagent read it"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m", "have it read");
    assert_eq!(agent.run().await.unwrap().text, "the subagent read it");
    let reqs = model.requests();
    assert_eq!(reqs.len(), 4);
    assert!(reqs[1].system.starts_with("You are a focused sub-agent"));
    assert!(
        reqs[1].system.contains("ROOT RULES: be brief."),
        "{}",
        reqs[1].system
    );
    // The parent's next turn has the nested file after the subagent's result.
    let last = reqs[3].messages.last().unwrap();
    assert!(
        matches!(&last.content[0], Block::ToolResult { tool_use_id, .. } if tool_use_id == "p1")
    );
    assert!(
        matches!(&last.content[1], Block::Text { text } if text.ends_with("API RULES: no unwrap."))
    );
}
