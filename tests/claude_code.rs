//! Claude Code (the real `claude` CLI, 2.1.332) driven by the fake LLM: the fake serves it as
//! the Anthropic API does, and a script of rules makes it call its own tools.
//!
//! Needs `claude` on PATH or `PEGASUS_TEST_CLAUDE` (`.ci/run` installs
//! `@anthropic-ai/claude-code@2.1.332`); without it each test skips with one line, and under
//! `CI=true` fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::claude::{self, Claude};
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::json;

/// The prompt of the tool test: rules find it in the last user text, behind Claude Code's
/// system reminder.
const PROMPT: &str = "Create greeting.txt and show it to me";

/// Claude Code writes a file with its `Write` tool, runs `cat` with its `Bash` tool, and
/// answers with the text the fake scripted: every request it made passed the fake's checks
/// (headers, betas, fields, thinking signatures, tool pairing) and the key it was given
/// arrived.
#[test]
fn claude_code_calls_its_own_tools_on_the_fakes_script() {
    let fake = FakeLlm::start().unwrap();
    fake.require_api_key(Some(claude::API_KEY.to_string()));
    let Some(cc) = Claude::new(&fake) else {
        return;
    };
    let file = cc.dir().join("greeting.txt");
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains(PROMPT.into()),
            ]),
            Reply::TextThenTools(
                "I will write the file.".into(),
                vec![ToolCall::new(
                    "Write",
                    json!({"file_path": file, "content": "hello from the fake\n"}),
                )],
            ),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::LastToolResultContains("File created successfully".into()),
            Reply::Tools(vec![ToolCall::new(
                "Bash",
                json!({"command": "cat greeting.txt", "description": "Show the file"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("hello from the fake".into()),
        Reply::Text("greeting.txt says: hello from the fake".into()),
    ));

    // The run's home (and the file in it) lives as long as `cc`.
    let cc = cc.args(["--allowedTools", "Write", "Bash(cat:*)"]);
    let run = cc.run(PROMPT);

    assert!(run.status.success(), "{}", run.dump());
    assert_eq!(
        run.result_text(),
        Some("greeting.txt says: hello from the fake"),
        "{}",
        run.dump()
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "hello from the fake\n"
    );
    let names: Vec<_> = run.tool_uses().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, vec![json!("Write"), json!("Bash")], "{}", run.dump());
    let results = run.tool_results();
    assert_eq!(results.len(), 2, "{}", run.dump());
    assert!(
        results[1]["content"]
            .to_string()
            .contains("hello from the fake"),
        "{}",
        run.dump()
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{}", run.dump());
    for r in &requests {
        assert_eq!(r.path, "/v1/messages?beta=true");
        assert!(r.stream);
        assert_eq!(r.header("x-api-key"), Some(claude::API_KEY));
    }
}
