//! Scripting, validation, auth and fault injection, against the real server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use pegasus_fakellm::{
    FakeLlm, Fault, Format, Match, Reply, Rule, ToolCall, NO_SCRIPTED_REPLY, WRONG_USAGE_TEXT,
};
use serde_json::{json, Value};

fn fault(f: Fault) -> Reply {
    Reply::Fault(f)
}

async fn anthropic_text(fake: &FakeLlm, user: &str) -> String {
    let v: Value = anthropic(&fake.base_url(), &anthropic_body(user, false))
        .await
        .json()
        .await
        .unwrap();
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn times_falls_through_to_next_rule() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("first".into())).times(2));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("rest".into())));
    assert_eq!(anthropic_text(&fake, "a").await, "first");
    assert_eq!(anthropic_text(&fake, "b").await, "first");
    assert_eq!(anthropic_text(&fake, "c").await, "rest");
    assert_eq!(anthropic_text(&fake, "d").await, "rest");
    assert_eq!(fake.request_count(), 4);
    assert!(fake.violations().is_empty());
}

#[tokio::test]
async fn matchers_select_rules() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Nth(1), Reply::Text("nth1".into())));
    fake.add_rule(Rule::new(
        Match::Model("special".into()),
        Reply::Text("model".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::SystemContains("pirate".into()),
            Match::Format(Format::OpenAi),
        ]),
        Reply::Text("arr".into()),
    ));
    fake.add_rule(Rule::new(
        Match::LastToolResultContains("42".into()),
        Reply::Text("answer is 42".into()),
    ));
    fake.add_rule(Rule::new(
        Match::All(vec![
            Match::NoToolResultYet,
            Match::LastUserTextContains("compute".into()),
        ]),
        Reply::Tools(vec![ToolCall::new("calc", json!({"expr": "6*7"}))]),
    ));
    fake.add_rule(Rule::new(
        Match::AnyTextContains("needle".into()),
        Reply::Text("found".into()),
    ));

    assert_eq!(anthropic_text(&fake, "whatever").await, "nth1");

    let mut body = anthropic_body("x", false);
    body["model"] = json!("special");
    let v: Value = anthropic(&fake.base_url(), &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["text"], "model");

    let body = json!({"model": "m", "messages": [
        {"role": "developer", "content": "talk like a pirate"},
        {"role": "user", "content": "hi"}]});
    let v: Value = openai(&fake.openai_base_url(), &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "arr");

    // First turn: tool call.
    let v: Value = anthropic(&fake.base_url(), &anthropic_body("please compute", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["stop_reason"], "tool_use");
    let tool_id = v["content"][0]["id"].as_str().unwrap().to_string();

    // Second turn with the tool result: text answer (last user text still says "compute").
    let body = json!({"model": "m", "max_tokens": 100, "messages": [
        {"role": "user", "content": "please compute"},
        {"role": "assistant", "content": v["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id,
                                       "content": [{"type": "text", "text": "result: 42"}]}]}
    ]});
    let v: Value = anthropic(&fake.base_url(), &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["text"], "answer is 42");

    assert_eq!(
        anthropic_text(&fake, "a needle in a haystack").await,
        "found"
    );
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[tokio::test]
async fn status_429_with_retry_after() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::Any,
        fault(Fault::Status {
            code: 429,
            message: "slow down".into(),
            retry_after_s: Some(7),
        }),
    ));
    let resp = anthropic(&fake.base_url(), &anthropic_body("hi", false)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    );

    let resp = openai(&fake.openai_base_url(), &openai_body("hi", false)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "7");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v,
        json!({"error": {"message": "slow down", "type": "rate_limit_exceeded", "param": null, "code": null}})
    );
}

#[tokio::test]
async fn status_529_overloaded_and_500() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(
        Rule::new(
            Match::Any,
            fault(Fault::Status {
                code: 529,
                message: "Overloaded".into(),
                retry_after_s: None,
            }),
        )
        .times(1),
    );
    fake.add_rule(Rule::new(
        Match::Any,
        fault(Fault::Status {
            code: 500,
            message: "boom".into(),
            retry_after_s: None,
        }),
    ));
    let resp = anthropic(&fake.base_url(), &anthropic_body("hi", true)).await;
    assert_eq!(resp.status().as_u16(), 529);
    assert!(resp.headers().get("retry-after").is_none());
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "overloaded_error");
    let resp = openai(&fake.openai_base_url(), &openai_body("hi", false)).await;
    assert_eq!(resp.status(), 500);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "server_error");
}

#[tokio::test]
async fn cut_stream_closes_mid_stream() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, fault(Fault::CutStream)));

    // Streaming: some events arrive, then the body breaks; no message_stop.
    let mut resp = anthropic(&fake.base_url(), &anthropic_body("hi", true)).await;
    assert_eq!(resp.status(), 200);
    let mut got = Vec::new();
    let err = loop {
        match resp.chunk().await {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => panic!("stream ended cleanly; expected a cut"),
            Err(e) => break e,
        }
    };
    assert!(err.is_body() || err.is_decode(), "{err:?}");
    let text = String::from_utf8(got).unwrap();
    assert!(text.contains("event: message_start"));
    assert!(!text.contains("message_stop"));

    let resp = openai(&fake.openai_base_url(), &openai_body("hi", true)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.is_err());

    // Non-streaming: Content-Length promises more than is sent.
    let resp = anthropic(&fake.base_url(), &anthropic_body("hi", false)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.bytes().await.is_err());
}

#[tokio::test]
async fn malformed_json() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, fault(Fault::MalformedJson)));

    let resp = anthropic(&fake.base_url(), &anthropic_body("hi", false)).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");

    let resp = openai(&fake.openai_base_url(), &openai_body("hi", false)).await;
    assert!(resp.json::<Value>().await.is_err());

    for streamed in [
        anthropic(&fake.base_url(), &anthropic_body("hi", true))
            .await
            .text()
            .await
            .unwrap(),
        openai(&fake.openai_base_url(), &openai_body("hi", true))
            .await
            .text()
            .await
            .unwrap(),
    ] {
        let events = parse_sse(&streamed);
        assert!(serde_json::from_str::<Value>(&events[0].data).is_ok());
        assert!(
            events
                .iter()
                .any(|e| serde_json::from_str::<Value>(&e.data).is_err()),
            "{streamed}"
        );
    }
}

#[tokio::test]
async fn wrong_usage() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, fault(Fault::WrongUsage)));
    let v: Value = anthropic(&fake.base_url(), &anthropic_body("hi", false))
        .await
        .json()
        .await
        .unwrap();
    assert!(v.get("usage").is_none());
    assert_eq!(v["content"][0]["text"], WRONG_USAGE_TEXT);
    let v: Value = openai(&fake.openai_base_url(), &openai_body("hi", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["usage"], Value::Null);
    assert_eq!(v["choices"][0]["message"]["content"], WRONG_USAGE_TEXT);

    let events = parse_sse(
        &anthropic(&fake.base_url(), &anthropic_body("hi", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    assert!(events[0].json()["message"].get("usage").is_none());
    let events = parse_sse(
        &openai(&fake.openai_base_url(), &openai_body("hi", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    let usage_chunk = events[events.len() - 2].json();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"], Value::Null);
}

#[tokio::test]
async fn anthropic_transcript_violation_gives_400() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("never".into())));
    let body = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]},
        {"role": "user", "content": "I forgot the tool result"}
    ]});
    let resp = anthropic(&fake.base_url(), &body).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("toolu_1"));
    let violations = fake.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].starts_with("request #1:"));
    assert!(violations[0].contains("toolu_1"));

    // Missing max_tokens is a violation too.
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(anthropic(&fake.base_url(), &body).await.status(), 400);
    assert!(fake.violations().iter().any(|v| v.contains("max_tokens")));
}

#[tokio::test]
async fn openai_transcript_violation_gives_400() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("never".into())));
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_x", "content": "orphan"}
    ]});
    let resp = openai(&fake.openai_base_url(), &body).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(fake.violations().len(), 1);
    assert!(fake.violations()[0].contains("call_x"));
}

#[tokio::test]
async fn require_api_key_gives_401() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("ok".into())));
    fake.require_api_key(Some("secret".into()));

    let resp = anthropic(&fake.base_url(), &anthropic_body("hi", false)).await; // sends sk-ant-test
    assert_eq!(resp.status(), 401);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "authentication_error");

    let resp = openai(&fake.openai_base_url(), &openai_body("hi", false)).await;
    assert_eq!(resp.status(), 401);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let ok = client()
        .post(format!("{}/v1/messages", fake.base_url()))
        .header("x-api-key", "secret")
        .header("anthropic-version", "2023-06-01")
        .json(&anthropic_body("hi", false))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let ok = client()
        .post(format!("{}/chat/completions", fake.openai_base_url()))
        .bearer_auth("secret")
        .json(&openai_body("hi", false))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);

    fake.require_api_key(None);
    assert_eq!(
        anthropic(&fake.base_url(), &anthropic_body("hi", false))
            .await
            .status(),
        200
    );
    assert!(fake.violations().is_empty());
}

#[tokio::test]
async fn unmatched_request_gives_500_and_violation() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::LastUserTextContains("other".into()),
        Reply::Text("x".into()),
    ));
    let resp = anthropic(
        &fake.base_url(),
        &anthropic_body("nobody scripted this", false),
    )
    .await;
    assert_eq!(resp.status(), 500);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "api_error");
    assert_eq!(v["error"]["message"], NO_SCRIPTED_REPLY);
    let resp = openai(&fake.openai_base_url(), &openai_body("nor this", false)).await;
    assert_eq!(resp.status(), 500);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["message"], NO_SCRIPTED_REPLY);
    assert_eq!(
        fake.violations(),
        vec![
            "unmatched request #1: nobody scripted this".to_string(),
            "unmatched request #2: nor this".to_string()
        ]
    );
}

#[tokio::test]
async fn stall_keeps_request_pending() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, fault(Fault::Stall)));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client
        .post(format!("{}/v1/messages", fake.base_url()))
        .header("anthropic-version", "2023-06-01")
        .json(&anthropic_body("hi", false))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn stall_stream_sends_first_events_then_hangs() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, fault(Fault::StallStream)));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let mut resp = client
        .post(format!("{}/v1/messages", fake.base_url()))
        .header("anthropic-version", "2023-06-01")
        .json(&anthropic_body("hi", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut got = Vec::new();
    let err = loop {
        match resp.chunk().await {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => panic!("stream ended; expected a stall"),
            Err(e) => break e,
        }
    };
    assert!(err.is_timeout(), "{err:?}");
    let text = String::from_utf8(got).unwrap();
    assert!(text.starts_with("event: message_start"), "{text}");
}

#[tokio::test]
async fn delay_then_reply() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::Any,
        fault(Fault::Delay {
            ms: 150,
            then: Box::new(Reply::Text("late".into())),
        }),
    ));
    let started = Instant::now();
    assert_eq!(anthropic_text(&fake, "hi").await, "late");
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn clock_stamps_each_delta_as_it_is_written() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::Any,
        fault(Fault::Clock {
            deltas: 5,
            gap_ms: 30,
        }),
    ));
    let now_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64
    };
    // Streamed, both formats: five text deltas, each one stamp, 30 ms apart.
    for openai_format in [false, true] {
        let before = now_us();
        let body = if openai_format {
            openai(&fake.openai_base_url(), &openai_body("hi", true)).await
        } else {
            anthropic(&fake.base_url(), &anthropic_body("hi", true)).await
        }
        .text()
        .await
        .unwrap();
        let after = now_us();
        let deltas: Vec<String> = parse_sse(&body)
            .iter()
            .filter(|e| !e.data.starts_with('['))
            .map(|e| e.json())
            .filter_map(|v| {
                let t = if openai_format {
                    v["choices"][0]["delta"]["content"].as_str()
                } else {
                    v["delta"]["text"].as_str()
                };
                t.filter(|t| !t.is_empty()).map(str::to_string)
            })
            .collect();
        assert_eq!(deltas.len(), 5, "{body}");
        let stamps: Vec<u64> = deltas
            .iter()
            .map(|d| {
                let s: Vec<u64> = pegasus_fakellm::clock_stamps(d).collect();
                assert_eq!(s.len(), 1, "{d:?}");
                s[0]
            })
            .collect();
        assert!(stamps[0] >= before && stamps[4] <= after, "{stamps:?}");
        for w in stamps.windows(2) {
            assert!(w[1] >= w[0] + 29_000, "{stamps:?}");
        }
    }
    // Plain: one stamp, five times.
    let text = anthropic_text(&fake, "hi").await;
    let stamps: Vec<u64> = pegasus_fakellm::clock_stamps(&text).collect();
    assert_eq!(stamps.len(), 5, "{text:?}");
    assert!(stamps.iter().all(|s| *s == stamps[0]));
}

#[tokio::test]
async fn garbage_requests_are_rejected() {
    let fake = FakeLlm::start().unwrap();
    // Body that is not JSON.
    let resp = client()
        .post(format!("{}/v1/messages", fake.base_url()))
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(fake.request_count(), 1);
    assert!(fake.violations()[0].contains("not valid JSON"));

    // Unknown endpoint.
    let resp = client()
        .get(format!("{}/v1/files", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(fake.violations()[1].contains("GET /v1/files"));

    // A context-window probe (the gateway asks servers on 127.0.0.1): 404 as from a hosted
    // API, counted apart, neither a request nor a violation.
    for (method, path) in [
        (reqwest::Method::GET, "/props"),
        (reqwest::Method::GET, "/v1/models"),
        (reqwest::Method::POST, "/api/show"),
    ] {
        let resp = client()
            .request(method, format!("{}{path}", fake.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
    }
    assert_eq!(fake.window_probes(), 3);
    assert_eq!(fake.request_count(), 1);
    assert_eq!(fake.violations().len(), 2, "{:?}", fake.violations());

    // Chunked request bodies are refused.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(fake.addr()).await.unwrap();
    s.write_all(
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(out.contains("connection: close"));
}

#[test]
fn blocking_client_from_sync_test() {
    // A sync test drives its own runtime; the fake lives on its own thread.
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("sync ok".into())));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let text = rt.block_on(anthropic_text(&fake, "hi"));
    assert_eq!(text, "sync ok");
}

#[tokio::test]
async fn dropping_the_server_releases_stalled_clients() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, fault(Fault::Stall)));
    let url = format!("{}/v1/messages", fake.base_url());
    let pending = tokio::spawn(async move {
        client()
            .post(url)
            .header("anthropic-version", "2023-06-01")
            .json(&anthropic_body("hi", false))
            .send()
            .await
    });
    while fake.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(fake);
    let result = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap();
    assert!(
        result.is_err(),
        "connection should be closed by the shutdown"
    );
}

#[tokio::test]
async fn large_body_with_expect_continue() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("big ok".into())));
    let body = anthropic_body(&"x".repeat(200_000), false).to_string();
    let mut s = tokio::net::TcpStream::connect(fake.addr()).await.unwrap();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 25];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.contains("big ok"));
    let usage_in = fake.requests().len();
    assert_eq!(usage_in, 1);
}

/// The `content-length` of a response head.
fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a content-length")
        .trim()
        .parse()
        .unwrap()
}

/// Reads one response with a `content-length` body from `s` (no more): its head and body.
async fn read_response(s: &mut tokio::net::TcpStream) -> (String, String) {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).await.unwrap(), 1, "closed mid-head");
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let len = content_length(&head);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    (head, String::from_utf8(body).unwrap())
}

#[tokio::test]
async fn connections_persist_as_the_real_apis_do() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(
        Match::Nth(2),
        fault(Fault::Status {
            code: 529,
            message: "busy".into(),
            retry_after_s: None,
        }),
    ));
    fake.add_rule(Rule::new(Match::Any, Reply::Text("kept".into())));
    let body = anthropic_body("hi", false).to_string();
    let request = |close: bool| {
        format!(
            "POST /v1/messages HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "connection: close\r\n" } else { "" }
        )
    };
    let mut s = tokio::net::TcpStream::connect(fake.addr()).await.unwrap();
    // One answer, then an error answer, on the same connection: neither closes it.
    s.write_all(request(false).as_bytes()).await.unwrap();
    let (head, text) = read_response(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert!(text.contains("kept"));
    s.write_all(request(false).as_bytes()).await.unwrap();
    let (head, _) = read_response(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 529 "), "{head}");
    // Two requests written at once (pipelined): both answered, in order; the second asks to
    // close, and the server does after answering it.
    let two = format!("{}{}", request(false), request(true));
    s.write_all(two.as_bytes()).await.unwrap();
    let (head, text) = read_response(&mut s).await;
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\n") && text.contains("kept"),
        "{head}"
    );
    let (head, text) = read_response(&mut s).await;
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\n") && text.contains("kept"),
        "{head}"
    );
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "nothing after the last answer");
    assert_eq!(fake.request_count(), 4);
    assert_eq!(fake.connection_count(), 1);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

#[tokio::test]
async fn a_pooling_client_reuses_its_connection() {
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("pooled".into())));
    // One client, several calls, streamed and not: all answered over pooled connections.
    let client = client();
    for stream in [false, true, false] {
        let resp = client
            .post(format!("{}/v1/messages", fake.base_url()))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .json(&anthropic_body("hi", stream))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap();
        let end = if stream { "message_stop" } else { "pooled" };
        assert!(text.contains(end), "{text}");
    }
    assert_eq!(fake.request_count(), 3);
    assert_eq!(fake.connection_count(), 1, "one connection, reused");
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}

/// A small answer is sent as a real server sends it, head and body in one write: the first
/// read after the socket turns readable returns all of it. (Written in two, a client woken for
/// the head alone pays a second wake-up for the body, which the benchmarks would count as the
/// client's cost.)
#[tokio::test]
async fn a_small_answer_arrives_in_one_piece() {
    use tokio::io::AsyncWriteExt;
    let fake = FakeLlm::start().unwrap();
    fake.add_rule(Rule::new(Match::Any, Reply::Text("whole".into())));
    let body = anthropic_body("hi", false).to_string();
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(fake.addr()).await.unwrap();
    for _ in 0..20 {
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = loop {
            s.readable().await.unwrap();
            match s.try_read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => panic!("read failed: {e}"),
            }
        };
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        let (head, rest) = got.split_once("\r\n\r\n").expect("a whole head");
        let len = content_length(head);
        assert_eq!(rest.len(), len, "the body came with the head: {got}");
        assert!(rest.contains("whole"), "{got}");
    }
    assert_eq!(fake.connection_count(), 1);
}

/// The fake can play a llama.cpp server for its window (`/props`), hold every probe as a slow
/// server does, and says which answers it began, with the client's `X-Client-Request-Id`.
#[tokio::test]
async fn window_probes_can_be_answered_and_held_and_answers_are_recorded() {
    let fake = FakeLlm::start().unwrap();
    fake.report_window(Some(4096));
    let props: Value = client()
        .get(format!("{}/props", fake.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(props["default_generation_settings"]["n_ctx"], 4096);
    // The other probes still answer as a hosted API.
    let models = client()
        .get(format!("{}/v1/models", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 404);

    fake.hold_window_probes(Some(Duration::from_secs(30)));
    let held = client()
        .get(format!("{}/props", fake.base_url()))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(
        held.is_err_and(|e| e.is_timeout()),
        "a held probe is not answered"
    );
    fake.hold_window_probes(None);
    assert_eq!(fake.window_probes(), 3);

    fake.add_rule(Rule::new(Match::Any, Reply::Text("hi".into())));
    let v: Value = client()
        .post(format!("{}/v1/messages", fake.base_url()))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("x-client-request-id", "c1-2-3")
        .json(&anthropic_body("hello", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answered = fake.answered();
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].request_id, v["id"].as_str().unwrap());
    assert_eq!(answered[0].client_request_id.as_deref(), Some("c1-2-3"));
    assert_eq!(answered[0].request, 1);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
