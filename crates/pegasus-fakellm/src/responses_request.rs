//! What an OpenAI Responses request (`POST /v1/responses`) may carry, checked as strictly as
//! the API checks it: the top-level parameters, `reasoning`, `text`, `include`, the tools'
//! shapes, the `input` items, and the pairing of every tool output with its call.
//!
//! The API refuses a request with a 400 `invalid_request_error` naming the first problem:
//! `Unknown parameter: 'x'.` (`code: unknown_parameter`, `param: x`), `Invalid value: ...`
//! (`invalid_value`), `Missing required parameter: 'x'.`, `No tool call found for function call
//! output with call_id X.`, `No tool output found for function call X.`. The shapes accepted are
//! the reference's and what Codex 0.171.0 really sends (its recorded requests are the fixtures
//! of `tests/codex_requests.rs`): `client_metadata`, `prompt_cache_key`, `namespace` and
//! `custom` tools, message items with their `id`, reasoning items sent back with the
//! `encrypted_content` the fake signed.

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::responses::encrypted_reasoning;

/// One reason the API refuses a request: its message, the parameter it names and its code.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Problem {
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl Problem {
    fn new(message: String, param: impl Into<Option<String>>, code: Option<&'static str>) -> Self {
        Problem {
            message,
            param: param.into(),
            code,
        }
    }

    /// The API's 400 body for this problem.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": "invalid_request_error",
                         "param": self.param, "code": self.code}})
    }
}

fn unknown(path: &str) -> Problem {
    Problem::new(
        format!("Unknown parameter: '{path}'."),
        path.to_string(),
        Some("unknown_parameter"),
    )
}

fn invalid(path: &str, value: &str, allowed: &[&str]) -> Problem {
    let quoted: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
    let list = match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{}, and {last}", rest.join(", ")),
        _ => quoted.join(""),
    };
    Problem::new(
        format!("Invalid value: '{value}'. Supported values are: {list}."),
        path.to_string(),
        Some("invalid_value"),
    )
}

fn missing(path: &str) -> Problem {
    Problem::new(
        format!("Missing required parameter: '{path}'."),
        path.to_string(),
        Some("missing_required_parameter"),
    )
}

/// The request body's top-level parameters the API knows.
const FIELDS: &[&str] = &[
    "background",
    "client_metadata",
    "context_management",
    "conversation",
    "include",
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "model",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

/// `include` values the API accepts.
const INCLUDES: &[&str] = &[
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
    "web_search_call.action.sources",
    "web_search_call.results",
];

const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];
const SUMMARIES: &[&str] = &["auto", "concise", "detailed"];
const VERBOSITIES: &[&str] = &["low", "medium", "high"];

/// Hosted tool types, accepted with whatever settings they carry (never run by the fake).
const HOSTED_TOOLS: &[&str] = &[
    "web_search",
    "web_search_preview",
    "file_search",
    "computer_use_preview",
    "code_interpreter",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "tool_search",
];

/// Every problem of a Responses request body, in the order the API would find them (it
/// reports the first).
pub(crate) fn check(body: &Value) -> Vec<Problem> {
    let mut p = Vec::new();
    let Some(obj) = body.as_object() else {
        return vec![Problem::new(
            "We could not parse the JSON body of your request.".into(),
            None,
            None,
        )];
    };
    for key in obj.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
        p.push(unknown(key));
    }
    match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        _ => p.push(missing("model")),
    }
    if let Some(r) = obj.get("reasoning").filter(|r| !r.is_null()) {
        reasoning(r, obj.get("model"), &mut p);
    }
    if let Some(t) = obj.get("text") {
        text(t, &mut p);
    }
    for (i, inc) in obj
        .get("include")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let v = inc.as_str().unwrap_or("");
        if !INCLUDES.contains(&v) {
            p.push(invalid(&format!("include[{i}]"), v, INCLUDES));
        }
    }
    for (i, tool) in obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        tool_shape(tool, &format!("tools[{i}]"), &mut p);
    }
    // The fake keeps no responses: any earlier one is unknown to it, as one made with
    // `store: false` is to the API.
    if let Some(id) = obj.get("previous_response_id").and_then(Value::as_str) {
        p.push(Problem::new(
            format!("Previous response with id '{id}' not found."),
            "previous_response_id".to_string(),
            Some("previous_response_not_found"),
        ));
    }
    let store = obj.get("store").and_then(Value::as_bool).unwrap_or(true);
    match obj.get("input") {
        None if obj.get("previous_response_id").is_none() && obj.get("prompt").is_none() => {
            p.push(missing("input"))
        }
        Some(Value::Array(items)) => input(items, store, &mut p),
        _ => {}
    }
    p
}

fn keys_of(v: &Value, path: &str, allowed: &[&str], p: &mut Vec<Problem>) {
    for key in v
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .filter(|k| !allowed.contains(&k.as_str()))
    {
        p.push(unknown(&format!("{path}.{key}")));
    }
}

fn one_of(v: Option<&Value>, path: &str, allowed: &[&str], p: &mut Vec<Problem>) {
    match v {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if allowed.contains(&s.as_str()) => {}
        Some(other) => p.push(invalid(path, other.as_str().unwrap_or(""), allowed)),
    }
}

fn reasoning(r: &Value, model: Option<&Value>, p: &mut Vec<Problem>) {
    keys_of(
        r,
        "reasoning",
        &["effort", "summary", "generate_summary"],
        p,
    );
    one_of(r.get("effort"), "reasoning.effort", EFFORTS, p);
    one_of(r.get("summary"), "reasoning.summary", SUMMARIES, p);
    let model = model.and_then(Value::as_str).unwrap_or("");
    if !model.is_empty() && !crate::validate::openai_model_reasons(model) {
        if let Some(param) = ["effort", "summary"].iter().find(|k| r.get(**k).is_some()) {
            p.push(Problem::new(
                format!(
                    "Unsupported parameter: 'reasoning.{param}' is not supported with this model."
                ),
                format!("reasoning.{param}"),
                Some("unsupported_parameter"),
            ));
        }
    }
}

fn text(t: &Value, p: &mut Vec<Problem>) {
    keys_of(t, "text", &["format", "verbosity"], p);
    one_of(t.get("verbosity"), "text.verbosity", VERBOSITIES, p);
    if let Some(f) = t.get("format") {
        one_of(
            f.get("type"),
            "text.format.type",
            &["text", "json_object", "json_schema"],
            p,
        );
    }
}

fn tool_shape(tool: &Value, path: &str, p: &mut Vec<Problem>) {
    let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
    let required: &[&str] = match kind {
        "function" => {
            keys_of(
                tool,
                path,
                &[
                    "type",
                    "name",
                    "description",
                    "parameters",
                    "strict",
                    "defer_loading",
                ],
                p,
            );
            &["name", "parameters"]
        }
        "custom" => {
            keys_of(
                tool,
                path,
                &["type", "name", "description", "format", "defer_loading"],
                p,
            );
            &["name"]
        }
        "namespace" => {
            keys_of(tool, path, &["type", "name", "description", "tools"], p);
            for (j, inner) in tool
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                tool_shape(inner, &format!("{path}.tools[{j}]"), p);
            }
            &["name", "tools"]
        }
        k if HOSTED_TOOLS.contains(&k) => &[],
        other => {
            let mut all = vec!["function", "custom", "namespace"];
            all.extend_from_slice(HOSTED_TOOLS);
            p.push(invalid(&format!("{path}.type"), other, &all));
            &[]
        }
    };
    for key in required.iter().filter(|k| tool.get(**k).is_none()) {
        p.push(missing(&format!("{path}.{key}")));
    }
}

/// The keys each input item type may have.
fn item_keys(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "message" => &["type", "id", "role", "content", "status"],
        "function_call" => &[
            "type",
            "id",
            "call_id",
            "name",
            "arguments",
            "status",
            "namespace",
        ],
        "function_call_output" | "custom_tool_call_output" => {
            &["type", "id", "call_id", "output", "status"]
        }
        "custom_tool_call" => &[
            "type",
            "id",
            "call_id",
            "name",
            "input",
            "status",
            "namespace",
        ],
        "reasoning" => &[
            "type",
            "id",
            "summary",
            "content",
            "encrypted_content",
            "status",
        ],
        "item_reference" => &["type", "id"],
        // Hosted tools' items: their shapes are the API's business, not the fake's.
        _ => return None,
    })
}

const ITEM_TYPES: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
    "item_reference",
    "web_search_call",
    "tool_search_call",
    "tool_search_output",
    "local_shell_call",
    "local_shell_call_output",
    "compaction",
    "image_generation_call",
];

fn input(items: &[Value], store: bool, p: &mut Vec<Problem>) {
    // Calls made so far (call_id → answered?), in order.
    let mut calls: Vec<(String, bool)> = Vec::new();
    let mut outputs_seen: HashSet<String> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("input[{i}]");
        // A bare `{role, content}` is a message.
        let kind =
            item.get("type")
                .and_then(Value::as_str)
                .unwrap_or(if item.get("role").is_some() {
                    "message"
                } else {
                    ""
                });
        if !ITEM_TYPES.contains(&kind) {
            p.push(invalid(&format!("{path}.type"), kind, ITEM_TYPES));
            continue;
        }
        if let Some(allowed) = item_keys(kind) {
            keys_of(item, &path, allowed, p);
        }
        match kind {
            "message" => message(item, &path, p),
            "function_call" | "custom_tool_call" => {
                let field = if kind == "function_call" {
                    "arguments"
                } else {
                    "input"
                };
                for key in ["call_id", "name", field] {
                    if item.get(key).is_none() {
                        p.push(missing(&format!("{path}.{key}")));
                    }
                }
                if let Some(id) = item.get("call_id").and_then(Value::as_str) {
                    calls.push((id.to_string(), false));
                }
            }
            "function_call_output" | "custom_tool_call_output" => {
                let id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if item.get("output").is_none() {
                    p.push(missing(&format!("{path}.output")));
                }
                match calls.iter_mut().find(|(c, _)| c == id) {
                    Some((_, answered)) => *answered = true,
                    None => {
                        let what = if kind == "function_call_output" {
                            "function call output"
                        } else {
                            "custom tool call output"
                        };
                        p.push(Problem::new(
                            format!("No tool call found for {what} with call_id {id}."),
                            "input".to_string(),
                            None,
                        ));
                    }
                }
                outputs_seen.insert(id.to_string());
            }
            "reasoning" => reasoning_item(item, store, p),
            _ => {}
        }
    }
    if let Some((id, _)) = calls.iter().find(|(_, answered)| !answered) {
        p.push(Problem::new(
            format!("No tool output found for function call {id}."),
            "input".to_string(),
            None,
        ));
    }
}

fn message(item: &Value, path: &str, p: &mut Vec<Problem>) {
    let role = item.get("role").and_then(Value::as_str).unwrap_or("");
    let roles = ["user", "assistant", "system", "developer"];
    if !roles.contains(&role) {
        p.push(invalid(&format!("{path}.role"), role, &roles));
        return;
    }
    let parts: &[&str] = if role == "assistant" {
        &["output_text", "refusal"]
    } else {
        &["input_text", "input_image", "input_file", "input_audio"]
    };
    match item.get("content") {
        Some(Value::String(_)) => {}
        Some(Value::Array(content)) => {
            for (j, part) in content.iter().enumerate() {
                let t = part.get("type").and_then(Value::as_str).unwrap_or("");
                if !parts.contains(&t) {
                    p.push(invalid(&format!("{path}.content[{j}].type"), t, parts));
                }
            }
        }
        _ => p.push(missing(&format!("{path}.content"))),
    }
}

/// A reasoning item sent back: with `store: false` only its `encrypted_content` can bring it
/// back, and that must be the fake's own, unchanged.
fn reasoning_item(item: &Value, store: bool, p: &mut Vec<Problem>) {
    let id = item.get("id").and_then(Value::as_str).unwrap_or("");
    match item.get("encrypted_content").and_then(Value::as_str) {
        Some(sealed) if sealed == encrypted_reasoning(id) => {}
        Some(_) => p.push(Problem::new(
            format!("The encrypted content for item {id} could not be verified."),
            None,
            Some("invalid_encrypted_content"),
        )),
        None if !store => p.push(Problem::new(
            format!("Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."),
            "input".to_string(),
            None,
        )),
        None => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn base(extra: Value) -> Value {
        let mut b = json!({"model": "gpt-5.5", "stream": true, "store": false,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]});
        if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        b
    }

    fn first(body: &Value) -> Option<Problem> {
        check(body).into_iter().next()
    }

    #[test]
    fn a_plain_request_passes() {
        assert_eq!(check(&base(json!({}))), vec![]);
    }

    #[test]
    fn unknown_parameters_are_refused_with_their_name() {
        let p = first(&base(json!({"frobnicate": 1}))).unwrap();
        assert_eq!(p.message, "Unknown parameter: 'frobnicate'.");
        assert_eq!(p.param.as_deref(), Some("frobnicate"));
        assert_eq!(
            p.body()["error"],
            json!({"message": "Unknown parameter: 'frobnicate'.", "type": "invalid_request_error",
                   "param": "frobnicate", "code": "unknown_parameter"})
        );
        let p = first(&base(
            json!({"reasoning": {"effort": "medium", "depth": 3}}),
        ))
        .unwrap();
        assert_eq!(p.message, "Unknown parameter: 'reasoning.depth'.");
        let p = first(&base(
            json!({"tools": [{"type": "function", "name": "f", "parameters": {}, "colour": 1}]}),
        ))
        .unwrap();
        assert_eq!(p.message, "Unknown parameter: 'tools[0].colour'.");
    }

    #[test]
    fn values_are_checked() {
        let p = first(&base(json!({"reasoning": {"effort": "extreme"}}))).unwrap();
        assert_eq!(p.message, "Invalid value: 'extreme'. Supported values are: 'none', 'minimal', 'low', 'medium', 'high', and 'xhigh'.");
        assert_eq!(p.param.as_deref(), Some("reasoning.effort"));
        let p = first(&base(json!({"include": ["reasoning.plaintext"]}))).unwrap();
        assert_eq!(p.param.as_deref(), Some("include[0]"));
        let p = first(&base(
            json!({"model": "gpt-4o", "reasoning": {"effort": "low"}}),
        ))
        .unwrap();
        assert_eq!(p.code, Some("unsupported_parameter"));
        let p = first(&json!({"input": "hi"})).unwrap();
        assert_eq!(p.message, "Missing required parameter: 'model'.");
    }

    #[test]
    fn outputs_pair_with_calls() {
        let call =
            json!({"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"});
        let out = json!({"type": "function_call_output", "call_id": "call_1", "output": "ok"});
        let good = base(json!({"input": [{"role": "user", "content": "go"}, call, out]}));
        assert_eq!(check(&good), vec![]);
        let orphan = base(json!({"input": [{"role": "user", "content": "go"}, out]}));
        assert_eq!(
            first(&orphan).unwrap().message,
            "No tool call found for function call output with call_id call_1."
        );
        let unanswered = base(json!({"input": [{"role": "user", "content": "go"}, call]}));
        assert_eq!(
            first(&unanswered).unwrap().message,
            "No tool output found for function call call_1."
        );
    }

    #[test]
    fn reasoning_comes_back_sealed() {
        let sealed = encrypted_reasoning("rs_1");
        let item = |content: Value| {
            base(json!({"input": [{"role": "user", "content": "go"},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": content}]}))
        };
        assert_eq!(check(&item(json!(sealed))), vec![]);
        let p = first(&item(json!(format!("{sealed}x")))).unwrap();
        assert!(p.message.contains("could not be verified"), "{p:?}");
        let p = first(&item(Value::Null)).unwrap();
        assert!(p.message.contains("Items are not persisted"), "{p:?}");
    }
}
