//! The requests Codex 0.171.0 really sends (recorded from `codex exec --json` pointed at a
//! logging server through a custom provider, machine-specific parts replaced:
//! `tests/fixtures/codex-0.171.0/`), replayed against the fake: accepted as they are, answered
//! with the Responses API's events, and refused with the real API's status and error body once
//! mutated as the API would not take them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{client, fixture, parse_sse, Recorded};
use pegasus_fakellm::{FakeLlm, Match, Reply, Rule, ToolCall};
use serde_json::{json, Value};

/// The first request of `codex exec "make a file"` (model `gpt-5.5`).
const FIRST_TURN: &str = include_str!("fixtures/codex-0.171.0/first-turn.json");
/// The third request of that run: it carries an `exec_command` call and its output, then an
/// `apply_patch` custom call and its output.
const TOOL_RESULTS: &str = include_str!("fixtures/codex-0.171.0/tool-results.json");

/// The output items a streamed answer builds, as Codex assembles them (from
/// `response.output_item.done`), and the final `response.completed` response.
fn assemble(sse: &str) -> (Vec<Value>, Value) {
    let mut items = Vec::new();
    let mut completed = Value::Null;
    let mut text = String::new();
    for (i, e) in parse_sse(sse).into_iter().enumerate() {
        let v = e.json();
        assert_eq!(
            e.event.as_deref(),
            v["type"].as_str(),
            "event {i} is named by its type"
        );
        assert_eq!(v["sequence_number"], i, "event {i} is numbered");
        match v["type"].as_str().unwrap() {
            "response.output_text.delta" => text.push_str(v["delta"].as_str().unwrap()),
            "response.output_text.done" => assert_eq!(v["text"], text.as_str()),
            "response.output_item.done" => items.push(v["item"].clone()),
            "response.completed" => completed = v["response"].clone(),
            _ => {}
        }
    }
    (items, completed)
}

/// Codex's first request is accepted as recorded; the answer streams a sealed reasoning item
/// (the request asked for reasoning and its encrypted content), the text, and the call.
#[tokio::test]
async fn the_recorded_first_turn_is_answered() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NewPrompt,
            Match::LastUserTextContains("make a file".into()),
        ]),
        Reply::TextThenTools(
            "Making it.".into(),
            vec![ToolCall::new("exec_command", json!({"cmd": "touch f.txt"}))],
        ),
    ));
    let (status, sse) = fixture(FIRST_TURN).send(&fake).await;
    assert_eq!(status, 200, "{sse}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    let (items, completed) = assemble(&sse);
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["reasoning", "message", "function_call"]);
    assert!(items[0]["encrypted_content"].as_str().is_some());
    assert_eq!(items[1]["content"][0]["text"], "Making it.");
    assert_eq!(items[2]["name"], "exec_command");
    assert_eq!(items[2]["arguments"], "{\"cmd\":\"touch f.txt\"}");
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"], json!(items));
    assert_eq!(completed["model"], "gpt-5.5");
    assert_eq!(completed["store"], false);
    let usage = &completed["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
    );
    let rec = fake.last_request().unwrap();
    assert_eq!(rec.path, "/v1/responses");
    assert!(rec.stream);
}

/// The recorded third request (both tools' calls and outputs) is accepted, and a reasoning
/// item the fake sealed may come back in it; the answer is the scripted text.
#[tokio::test]
async fn the_recorded_tool_results_turn_is_answered() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("make a file".into()),
            Reply::Tools(vec![ToolCall::new(
                "apply_patch",
                json!("*** Begin Patch\n*** Add File: g.txt\n+patched\n*** End Patch\n"),
            )]),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("Success. Updated the following files".into()),
        Reply::Text("done it".into()),
    ));
    // The apply_patch call the fake makes is a custom tool call, as Codex declares the tool.
    let (_, sse) = fixture(FIRST_TURN).send(&fake).await;
    let (items, _) = assemble(&sse);
    assert_eq!(items[1]["type"], "custom_tool_call", "{items:?}");
    assert_eq!(items[1]["name"], "apply_patch");
    assert!(items[1]["input"]
        .as_str()
        .unwrap()
        .starts_with("*** Begin Patch"));

    let (status, sse) = fixture(TOOL_RESULTS).send(&fake).await;
    assert_eq!(status, 200, "{sse}");
    let (out, _) = assemble(&sse);
    assert_eq!(out.last().unwrap()["content"][0]["text"], "done it");

    let sealed = items[0].clone();
    let turn = fixture(TOOL_RESULTS).with(|b| {
        let input = b["input"].as_array_mut().unwrap();
        assert_eq!(input[4]["type"], "function_call");
        input.insert(4, sealed);
    });
    let (status, sse) = turn.send(&fake).await;
    assert_eq!(status, 200, "{sse}");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// Each mutation of the recorded requests is refused with the real API's status and error
/// body (message, `param`, `code`), and listed as a violation.
#[tokio::test]
async fn mutations_of_the_recorded_requests_are_refused_as_the_api_refuses_them() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("never".into())));
    let error = |message: &str, param: Value, code: Value| json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}});
    let cases: Vec<(Recorded, u16, Value)> = vec![
        (
            fixture(FIRST_TURN).with(|b| b["speculative_decoding"] = json!(true)),
            400,
            error(
                "Unknown parameter: 'speculative_decoding'.",
                json!("speculative_decoding"),
                json!("unknown_parameter"),
            ),
        ),
        (
            fixture(FIRST_TURN).with(|b| b["reasoning"]["effort"] = json!("ludicrous")),
            400,
            error(
                "Invalid value: 'ludicrous'. Supported values are: 'none', 'minimal', 'low', 'medium', 'high', and 'xhigh'.",
                json!("reasoning.effort"),
                json!("invalid_value"),
            ),
        ),
        (
            fixture(FIRST_TURN).with(|b| b["tools"][0]["colour"] = json!("red")),
            400,
            error(
                "Unknown parameter: 'tools[0].colour'.",
                json!("tools[0].colour"),
                json!("unknown_parameter"),
            ),
        ),
        (
            fixture(TOOL_RESULTS).with(|b| {
                b["input"].as_array_mut().unwrap().remove(4);
            }),
            400,
            error(
                "No tool call found for function call output with call_id call_0.",
                json!("input"),
                Value::Null,
            ),
        ),
        (
            fixture(TOOL_RESULTS).with(|b| {
                b["input"].as_array_mut().unwrap().pop();
            }),
            400,
            error(
                "No tool output found for function call call_1.",
                json!("input"),
                Value::Null,
            ),
        ),
        (
            fixture(TOOL_RESULTS).with(|b| {
                let forged = json!({"type": "reasoning", "id": "rs_forged", "summary": [],
                                    "encrypted_content": "gAAAAAmadeup"});
                b["input"].as_array_mut().unwrap().insert(4, forged);
            }),
            400,
            error(
                "The encrypted content for item rs_forged could not be verified.",
                Value::Null,
                json!("invalid_encrypted_content"),
            ),
        ),
        (
            fixture(FIRST_TURN).with(|b| b["previous_response_id"] = json!("resp_earlier")),
            400,
            error(
                "Previous response with id 'resp_earlier' not found.",
                json!("previous_response_id"),
                json!("previous_response_not_found"),
            ),
        ),
    ];
    for (n, (request, code, body)) in cases.iter().enumerate() {
        let (status, got) = request.send(&fake).await;
        assert_eq!(status, *code, "case {n}: {got}");
        let got: Value = serde_json::from_str(&got).unwrap();
        assert_eq!(&got, body, "case {n}");
        let violations = fake.violations();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            violations.last().unwrap().ends_with(message),
            "case {n}: {violations:?}"
        );
    }
    assert_eq!(fake.answered().len(), 0, "no refused request is answered");
}

/// Without its bearer key the request is OpenAI's 401, whatever the fake requires; with
/// another key than the one required, the 401 shows the key masked.
#[tokio::test]
async fn keys_are_required_as_openai_requires_them() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("hi".into())));
    let (status, body) = fixture(FIRST_TURN)
        .without_header("authorization")
        .send(&fake)
        .await;
    assert_eq!(status, 401, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("You didn't provide an API key."));
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], Value::Null);

    fake.require_api_key(Some("sk-the-right-key".into()));
    let (status, body) = fixture(FIRST_TURN).send(&fake).await;
    assert_eq!(status, 401, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body["error"]["message"],
        "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys."
    );
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert_eq!(fake.answered().len(), 0);
}

/// A plain (not streamed) request gets the whole `response` object.
#[tokio::test]
async fn a_plain_request_gets_the_response_object() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("plain answer".into())));
    let resp = client()
        .post(format!("{}/responses", fake.openai_base_url()))
        .bearer_auth("sk-test")
        .json(&json!({"model": "gpt-4.1", "input": "hello", "instructions": "be brief"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["instructions"], "be brief");
    assert_eq!(body["output"][0]["type"], "message");
    assert_eq!(body["output"][0]["content"][0]["text"], "plain answer");
    assert!(body["id"].as_str().unwrap().starts_with("resp_"));
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
