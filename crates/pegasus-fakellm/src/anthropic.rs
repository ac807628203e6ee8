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

fn stop_reason(a: &Answer) -> &'static str {
    if a.is_tool_stop() {
        "tool_use"
    } else {
        "end_turn"
    }
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
        "stop_reason": stop_reason(a),
        "stop_sequence": null,
    });
    if let (Some(u), Some(obj)) = (&a.usage, msg.as_object_mut()) {
        obj.insert("usage".into(), usage_json(u));
    }
    msg
}

/// The full streaming event sequence for an answer.
pub(crate) fn events(a: &Answer) -> Vec<SseEvent> {
    let mut out = Vec::new();
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
    out.push(SseEvent::named(
        "message_start",
        &json!({"type": "message_start", "message": start_msg}),
    ));

    let ping = || SseEvent::named("ping", &json!({"type": "ping"}));
    let mut pinged = false;
    let mut index = 0usize;

    if let Some((thinking, signature)) = &a.thinking {
        out.push(SseEvent::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        out.push(ping());
        pinged = true;
        for piece in split_pieces(thinking, 3) {
            out.push(SseEvent::named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}}),
            ));
        }
        out.push(SseEvent::named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": signature}}),
        ));
        out.push(SseEvent::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if let Some(data) = &a.redacted {
        out.push(SseEvent::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "redacted_thinking", "data": data}}),
        ));
        out.push(SseEvent::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }

    if let Some(text) = &a.text {
        out.push(SseEvent::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        out.push(ping());
        pinged = true;
        for piece in split_pieces(text, a.pieces) {
            out.push(SseEvent::named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        out.push(SseEvent::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for t in &a.tools {
        out.push(SseEvent::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": t.id, "name": t.name, "input": {}}}),
        ));
        if !pinged {
            out.push(ping());
            pinged = true;
        }
        for piece in split_pieces(&t.input.to_string(), 3) {
            out.push(SseEvent::named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        out.push(SseEvent::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if !pinged {
        out.push(ping());
    }

    let mut delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(a), "stop_sequence": null},
    });
    if let (Some(u), Some(obj)) = (&a.usage, delta.as_object_mut()) {
        obj.insert("usage".into(), json!({"output_tokens": u.output}));
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
