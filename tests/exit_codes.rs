//! Honest exit codes (DESIGN.md §11, issue 26 item 4): `project send --wait` exits 0 with the
//! answer, and 1 with the reason on stderr (one line) when the message's task ended failed or
//! was stopped — by a budget, the watchdog, the loop guard or the turn cap — one test per
//! reason, through the real daemon, worker and CLI with the fake LLM over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Fault, Match, Reply, Rule, ToolCall, UsageSpec};
use serde_json::json;

fn user(t: &str) -> Match {
    Match::LastUserTextContains(t.into())
}

fn fake() -> FakeLlm {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    fake
}

/// A home on `fake` with these `agent` settings (reflection off) and `extra` YAML.
fn home_with(fake: &FakeLlm, agent: &str, extra: &str) -> Home {
    Home::with_config(&format!(
        "{}workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false{agent}}}\n\
         dashboard: {{listen: \"127.0.0.1:0\"}}\n\
         {extra}\n",
        fake_provider_config(fake),
    ))
}

/// `project send p TEXT --wait` must exit 1 with one line on stderr; returns it.
fn send_fails(home: &Home, text: &str) -> String {
    home.ctl_fails(&["project", "send", "p", text, "--wait"])
}

#[test]
fn an_answer_exits_0_and_prints_it() {
    let fake = fake();
    fake.add_rule(Rule::new(user("hello"), Reply::Text("hi there".into())));
    let home = home_with(&fake, "", "");
    let _d = home.start_fake();
    home.create("p");
    let out = home.ctl(&["project", "send", "p", "hello", "--wait"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hi there");
    assert!(out.stderr.is_empty());
}

#[test]
fn a_failed_task_exits_1_with_the_models_error() {
    let fake = fake();
    fake.add_rule(Rule::new(
        user("break"),
        Reply::Fault(Fault::Status {
            code: 400,
            message: "this request is malformed".into(),
            retry_after_s: None,
        }),
    ));
    let home = home_with(&fake, "", "");
    let _d = home.start_fake();
    home.create("p");
    let line = send_fails(&home, "break");
    assert!(line.contains("did not answer"), "{line}");
    assert!(line.contains("this request is malformed"), "{line}");
}

#[test]
fn a_budget_stop_exits_1_naming_the_budget() {
    let fake = fake();
    fake.add_rule(
        Rule::new(
            user("spend"),
            Reply::Tools(vec![ToolCall::new("list_dir", json!({"path": "."}))]),
        )
        .usage(UsageSpec {
            input: 5000,
            output: 100,
            cache_read: 0,
            cache_write: 0,
        }),
    );
    // The first call fits the task's cap, the second's worst case does not.
    let home = home_with(&fake, "", "budget: {daily_usd: null, task_usd: 0.012}");
    let _d = home.start_fake();
    home.create("p");
    let line = send_fails(&home, "spend");
    assert!(line.contains("did not answer"), "{line}");
    assert!(line.to_lowercase().contains("budget"), "{line}");
}

#[test]
fn a_watchdog_stop_exits_1_naming_the_silence() {
    let fake = fake();
    // A hung command sends no event: the watchdog fails the task and restarts the worker.
    fake.add_rule(Rule::new(
        user("hang"),
        Reply::Tools(vec![ToolCall::new("exec", json!({"command": "sleep 30"}))]),
    ));
    let home = home_with(&fake, "", "watchdog: {silent_timeout_s: 2}");
    let _d = home.start_fake();
    home.create("p");
    let line = send_fails(&home, "hang");
    assert!(line.contains("did not answer"), "{line}");
    assert!(line.contains("silent"), "{line}");
}

#[test]
fn a_loop_stop_exits_1_naming_loop_repeat_limit() {
    let fake = fake();
    fake.add_rule(Rule::new(
        user("loop"),
        Reply::Tools(vec![ToolCall::new("list_dir", json!({"path": "."}))]),
    ));
    let home = home_with(&fake, ", loop_repeat_limit: 2", "");
    let _d = home.start_fake();
    home.create("p");
    let line = send_fails(&home, "loop");
    assert!(line.contains("did not answer"), "{line}");
    assert!(line.contains("loop_repeat_limit"), "{line}");
}

#[test]
fn a_turn_cap_stop_exits_1_naming_max_turns() {
    let fake = fake();
    // Another call every turn, so the loop guard never fires.
    for dir in [".", "./", "././"] {
        fake.add_rule(
            Rule::new(
                Match::AnyTextContains("walk".into()),
                Reply::Tools(vec![ToolCall::new("list_dir", json!({"path": dir}))]),
            )
            .times(1),
        );
    }
    let home = home_with(&fake, ", max_turns: 2", "");
    let _d = home.start_fake();
    home.create("p");
    let line = send_fails(&home, "walk");
    assert!(line.contains("did not answer"), "{line}");
    assert!(line.contains("max_turns"), "{line}");
}
