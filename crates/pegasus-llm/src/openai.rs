//! The OpenAI Chat Completions API (and every server compatible with it): request body,
//! response body and stream chunks.
//!
//! The neutral transcript keeps tool results inside a user message, as Anthropic does; Chat
//! Completions wants each result as its own `tool` message right after the assistant message
//! that asked for it, which is why one neutral message can become several here. Usage is
//! normalised to Anthropic's meaning: OpenAI's `prompt_tokens` *includes* cached tokens, so they
//! are subtracted to get the tokens billed at the full input price.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use pegasus_proto::llm::{tool_uses, Block, ChatRequest, LlmError, Message, Role, StopReason};

use crate::reply::{insert_tools, without_empty_text, ProviderReply, SeenUsage};
use crate::sse::{forward, StreamParser};

/// The JSON body of `POST /chat/completions` for `req`, addressed to `model`. A `reasoning`
/// model (the model table says so) gets `max_completion_tokens`, `reasoning_effort` when the
/// request thinks, and no temperature; any other model never gets `reasoning_effort`.
pub fn request_body(
    req: &ChatRequest,
    model: &str,
    stream: bool,
    reasoning: bool,
) -> Result<Value, LlmError> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    let mut messages = Vec::new();
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for m in &req.messages {
        push_message(&mut messages, m);
    }
    body.insert("messages".into(), Value::Array(messages));
    insert_tools(&mut body, &req.tools, |t, schema| {
        json!({
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": schema}
        })
    })?;
    if reasoning {
        body.insert("max_completion_tokens".into(), json!(req.max_tokens));
        if let Some(effort @ ("low" | "medium" | "high")) = req.thinking.as_deref() {
            body.insert("reasoning_effort".into(), json!(effort));
        }
    } else {
        body.insert("max_tokens".into(), json!(req.max_tokens));
        if let Some(t) = req.temperature {
            body.insert("temperature".into(), json!(t));
        }
    }
    if stream {
        body.insert("stream".into(), json!(true));
        // Without this the stream carries no usage at all, and the call could not be priced.
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Value::Object(body))
}

/// Appends the Chat Completions messages for one neutral message.
fn push_message(out: &mut Vec<Value>, m: &Message) {
    let text: Vec<&str> = m
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    match m.role {
        Role::Assistant => {
            let calls: Vec<Value> = tool_uses(&m.content)
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            let content = if text.is_empty() {
                Value::Null
            } else {
                json!(text.join("\n"))
            };
            let mut msg = json!({"role": "assistant", "content": content});
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            out.push(msg);
        }
        Role::User => {
            // Tool results first: they must directly follow the assistant's tool calls.
            for b in &m.content {
                if let Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } = b
                {
                    // Chat Completions has no error flag; say it in the content instead.
                    let content = if *is_error {
                        format!("Error: {content}")
                    } else {
                        content.clone()
                    };
                    out.push(
                        json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}),
                    );
                }
            }
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text.join("\n")}));
            }
        }
    }
}

fn stop_reason(finish: Option<&str>, has_tool_calls: bool) -> StopReason {
    match finish {
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        // Some compatible servers say "stop" while returning tool calls; the calls are what
        // the agent must act on.
        Some("stop") if has_tool_calls => StopReason::ToolUse,
        Some("stop") => StopReason::EndTurn,
        Some("length") => StopReason::MaxTokens,
        _ => StopReason::Other,
    }
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

impl WireUsage {
    /// The counts reported; cached prompt tokens are split out of the prompt count.
    fn seen(&self) -> SeenUsage {
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        SeenUsage {
            input: self.prompt_tokens.map(|p| p.saturating_sub(cached)),
            output: self.completion_tokens,
            cache_read: if self.prompt_tokens.is_some() {
                cached
            } else {
                0
            },
            cache_write: 0,
        }
    }
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireChoiceMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireChoiceMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireCompletion {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
}

/// The `i`th tool call of an answer as a block: a server that sent no id gets `call_{i}`, so
/// the result can still be matched to it; no (or blank) arguments are `{}`.
fn tool_use(i: usize, id: Option<String>, name: String, arguments: Option<String>) -> Block {
    Block::ToolUse {
        id: id
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("call_{i}")),
        name,
        input_json: arguments
            .filter(|a| !a.trim().is_empty())
            .unwrap_or_else(|| "{}".into()),
    }
}

/// Parses a non-streamed response body (the first choice; Pegasus never asks for more).
pub fn parse_response(body: &[u8]) -> Result<ProviderReply, String> {
    let c: WireCompletion =
        serde_json::from_slice(body).map_err(|e| format!("unreadable completion body: {e}"))?;
    let choice = c
        .choices
        .into_iter()
        .next()
        .ok_or("completion has no choices")?;
    let mut content = Vec::new();
    if let Some(text) = choice.message.content {
        content.push(Block::Text { text });
    }
    let calls = choice.message.tool_calls.unwrap_or_default();
    for (i, call) in calls.into_iter().enumerate() {
        let f = call.function;
        content.push(tool_use(i, call.id, f.name, f.arguments));
    }
    let has_tools = content.iter().any(|b| matches!(b, Block::ToolUse { .. }));
    Ok(ProviderReply {
        id: c.id,
        model: c.model,
        content: without_empty_text(content),
        stop_reason: stop_reason(choice.finish_reason.as_deref(), has_tools),
        usage: c.usage.map(|u| u.seen()).unwrap_or_default(),
    })
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles a streamed completion from `data:` chunks until `data: [DONE]`. Tool calls
/// arrive keyed by `index`: the id and name with the first piece, the arguments in pieces.
#[derive(Debug, Default)]
pub struct Stream {
    id: String,
    model: String,
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<String>,
    usage: SeenUsage,
    done: bool,
    /// Bytes of answer received (text and tool calls), for an estimate if usage is missing.
    received: u64,
}

impl StreamParser for Stream {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        deltas: Option<&crate::sse::Deltas>,
    ) -> Result<bool, String> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let v: Value =
            serde_json::from_str(data).map_err(|e| format!("unreadable stream chunk: {e}"))?;
        if let Some(e) = v.get("error") {
            let message = e
                .get("message")
                .and_then(Value::as_str)
                .or_else(|| e.as_str())
                .unwrap_or("unknown error");
            return Err(format!("error in stream: {message}"));
        }
        for (key, to) in [("id", &mut self.id), ("model", &mut self.model)] {
            if let Some(s) = v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                *to = s.to_string();
            }
        }
        let choices = v.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(piece) = delta.get("content").and_then(Value::as_str) {
                forward(deltas, piece);
                self.text.push_str(piece);
                self.received += piece.len() as u64;
            }
            let calls = delta.get("tool_calls").and_then(Value::as_array);
            for (pos, call) in calls.into_iter().flatten().enumerate() {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(pos as u64);
                let slot = self.calls.entry(index).or_default();
                if let Some(id) = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    slot.id = id.to_string();
                }
                // The name comes whole with the first piece; some servers repeat it later.
                if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                    if slot.name.is_empty() {
                        slot.name = name.to_string();
                        self.received += name.len() as u64;
                    }
                }
                if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                    slot.arguments.push_str(args);
                    self.received += args.len() as u64;
                }
            }
            if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(f.to_string());
            }
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            let wire = WireUsage::deserialize(u).map_err(|e| format!("unreadable usage: {e}"))?;
            self.usage = wire.seen();
        }
        Ok(false)
    }

    fn progress(&self) -> (u64, SeenUsage, &str, &str) {
        (self.received, self.usage, &self.id, &self.model)
    }

    fn finish(self: Box<Self>) -> Result<ProviderReply, String> {
        // A finish_reason means the answer is whole even if [DONE] got lost; without either
        // the stream was cut mid-answer.
        if !self.done && self.finish.is_none() {
            return Err("stream ended before [DONE] and without a finish_reason".into());
        }
        let mut content = vec![Block::Text { text: self.text }];
        for (i, call) in self.calls.into_values().enumerate() {
            content.push(tool_use(i, Some(call.id), call.name, Some(call.arguments)));
        }
        let has_tools = content.len() > 1;
        Ok(ProviderReply {
            id: self.id,
            model: self.model,
            content: without_empty_text(content),
            stop_reason: stop_reason(self.finish.as_deref(), has_tools),
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::sse::{feed, feed_deltas, tool_use, usage};
    use pegasus_proto::llm::{CallMeta, ToolSpec};

    fn request() -> ChatRequest {
        ChatRequest {
            model: "openai/gpt-4o".into(),
            system: "be brief".into(),
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![Block::Text {
                        text: "weather in Paris and Rome?".into(),
                    }],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::ToolUse {
                            id: "call_a".into(),
                            name: "get_weather".into(),
                            input_json: r#"{"city":"Paris"}"#.into(),
                        },
                        Block::ToolUse {
                            id: "call_b".into(),
                            name: "get_weather".into(),
                            input_json: r#"{"city":"Rome"}"#.into(),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        Block::Text {
                            text: "also, hurry".into(),
                        },
                        Block::ToolResult {
                            tool_use_id: "call_a".into(),
                            content: "sunny".into(),
                            is_error: false,
                        },
                        Block::ToolResult {
                            tool_use_id: "call_b".into(),
                            content: "timeout".into(),
                            is_error: true,
                        },
                    ],
                },
            ],
            tools: vec![ToolSpec {
                name: "get_weather".into(),
                description: "Weather of a city".into(),
                input_schema_json: r#"{"type":"object","properties":{"city":{"type":"string"}}}"#
                    .into(),
            }],
            max_tokens: 500,
            temperature: Some(0.25),
            thinking: Some("medium".into()),
            timeout_s: None,
            stream: true,
            meta: CallMeta::default(),
        }
    }

    #[test]
    fn a_reasoning_model_gets_max_completion_tokens_and_effort_and_no_temperature() {
        let body = request_body(&request(), "o4-mini", false, true).unwrap();
        assert_eq!(body["max_completion_tokens"], json!(500));
        assert_eq!(body["reasoning_effort"], json!("medium"));
        assert!(body.get("max_tokens").is_none() && body.get("temperature").is_none());
    }

    #[test]
    fn request_body_matches_chat_completions() {
        let body = request_body(&request(), "gpt-4o", true, false).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "weather in Paris and Rome?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                        {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
                    {"role": "tool", "tool_call_id": "call_b", "content": "Error: timeout"},
                    {"role": "user", "content": "also, hurry"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "get_weather", "description": "Weather of a city",
                    "parameters": {"type":"object","properties":{"city":{"type":"string"}}}
                }}],
                "max_tokens": 500,
                "temperature": 0.25,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn plain_request_omits_optional_keys() {
        let mut r = request();
        r.system.clear();
        r.tools.clear();
        r.temperature = None;
        r.thinking = Some("off".into());
        r.messages.truncate(1);
        let body = request_body(&r, "llama3", false, false).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "llama3",
                "messages": [{"role": "user", "content": "weather in Paris and Rome?"}],
                "max_tokens": 500
            })
        );
        // Assistant text without tool calls has no tool_calls key at all.
        let msg = Message {
            role: Role::Assistant,
            content: vec![Block::Text { text: "ok".into() }],
        };
        let mut out = Vec::new();
        push_message(&mut out, &msg);
        assert_eq!(out, vec![json!({"role": "assistant", "content": "ok"})]);
    }

    #[test]
    fn parses_a_response_and_normalises_cached_usage() {
        let body = r#"{
          "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
             "tool_calls": [{"id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
             "finish_reason": "tool_calls"}],
          "usage": {"prompt_tokens": 1000, "completion_tokens": 30, "total_tokens": 1030,
                    "prompt_tokens_details": {"cached_tokens": 800}}
        }"#;
        let r = parse_response(body.as_bytes()).unwrap();
        assert_eq!(r.id, "chatcmpl-1");
        assert_eq!(r.model, "gpt-4o-2024-08-06");
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(
            r.content,
            vec![tool_use("call_x", "get_weather", r#"{"city":"Paris"}"#)]
        );
        assert_eq!(r.usage.complete(), usage(200, 30, 800, 0));
    }

    #[test]
    fn text_response_and_missing_usage() {
        let body = r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
        let r = parse_response(body.as_bytes()).unwrap();
        assert_eq!(r.content, vec![Block::Text { text: "hi".into() }]);
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(r.usage.complete(), None);
        let body = r#"{"id":"c","choices":[{"message":{"content":"x"},"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":null}}"#;
        let r = parse_response(body.as_bytes()).unwrap();
        assert_eq!(r.stop_reason, StopReason::MaxTokens);
        assert_eq!(r.usage.complete().unwrap().input_tokens, 5);
        assert!(parse_response(br#"{"id":"c","choices":[]}"#).is_err());
        assert!(parse_response(b"<html>").is_err());
    }

    const STREAM: &str = r#"data: {"id":"chatcmpl-s","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Check"},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"ing"},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_p","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_r","type":"function","function":{"name":"get_weather","arguments":"{\"ci"}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"ty\":\"Rome\"}"}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-s","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":12,"total_tokens":112,"prompt_tokens_details":{"cached_tokens":64}}}

data: [DONE]

"#;

    #[test]
    fn stream_assembles_tool_calls_by_index_and_usage_from_the_last_chunk() {
        let (r, deltas) = feed_deltas(Stream::default(), STREAM).unwrap();
        assert_eq!(r.id, "chatcmpl-s");
        assert_eq!(r.model, "gpt-4o-mini");
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(
            r.content,
            vec![
                Block::Text {
                    text: "Checking".into()
                },
                tool_use("call_p", "get_weather", r#"{"city":"Paris"}"#),
                tool_use("call_r", "get_weather", r#"{"city":"Rome"}"#),
            ]
        );
        assert_eq!(r.usage.complete(), usage(36, 12, 64, 0));
        assert_eq!(deltas, vec!["Check", "ing"]);
    }

    #[test]
    fn a_stream_cut_before_finish_is_an_error_but_a_lost_done_is_not() {
        let cut = &STREAM[..STREAM.find(r#""finish_reason":"tool_calls""#).unwrap()];
        let cut = &cut[..cut.rfind("data:").unwrap()];
        let err = feed(Stream::default(), cut, None).unwrap_err();
        assert!(err.contains("[DONE]"), "{err}");
        let no_done = &STREAM[..STREAM.find("data: [DONE]").unwrap()];
        let r = feed(Stream::default(), no_done, None).unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn an_error_chunk_fails_the_attempt() {
        let err = feed(
            Stream::default(),
            "data: {\"error\":{\"message\":\"server overloaded\"}}\n\n",
            None,
        )
        .unwrap_err();
        assert!(err.contains("server overloaded"), "{err}");
    }
}
