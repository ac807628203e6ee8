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

/// A stdio MCP server of one tool, `ping`, answering `pong WORD` (newline-delimited JSON-RPC,
/// as the MCP stdio transport is).
const MINI_MCP: &str = r#"import json, sys
for line in sys.stdin:
    m = json.loads(line)
    mid, method = m.get("id"), m.get("method")
    if method == "initialize":
        result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "mini", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "ping", "description": "Answers pong",
                             "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}},
                                             "required": ["word"]}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "pong " + m["params"]["arguments"]["word"]}]}
    elif mid is None:
        continue
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// Claude Code defers an MCP server's tools behind its `ToolSearch`: the fake's script loads
/// the tool first (`select:mcp__mini__ping`, answered with a `tool_reference` the fake checks
/// against the offered tools), then calls it, and Claude Code runs it on the MCP server.
#[test]
fn claude_code_loads_and_calls_an_mcp_tool_on_the_fakes_script() {
    let fake = FakeLlm::start().unwrap();
    let Some(cc) = Claude::new(&fake) else {
        return;
    };
    let server = cc.home().join("mini_mcp.py");
    std::fs::write(&server, MINI_MCP).unwrap();
    let config = cc.home().join("mcp.json");
    let spec = json!({"mcpServers": {"mini": {"command": "python3", "args": [server]}}});
    std::fs::write(&config, spec.to_string()).unwrap();
    fake.add_rule(
        Rule::new(
            Match::NewPrompt,
            Reply::Tools(vec![ToolCall::new(
                "ToolSearch",
                json!({"query": "select:mcp__mini__ping", "max_results": 5}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(
        Rule::new(
            Match::LastToolResultContains("mcp__mini__ping".into()),
            Reply::Tools(vec![ToolCall::new(
                "mcp__mini__ping",
                json!({"word": "fake"}),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("pong fake".into()),
        Reply::Text("The server said pong fake.".into()),
    ));

    let cc = cc.args([
        "--mcp-config",
        config.to_str().unwrap(),
        "--allowedTools",
        "mcp__mini__ping",
    ]);
    let run = cc.run("Ping the mini server");

    assert_eq!(
        run.result_text(),
        Some("The server said pong fake."),
        "{}",
        run.dump()
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{}", run.dump());
    let offered = |i: usize| -> Vec<String> {
        requests[i].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(!offered(0).contains(&"mcp__mini__ping".to_string()));
    assert!(offered(2).contains(&"mcp__mini__ping".to_string()));
}

/// A request no rule answers gets the fake's 500, which ends the run at once (the helper turns
/// Claude Code's retries off) with an error result, and is listed as a violation naming the
/// prompt.
#[test]
fn an_unscripted_request_fails_the_run_fast_and_is_a_violation() {
    let fake = FakeLlm::start().unwrap();
    let Some(cc) = Claude::new(&fake) else {
        return;
    };
    let started = std::time::Instant::now();
    let run = cc.run("Nobody scripted this");
    assert!(!run.status.success(), "{}", run.dump());
    assert_eq!(run.result().unwrap()["is_error"], true, "{}", run.dump());
    assert_eq!(fake.request_count(), 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let violations = fake.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].contains("unmatched request #1")
            && violations[0].contains("Nobody scripted this"),
        "{violations:?}"
    );
}
