//! Exact response shapes of both wire formats, streamed and not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pegasus_fakellm::{FakeLlm, Format, Match, Reply, Rule, ToolCall, UsageSpec};
use serde_json::{json, Value};

fn weather_tools() -> Vec<ToolCall> {
    vec![
        ToolCall::new("get_weather", json!({"city": "Paris", "units": "celsius"})),
        ToolCall::new("get_time", json!({"tz": "Europe/Paris"})),
    ]
}

#[tokio::test]
async fn anthropic_non_streaming_text_exact_shape() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(
        Rule::new(
            Match::LastUserTextContains("hello".into()),
            Reply::Text("Hi there!".into()),
        )
        .usage(UsageSpec {
            input: 11,
            output: 7,
            cache_read: 3,
            cache_write: 2,
        }),
    );
    let resp = anthropic(&fake.anthropic_base_url(), &anthropic_body("hello", false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v: Value = resp.json().await.unwrap();
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("msg_"), "{id}");
    assert_eq!(
        v,
        json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": "Hi there!"}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": 11, "output_tokens": 7,
                      "cache_creation_input_tokens": 2, "cache_read_input_tokens": 3}
        })
    );
    let rec = fake.requests();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].format, Format::Anthropic);
    assert_eq!(rec[0].path, "/v1/messages");
    assert!(!rec[0].stream);
    assert_eq!(rec[0].header("X-Api-Key"), Some("sk-ant-test"));
    assert_eq!(rec[0].body["messages"][0]["content"], "hello");
    assert!(fake.violations().is_empty());
}

#[tokio::test]
async fn anthropic_non_streaming_text_then_tools() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::Any,
        Reply::TextThenTools("Checking.".into(), weather_tools()),
    ));
    let v: Value = anthropic(&fake.base_url(), &anthropic_body("weather?", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["stop_reason"], "tool_use");
    let content = v["content"].as_array().unwrap();
    assert_eq!(content.len(), 3);
    assert_eq!(content[0], json!({"type": "text", "text": "Checking."}));
    for (block, (name, input)) in content[1..].iter().zip([
        ("get_weather", json!({"city": "Paris", "units": "celsius"})),
        ("get_time", json!({"tz": "Europe/Paris"})),
    ]) {
        let id = block["id"].as_str().unwrap();
        assert!(id.starts_with("toolu_"));
        assert_eq!(
            block,
            &json!({"type": "tool_use", "id": id, "name": name, "input": input})
        );
    }
    assert_ne!(content[1]["id"], content[2]["id"]);
    // Default usage estimate is present and positive.
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() >= 1);
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() >= 1);
    assert_eq!(v["usage"]["cache_read_input_tokens"], 0);
}

#[tokio::test]
async fn anthropic_streaming_text_and_tools() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::Any,
        Reply::TextThenTools("Let me look that up.".into(), weather_tools()),
    ));
    let resp = anthropic(&fake.base_url(), &anthropic_body("weather?", true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&resp.text().await.unwrap());
    for e in &events {
        let name = e.event.as_deref().unwrap();
        assert_eq!(e.json()["type"], name, "event name equals data.type");
    }
    let names: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(
        &names[names.len() - 2..],
        &["message_delta", "message_stop"]
    );
    assert!(names.contains(&"ping"));

    let start = events[0].json();
    let msg = &start["message"];
    assert!(msg["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["role"], "assistant");
    assert_eq!(msg["model"], "claude-test");
    assert_eq!(msg["content"], json!([]));
    assert_eq!(msg["stop_reason"], Value::Null);
    assert_eq!(msg["stop_sequence"], Value::Null);
    assert_eq!(msg["usage"]["output_tokens"], 1);
    assert!(msg["usage"]["input_tokens"].as_u64().unwrap() >= 1);

    // Rebuild the blocks the way a client must.
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    let mut text_deltas = 0;
    let mut json_deltas = vec![0; 3];
    for e in &events {
        let d = e.json();
        match e.event.as_deref().unwrap() {
            "content_block_start" => {
                assert_eq!(d["index"].as_u64().unwrap() as usize, blocks.len());
                blocks.push(d["content_block"].clone());
                partial.push(String::new());
            }
            "content_block_delta" => {
                let i = d["index"].as_u64().unwrap() as usize;
                match d["delta"]["type"].as_str().unwrap() {
                    "text_delta" => {
                        text_deltas += 1;
                        let t = format!(
                            "{}{}",
                            blocks[i]["text"].as_str().unwrap(),
                            d["delta"]["text"].as_str().unwrap()
                        );
                        blocks[i]["text"] = json!(t);
                    }
                    "input_json_delta" => {
                        json_deltas[i] += 1;
                        partial[i].push_str(d["delta"]["partial_json"].as_str().unwrap());
                    }
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => {
                let i = d["index"].as_u64().unwrap() as usize;
                if blocks[i]["type"] == "tool_use" {
                    blocks[i]["input"] = serde_json::from_str(&partial[i]).unwrap();
                }
            }
            "message_delta" => {
                assert_eq!(
                    d["delta"],
                    json!({"stop_reason": "tool_use", "stop_sequence": null})
                );
                assert!(d["usage"]["output_tokens"].as_u64().unwrap() >= 1);
            }
            _ => {}
        }
    }
    assert!(text_deltas >= 2, "text is split across deltas");
    assert!(
        json_deltas[1] >= 2 && json_deltas[2] >= 2,
        "tool json is split: {json_deltas:?}"
    );
    assert_eq!(
        blocks[0],
        json!({"type": "text", "text": "Let me look that up."})
    );
    assert_eq!(blocks[1]["type"], "tool_use");
    assert_eq!(blocks[1]["name"], "get_weather");
    assert!(blocks[1]["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(
        blocks[1]["input"],
        json!({"city": "Paris", "units": "celsius"})
    );
    assert_eq!(blocks[2]["name"], "get_time");
    assert_eq!(blocks[2]["input"], json!({"tz": "Europe/Paris"}));
    assert!(fake.requests()[0].stream);
}

#[tokio::test]
async fn openai_non_streaming_text_exact_shape() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(
        Rule::new(Match::Format(Format::OpenAi), Reply::Text("Hello!".into())).usage(UsageSpec {
            input: 10,
            output: 5,
            cache_read: 4,
            cache_write: 0,
        }),
    );
    let resp = openai(&fake.openai_base_url(), &openai_body("hi", false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    let created = v["created"].as_u64().unwrap();
    assert!(created > 1_600_000_000);
    assert_eq!(
        v,
        json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": "gpt-test",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!", "refusal": null},
                "logprobs": null,
                "finish_reason": "stop"
            }],
            "usage": {"prompt_tokens": 14, "completion_tokens": 5, "total_tokens": 19,
                      "prompt_tokens_details": {"cached_tokens": 4},
                      "completion_tokens_details": {"reasoning_tokens": 0}}
        })
    );
    assert_eq!(fake.requests()[0].format, Format::OpenAi);
    assert_eq!(fake.requests()[0].path, "/v1/chat/completions");
}

#[tokio::test]
async fn openai_non_streaming_tools() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Tools(weather_tools())));
    let v: Value = openai(&fake.openai_base_url(), &openai_body("weather?", false))
        .await
        .json()
        .await
        .unwrap();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    let id = calls[0]["id"].as_str().unwrap();
    assert!(id.starts_with("call_"));
    assert_eq!(
        calls[0],
        json!({"id": id, "type": "function",
               "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"units\":\"celsius\"}"}})
    );
    let args: Value =
        serde_json::from_str(calls[1]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"tz": "Europe/Paris"}));
}

#[tokio::test]
async fn openai_text_only_has_no_tool_calls_key() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("x".into())));
    let v: Value = openai(&fake.openai_base_url(), &openai_body("hi", false))
        .await
        .json()
        .await
        .unwrap();
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
}

#[tokio::test]
async fn openai_streaming_text_and_tools() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::Any,
        Reply::TextThenTools("Looking it up now.".into(), weather_tools()),
    ));
    let resp = openai(&fake.openai_base_url(), &openai_body("weather?", true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&resp.text().await.unwrap());
    assert!(events.iter().all(|e| e.event.is_none()));
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(Event::json).collect();

    let first = &chunks[0];
    assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["model"], "gpt-test");
    assert!(first["created"].as_u64().is_some());
    assert_eq!(first["choices"][0]["index"], 0);
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(first["choices"][0]["finish_reason"], Value::Null);
    assert!(chunks.iter().all(|c| c["id"] == first["id"]));

    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert!(usage_chunk["usage"]["prompt_tokens"].as_u64().unwrap() >= 1);
    assert!(usage_chunk["usage"]["total_tokens"].as_u64().unwrap() >= 2);

    let mut text = String::new();
    let mut text_pieces = 0;
    let mut calls: Vec<(String, String, String, usize)> = Vec::new(); // id, name, args, pieces
    let mut finish = None;
    for c in &chunks[..chunks.len() - 1] {
        let choice = &c["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            if !t.is_empty() {
                text_pieces += 1;
            }
            text.push_str(t);
        }
        for tc in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                assert_eq!(tc["type"], "function");
                calls.push((
                    tc["id"].as_str().unwrap().to_string(),
                    tc["function"]["name"].as_str().unwrap().to_string(),
                    String::new(),
                    0,
                ));
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                if !a.is_empty() {
                    calls[i].3 += 1;
                }
                calls[i].2.push_str(a);
            }
        }
    }
    assert_eq!(text, "Looking it up now.");
    assert!(text_pieces >= 2);
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    assert_eq!(calls.len(), 2);
    assert!(calls[0].0.starts_with("call_"));
    assert_eq!(calls[0].1, "get_weather");
    assert!(calls[0].3 >= 2, "arguments split across deltas");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].2).unwrap(),
        json!({"city": "Paris", "units": "celsius"})
    );
    assert_eq!(calls[1].1, "get_time");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[1].2).unwrap(),
        json!({"tz": "Europe/Paris"})
    );
}

#[tokio::test]
async fn openai_streaming_without_include_usage_has_no_usage_chunk() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("plain".into())));
    let body = json!({"model": "gpt-test", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let events = parse_sse(
        &openai(&fake.openai_base_url(), &body)
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(events.last().unwrap().data, "[DONE]");
    for e in &events[..events.len() - 1] {
        let c = e.json();
        assert!(c.get("usage").is_none());
        assert_eq!(c["choices"].as_array().unwrap().len(), 1);
    }
    let finish = events[events.len() - 2].json();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["choices"][0]["delta"], json!({}));
}

#[test]
fn works_from_sync_code_and_stops_on_drop() {
    let fake = FakeLlm::start().unwrap();
    let addr = fake.addr();
    let clone = fake.clone();
    drop(fake);
    // Still served through the clone.
    assert!(std::net::TcpStream::connect(addr).is_ok());
    drop(clone);
    // Last handle gone: the listener is closed.
    assert!(std::net::TcpStream::connect(addr).is_err());
}
