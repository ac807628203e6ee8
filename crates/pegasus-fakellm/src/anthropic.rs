//! The Anthropic Messages API wire format (`POST /v1/messages`).
//!
//! Shapes follow the public API reference: a `message` object for
//! non-streaming calls, the `message_start` … `message_stop` event sequence
//! for streaming, and `{"type":"error","error":{…}}` for failures.

use serde_json::{json, Value};

use crate::answer::Answer;
use crate::script::UsageSpec;
use crate::sse::{split_pieces, SseEvent};

/// Is the request authorised for `key` (`x-api-key` header)?
pub(crate) fn authorized(headers: &[(String, String)], key: &str) -> bool {
    headers.iter().any(|(n, v)| n == "x-api-key" && v == key)
}

/// Anthropic's error `type` for an HTTP status.
pub(crate) fn error_type(code: u16) -> &'static str {
    match code {
        400 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The error body for `code`.
pub(crate) fn error_body(code: u16, message: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type(code), "message": message}
    })
}

fn usage_json(u: &UsageSpec) -> Value {
    json!({
        "input_tokens": u.input,
        "output_tokens": u.output,
        "cache_creation_input_tokens": u.cache_write,
        "cache_read_input_tokens": u.cache_read,
    })
}

/// The non-streaming `message` response body.
pub(crate) fn message(a: &Answer) -> Value {
    let mut content = Vec::new();
    if let Some((thinking, signature)) = &a.thinking {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": signature}));
    }
    if let Some(data) = &a.redacted {
        content.push(json!({"type": "redacted_thinking", "data": data}));
    }
    if let Some(text) = &a.text {
        content.push(json!({"type": "text", "text": text}));
    }
    for t in &a.tools {
        content.push(json!({"type": "tool_use", "id": t.id, "name": t.name, "input": t.input}));
    }
    let mut msg = json!({
        "id": a.id,
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": content,
        "stop_reason": a.stop_reason("tool_use", "end_turn"),
        "stop_sequence": null,
    });
    if let (Some(u), Some(obj)) = (&a.usage, msg.as_object_mut()) {
        obj.insert("usage".into(), usage_json(u));
    }
    if let (true, Some(obj)) = (a.context_management, msg.as_object_mut()) {
        obj.insert("context_management".into(), applied_edits());
    }
    msg
}

/// The `context_management` of an answer to a request that asked for it: the edits applied.
fn applied_edits() -> Value {
    json!({"applied_edits": []})
}

/// Content blocks as stream events, numbered in order.
struct Blocks {
    out: Vec<SseEvent>,
    index: usize,
    pinged: bool,
}

impl Blocks {
    /// One block: its start, a ping right after it when `ping`, its deltas, its stop.
    fn push(&mut self, start: Value, ping: bool, deltas: impl IntoIterator<Item = Value>) {
        let index = self.index;
        self.out.push(SseEvent::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        if ping {
            self.out.push(ping_event());
            self.pinged = true;
        }
        for delta in deltas {
            self.out.push(SseEvent::named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        self.out.push(SseEvent::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        self.index += 1;
    }
}

fn ping_event() -> SseEvent {
    SseEvent::named("ping", &json!({"type": "ping"}))
}

/// The full streaming event sequence for an answer.
pub(crate) fn events(a: &Answer) -> Vec<SseEvent> {
    let mut start_msg = json!({
        "id": a.id,
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
    });
    if let (Some(u), Some(obj)) = (&a.usage, start_msg.as_object_mut()) {
        let mut usage = usage_json(u);
        usage["output_tokens"] = json!(1);
        obj.insert("usage".into(), usage);
    }
    let mut b = Blocks {
        out: vec![SseEvent::named(
            "message_start",
            &json!({"type": "message_start", "message": start_msg}),
        )],
        index: 0,
        pinged: false,
    };
    let pieces = |text: &str, n: usize, kind: &str, key: &str| {
        let deltas = split_pieces(text, n).into_iter();
        deltas
            .map(|p| json!({"type": kind, key: p}))
            .collect::<Vec<_>>()
    };
    if let Some((thinking, signature)) = &a.thinking {
        let mut deltas = pieces(thinking, 3, "thinking_delta", "thinking");
        deltas.push(json!({"type": "signature_delta", "signature": signature}));
        let start = json!({"type": "thinking", "thinking": "", "signature": ""});
        b.push(start, true, deltas);
    }
    if let Some(data) = &a.redacted {
        b.push(
            json!({"type": "redacted_thinking", "data": data}),
            false,
            [],
        );
    }
    if let Some(text) = &a.text {
        let deltas = pieces(text, a.pieces, "text_delta", "text");
        b.push(json!({"type": "text", "text": ""}), true, deltas);
    }
    for t in &a.tools {
        let deltas = pieces(&t.input.to_string(), 3, "input_json_delta", "partial_json");
        let start = json!({"type": "tool_use", "id": t.id, "name": t.name, "input": {}});
        let ping = !b.pinged;
        b.push(start, ping, deltas);
    }
    let mut out = b.out;
    if !b.pinged {
        out.push(ping_event());
    }

    let mut delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": a.stop_reason("tool_use", "end_turn"), "stop_sequence": null},
    });
    if let (Some(u), Some(obj)) = (&a.usage, delta.as_object_mut()) {
        obj.insert("usage".into(), json!({"output_tokens": u.output}));
    }
    if let (true, Some(obj)) = (a.context_management, delta.as_object_mut()) {
        obj.insert("context_management".into(), applied_edits());
    }
    out.push(SseEvent::named("message_delta", &delta));
    out.push(SseEvent::named(
        "message_stop",
        &json!({"type": "message_stop"}),
    ));
    out
}

/// A non-streaming body that is not JSON (truncated object plus garbage).
pub(crate) fn malformed_body(a: &Answer) -> String {
    crate::answer::malformed(&message(a))
}

/// An SSE event whose data line is not JSON.
pub(crate) fn malformed_event() -> SseEvent {
    SseEvent::raw(
        Some("content_block_delta"),
        "{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": <<not json>>",
    )
}
