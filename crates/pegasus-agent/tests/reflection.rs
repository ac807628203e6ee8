//! The PostTaskReflector writes facts and episodes after an answered task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::StopKind;

fn reflecting() -> pegasus_agent::AgentSettings {
    let mut s = settings();
    s.reflection = true;
    s
}

#[tokio::test]
async fn facts_and_an_episode_are_written_and_paid_for_by_the_task() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(text("We use Postgres 16."));
    model.push_for(
        "PostTaskReflector",
        text(r#"Here you go: {"facts":[{"file":"stack.md","content":"Database: Postgres 16"},{"file":"../../escape","content":"contained"}],"episode":"User asked about the database; answered Postgres 16."}"#),
    );
    let (mut agent, _rx) = fx.open(model.clone(), reflecting());
    send(&mut agent, "m", "Which database do we use?");
    let out = agent.run().await.unwrap();
    assert_eq!(out.stop, StopKind::Answered);
    assert_eq!(out.text, "We use Postgres 16.");
    assert!(
        (out.cost_usd - 0.02).abs() < 1e-9,
        "reflection cost counts: {}",
        out.cost_usd
    );

    let mem = fx.dir.join("memory");
    assert_eq!(
        std::fs::read_to_string(mem.join("facts/stack.md")).unwrap(),
        "Database: Postgres 16\n"
    );
    assert_eq!(
        std::fs::read_to_string(mem.join("facts/escape.md")).unwrap(),
        "contained\n"
    );
    let month = chrono::Utc::now().format("%Y-%m").to_string();
    let ep = std::fs::read_to_string(mem.join(format!("episodes/{month}.md"))).unwrap();
    assert!(
        ep.contains(&format!("[{}] User asked about the database", out.task_id)),
        "{ep}"
    );

    let reqs = model.requests();
    assert_eq!(reqs.len(), 2);
    let r = &reqs[1];
    assert!(r.system.contains("PostTaskReflector"));
    assert!(r.tools.is_empty());
    assert_eq!(r.meta.task.as_deref(), Some(out.task_id.as_str()));
    let Some(pegasus_proto::llm::Block::Text { text: record }) = r.messages[0].content.first()
    else {
        panic!()
    };
    assert!(record.contains("Which database do we use?") && record.contains("Postgres 16"));

    // The next task's system prompt indexes what was remembered.
    model.push(text("ok"));
    send(&mut agent, "m2", "thanks");
    agent.run().await.unwrap();
    let sys = &model.loop_requests().pop().unwrap().system;
    assert!(
        sys.contains("- facts/stack.md: Database: Postgres 16"),
        "{sys}"
    );
}

#[tokio::test]
async fn unparsable_reflection_is_ignored() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(text("answer"));
    model.push_for("PostTaskReflector", text("I have no JSON for you"));
    let (mut agent, _rx) = fx.open(model.clone(), reflecting());
    send(&mut agent, "m", "q");
    let out = agent.run().await.unwrap();
    assert_eq!(out.stop, StopKind::Answered);
    assert_eq!(
        fx.tasks().list().unwrap()[0].state,
        pegasus_tasks::TaskState::Done
    );
    assert!(pegasus_agent::memory::memory_index(&fx.dir.join("memory")).is_empty());
}

#[tokio::test]
async fn no_reflection_after_a_stop_or_when_disabled() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(Err(pegasus_proto::llm::LlmError::Other("down".into())));
    let (mut agent, _rx) = fx.open(model.clone(), reflecting());
    send(&mut agent, "m", "q");
    agent.run().await.unwrap();
    model.push(text("a"));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m2", "q2");
    agent.run().await.unwrap();
    assert!(model
        .requests()
        .iter()
        .all(|r| !r.system.contains("PostTaskReflector")));
}
