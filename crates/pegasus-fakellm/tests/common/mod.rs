//! Helpers shared by the integration tests: request builders, recorded requests replayed, and
//! an SSE parser.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use pegasus_fakellm::FakeLlm;
use serde_json::{json, Value};

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

/// POST an Anthropic request with the usual headers.
pub async fn anthropic(base: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{base}/v1/messages"))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// POST an OpenAI request with the usual headers.
pub async fn openai(base_v1: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{base_v1}/chat/completions"))
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

pub fn anthropic_body(user: &str, stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "system": "You are Pegasus.",
        "messages": [{"role": "user", "content": user}],
        "stream": stream,
    })
}

pub fn openai_body(user: &str, stream: bool) -> Value {
    json!({
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are Pegasus."},
            {"role": "user", "content": user}
        ],
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

/// One parsed SSE event.
#[derive(Debug, Clone)]
pub struct Event {
    pub event: Option<String>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.data))
    }
}

/// Parses a complete SSE body into events.
pub fn parse_sse(text: &str) -> Vec<Event> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push(d.to_string());
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            Event {
                event,
                data: data.join("\n"),
            }
        })
        .collect()
}

/// A request a real client sent, recorded as a fixture (`{"path", "headers", "body"}`): its
/// target, headers and body, to be replayed (and mutated) against the fake.
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

/// Reads a recorded request.
pub fn fixture(text: &str) -> Recorded {
    let v: Value = serde_json::from_str(text).unwrap();
    let headers = v["headers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    Recorded {
        path: v["path"].as_str().unwrap().to_string(),
        headers,
        body: v["body"].clone(),
    }
}

impl Recorded {
    /// Without header `name`.
    pub fn without_header(mut self, name: &str) -> Recorded {
        self.headers.retain(|(n, _)| n != name);
        self
    }

    /// With its body changed by `f`.
    pub fn with(mut self, f: impl FnOnce(&mut Value)) -> Recorded {
        f(&mut self.body);
        self
    }

    /// Sends it to `fake` as recorded: its status and body.
    pub async fn send(&self, fake: &FakeLlm) -> (u16, String) {
        let mut req = client().post(format!("{}{}", fake.base_url(), self.path));
        for (n, v) in &self.headers {
            req = req.header(n, v);
        }
        let resp = req.body(self.body.to_string()).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }
}
