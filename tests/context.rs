//! Context never bricks a project (SPEC §6), end to end: pegasusd, a worker and pegasusctl
//! as real processes, the fake LLM over real HTTP enforcing its context window with the real
//! 400 ("prompt is too long: N tokens > M maximum").
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;

/// The fake's context window, in its tokens (JSON characters / 4).
const FAKE_WINDOW: u64 = 30_000;

/// Scripts a project that dumps 5 MB through `exec` on every "dump" message: the summary call
/// gets a summary, a dump's capped result gets an answer, a dump request gets the command.
fn dump_rules(fake: &FakeLlm) {
    main_agent_rule(fake);
    fake.add_rule(Rule::new(
        Match::SystemContains("compaction".into()),
        Reply::Text("SUMMARY: the user asked for dumps of 5 MB of x; each was done.".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("bytes cut here".into()),
        Reply::Text("dumped".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("dump".into()),
        Reply::Tools(vec![ToolCall::new(
            "exec",
            json!({"command": "head -c 5000000 /dev/zero | tr '\\0' x"}),
        )]),
    ));
}

fn archived(home: &Home, project: &str) -> usize {
    std::fs::read_dir(home.project_dir(project).join("session/archive"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// `window` is what the model table says; the fake's real window is [`FAKE_WINDOW`].
fn home_with_window(fake: &FakeLlm, window: u64) -> Home {
    Home::with_config(&format!(
        "default_model: fa/test-model\n\
         providers:\n  fa: {{kind: anthropic, base_url: \"{a}\", api_key_env: {FAKE_KEY_ENV}}}\n\
         prices:\n  \"fa/*\": {{input: 1.0, output: 2.0}}\n\
         models:\n  \"fa/*\": {{context_window: {window}, max_output_tokens: 1024}}\n\
         llm: {{retry_base_ms: 10, max_retries: 1, timeout_s: 60}}\n\
         workers: {{shutdown_timeout_s: 5}}\n\
         agent: {{reflection: false, max_tokens: 1024, exec_output_cap_bytes: 8000000}}\n",
        a = fake.anthropic_base_url(),
    ))
}

#[test]
fn a_project_whose_tool_returns_5_mb_keeps_answering() {
    let fake = FakeLlm::start().unwrap();
    fake.set_context_window(Some(FAKE_WINDOW));
    dump_rules(&fake);
    let home = home_with_window(&fake, FAKE_WINDOW);
    let _d = home.start_fake();
    home.create("big");
    for n in 1..=6 {
        let reply = home.ctl_ok(&["project", "send", "big", &format!("dump {n}"), "--wait"]);
        assert_eq!(reply.trim(), "dumped", "message {n}");
    }
    // Each result reached the model capped (32 KiB of 5 MB), and the session was compacted
    // before a request could reach the window: the provider never refused one.
    assert!(archived(&home, "big") >= 1, "the session was compacted");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let biggest = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string().len())
        .max()
        .unwrap();
    assert!(biggest < 4 * FAKE_WINDOW as usize, "{biggest}");
    let session = home.project_dir("big").join("session/current.jsonl");
    assert!(std::fs::metadata(session).unwrap().len() < 1 << 20);
    for task in home.json(&["task", "list", "big"]).as_array().unwrap() {
        assert_eq!(task["state"], "done", "{task}");
    }
}

#[test]
fn a_session_over_the_window_recovers_when_the_provider_refuses_it() {
    let fake = FakeLlm::start().unwrap();
    fake.set_context_window(Some(FAKE_WINDOW));
    dump_rules(&fake);
    // The model table claims a window 30 times larger than the provider's: the estimate never
    // sees a problem, so the session grows until the provider refuses a request.
    let home = home_with_window(&fake, 30 * FAKE_WINDOW);
    let _d = home.start_fake();
    home.create("big");
    for n in 1..=6 {
        let reply = home.ctl_ok(&["project", "send", "big", &format!("dump {n}"), "--wait"]);
        assert_eq!(reply.trim(), "dumped", "message {n}");
    }
    let refused: Vec<String> = fake
        .violations()
        .into_iter()
        .filter(|v| v.contains("prompt is too long"))
        .collect();
    assert!(!refused.is_empty(), "the provider refused a request");
    assert_eq!(
        refused.len(),
        fake.violations().len(),
        "nothing else was wrong: {:?}",
        fake.violations()
    );
    assert!(archived(&home, "big") >= 1);
    // Every refusal was followed by a compaction and an accepted retry.
    for task in home.json(&["task", "list", "big"]).as_array().unwrap() {
        assert_eq!(task["state"], "done", "{task}");
    }
}
