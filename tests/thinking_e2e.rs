//! Proof against a real-shaped server (issue #9 item 7): a thinking role works through three
//! tool calls, end to end through pegasusd, a worker and pegasusctl, over streaming, for each
//! wire format; the fake LLM validates every request as the real API would (signed thinking
//! blocks sent back unchanged, no temperature with thinking, budget_tokens < max_tokens;
//! `max_completion_tokens` + `reasoning_effort` for a reasoning model).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Format, Match, Reply, Rule, ToolCall};
use serde_json::json;

fn home_for(fake: &FakeLlm, format: Format) -> Home {
    let model = match format {
        Format::Anthropic => "fa/test-thinking",
        Format::OpenAi | Format::Responses => "fo/test-reasoning",
    };
    Home::with_config(&format!(
        "default_model: {model}\n\
         providers:\n  \
           fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n  \
           fo: {{kind: openai, base_url: \"{o}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n  \"fo/*\": {{input: 1.0, output: 2.0}}\n\
         models:\n  \
           \"fa/*-thinking\": {{context_window: 200000, max_output_tokens: 16000, thinking: true}}\n  \
           \"fo/*-reasoning\": {{context_window: 200000, max_output_tokens: 16000, reasoning: true}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false}}\n",
        a = fake.anthropic_base_url(),
        o = fake.openai_base_url(),
    ))
}

/// The coder role (thinking: medium, temperature 0.2) as a subagent: write, read, run, answer.
fn thinking_role_three_tool_calls(format: Format) {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(FAKE_KEY.into()));
    main_agent_rule(&fake);
    let coder = |m: Match| Match::All(vec![Match::SystemContains("# Your Task".into()), m]);
    fake.add_rule(Rule::new(
        coder(Match::NoToolResultYet),
        Reply::Tools(vec![ToolCall::new(
            "write_file",
            json!({"path": "calc.sh", "content": "echo $((6 * 7))\n"}),
        )]),
    ));
    fake.add_rule(Rule::new(
        coder(Match::LastToolResultContains("calc.sh".into())),
        Reply::Tools(vec![ToolCall::new("read_file", json!({"path": "calc.sh"}))]),
    ));
    fake.add_rule(Rule::new(
        coder(Match::LastToolResultContains("echo $((6 * 7))".into())),
        Reply::Tools(vec![ToolCall::new(
            "exec",
            json!({"command": "sh calc.sh"}),
        )]),
    ));
    fake.add_rule(Rule::new(
        coder(Match::LastToolResultContains("42".into())),
        Reply::Text("calc.sh prints 42".into()),
    ));
    // The project's own agent hands the work to the coder, then reports.
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("calc.sh prints 42".into()),
        Reply::Text("The coder says: calc.sh prints 42".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("compute".into()),
        Reply::Tools(vec![ToolCall::new(
            "spawn_subagent",
            json!({"task": "write calc.sh that prints 6*7 and run it", "role": "coder"}),
        )]),
    ));
    let home = home_for(&fake, format);
    let _d = home.start_fake();
    home.create("calc");
    let reply = home.ctl_ok(&["project", "send", "calc", "please compute 6*7", "--wait"]);
    assert_eq!(reply.trim(), "The coder says: calc.sh prints 42");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());

    let coder_requests: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.body.to_string().contains("# Your Task"))
        .collect();
    assert_eq!(coder_requests.len(), 4, "three tool calls and the answer");
    for (n, r) in coder_requests.iter().enumerate() {
        assert!(r.stream, "request {n} streams");
        match format {
            Format::Anthropic => {
                assert_eq!(r.body["thinking"]["type"], "enabled", "request {n}");
                assert!(r.body.get("temperature").is_none(), "request {n}");
                let budget = r.body["thinking"]["budget_tokens"].as_u64().unwrap();
                assert!(budget < r.body["max_tokens"].as_u64().unwrap());
            }
            Format::OpenAi | Format::Responses => {
                assert!(r.body.get("reasoning_effort").is_some(), "request {n}");
                assert!(r.body.get("max_completion_tokens").is_some());
                assert!(r.body.get("max_tokens").is_none());
                assert!(r.body.get("temperature").is_none());
            }
        }
    }
    if format == Format::Anthropic {
        // Each continuation carries every earlier turn's thinking, signed and in its place.
        let last = coder_requests[3].body["messages"]
            .as_array()
            .unwrap()
            .clone();
        let assistant_turns: Vec<_> = last.iter().filter(|m| m["role"] == "assistant").collect();
        assert_eq!(assistant_turns.len(), 3);
        for turn in assistant_turns {
            let content = turn["content"].as_array().unwrap();
            assert_eq!(content[0]["type"], "thinking", "{turn}");
            assert!(content[0]["signature"]
                .as_str()
                .is_some_and(|s| !s.is_empty()));
            assert!(content.iter().any(|b| b["type"] == "redacted_thinking"));
        }
    }
    // The session holds the thinking blocks the tool loop needed.
    let session =
        std::fs::read_to_string(home.project_dir("calc").join("session/current.jsonl")).unwrap();
    assert!(session.contains("The coder says"));
}

#[test]
fn a_thinking_role_through_three_tool_calls_over_anthropic_streaming() {
    thinking_role_three_tool_calls(Format::Anthropic);
}

#[test]
fn a_reasoning_role_through_three_tool_calls_over_openai_streaming() {
    thinking_role_three_tool_calls(Format::OpenAi);
}
