//! Codex (the real `codex` CLI, OpenAI's Codex 0.171.0) driven by the fake LLM: the fake serves
//! it as the OpenAI Responses API does, and a script of rules makes it run its own tools.
//!
//! Needs `codex` on PATH or `PEGASUS_TEST_CODEX` (`.ci/run` installs `@openai/codex@0.171.0`);
//! without it each test skips with one line, and under `CI=true` fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::codex::{self, Codex};
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;

/// Codex answers a prompt with the text the fake scripted, streamed as the Responses API
/// streams it; the key it was given arrived, and every request passed the fake's checks.
#[test]
fn codex_answers_with_the_fakes_text() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(codex::API_KEY.to_string()));
    let Some(cx) = Codex::new(&fake) else {
        return;
    };
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("Say hello".into()),
        Reply::Text("Hello from the fake.".into()),
    ));
    let run = cx.run("Say hello");

    assert!(run.status.success(), "{}", run.dump());
    assert_eq!(run.answer(), Some("Hello from the fake."), "{}", run.dump());
    assert!(run.thread_id().is_some(), "{}", run.dump());
    // No complaint of unknown model metadata, nothing else but the answer.
    assert_eq!(run.items().len(), 1, "{}", run.dump());
    let usage = &run.turn_completed().unwrap()["usage"];
    assert!(
        usage["input_tokens"].as_u64().unwrap() > 0,
        "{}",
        run.dump()
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "{}", run.dump());
    let r = &requests[0];
    assert_eq!(r.path, "/v1/responses");
    assert!(r.stream);
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {}", codex::API_KEY).as_str())
    );
    assert_eq!(r.body["model"], codex::MODEL);
}

/// The fake calls Codex's `exec_command` tool; Codex runs the command (in its workspace-write
/// sandbox) and sends its output back, then `apply_patch` (a custom tool: the patch is the
/// call's input) adds a file; the fake's last answer closes the turn. The reasoning item the
/// fake sent first came back sealed, and each output answered its call.
#[test]
fn codex_runs_a_command_and_a_patch_on_the_fakes_script() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(codex::API_KEY.to_string()));
    let Some(cx) = Codex::new(&fake) else {
        return;
    };
    fake.add_rule(
        Rule::new(
            Match::NewPrompt,
            Reply::TextThenTools(
                "I will look first.".into(),
                vec![ToolCall::new(
                    "exec_command",
                    json!({"cmd": "echo made-by-codex > seen.txt && cat seen.txt"}),
                )],
            ),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::LastToolResultContains("made-by-codex".into()),
            Reply::Tools(vec![ToolCall::new(
                "apply_patch",
                json!("*** Begin Patch\n*** Add File: patched.txt\n+patched by codex\n*** End Patch\n"),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("patched.txt".into()),
        Reply::Text("Both files are there.".into()),
    ));
    let cx = cx.args(["--sandbox", "workspace-write"]);
    let run = cx.run("Make two files");

    assert!(run.status.success(), "{}", run.dump());
    assert_eq!(
        run.answer(),
        Some("Both files are there."),
        "{}",
        run.dump()
    );
    let commands = run.items_of("command_execution");
    assert_eq!(commands.len(), 1, "{}", run.dump());
    assert_eq!(commands[0]["exit_code"], 0, "{}", run.dump());
    assert!(
        commands[0]["aggregated_output"]
            .as_str()
            .unwrap()
            .contains("made-by-codex"),
        "{}",
        run.dump()
    );
    assert_eq!(run.items_of("file_change").len(), 1, "{}", run.dump());
    assert_eq!(
        std::fs::read_to_string(cx.dir().join("seen.txt")).unwrap(),
        "made-by-codex\n"
    );
    assert_eq!(
        std::fs::read_to_string(cx.dir().join("patched.txt")).unwrap(),
        "patched by codex\n"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{}", run.dump());
    // The last request carries both calls, both outputs and the sealed reasoning items back.
    let input = requests[2].body["input"].as_array().unwrap();
    let kinds: Vec<&str> = input.iter().filter_map(|i| i["type"].as_str()).collect();
    for kind in [
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
}

/// A refusal of the API reaches Codex's events as the error it is: a wrong key is OpenAI's
/// 401 (`Incorrect API key provided`), and the run fails at once without retrying.
#[test]
fn a_refused_request_fails_the_run_with_the_apis_error() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some("sk-another-key".to_string()));
    let Some(cx) = Codex::new(&fake) else {
        return;
    };
    fake.add_rule(Rule::new(Match::Any, Reply::Text("never sent".into())));
    let run = cx.run("Say hello");

    assert!(!run.status.success(), "{}", run.dump());
    assert!(run.answer().is_none(), "{}", run.dump());
    let errors = run.errors();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("Incorrect API key provided")),
        "{}",
        run.dump()
    );
    assert!(
        run.events.iter().any(|e| e["type"] == "turn.failed"),
        "{}",
        run.dump()
    );
    assert_eq!(fake.request_count(), 1, "{}", run.dump());
    assert!(fake.answered().is_empty());
}

/// A request no rule answers gets the fake's 500, which ends the run (the helper's provider
/// has no retries) with an error, and is listed as a violation naming the prompt.
#[test]
fn an_unscripted_request_fails_the_run_and_is_a_violation() {
    let fake = FakeLlm::start().unwrap();
    let Some(cx) = Codex::new(&fake) else {
        return;
    };
    let run = cx.run("Nobody scripted this");
    assert!(!run.status.success(), "{}", run.dump());
    assert!(
        run.events.iter().any(|e| e["type"] == "turn.failed"),
        "{}",
        run.dump()
    );
    let violations = fake.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].contains("unmatched request #1")
            && violations[0].contains("Nobody scripted this"),
        "{violations:?}"
    );
}

/// `codex exec resume THREAD` continues the thread: the second prompt's request carries the
/// first exchange, and Codex keeps the thread id.
#[test]
fn codex_resumes_its_thread() {
    let fake = FakeLlm::start().unwrap();
    let Some(cx) = Codex::new(&fake) else {
        return;
    };
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("first question".into()),
        Reply::Text("first answer".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::LastUserTextContains("second question".into()),
            Match::AnyTextContains("first answer".into()),
        ]),
        Reply::Text("second answer, remembering the first".into()),
    ));
    let first = cx.run("first question");
    assert_eq!(first.answer(), Some("first answer"), "{}", first.dump());
    let thread = first.thread_id().unwrap().to_string();

    let args: Vec<String> = ["exec", "resume", "--json", "--skip-git-repo-check", &thread]
        .iter()
        .map(|s| s.to_string())
        .chain(["second question".to_string()])
        .collect();
    let second = cx.run_args(&args);
    assert!(second.status.success(), "{}", second.dump());
    assert_eq!(
        second.answer(),
        Some("second answer, remembering the first"),
        "{}",
        second.dump()
    );
    assert_eq!(
        second.thread_id(),
        Some(thread.as_str()),
        "{}",
        second.dump()
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// Codex's hosted `web_search` (run on OpenAI's side, billed apart from the tokens Pegasus
/// meters, out of reach of the approval policy) is in its requests by default; `-c
/// web_search="disabled"` takes it out, and a later `-c web_search="live"` puts it back (the
/// last override wins), which is how a project opts in through `harnesses.codex.args`.
#[test]
fn the_hosted_web_search_is_one_override_and_the_last_override_wins() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(codex::API_KEY.to_string()));
    let Some(cx) = Codex::new(&fake) else {
        return;
    };
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    let has_web_search = |args: &[&str]| {
        let before = fake.requests().len();
        let run = Codex::new(&fake)
            .expect("found above")
            .args(args.iter().copied())
            .run("Say ok");
        assert!(run.status.success(), "{}", run.dump());
        let requests = fake.requests();
        assert_eq!(requests.len(), before + 1, "{}", run.dump());
        let tools = requests[before].body["tools"].as_array().cloned();
        tools
            .unwrap_or_default()
            .iter()
            .any(|t| t["type"] == "web_search")
    };
    drop(cx);
    assert!(has_web_search(&[]), "on by default");
    assert!(!has_web_search(&["-c", "web_search=\"disabled\""]));
    assert!(has_web_search(&[
        "-c",
        "web_search=\"disabled\"",
        "-c",
        "web_search=\"live\""
    ]));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
