//! The OpenAI Chat Completions wire format (`POST /v1/chat/completions`).
//!
//! Shapes follow the public API reference: a `chat.completion` object for
//! non-streaming calls, `chat.completion.chunk` objects on `data:` lines
//! ending with `data: [DONE]` for streaming, and `{"error":{…}}` for failures.

use serde_json::{json, Value};

use crate::answer::Answer;
use crate::script::UsageSpec;
use crate::sse::{split_pieces, SseEvent};

/// Is the request authorised for `key` (`Authorization: Bearer <key>`)?
pub(crate) fn authorized(headers: &[(String, String)], key: &str) -> bool {
    headers.iter().any(|(n, v)| {
        n == "authorization"
            && v.split_once(' ')
                .is_some_and(|(scheme, k)| scheme.eq_ignore_ascii_case("bearer") && k.trim() == key)
    })
}

/// OpenAI's error `type` for an HTTP status.
pub(crate) fn error_type(code: u16) -> &'static str {
    match code {
        429 => "rate_limit_exceeded",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

/// The error body for `code`.
pub(crate) fn error_body(code: u16, message: &str) -> Value {
    json!({
        "error": {"message": message, "type": error_type(code), "param": null, "code": null}
    })
}

/// OpenAI's answer to a prompt longer than the model's window.
pub(crate) fn context_error_body(message: &str) -> Value {
    json!({
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded"
        }
    })
}

fn usage_json(u: &UsageSpec) -> Value {
    let prompt = u.input + u.cache_read + u.cache_write;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": u.output,
        "total_tokens": prompt + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cache_read},
        "completion_tokens_details": {"reasoning_tokens": 0},
    })
}

/// The non-streaming `chat.completion` response body.
pub(crate) fn completion(a: &Answer) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": a.text,
        "refusal": null,
    });
    if !a.tools.is_empty() {
        let calls: Vec<Value> = a
            .tools
            .iter()
            .map(|t| {
                json!({"id": t.id, "type": "function",
                       "function": {"name": t.name, "arguments": t.input.to_string()}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": a.id,
        "object": "chat.completion",
        "created": a.created,
        "model": a.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": a.stop_reason("tool_calls", "stop"),
        }],
        "usage": a.usage.as_ref().map(usage_json),
    })
}

/// The full streaming chunk sequence, `[DONE]` included.
pub(crate) fn events(a: &Answer, include_usage: bool) -> Vec<SseEvent> {
    let chunk = |delta: Value, finish: Option<&str>| {
        let mut c = json!({
            "id": a.id,
            "object": "chat.completion.chunk",
            "created": a.created,
            "model": a.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            // With include_usage the real API sends `usage: null` on every
            // chunk except the final usage-only chunk.
            c["usage"] = Value::Null;
        }
        SseEvent::data(&c)
    };

    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    if let Some(text) = &a.text {
        for piece in split_pieces(text, a.pieces) {
            out.push(chunk(json!({"content": piece}), None));
        }
    }
    for (i, t) in a.tools.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": t.id, "type": "function",
                                   "function": {"name": t.name, "arguments": ""}}]}),
            None,
        ));
        for piece in split_pieces(&t.input.to_string(), 3) {
            out.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                None,
            ));
        }
    }
    out.push(chunk(json!({}), Some(a.stop_reason("tool_calls", "stop"))));
    if include_usage {
        out.push(SseEvent::data(&json!({
            "id": a.id,
            "object": "chat.completion.chunk",
            "created": a.created,
            "model": a.model,
            "choices": [],
            "usage": a.usage.as_ref().map(usage_json),
        })));
    }
    out.push(SseEvent::raw(None, "[DONE]"));
    out
}

/// A non-streaming body that is not JSON (truncated object plus garbage).
pub(crate) fn malformed_body(a: &Answer) -> String {
    crate::answer::malformed(&completion(a))
}

/// An SSE data line that is not JSON.
pub(crate) fn malformed_event() -> SseEvent {
    SseEvent::raw(
        None,
        "{\"id\": \"chatcmpl-broken\", \"object\": \"chat.completion.chunk\", \"choices\": [{\"delta\": <<not json>>",
    )
}
