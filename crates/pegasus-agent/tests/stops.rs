//! Every guard stops a run with its StopKind, records it on the task, and leaves a transcript
//! the next run can use.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{calls, send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::transcript::{check_valid, rebuild};
use pegasus_agent::StopKind;
use pegasus_proto::llm::LlmError;
use pegasus_store::load_session;
use serde_json::json;

fn last_task(fx: &Fixture) -> pegasus_tasks::Task {
    fx.tasks().list().unwrap().remove(0)
}

fn assert_files_valid(fx: &Fixture) {
    check_valid(&rebuild(&load_session(&fx.dir).unwrap().records)).unwrap();
}

#[tokio::test]
async fn the_same_call_repeated_stops_as_loop_capped() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    *model.repeat.lock().unwrap() = Some(calls(&[("x", "list_dir", json!({"path": "."}))]));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m", "loop please");
    let out = agent.run().await.unwrap();
    assert_eq!(out.stop, StopKind::LoopCapped);
    assert_eq!(out.turns, 3);
    assert!(
        out.text.contains("`list_dir` call 3 times in a row"),
        "{}",
        out.text
    );
    let task = last_task(&fx);
    assert_eq!(
        (task.state.as_str(), task.stop_reason.as_deref()),
        ("failed", Some("loop_capped"))
    );
    check_valid(agent.transcript()).unwrap();
    assert_files_valid(&fx);
}

#[tokio::test]
async fn too_many_turns_stop_as_turn_capped() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    for i in 0..2 {
        model.push(calls(&[(
            &format!("c{i}"),
            "list_dir",
            json!({"path": format!("d{i}")}),
        )]));
    }
    let mut s = settings();
    s.max_turns = 2;
    let (mut agent, _rx) = fx.open(model.clone(), s);
    send(&mut agent, "m", "wander");
    let out = agent.run().await.unwrap();
    assert_eq!(out.stop, StopKind::TurnCapped);
    assert_eq!(out.turns, 2);
    assert_eq!(model.requests().len(), 2);
    let task = last_task(&fx);
    assert_eq!(
        (task.state.as_str(), task.stop_reason.as_deref()),
        ("failed", Some("turn_capped"))
    );
    assert_files_valid(&fx);

    // The next message is answered from a valid transcript.
    model.push(text("back"));
    send(&mut agent, "m2", "come back");
    let out = agent.run().await.unwrap();
    assert_eq!(out.stop, StopKind::Answered);
    check_valid(&model.requests().pop().unwrap().messages).unwrap();
}

#[tokio::test]
async fn a_budget_refusal_stops_as_budget_and_blocks_the_task() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model
        .push(calls(&[("a", "list_dir", json!({"path": "."}))]))
        .push(Err(LlmError::BudgetExceeded {
            scope: "task".into(),
            limit: 2.0,
            spent: 2.5,
        }));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m", "spend");
    let out = agent.run().await.unwrap();
    assert!(
        matches!(&out.stop, StopKind::Budget(m) if m.contains("budget exceeded")),
        "{:?}",
        out.stop
    );
    assert!(out.text.starts_with("Stopped: budget exceeded"));
    assert_eq!(out.turns, 1);
    let task = last_task(&fx);
    assert_eq!(
        (task.state.as_str(), task.stop_reason.as_deref()),
        ("blocked", Some("budget"))
    );
    assert_files_valid(&fx);
}

#[tokio::test]
async fn another_model_error_stops_as_model_error_with_one_line() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(Err(LlmError::Exhausted {
        provider: "fake".into(),
        attempts: 4,
        last: "HTTP 529".into(),
    }));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m", "hello");
    let out = agent.run().await.unwrap();
    assert!(matches!(out.stop, StopKind::ModelError(_)));
    assert_eq!(
        out.text,
        "Stopped: the model call failed: provider fake failed after 4 attempts: HTTP 529"
    );
    assert!(!out.text.contains('\n'));
    let task = last_task(&fx);
    assert_eq!(
        (task.state.as_str(), task.stop_reason.as_deref()),
        ("failed", Some("model_error"))
    );
}

#[tokio::test]
async fn an_answer_cut_by_max_tokens_is_done_but_token_capped() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(Ok(common::response(
        vec![pegasus_proto::llm::Block::Text {
            text: "partial".into(),
        }],
        pegasus_proto::llm::StopReason::MaxTokens,
    )));
    let (mut agent, _rx) = fx.open(model.clone(), settings());
    send(&mut agent, "m", "long answer please");
    let out = agent.run().await.unwrap();
    assert_eq!(out.stop, StopKind::Answered);
    let task = last_task(&fx);
    assert_eq!(
        (task.state.as_str(), task.stop_reason.as_deref()),
        ("done", Some("token_capped"))
    );
}
