//! The Anthropic Messages API: request body, response body and stream events.
//!
//! Shapes follow <https://docs.anthropic.com/en/api/messages> exactly, so the official API (and
//! a fake server built from the SDK's types) accepts them: tool inputs and schemas travel as
//! JSON objects, not strings; `system` and `tools` are left out when empty rather than sent
//! empty.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use pegasus_proto::llm::{Block, ChatRequest, LlmError, Role, StopReason};

use crate::reply::{insert_tools, without_empty_text, ProviderReply, SeenUsage};
use crate::sse::{forward, StreamParser};

/// The API version header every request carries.
pub const API_VERSION: &str = "2023-06-01";

/// Extended-thinking budget for a reasoning effort; `None` = thinking off.
pub(crate) fn thinking_budget(thinking: Option<&str>) -> Option<u32> {
    match thinking? {
        "low" => Some(1024),
        "medium" => Some(4096),
        "high" => Some(16384),
        _ => None,
    }
}

/// The JSON body of `POST /v1/messages` for `req`, addressed to `model` (no provider prefix).
pub fn request_body(req: &ChatRequest, model: &str, stream: bool) -> Result<Value, LlmError> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    let mut budget = thinking_budget(req.thinking.as_deref());
    if budget.is_some() && !continuation_can_think(&req.messages) {
        // The API wants the assistant turn of an open tool loop to start with its thinking
        // block when thinking is on; a turn made without thinking cannot grow one. Finish
        // this loop without thinking rather than be refused with a 400.
        tracing::info!(
            "thinking off for this call: the tool loop it continues was started without thinking"
        );
        budget = None;
    }
    // With thinking on, max_tokens must exceed the thinking budget; the caller's max_tokens is
    // what it wants for the answer itself, so the budget is added on top.
    let max_tokens = req.max_tokens.saturating_add(budget.unwrap_or(0));
    body.insert("max_tokens".into(), json!(max_tokens));
    if !req.system.is_empty() {
        body.insert("system".into(), json!(req.system));
    }
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| message(m, budget.is_some()))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    insert_tools(
        &mut body,
        &req.tools,
        |t, schema| json!({"name": t.name, "description": t.description, "input_schema": schema}),
    )?;
    match budget {
        Some(b) => {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": b}),
            );
            // The API refuses any temperature but 1 with thinking enabled; leaving it out
            // keeps a role's temperature setting from breaking a thinking call.
        }
        None => {
            if let Some(t) = req.temperature {
                body.insert("temperature".into(), json!(t));
            }
        }
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(body))
}

/// Whether a request may have thinking on: unless it continues a tool loop (the last message
/// carries tool results) whose assistant turn does not start with a thinking block.
fn continuation_can_think(messages: &[crate::Message]) -> bool {
    let n = messages.len();
    let continues = messages.last().is_some_and(|m| {
        m.role == Role::User
            && m.content
                .iter()
                .any(|b| matches!(b, Block::ToolResult { .. }))
    });
    if !continues || n < 2 {
        return true;
    }
    messages[n - 2].role == Role::Assistant
        && matches!(
            messages[n - 2].content.first(),
            Some(Block::Thinking { .. } | Block::RedactedThinking { .. })
        )
}

/// One message on the wire. Thinking blocks are sent back unchanged (signature and all) when
/// the call thinks, and left out when it does not.
fn message(m: &crate::Message, thinking: bool) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let mut blocks: Vec<Value> = m
        .content
        .iter()
        .filter(|b| match b {
            Block::Text { text } => !text.is_empty(),
            Block::Thinking { .. } | Block::RedactedThinking { .. } => thinking,
            _ => true,
        })
        .map(|b| match b {
            Block::Thinking {
                thinking,
                signature,
            } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
            Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
            Block::Text { text } => json!({"type": "text", "text": text}),
            Block::ToolUse {
                id,
                name,
                input_json,
            } => {
                // The API wants an object; a model's broken JSON (e.g. cut by max_tokens) is
                // sent as {} so the transcript stays valid and the tool result explains it.
                let input = parse_object(input_json).unwrap_or_else(|| {
                    tracing::warn!(tool = %name, "tool_use input is not a JSON object; sending {{}}");
                    Value::Object(Map::new())
                });
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => json!({
                "type": "tool_result",
                "tool_use_id": tool_use_id,
                "content": content,
                "is_error": is_error,
            }),
        })
        .collect();
    if blocks.is_empty() {
        // Only empty text: keep one so the API's error (if any) names the real problem.
        blocks.push(json!({"type": "text", "text": ""}));
    }
    json!({"role": role, "content": blocks})
}

fn parse_object(text: &str) -> Option<Value> {
    let text = if text.trim().is_empty() { "{}" } else { text };
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

fn stop_reason(s: Option<&str>) -> StopReason {
    match s {
        Some("end_turn") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        _ => StopReason::Other,
    }
}

/// `usage` as Anthropic reports it; every field optional so a partial report is detected.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Later reports (message_delta) refine earlier ones (message_start) field by field.
    fn merge(&mut self, later: WireUsage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens = later
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens = later
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
    }

    /// The counts reported; cache counts default to 0 (the API leaves them out when caching
    /// was not involved).
    fn seen(&self) -> SeenUsage {
        SeenUsage {
            input: self.input_tokens,
            output: self.output_tokens,
            cache_read: self.cache_read_input_tokens.unwrap_or(0),
            cache_write: self.cache_creation_input_tokens.unwrap_or(0),
        }
    }
}

/// The usage an Anthropic `usage` object reports (of a whole message, or of a stream's
/// event); a count it leaves out stays unknown.
pub(crate) fn seen_usage(usage: Option<&Value>) -> SeenUsage {
    usage
        .and_then(|u| WireUsage::deserialize(u).ok())
        .map(|u| u.seen())
        .unwrap_or_default()
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum WireBlock {
    #[serde(rename = "text")]
    Text { text: String },
    #[serde(rename = "tool_use")]
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    #[serde(rename = "thinking")]
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    #[serde(rename = "redacted_thinking")]
    RedactedThinking { data: String },
    /// Server tools, citations...: not part of the neutral transcript.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireMessage {
    id: String,
    #[serde(default)]
    model: String,
    content: Vec<WireBlock>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

/// Parses a non-streamed response body.
pub fn parse_response(body: &[u8]) -> Result<ProviderReply, String> {
    let m: WireMessage =
        serde_json::from_slice(body).map_err(|e| format!("unreadable message body: {e}"))?;
    let content = m
        .content
        .into_iter()
        .filter_map(|b| match b {
            WireBlock::Text { text } => Some(Block::Text { text }),
            WireBlock::ToolUse { id, name, input } => Some(Block::ToolUse {
                id,
                name,
                input_json: input.to_string(),
            }),
            WireBlock::Thinking {
                thinking,
                signature,
            } => Some(Block::Thinking {
                thinking,
                signature,
            }),
            WireBlock::RedactedThinking { data } => Some(Block::RedactedThinking { data }),
            WireBlock::Other => None,
        })
        .collect();
    Ok(ProviderReply {
        id: m.id,
        model: m.model,
        content: without_empty_text(content),
        stop_reason: stop_reason(m.stop_reason.as_deref()),
        usage: m.usage.map(|u| u.seen()).unwrap_or_default(),
    })
}

/// Assembles a streamed message: `message_start`, then per content block `start`/`delta`*/
/// `stop`, then `message_delta` (stop reason, output tokens) and `message_stop`.
#[derive(Debug, Default)]
pub struct Stream {
    id: String,
    model: String,
    /// The content blocks as far as their deltas came; `None` for a kind not kept (server
    /// tools, citations...).
    blocks: BTreeMap<u64, Option<Block>>,
    stop_reason: Option<String>,
    usage: WireUsage,
    saw_usage: bool,
    stopped: bool,
    /// Bytes of answer received, for an estimate if usage is missing.
    received: u64,
}

impl StreamParser for Stream {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        deltas: Option<&crate::sse::Deltas>,
    ) -> Result<bool, String> {
        // The JSON's own `type` is authoritative (it always equals the SSE event name).
        let v: Value =
            serde_json::from_str(data).map_err(|e| format!("unreadable stream event: {e}"))?;
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                let m = v.get("message").cloned().unwrap_or(Value::Null);
                self.id = str_at(&m, "id");
                self.model = str_at(&m, "model");
                self.take_usage(m.get("usage"));
            }
            "content_block_start" => {
                let b = v.get("content_block").cloned().unwrap_or(Value::Null);
                let block = match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = str_at(&b, "text");
                        forward(deltas, &text);
                        Some(Block::Text { text })
                    }
                    Some("tool_use") => Some(Block::ToolUse {
                        id: str_at(&b, "id"),
                        name: str_at(&b, "name"),
                        input_json: String::new(),
                    }),
                    Some("thinking") => Some(Block::Thinking {
                        thinking: str_at(&b, "thinking"),
                        signature: str_at(&b, "signature"),
                    }),
                    Some("redacted_thinking") => Some(Block::RedactedThinking {
                        data: str_at(&b, "data"),
                    }),
                    _ => None,
                };
                self.received += match &block {
                    Some(Block::Text { text }) => text.len(),
                    Some(Block::ToolUse { id, name, .. }) => id.len() + name.len(),
                    _ => 0,
                } as u64;
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let d = v.get("delta").cloned().unwrap_or(Value::Null);
                for key in ["text", "partial_json", "thinking", "signature"] {
                    if let Some(piece) = d.get(key).and_then(Value::as_str) {
                        self.received += piece.len() as u64;
                    }
                }
                let block = self.blocks.get_mut(&index).and_then(Option::as_mut);
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = str_at(&d, "text");
                        forward(deltas, &piece);
                        match self.blocks.entry(index).or_insert_with(|| {
                            Some(Block::Text {
                                text: String::new(),
                            })
                        }) {
                            Some(Block::Text { text }) => text.push_str(&piece),
                            _ => return Err(format!("text delta for non-text block {index}")),
                        }
                    }
                    Some("input_json_delta") => match block {
                        Some(Block::ToolUse { input_json, .. }) => {
                            input_json.push_str(&str_at(&d, "partial_json"))
                        }
                        _ => return Err(format!("tool input delta for non-tool block {index}")),
                    },
                    Some("thinking_delta") => match block {
                        Some(Block::Thinking { thinking, .. }) => {
                            thinking.push_str(&str_at(&d, "thinking"))
                        }
                        _ => return Err(format!("thinking delta for non-thinking block {index}")),
                    },
                    Some("signature_delta") => match block {
                        Some(Block::Thinking { signature, .. }) => {
                            signature.push_str(&str_at(&d, "signature"))
                        }
                        _ => return Err(format!("signature delta for non-thinking block {index}")),
                    },
                    // citations and delta types newer than this code: not kept.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_string());
                }
                self.take_usage(v.get("usage"));
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => {
                let message = v
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error");
                return Err(format!("error event in stream: {message}"));
            }
            // ping, content_block_stop and event types newer than this code.
            _ => {}
        }
        Ok(false)
    }

    fn progress(&self) -> (u64, SeenUsage, &str, &str) {
        (self.received, self.usage.seen(), &self.id, &self.model)
    }

    fn finish(self: Box<Self>) -> Result<ProviderReply, String> {
        if !self.stopped {
            return Err("stream ended before message_stop".into());
        }
        let content = self
            .blocks
            .into_values()
            .flatten()
            .map(|b| match b {
                // A tool called without arguments streams none.
                Block::ToolUse {
                    id,
                    name,
                    input_json,
                } if input_json.trim().is_empty() => Block::ToolUse {
                    id,
                    name,
                    input_json: "{}".into(),
                },
                b => b,
            })
            .collect();
        Ok(ProviderReply {
            id: self.id,
            model: self.model,
            content: without_empty_text(content),
            stop_reason: stop_reason(self.stop_reason.as_deref()),
            usage: if self.saw_usage {
                self.usage.seen()
            } else {
                SeenUsage::default()
            },
        })
    }
}

impl Stream {
    fn take_usage(&mut self, usage: Option<&Value>) {
        if let Some(u) = usage.and_then(|u| WireUsage::deserialize(u).ok()) {
            self.usage.merge(u);
            self.saw_usage = true;
        }
    }
}

fn str_at(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::sse::{feed, feed_deltas, tool_use, usage};
    use pegasus_proto::llm::{CallMeta, Message, ToolSpec};

    fn request() -> ChatRequest {
        ChatRequest {
            model: "anthropic/claude-sonnet-4-5".into(),
            system: "be brief".into(),
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![Block::Text {
                        text: "weather?".into(),
                    }],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Text {
                            text: "checking".into(),
                        },
                        Block::ToolUse {
                            id: "toolu_1".into(),
                            name: "get_weather".into(),
                            input_json: r#"{"city":"Paris"}"#.into(),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: "toolu_1".into(),
                        content: "sunny".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![ToolSpec {
                name: "get_weather".into(),
                description: "Weather of a city".into(),
                input_schema_json:
                    r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#
                        .into(),
            }],
            max_tokens: 1000,
            temperature: Some(0.5),
            thinking: None,
            timeout_s: None,
            stream: false,
            meta: CallMeta::default(),
        }
    }

    #[test]
    fn request_body_matches_the_messages_api() {
        let body = request_body(&request(), "claude-sonnet-4-5", false).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 1000,
                "system": "be brief",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "checking"},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": false}
                    ]}
                ],
                "tools": [{
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "input_schema": {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}
                }],
                "temperature": 0.5
            })
        );
    }

    #[test]
    fn empty_system_and_tools_are_omitted_and_stream_is_flagged() {
        let mut r = request();
        r.system.clear();
        r.tools.clear();
        r.temperature = None;
        let body = request_body(&r, "m", true).unwrap();
        let o = body.as_object().unwrap();
        assert!(!o.contains_key("system"));
        assert!(!o.contains_key("tools"));
        assert!(!o.contains_key("temperature"));
        assert!(!o.contains_key("thinking"));
        assert_eq!(o["stream"], json!(true));
    }

    #[test]
    fn thinking_levels_set_a_budget_on_top_of_max_tokens() {
        for (level, budget) in [("low", 1024), ("medium", 4096), ("high", 16384)] {
            let mut r = request();
            // A fresh request (this one's tool loop was started without thinking).
            r.messages.truncate(1);
            r.thinking = Some(level.into());
            let body = request_body(&r, "m", false).unwrap();
            assert_eq!(
                body["thinking"],
                json!({"type": "enabled", "budget_tokens": budget})
            );
            assert_eq!(body["max_tokens"], json!(1000 + budget));
            assert!(body.get("temperature").is_none());
        }
        let mut r = request();
        r.thinking = Some("off".into());
        let body = request_body(&r, "m", false).unwrap();
        assert!(body.get("thinking").is_none());
        assert_eq!(body["max_tokens"], json!(1000));
    }

    #[test]
    fn a_bad_tool_schema_is_an_error_and_bad_tool_input_becomes_empty() {
        let mut r = request();
        r.tools[0].input_schema_json = "not json".into();
        assert!(request_body(&r, "m", false).is_err());
        let mut r = request();
        r.messages[1].content[1] = Block::ToolUse {
            id: "t".into(),
            name: "n".into(),
            input_json: r#"{"city": "Par"#.into(),
        };
        let body = request_body(&r, "m", false).unwrap();
        assert_eq!(body["messages"][1]["content"][1]["input"], json!({}));
    }

    #[test]
    fn parses_a_response_with_text_tool_use_and_thinking() {
        let body = r#"{
          "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
          "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Paris"}}
          ],
          "stop_reason": "tool_use", "stop_sequence": null,
          "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 10}
        }"#;
        let r = parse_response(body.as_bytes()).unwrap();
        assert_eq!(r.id, "msg_01");
        assert_eq!(r.model, "claude-sonnet-4-5-20250929");
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(
            r.content,
            vec![
                Block::Thinking {
                    thinking: "hmm".into(),
                    signature: "sig".into()
                },
                Block::Text {
                    text: "Let me check.".into()
                },
                tool_use("toolu_9", "get_weather", r#"{"city":"Paris"}"#)
            ]
        );
        assert_eq!(r.usage.complete(), usage(100, 20, 50, 10));
    }

    #[test]
    fn missing_usage_is_unknown_not_zero() {
        let body = r#"{"id":"m","model":"x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}"#;
        let r = parse_response(body.as_bytes()).unwrap();
        assert_eq!(r.usage.complete(), None);
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        let body =
            r#"{"id":"m","content":[],"stop_reason":"max_tokens","usage":{"output_tokens":3}}"#;
        let r = parse_response(body.as_bytes()).unwrap();
        assert_eq!(r.usage.complete(), None);
        // A partial report: the count given is kept, the missing one estimated.
        let (u, estimated) = r.usage.or_estimate(40, 1);
        assert!(estimated);
        assert_eq!((u.input_tokens, u.output_tokens), (40, 3));
        assert_eq!(r.stop_reason, StopReason::MaxTokens);
        assert!(parse_response(b"{\"id\": ").is_err());
    }

    const STREAM: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_s","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1,"cache_read_input_tokens":5,"cache_creation_input_tokens":0}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_s","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Pa"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ris\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}

event: message_stop
data: {"type":"message_stop"}

"#;

    #[test]
    fn stream_assembles_text_and_split_tool_json_and_forwards_deltas() {
        let (r, deltas) = feed_deltas(Stream::default(), STREAM).unwrap();
        assert_eq!(r.id, "msg_s");
        assert_eq!(r.model, "claude-haiku-4-5");
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(
            r.content,
            vec![
                Block::Text {
                    text: "Hello".into()
                },
                tool_use("toolu_s", "get_weather", r#"{"city": "Paris"}"#)
            ]
        );
        assert_eq!(r.usage.complete(), usage(25, 42, 5, 0));
        assert_eq!(deltas, vec!["Hel", "lo"]);
    }

    #[test]
    fn a_stream_without_message_stop_is_cut() {
        let cut = &STREAM[..STREAM.find("event: message_delta").unwrap()];
        let err = feed(Stream::default(), cut, None).unwrap_err();
        assert!(err.contains("message_stop"), "{err}");
    }

    #[test]
    fn an_error_event_fails_the_attempt() {
        let text = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let err = feed(Stream::default(), text, None).unwrap_err();
        assert!(err.contains("Overloaded"), "{err}");
    }

    #[test]
    fn a_tool_call_without_input_deltas_has_empty_object_input() {
        let text = r#"event: message_start
data: {"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":1,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"now","input":{}}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}

event: message_stop
data: {"type":"message_stop"}
"#;
        let r = feed(Stream::default(), text, None).unwrap();
        assert_eq!(r.content, vec![tool_use("t", "now", "{}")]);
        assert_eq!(r.usage.complete().unwrap().output_tokens, 7);
    }
}
