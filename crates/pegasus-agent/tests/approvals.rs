//! The approval gate (DESIGN.md §11) inside the agent loop: a call the policy asks about blocks its
//! task with a durable request and runs once when approved; a denial, a policy refusal and a
//! timeout go back to the model in DESIGN.md's words; a call still waiting when the process stops is
//! held open across the restart and answered then, never run twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{calls, send, settings, text, Fixture, ScriptedModel};
use pegasus_agent::transcript::check_valid;
use pegasus_agent::{Agent, Approvals, Desk, StopKind};
use pegasus_approvals::{self as store, Answer, ApprovalsConfig, Decision};
use pegasus_proto::llm::Block;
use pegasus_proto::TaskState;

fn policy(yaml: &str) -> ApprovalsConfig {
    let v: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
    ApprovalsConfig::from_yaml(Some(&v)).unwrap()
}

/// The project's PROJECT.md, with `approvals` its block (YAML flow style, e.g. `{exec: ask}`).
fn project_md(approvals: &str) -> String {
    format!(
        "---\nname: demo\nstatus: active\ncreated: 2026-02-28T10:00:00Z\napprovals: {approvals}\n---\nA demo.\n"
    )
}

/// The gate under config.yml's block `yaml`; the project's PROJECT.md adds nothing (one is
/// written if the test has none: without it no gated call runs).
fn gate(fx: &Fixture, desk: &Desk, agent: &mut Agent, yaml: &str) -> Arc<Approvals> {
    let file = fx.dir.join("PROJECT.md");
    if !file.exists() {
        std::fs::write(&file, project_md("{}")).unwrap();
    }
    let g = Arc::new(Approvals::new(desk, policy(yaml)));
    agent.set_approvals(g.clone());
    g
}

/// Waits (with a deadline) for the project's one pending request.
async fn pending(fx: &Fixture) -> store::ApprovalRequest {
    pending_besides(fx, "").await
}

/// Waits (with a deadline) for a pending request other than `seen`.
async fn pending_besides(fx: &Fixture, seen: &str) -> store::ApprovalRequest {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(r) = store::pending(&fx.dir).into_iter().find(|r| r.id != seen) {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no approval request appeared"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn answer(fx: &Fixture, id: &str, decision: Decision) {
    store::answer(
        &fx.dir,
        id,
        &Answer {
            decision,
            by: "cli".into(),
            at: chrono::Utc::now(),
        },
    )
    .unwrap();
}

/// The tool result the model got back for call `id`.
fn result_of(model: &ScriptedModel, id: &str) -> Option<(String, bool)> {
    model.requests().iter().rev().find_map(|r| {
        r.messages.iter().rev().find_map(|m| {
            m.content.iter().find_map(|b| match b {
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } if tool_use_id == id => Some((content.clone(), *is_error)),
                _ => None,
            })
        })
    })
}

fn runs(fx: &Fixture) -> usize {
    std::fs::read_to_string(fx.workdir.join("runs.txt"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

const RUN_ONCE: &str = "echo ran >> runs.txt";

/// A model that calls exec `RUN_ONCE` as `c1`, then answers `last`.
fn run_once_then(last: &str) -> std::sync::Arc<ScriptedModel> {
    let model = ScriptedModel::new();
    model.push(calls(&[(
        "c1",
        "exec",
        serde_json::json!({"command": RUN_ONCE}),
    )]));
    model.push(text(last));
    model
}

#[tokio::test]
async fn an_asked_call_blocks_its_task_and_runs_once_when_approved() {
    let fx = Fixture::new();
    let model = run_once_then("done");
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    let g = gate(&fx, &desk, &mut agent, "exec: ask");
    send(&mut agent, "m1", "build it");
    let tasks = fx.tasks();
    let approver = async {
        let r = pending(&fx).await;
        assert_eq!(r.summary, RUN_ONCE, "the whole command line is shown");
        assert_eq!(r.tool, "exec");
        let t = tasks.get(&r.task).unwrap();
        assert_eq!(t.state, TaskState::Blocked);
        assert_eq!(t.stop_reason.as_deref(), Some("approval"));
        assert_eq!(runs(&fx), 0, "nothing runs before the answer");
        answer(&fx, &r.id, Decision::Approved { always: false });
        g.wake();
        r.id
    };
    let (outcome, id) = tokio::join!(agent.run(), approver);
    let outcome = outcome.unwrap();
    assert_eq!(outcome.stop, StopKind::Answered);
    assert_eq!(runs(&fx), 1);
    assert!(!result_of(&model, "c1").unwrap().1);
    assert!(store::open_requests(&fx.dir).is_empty(), "closed once run");
    assert!(fx
        .dir
        .join("approvals/closed")
        .join(format!("{id}.ran"))
        .exists());
    assert_eq!(
        fx.tasks().get(&outcome.task_id).unwrap().state,
        TaskState::Done
    );
    check_valid(agent.transcript()).unwrap();
}

#[tokio::test]
async fn a_denial_a_policy_refusal_and_a_timeout_go_back_in_spec_words() {
    // Denied by the user, with a reason.
    let fx = Fixture::new();
    let model = run_once_then("ok");
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    let g = gate(&fx, &desk, &mut agent, "exec: ask");
    send(&mut agent, "m1", "build it");
    let approver = async {
        let r = pending(&fx).await;
        answer(
            &fx,
            &r.id,
            Decision::Denied {
                reason: Some("not on a Friday".into()),
            },
        );
        g.wake();
    };
    let (outcome, ()) = tokio::join!(agent.run(), approver);
    assert_eq!(outcome.unwrap().stop, StopKind::Answered);
    assert_eq!(
        result_of(&model, "c1").unwrap(),
        ("denied by the user: not on a Friday".into(), true)
    );
    assert_eq!(runs(&fx), 0);

    // Refused by policy: no request, the glob named.
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(calls(&[
        ("c1", "exec", serde_json::json!({"command": RUN_ONCE})),
        (
            "c2",
            "write_file",
            serde_json::json!({"path": "a.txt", "content": "x"}),
        ),
    ]));
    model.push(text("ok"));
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    gate(
        &fx,
        &desk,
        &mut agent,
        "tools: {exec: deny, \"write_*\": deny}",
    );
    send(&mut agent, "m1", "build it");
    agent.run().await.unwrap();
    assert_eq!(
        result_of(&model, "c1").unwrap(),
        ("denied by policy: approvals.tools[exec]".into(), true)
    );
    assert_eq!(
        result_of(&model, "c2").unwrap(),
        ("denied by policy: approvals.tools[write_*]".into(), true)
    );
    assert!(!fx.workdir.join("a.txt").exists());
    assert!(store::open_requests(&fx.dir).is_empty());

    // No answer in time.
    let fx = Fixture::new();
    let model = run_once_then("ok");
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    gate(&fx, &desk, &mut agent, "exec: ask\ntimeout_s: 1");
    send(&mut agent, "m1", "build it");
    agent.run().await.unwrap();
    assert_eq!(
        result_of(&model, "c1").unwrap(),
        ("denied: no answer within 1 s".into(), true)
    );
    assert_eq!(runs(&fx), 0);
}

/// The project's rules are stricter than config.yml's: while its PROJECT.md does not load, a
/// gated call is refused with one line naming the file, never run under config.yml's looser
/// policy; fixed, the project's rules hold again.
#[tokio::test]
async fn a_project_whose_project_md_does_not_load_runs_nothing() {
    let fx = Fixture::new();
    std::fs::write(fx.dir.join("PROJECT.md"), project_md("{exec: ask}")).unwrap();
    let model = run_once_then("ok");
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    // config.yml allows every command.
    let g = gate(&fx, &desk, &mut agent, "exec: allow");
    let exec = serde_json::json!({"command": RUN_ONCE});
    assert_eq!(
        g.check("exec", &exec).unwrap(),
        pegasus_approvals::PolicyDecision::Ask
    );
    // Broken by hand.
    std::fs::write(
        fx.dir.join("PROJECT.md"),
        "---\nname: demo\nstatus: [\n---\n",
    )
    .unwrap();
    send(&mut agent, "m1", "build it");
    agent.run().await.unwrap();
    let (result, is_error) = result_of(&model, "c1").unwrap();
    assert!(is_error);
    assert!(
        result.starts_with("approval refused: PROJECT.md of demo does not load ("),
        "{result}"
    );
    assert!(result.contains("PROJECT.md:"), "names the file: {result}");
    assert!(result.ends_with("; fix it and retry"), "{result}");
    assert_eq!(runs(&fx), 0, "the command did not run");
    assert!(store::open_requests(&fx.dir).is_empty(), "nobody was asked");
    // Fixed: the project's rules again.
    std::fs::write(fx.dir.join("PROJECT.md"), project_md("{exec: ask}")).unwrap();
    assert_eq!(
        g.check("exec", &exec).unwrap(),
        pegasus_approvals::PolicyDecision::Ask
    );
}

#[tokio::test]
async fn allow_globs_skip_the_question_but_not_for_a_chained_command() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(calls(&[(
        "c1",
        "exec",
        serde_json::json!({"command": "echo hi >> runs.txt"}),
    )]));
    model.push(calls(&[(
        "c2",
        "exec",
        serde_json::json!({"command": "echo hi; echo sneaky >> runs.txt"}),
    )]));
    model.push(text("ok"));
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    let g = gate(
        &fx,
        &desk,
        &mut agent,
        "exec: ask\nallow: [\"echo hi >> runs.txt\", \"echo hi*\"]",
    );
    send(&mut agent, "m1", "go");
    let approver = async {
        let r = pending(&fx).await;
        assert_eq!(r.summary, "echo hi; echo sneaky >> runs.txt");
        answer(&fx, &r.id, Decision::Denied { reason: None });
        g.wake();
    };
    let (outcome, ()) = tokio::join!(agent.run(), approver);
    assert_eq!(outcome.unwrap().stop, StopKind::Answered);
    assert!(
        !result_of(&model, "c1").unwrap().1,
        "allowed without asking"
    );
    assert_eq!(
        result_of(&model, "c2").unwrap(),
        ("denied by the user".into(), true)
    );
    assert_eq!(runs(&fx), 1);
}

#[tokio::test]
async fn a_call_waiting_at_a_stop_is_held_across_the_restart_and_runs_once() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(calls(&[
        ("c0", "list_dir", serde_json::json!({"path": "."})),
        ("c1", "exec", serde_json::json!({"command": RUN_ONCE})),
    ]));
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    gate(&fx, &desk, &mut agent, "exec: ask");
    send(&mut agent, "m1", "build it");
    let stop = desk.stop.clone();
    let stopper = async {
        pending(&fx).await;
        // A graceful stop while the call waits.
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let (outcome, ()) = tokio::join!(agent.run(), stopper);
    let outcome = outcome.unwrap();
    assert_eq!(outcome.stop, StopKind::Held);
    let task = outcome.task_id.clone();
    assert_eq!(fx.tasks().get(&task).unwrap().state, TaskState::Blocked);
    drop(agent);

    // The next start: the call is open, not cancelled, and the request still waits.
    let model = ScriptedModel::new();
    model.push(text("built"));
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    assert_eq!(agent.held_task(), Some(task.as_str()));
    let g = gate(&fx, &desk, &mut agent, "exec: ask");
    let r = store::pending(&fx.dir).pop().unwrap();
    // A message that arrives while it waits is kept for after it.
    send(&mut agent, "m2", "and also this");
    answer(&fx, &r.id, Decision::Approved { always: false });
    g.wake();
    let outcome = agent.resume_held(None, true).await.unwrap().unwrap();
    assert_eq!(outcome.stop, StopKind::Answered);
    assert_eq!(outcome.text, "built");
    assert_eq!(runs(&fx), 1);
    // The approved call's real result, and the cut-off list_dir as cancelled.
    assert!(!result_of(&model, "c1").unwrap().1);
    assert_eq!(
        result_of(&model, "c0").unwrap().0,
        pegasus_store::CANCELLED_TOOL_RESULT
    );
    assert_eq!(fx.tasks().get(&task).unwrap().state, TaskState::Done);
    check_valid(agent.transcript()).unwrap();
    drop(agent);

    // Another start finds nothing to hold and runs nothing again.
    let (agent, _rx) = fx.open(ScriptedModel::new(), settings());
    assert_eq!(agent.held_task(), None);
    assert_eq!(runs(&fx), 1);
    check_valid(agent.transcript()).unwrap();
}

#[tokio::test]
async fn a_request_whose_task_moved_on_is_withdrawn_at_the_next_start() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(calls(&[(
        "c1",
        "exec",
        serde_json::json!({"command": RUN_ONCE}),
    )]));
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    gate(&fx, &desk, &mut agent, "exec: ask");
    send(&mut agent, "m1", "build it");
    let stop = desk.stop.clone();
    let stopper = async {
        pending(&fx).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let (outcome, ()) = tokio::join!(agent.run(), stopper);
    let task = outcome.unwrap().task_id;
    // Cancelled while the worker was down.
    fx.tasks()
        .transition(&task, TaskState::Blocked, TaskState::Cancelled, "cli", "no")
        .unwrap();
    drop(agent);
    let (agent, _rx) = fx.open(ScriptedModel::new(), settings());
    assert_eq!(agent.held_task(), None);
    assert!(store::open_requests(&fx.dir).is_empty());
    assert_eq!(runs(&fx), 0);
    check_valid(agent.transcript()).unwrap();
}

/// An MCP tool, as the worker offers one (`mcp__SERVER__TOOL`), counting its calls.
struct McpPush(Arc<std::sync::atomic::AtomicU32>);

impl pegasus_agent::Tool for McpPush {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        pegasus_proto::llm::ToolSpec {
            name: "mcp__github__push".into(),
            description: "push".into(),
            input_schema_json: "{\"type\":\"object\"}".into(),
        }
    }
    fn call<'a>(
        &'a self,
        _input: serde_json::Value,
        _ctx: &'a pegasus_agent::ToolCtx,
    ) -> pegasus_agent::ToolFuture<'a> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async { pegasus_agent::ToolOutput::ok("pushed") })
    }
}

#[tokio::test]
async fn mcp_tools_are_asked_about_by_their_glob() {
    let fx = Fixture::new();
    let model = ScriptedModel::new();
    model.push(calls(&[(
        "c1",
        "mcp__github__push",
        serde_json::json!({"branch": "main"}),
    )]));
    model.push(calls(&[(
        "c2",
        "mcp__github__push",
        serde_json::json!({"branch": "dev"}),
    )]));
    model.push(text("ok"));
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), settings());
    let pushes = Arc::new(std::sync::atomic::AtomicU32::new(0));
    agent.set_mcp_tools(vec![Arc::new(McpPush(pushes.clone()))], None);
    let g = gate(&fx, &desk, &mut agent, "tools: {\"mcp__github__*\": ask}");
    send(&mut agent, "m1", "push it");
    let approver = async {
        let r = pending(&fx).await;
        assert_eq!(r.tool, "mcp__github__push");
        // The MCP server is named before the arguments (issue 32).
        assert_eq!(
            r.summary,
            "mcp__github__push (MCP server github) {\"branch\":\"main\"}"
        );
        answer(&fx, &r.id, Decision::Denied { reason: None });
        g.wake();
        // The second call asks again (a denial is for that call only).
        let second = pending_besides(&fx, &r.id).await;
        answer(&fx, &second.id, Decision::Approved { always: false });
        g.wake();
    };
    let (outcome, ()) = tokio::join!(agent.run(), approver);
    assert_eq!(outcome.unwrap().stop, StopKind::Answered);
    assert_eq!(
        result_of(&model, "c1").unwrap(),
        ("denied by the user".into(), true)
    );
    assert_eq!(result_of(&model, "c2").unwrap(), ("pushed".into(), false));
    assert_eq!(pushes.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A role's time limit counts the work, not the wait for a person: an answer that comes after
/// the limit still runs the call, and the task goes on.
#[tokio::test]
async fn waiting_for_a_person_does_not_count_against_the_time_limit() {
    let fx = Fixture::new();
    let model = run_once_then("done");
    let mut s = settings();
    s.run_timeout_s = Some(1);
    let (mut agent, desk, _rx) = fx.open_desk(model.clone(), s);
    let g = gate(&fx, &desk, &mut agent, "exec: ask");
    send(&mut agent, "m1", "build it");
    let approver = async {
        let r = pending(&fx).await;
        // The person answers after the role's whole time limit has gone by.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        answer(&fx, &r.id, Decision::Approved { always: false });
        g.wake();
    };
    let (outcome, ()) = tokio::join!(agent.run(), approver);
    let outcome = outcome.unwrap();
    assert_eq!(outcome.stop, StopKind::Answered, "{}", outcome.text);
    assert_eq!(runs(&fx), 1);
    assert_eq!(
        fx.tasks().get(&outcome.task_id).unwrap().state,
        TaskState::Done
    );
}
