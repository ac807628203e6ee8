//! The OpenAI Responses API wire format (`POST /v1/responses`), as OpenAI's Codex CLI calls it.
//!
//! Shapes follow the API reference and what Codex parses: a `response` object for a plain
//! call; for a streamed one, named events (`event: response.created` and a `data:` line whose
//! `type` repeats the name, each with its `sequence_number`): `response.created`,
//! `response.in_progress`, then per output item `response.output_item.added`, its deltas
//! (`response.output_text.delta` inside a content part, `response.function_call_arguments.delta`,
//! `response.custom_tool_call_input.delta`) and their `.done`, `response.output_item.done`, and
//! last `response.completed` carrying the whole response with its `usage`. Errors are OpenAI's
//! `{"error": {"message", "type", "param", "code"}}`.
//!
//! A request that asks for reasoning (`reasoning` set, a reasoning model, and `include` naming
//! `reasoning.encrypted_content`, as Codex does) gets a `reasoning` item first, whose
//! `encrypted_content` the fake signs: the client must send it back unchanged
//! ([`crate::responses_request`] checks it).

use serde_json::{json, Value};

use crate::answer::{Answer, AnswerTool};
use crate::ids;
use crate::script::UsageSpec;
use crate::sse::{split_pieces, SseEvent};

/// The 401 body of a request without a bearer key, or (when the fake requires one) with
/// another key than `required`, worded as OpenAI words them; `None` when it may pass.
pub(crate) fn unauthorized(headers: &[(String, String)], required: Option<&str>) -> Option<Value> {
    let given = headers
        .iter()
        .find(|(n, _)| n == "authorization")
        .and_then(|(_, v)| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, k)| k.trim())
        .filter(|k| !k.is_empty());
    let (message, code) = match (given, required) {
        (None, _) => (
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (Username: YOUR_KEY) when using HTTP Basic auth. You can obtain an API key from https://platform.openai.com/account/api-keys.".to_string(),
            Value::Null,
        ),
        (Some(k), Some(r)) if k != r => (
            format!(
                "Incorrect API key provided: {}. You can find your API key at https://platform.openai.com/account/api-keys.",
                masked(k)
            ),
            json!("invalid_api_key"),
        ),
        _ => return None,
    };
    Some(
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": code}}),
    )
}

/// A key as OpenAI shows it back: its first three and last four characters (a short one
/// whole).
fn masked(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 8 {
        return key.to_string();
    }
    let head: String = chars[..3].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 7))
}

/// OpenAI's answer to a prompt longer than the model's window, as the Responses API words it.
pub(crate) fn context_error_body() -> Value {
    json!({
        "error": {
            "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded"
        }
    })
}

fn usage_json(u: &UsageSpec) -> Value {
    let input = u.input + u.cache_read + u.cache_write;
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": u.cache_read},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + u.output,
    })
}

/// The `encrypted_content` of the reasoning item with id `id`: signed by the fake, so a
/// client cannot make one up or alter it.
pub(crate) fn encrypted_reasoning(id: &str) -> String {
    ids::redacted_data(id)
}

/// What of the request the response object echoes, as the real API echoes it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Echo {
    pub instructions: Value,
    pub reasoning: Value,
    pub store: bool,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Value,
    pub parallel_tool_calls: bool,
    pub prompt_cache_key: Value,
    /// Answer with a signed `reasoning` item first (see the module's doc).
    pub reasoning_item: bool,
    /// The names of the request's `custom` tools: a call of one is a `custom_tool_call`.
    pub custom_tools: Vec<String>,
}

impl Echo {
    /// What a request's body asks to be echoed.
    pub fn from_body(body: &Value) -> Echo {
        let get = |k: &str| body.get(k).cloned().unwrap_or(Value::Null);
        let encrypted = body
            .get("include")
            .and_then(Value::as_array)
            .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content"));
        let model = body.get("model").and_then(Value::as_str).unwrap_or("");
        let custom_tools = body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("custom"))
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .map(str::to_string)
            .collect();
        Echo {
            instructions: get("instructions"),
            reasoning: get("reasoning"),
            store: body.get("store").and_then(Value::as_bool).unwrap_or(true),
            text: get("text"),
            tool_choice: body.get("tool_choice").cloned().unwrap_or(json!("auto")),
            tools: body.get("tools").cloned().unwrap_or(json!([])),
            parallel_tool_calls: body
                .get("parallel_tool_calls")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            prompt_cache_key: get("prompt_cache_key"),
            reasoning_item: encrypted
                && body.get("reasoning").is_some_and(|r| !r.is_null())
                && crate::validate::openai_model_reasons(model),
            custom_tools,
        }
    }
}

/// The output items of an answer, with their ids, in order.
struct Items {
    reasoning: Option<Value>,
    message: Option<(String, String)>,
    calls: Vec<Value>,
}

/// A finished call item: a `custom_tool_call` (input text) for a tool the request declared
/// `custom`, else a `function_call` (arguments as JSON text).
fn call_item(t: &AnswerTool, custom: bool) -> Value {
    if custom {
        let input = match &t.input {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        json!({"id": ids::unique("ctc_"), "type": "custom_tool_call", "status": "completed",
               "call_id": t.id, "name": t.name, "input": input})
    } else {
        let mut item = json!({"id": ids::unique("fc_"), "type": "function_call",
               "status": "completed", "arguments": t.input.to_string(), "call_id": t.id,
               "name": t.name});
        if let Some(ns) = &t.namespace {
            item["namespace"] = json!(ns);
        }
        item
    }
}

impl Items {
    fn of(a: &Answer, echo: &Echo) -> Items {
        let reasoning = echo.reasoning_item.then(|| {
            let id = ids::unique("rs_");
            let sealed = encrypted_reasoning(&id);
            json!({"id": id, "type": "reasoning", "summary": [], "encrypted_content": sealed})
        });
        let calls = a
            .tools
            .iter()
            .map(|t| call_item(t, echo.custom_tools.contains(&t.name)))
            .collect();
        Items {
            reasoning,
            message: a.text.clone().map(|t| (ids::unique("msg_"), t)),
            calls,
        }
    }

    /// The finished items, as `output` lists them.
    fn output(&self) -> Vec<Value> {
        let mut out: Vec<Value> = self.reasoning.iter().cloned().collect();
        if let Some((id, text)) = &self.message {
            out.push(message_item(id, Some(text)));
        }
        out.extend(self.calls.iter().cloned());
        out
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

/// An assistant message item: finished with its text, or just begun (`None`).
fn message_item(id: &str, text: Option<&str>) -> Value {
    match text {
        Some(t) => json!({"id": id, "type": "message", "status": "completed",
                          "content": [text_part(t)], "role": "assistant"}),
        None => json!({"id": id, "type": "message", "status": "in_progress",
                       "content": [], "role": "assistant"}),
    }
}

/// The response object: `status`, its output items and (once completed) its usage.
fn response(a: &Answer, echo: &Echo, status: &str, output: Vec<Value>) -> Value {
    let done = status == "completed";
    json!({
        "id": a.id,
        "object": "response",
        "created_at": a.created,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": echo.instructions,
        "max_output_tokens": null,
        "max_tool_calls": null,
        "model": a.model,
        "output": output,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "previous_response_id": null,
        "prompt_cache_key": echo.prompt_cache_key,
        "reasoning": echo.reasoning,
        "safety_identifier": null,
        "service_tier": "default",
        "store": echo.store,
        "temperature": 1.0,
        "text": echo.text,
        "tool_choice": echo.tool_choice,
        "tools": echo.tools,
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": if done { a.usage.as_ref().map(usage_json) } else { None },
        "user": null,
        "metadata": {},
    })
}

/// The non-streaming response body.
pub(crate) fn body(a: &Answer, echo: &Echo) -> Value {
    response(a, echo, "completed", Items::of(a, echo).output())
}

/// Numbers events as the API does (`sequence_number` from 0) and names them by their type.
struct Seq {
    out: Vec<SseEvent>,
}

impl Seq {
    fn push(&mut self, kind: &'static str, mut data: Value) {
        if let Some(o) = data.as_object_mut() {
            o.insert("type".into(), json!(kind));
            o.insert("sequence_number".into(), json!(self.out.len()));
        }
        self.out.push(SseEvent::named(kind, &data));
    }
}

/// The full streaming event sequence for an answer.
pub(crate) fn events(a: &Answer, echo: &Echo) -> Vec<SseEvent> {
    let items = Items::of(a, echo);
    let mut s = Seq { out: Vec::new() };
    let begun = response(a, echo, "in_progress", Vec::new());
    s.push("response.created", json!({"response": begun}));
    s.push("response.in_progress", json!({"response": begun}));
    let mut index = 0;
    if let Some(item) = &items.reasoning {
        let mut added = item.clone();
        added["encrypted_content"] = Value::Null;
        s.push(
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        );
        s.push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        index += 1;
    }
    if let Some((id, text)) = &items.message {
        let at = json!({"item_id": id, "output_index": index, "content_index": 0});
        let with = |extra: Value| {
            let mut v = at.clone();
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v
        };
        s.push(
            "response.output_item.added",
            json!({"output_index": index, "item": message_item(id, None)}),
        );
        s.push(
            "response.content_part.added",
            with(json!({"part": text_part("")})),
        );
        for piece in split_pieces(text, a.pieces) {
            s.push(
                "response.output_text.delta",
                with(json!({"delta": piece, "logprobs": []})),
            );
        }
        s.push(
            "response.output_text.done",
            with(json!({"text": text, "logprobs": []})),
        );
        s.push(
            "response.content_part.done",
            with(json!({"part": text_part(text)})),
        );
        s.push(
            "response.output_item.done",
            json!({"output_index": index, "item": message_item(id, Some(text))}),
        );
        index += 1;
    }
    for item in &items.calls {
        let custom = item["type"] == "custom_tool_call";
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        let (field, delta_kind, done_kind) = if custom {
            (
                "input",
                "response.custom_tool_call_input.delta",
                "response.custom_tool_call_input.done",
            )
        } else {
            (
                "arguments",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
            )
        };
        added[field] = json!("");
        s.push(
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        );
        let whole = item[field].as_str().unwrap_or_default();
        let at = json!({"item_id": item["id"], "output_index": index});
        for piece in split_pieces(whole, 3) {
            let mut d = at.clone();
            d["delta"] = json!(piece);
            s.push(delta_kind, d);
        }
        let mut d = at.clone();
        d[field] = json!(whole);
        s.push(done_kind, d);
        s.push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        index += 1;
    }
    s.push(
        "response.completed",
        json!({"response": response(a, echo, "completed", items.output())}),
    );
    s.out
}

/// A non-streaming body that is not JSON (truncated object plus garbage).
pub(crate) fn malformed_body(a: &Answer, echo: &Echo) -> String {
    crate::answer::malformed(&body(a, echo))
}

/// An SSE event whose data line is not JSON.
pub(crate) fn malformed_event() -> SseEvent {
    SseEvent::raw(
        Some("response.output_text.delta"),
        "{\"type\": \"response.output_text.delta\", \"delta\": <<not json>>",
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::record::Format;
    use crate::script::ToolCall;

    fn parse(events: &[SseEvent]) -> Vec<Value> {
        events
            .iter()
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect()
    }

    #[test]
    fn text_stream_is_numbered_and_named() {
        let a = Answer::new(
            Format::Responses,
            "gpt-5.5",
            Some("hello there".into()),
            &[],
            None,
            40,
        );
        let ev = events(&a, &Echo::default());
        let data = parse(&ev);
        let kinds: Vec<&str> = data.iter().map(|d| d["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        for (i, (e, d)) in ev.iter().zip(&data).enumerate() {
            assert_eq!(d["sequence_number"], i);
            assert_eq!(Some(d["type"].as_str().unwrap()), e.event);
        }
        let text: String = data
            .iter()
            .filter(|d| d["type"] == "response.output_text.delta")
            .map(|d| d["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "hello there");
        let done = &data[10]["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["content"][0]["text"], "hello there");
        assert!(done["usage"]["input_tokens"].as_u64().unwrap() > 0);
        assert!(data[0]["response"]["usage"].is_null());
    }

    #[test]
    fn calls_are_function_or_custom_as_the_request_declared_them() {
        let calls = [
            ToolCall::new("exec_command", json!({"cmd": "ls"})),
            ToolCall::new("apply_patch", json!("*** Begin Patch\n*** End Patch\n")),
        ];
        let a = Answer::new(Format::Responses, "gpt-5.5", None, &calls, None, 40);
        let echo = Echo::from_body(&json!({"model": "gpt-5.5",
            "reasoning": {"effort": "low"}, "include": ["reasoning.encrypted_content"],
            "tools": [{"type": "function", "name": "exec_command", "parameters": {}},
                      {"type": "custom", "name": "apply_patch"}]}));
        let out = body(&a, &echo)["output"].clone();
        assert_eq!(out[0]["type"], "reasoning");
        let id = out[0]["id"].as_str().unwrap();
        assert_eq!(out[0]["encrypted_content"], encrypted_reasoning(id));
        assert_eq!(out[1]["type"], "function_call");
        assert_eq!(out[1]["arguments"], "{\"cmd\":\"ls\"}");
        assert!(out[1]["call_id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(out[2]["type"], "custom_tool_call");
        assert_eq!(out[2]["input"], "*** Begin Patch\n*** End Patch\n");

        let data = parse(&events(&a, &echo));
        let args: String = data
            .iter()
            .filter(|d| d["type"] == "response.function_call_arguments.delta")
            .map(|d| d["delta"].as_str().unwrap())
            .collect();
        assert_eq!(args, "{\"cmd\":\"ls\"}");
        assert!(data
            .iter()
            .any(|d| d["type"] == "response.custom_tool_call_input.done"));
    }
}
