//! The requests Claude Code 2.1.332 really sends (recorded from `claude -p` pointed at a
//! logging server, machine-specific parts replaced: `tests/fixtures/claude-code-2.1.332/`),
//! replayed against the fake: accepted as they are, and refused with the real API's status and
//! error body once mutated as the API would not take them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{fixture, parse_sse, Recorded};
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};

/// The first request of `claude -p "write hello.txt"`.
const FIRST_TURN: &str = include_str!("fixtures/claude-code-2.1.332/first-turn.json");
/// The request that carries the result of the `Write` the first answer asked for.
const TOOL_RESULT: &str = include_str!("fixtures/claude-code-2.1.332/tool-result.json");

impl Recorded {
    /// The `anthropic-beta` header without `beta`.
    fn without_beta(mut self, beta: &str) -> Recorded {
        for (n, v) in &mut self.headers {
            if n == "anthropic-beta" {
                let kept: Vec<&str> = v.split(',').filter(|b| *b != beta).collect();
                assert_ne!(kept.len(), v.split(',').count(), "{beta} was not sent");
                *v = kept.join(",");
            }
        }
        self
    }

    fn with_beta(mut self, beta: &str) -> Recorded {
        for (n, v) in &mut self.headers {
            if n == "anthropic-beta" {
                v.push(',');
                v.push_str(beta);
            }
        }
        self
    }
}

/// The fake's scripted first answer: text, then a `Write` call.
fn write_rule(fake: &FakeLlm) {
    fake.add_rule(
        Rule::new(
            Match::All(vec![
                Match::NewPrompt,
                Match::LastUserTextContains("write hello.txt".into()),
            ]),
            Reply::TextThenTools(
                "Writing it.".into(),
                vec![ToolCall::new(
                    "Write",
                    json!({"file_path": "/home/user/work/hello.txt", "content": "hello\n"}),
                )],
            ),
        )
        .times(1),
    );
}

/// The content blocks a streamed answer builds, as a client assembles them.
fn assemble(sse: &str) -> (Vec<Value>, Value) {
    let mut blocks: Vec<Value> = Vec::new();
    let mut json_parts: Vec<String> = Vec::new();
    let mut delta = Value::Null;
    for e in parse_sse(sse) {
        let v = e.json();
        match v["type"].as_str().unwrap() {
            "content_block_start" => {
                blocks.push(v["content_block"].clone());
                json_parts.push(String::new());
            }
            "content_block_delta" => {
                let i = v["index"].as_u64().unwrap() as usize;
                let d = &v["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => {
                        let t = blocks[i]["text"].as_str().unwrap().to_string();
                        blocks[i]["text"] = json!(t + d["text"].as_str().unwrap());
                    }
                    "thinking_delta" => {
                        let t = blocks[i]["thinking"].as_str().unwrap().to_string();
                        blocks[i]["thinking"] = json!(t + d["thinking"].as_str().unwrap());
                    }
                    "signature_delta" => blocks[i]["signature"] = d["signature"].clone(),
                    "input_json_delta" => {
                        json_parts[i].push_str(d["partial_json"].as_str().unwrap())
                    }
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => {
                let i = v["index"].as_u64().unwrap() as usize;
                if blocks[i]["type"] == "tool_use" {
                    blocks[i]["input"] = serde_json::from_str(&json_parts[i]).unwrap();
                }
            }
            "message_delta" => delta = v,
            _ => {}
        }
    }
    (blocks, delta)
}

/// Claude Code's first request is accepted as recorded; the answer streams the real shapes:
/// adaptive thinking (signed), text, the tool call, and a `message_delta` with the stop
/// reason, usage and the context-management edits applied.
#[tokio::test]
async fn the_recorded_first_turn_is_answered() {
    let fake = FakeLlm::start().unwrap();
    write_rule(&fake);
    let (status, sse) = fixture(FIRST_TURN).send(&fake).await;
    assert_eq!(status, 200, "{sse}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let names: Vec<String> = parse_sse(&sse)
        .into_iter()
        .map(|e| e.event.unwrap())
        .collect();
    assert_eq!(names.first().map(String::as_str), Some("message_start"));
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    let (blocks, delta) = assemble(&sse);
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["thinking", "redacted_thinking", "text", "tool_use"]);
    assert!(!blocks[0]["thinking"].as_str().unwrap().is_empty());
    assert!(blocks[0]["signature"]
        .as_str()
        .unwrap()
        .starts_with("fakesig"));
    assert_eq!(blocks[3]["name"], "Write");
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(delta["context_management"], json!({"applied_edits": []}));
    let rec = fake.last_request().unwrap();
    assert_eq!(rec.path, "/v1/messages?beta=true");
}

/// The request carrying the tool's result is accepted when its assistant turn is the fake's
/// own answer, as Claude Code sends it back (thinking signed by the fake, tool ids paired);
/// the recorded one, whose thinking another server signed, is refused as the API refuses a
/// forged signature.
#[tokio::test]
async fn the_recorded_tool_result_turn_pairs_with_the_fakes_answer() {
    let fake = FakeLlm::start().unwrap();
    write_rule(&fake);
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("File created successfully".into()),
        Reply::Text("Done: wrote hello.txt".into()),
    ));

    let recorded = fixture(TOOL_RESULT);
    let (status, body) = recorded.send(&fake).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("Invalid `signature` in `thinking` block"),
        "{body}"
    );

    let (_, sse) = fixture(FIRST_TURN).send(&fake).await;
    let (blocks, _) = assemble(&sse);
    let id = blocks[3]["id"].clone();
    let mut turn = fixture(TOOL_RESULT);
    let messages = turn.body["messages"].as_array_mut().unwrap();
    assert_eq!(messages[2]["role"], "assistant");
    messages[2]["content"] = json!(blocks);
    assert_eq!(messages[3]["content"][0]["type"], "tool_result");
    messages[3]["content"][0]["tool_use_id"] = id;
    let violations_before = fake.violations().len();
    let (status, sse) = turn.send(&fake).await;
    assert_eq!(status, 200, "{sse}");
    assert_eq!(
        fake.violations().len(),
        violations_before,
        "{:?}",
        fake.violations()
    );
    let (blocks, delta) = assemble(&sse);
    assert_eq!(blocks.last().unwrap()["text"], "Done: wrote hello.txt");
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
}

/// Each mutation of the recorded first turn is refused with the real API's 400 and its
/// `invalid_request_error` body, worded as the API words it, and listed as a violation.
#[tokio::test]
async fn mutations_of_the_recorded_request_are_refused_as_the_api_refuses_them() {
    let fake = FakeLlm::start().unwrap();
    write_rule(&fake);
    let cases: Vec<(Recorded, &str)> = vec![
        (
            {
                let mut r = fixture(FIRST_TURN);
                r.body["speculative_decoding"] = json!(true);
                r
            },
            "speculative_decoding: Extra inputs are not permitted",
        ),
        (
            fixture(FIRST_TURN).without_beta("context-management-2025-06-27"),
            "context_management: Extra inputs are not permitted",
        ),
        (
            fixture(FIRST_TURN).without_beta("thinking-display-updates-2026-08-18"),
            "thinking.adaptive.display: Input should be 'summarized' or 'omitted'",
        ),
        (
            fixture(FIRST_TURN).without_beta("advanced-tool-use-2025-11-20"),
            "tools.10.custom.defer_loading: Extra inputs are not permitted",
        ),
        (
            fixture(FIRST_TURN).with_beta("warp-drive-2099-01-01"),
            "Unexpected value(s) `warp-drive-2099-01-01` for the `anthropic-beta` header. Please consult our documentation at docs.claude.com or try again without the header.",
        ),
        (
            fixture(FIRST_TURN).without_header("anthropic-version"),
            "anthropic-version: header is required",
        ),
        (
            {
                let mut r = fixture(FIRST_TURN);
                r.body["max_tokens"] = json!(128_001);
                r
            },
            "max_tokens: 128001 > 128000, which is the maximum allowed number of output tokens for claude-opus-5-5",
        ),
        (
            {
                let mut r = fixture(FIRST_TURN);
                r.body["output_config"]["effort"] = json!("ludicrous");
                r
            },
            "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'",
        ),
        (
            {
                let mut r = fixture(FIRST_TURN);
                r.body["metadata"]["account"] = json!("x");
                r
            },
            "metadata.account: Extra inputs are not permitted",
        ),
    ];
    for (n, (request, message)) in cases.iter().enumerate() {
        let (status, body) = request.send(&fake).await;
        assert_eq!(status, 400, "case {n}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            body,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
            "case {n}"
        );
        let violations = fake.violations();
        assert!(
            violations.last().unwrap().ends_with(message),
            "case {n}: {violations:?}"
        );
    }
    assert_eq!(fake.answered().len(), 0, "no refused request is answered");
}

/// A tool search's `tool_reference` must name a tool the request offers (Claude Code's
/// `ToolSearch` loads a deferred MCP tool so); its name is what
/// `Match::LastToolResultContains` sees of it.
#[tokio::test]
async fn tool_references_name_offered_tools() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("mcp__mini__ping".into()),
        Reply::Text("loaded".into()),
    ));
    let mut r = fixture(FIRST_TURN);
    r.body["messages"] = json!([
            {"role": "user", "content": "find ping"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "select:mcp__mini__ping"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "tool_reference", "tool_name": "mcp__mini__ping"}]},
                {"type": "text", "text": "Tool loaded."}
            ]}
    ]);
    let (status, body) = r.send(&fake).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("tool_reference names `mcp__mini__ping`, which is not in `tools`"),
        "{body}"
    );
    r.body["tools"].as_array_mut().unwrap().push(json!({
        "name": "mcp__mini__ping", "description": "Answers pong",
        "input_schema": {"type": "object", "properties": {}}, "defer_loading": true
    }));
    let (status, body) = r.send(&fake).await;
    assert_eq!(status, 200, "{body}");
    let (blocks, _) = assemble(&body);
    assert_eq!(blocks.last().unwrap()["text"], "loaded");
}
