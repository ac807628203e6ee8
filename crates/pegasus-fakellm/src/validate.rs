//! Transcript validation, as strict as the real APIs.
//!
//! The real providers reject requests whose tool calls and tool results do
//! not pair up, and Anthropic rejects non-alternating roles. A client bug
//! here only shows up against the real API, in production; the fake catches
//! it in tests instead, answering 400 `invalid_request_error` and recording
//! a violation. Each function returns the list of problems (empty = valid).

use std::collections::HashSet;

use serde_json::Value;

/// Problems with an Anthropic Messages request body.
pub(crate) fn anthropic(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if !body.is_object() {
        return vec!["request body must be a JSON object".to_string()];
    }
    check_model(body, &mut problems);
    match body.get("max_tokens") {
        Some(v) if v.as_u64().is_some_and(|n| n >= 1) => {}
        Some(_) => problems.push("max_tokens: must be a positive integer".to_string()),
        None => problems.push("max_tokens: Field required".to_string()),
    }
    if let Some(system) = body.get("system") {
        if !(system.is_string() || system.is_array()) {
            problems.push("system: must be a string or an array of text blocks".to_string());
        }
    }
    let thinking = thinking_settings(body, &mut problems);
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    if thinking && !anthropic_model_thinks(model) {
        problems.push(format!("'{model}' does not support thinking."));
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        problems.push("messages: Field required (an array)".to_string());
        return problems;
    };
    let budgeted = body.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
    thinking_blocks(messages, budgeted, &mut problems);
    if messages.is_empty() {
        problems.push("messages: at least one message is required".to_string());
        return problems;
    }

    // Per message: role, content shape, and the ids of tool_use / tool_result blocks.
    let mut roles = Vec::with_capacity(messages.len());
    let mut uses: Vec<Vec<String>> = Vec::with_capacity(messages.len());
    let mut results: Vec<Vec<String>> = Vec::with_capacity(messages.len());
    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        if !["user", "assistant", "system"].contains(&role) {
            problems.push(format!(
                "messages.{i}.role: Input should be 'user', 'assistant' or 'system'"
            ));
        }
        if role == "system" {
            system_message(msg, i, &mut problems);
        }
        roles.push(role);
        let mut u = Vec::new();
        let mut r = Vec::new();
        match msg.get("content") {
            Some(Value::String(_)) => {}
            Some(Value::Array(blocks)) => {
                for (j, block) in blocks.iter().enumerate() {
                    match block.get("type").and_then(Value::as_str) {
                        Some("tool_use") => {
                            if role != "assistant" {
                                problems.push(format!("messages.{i}.content.{j}: tool_use blocks are only allowed in assistant messages"));
                            }
                            match block.get("id").and_then(Value::as_str) {
                                Some(id) => u.push(id.to_string()),
                                None => problems
                                    .push(format!("messages.{i}.content.{j}.id: Field required")),
                            }
                            if block.get("name").and_then(Value::as_str).is_none() {
                                problems
                                    .push(format!("messages.{i}.content.{j}.name: Field required"));
                            }
                            if !block.get("input").is_some_and(Value::is_object) {
                                problems.push(format!(
                                    "messages.{i}.content.{j}.input: must be an object"
                                ));
                            }
                        }
                        Some("tool_result") => {
                            tool_references(body, block, i, j, &mut problems);
                            if role != "user" {
                                problems.push(format!("messages.{i}.content.{j}: tool_result blocks are only allowed in user messages"));
                            }
                            match block.get("tool_use_id").and_then(Value::as_str) {
                                Some(id) => r.push(id.to_string()),
                                None => problems.push(format!(
                                    "messages.{i}.content.{j}.tool_use_id: Field required"
                                )),
                            }
                        }
                        Some(_) => {}
                        None => {
                            problems.push(format!("messages.{i}.content.{j}.type: Field required"))
                        }
                    }
                }
            }
            _ => problems.push(format!(
                "messages.{i}.content: must be a string or an array of blocks"
            )),
        }
        uses.push(u);
        results.push(r);
    }

    if roles.first() != Some(&"user") {
        problems.push("messages.0.role: the first message must use the \"user\" role".to_string());
    }
    // A mid-conversation system message stands between turns: alternation skips it.
    let mut previous: Option<&str> = None;
    for (i, role) in roles.iter().enumerate() {
        if *role == "system" {
            continue;
        }
        if previous == Some(*role) && !role.is_empty() {
            problems.push(format!(
                "messages.{i}: roles must alternate between \"user\" and \"assistant\", but found two consecutive {role:?} messages"
            ));
        }
        previous = Some(role);
    }

    for i in 0..messages.len() {
        // Every tool_result must answer a tool_use of the immediately preceding assistant message.
        if !results[i].is_empty() {
            let previous: HashSet<&str> = if i > 0 && roles[i - 1] == "assistant" {
                uses[i - 1].iter().map(String::as_str).collect()
            } else {
                HashSet::new()
            };
            for id in &results[i] {
                if !previous.contains(id.as_str()) {
                    problems.push(format!(
                        "messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    ));
                }
            }
        }
        // Every tool_use must be answered by a tool_result in the next user message.
        if !uses[i].is_empty() {
            let next: HashSet<&str> = if i + 1 < messages.len() && roles[i + 1] == "user" {
                results[i + 1].iter().map(String::as_str).collect()
            } else {
                HashSet::new()
            };
            let missing: Vec<&str> = uses[i]
                .iter()
                .map(String::as_str)
                .filter(|id| !next.contains(id))
                .collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    i + 1,
                    missing.join(", ")
                ));
            }
        }
    }
    problems
}

const THINKING_DOCS: &str =
    "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking";

/// A tool search's result names tools by reference (`{"type": "tool_reference", "tool_name":
/// ...}`, Claude Code's `ToolSearch`); the API expands each from the request's `tools`, so a
/// name it does not offer is refused.
fn tool_references(body: &Value, result: &Value, i: usize, j: usize, problems: &mut Vec<String>) {
    let offered = |name: &str| {
        body.get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(name))
    };
    let parts = result.get("content").and_then(Value::as_array);
    for (k, part) in parts.into_iter().flatten().enumerate() {
        if part.get("type").and_then(Value::as_str) != Some("tool_reference") {
            continue;
        }
        let name = part.get("tool_name").and_then(Value::as_str).unwrap_or("");
        if !offered(name) {
            problems.push(format!(
                "messages.{i}.content.{j}.content.{k}: tool_reference names `{name}`, which is not in `tools`"
            ));
        }
    }
}

/// A mid-conversation `system` message (Claude Code sends its environment so): text blocks
/// only (and, like any message but a user's, never the first).
fn system_message(msg: &Value, i: usize, problems: &mut Vec<String>) {
    if let Some(blocks) = msg.get("content").and_then(Value::as_array) {
        for (j, b) in blocks.iter().enumerate() {
            let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
            if kind != "text" {
                problems.push(format!(
                    "messages.{i}.content.{j}: a system message may only contain text blocks, found `{kind}`"
                ));
            }
        }
    }
}

/// The `thinking` parameter's rules; returns whether thinking is on (a budget or adaptive).
/// Only a fixed budget makes the assistant turn of an open tool loop start with thinking:
/// an adaptive model may have answered without thinking. The tag itself is checked with the
/// other fields ([`crate::anthropic_request`]).
fn thinking_settings(body: &Value, problems: &mut Vec<String>) -> bool {
    let Some(t) = body.get("thinking") else {
        return false;
    };
    match t.get("type").and_then(Value::as_str) {
        Some("disabled") => false,
        Some("adaptive") => true,
        Some("enabled") => {
            let budget = t.get("budget_tokens").and_then(Value::as_u64);
            match budget {
                None => problems.push("thinking.enabled.budget_tokens: Field required".into()),
                Some(b) if b < 1024 => problems.push(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                        .into(),
                ),
                Some(b) => {
                    let max = body.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
                    if max <= b {
                        problems.push(format!(
                            "`max_tokens` must be greater than `thinking.budget_tokens`. {THINKING_DOCS}#max-tokens-and-context-window-size"
                        ));
                    }
                }
            }
            if body
                .get("temperature")
                .and_then(Value::as_f64)
                .is_some_and(|x| x != 1.0)
            {
                problems.push(format!(
                    "`temperature` may only be set to 1 when thinking is enabled. {THINKING_DOCS}#feature-compatibility"
                ));
            }
            for key in ["top_k"] {
                if body.get(key).is_some() {
                    problems.push(format!(
                        "`{key}` is not supported when thinking is enabled. {THINKING_DOCS}#feature-compatibility"
                    ));
                }
            }
            true
        }
        _ => false,
    }
}

/// Thinking blocks: only in assistant messages, signed by this server and unaltered; and with
/// thinking on, the assistant turn of an open tool loop must start with one.
fn thinking_blocks(messages: &[Value], enabled: bool, problems: &mut Vec<String>) {
    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        let Some(blocks) = msg.get("content").and_then(Value::as_array) else {
            continue;
        };
        for (j, b) in blocks.iter().enumerate() {
            match b.get("type").and_then(Value::as_str) {
                Some("thinking") => {
                    if role != "assistant" {
                        problems.push(format!("messages.{i}.content.{j}: thinking blocks are only allowed in assistant messages"));
                    }
                    let text = b.get("thinking").and_then(Value::as_str);
                    let sig = b.get("signature").and_then(Value::as_str);
                    match (text, sig) {
                        (Some(t), Some(s)) if crate::ids::thinking_signature(t) == s => {}
                        (Some(_), Some(_)) => problems.push(format!(
                            "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                        )),
                        _ => problems.push(format!(
                            "messages.{i}.content.{j}.signature: Field required"
                        )),
                    }
                }
                Some("redacted_thinking") => {
                    if role != "assistant" {
                        problems.push(format!("messages.{i}.content.{j}: redacted_thinking blocks are only allowed in assistant messages"));
                    }
                    if !b
                        .get("data")
                        .and_then(Value::as_str)
                        .is_some_and(crate::ids::redacted_is_genuine)
                    {
                        problems.push(format!(
                            "messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    if !enabled || messages.len() < 2 {
        return;
    }
    let n = messages.len();
    let continues = messages[n - 1]
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|b| {
            b.iter()
                .any(|x| x.get("type").and_then(Value::as_str) == Some("tool_result"))
        });
    if !continues {
        return;
    }
    let first = messages[n - 2]
        .pointer("/content/0/type")
        .and_then(Value::as_str)
        .unwrap_or("text");
    if first != "thinking" && first != "redacted_thinking" {
        problems.push(format!(
            "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. {THINKING_DOCS}",
            n - 2
        ));
    }
}

/// Whether an Anthropic model supports extended thinking, as the real API decides: the
/// Claude 3.5 models and the fake's `-nothink` models do not.
pub(crate) fn anthropic_model_thinks(model: &str) -> bool {
    !(model.contains("claude-3-5")
        || model.contains("claude-3-haiku")
        || model.ends_with("-nothink"))
}

/// Whether an OpenAI model is a reasoning model, as the real API decides (o-series, gpt-5),
/// plus the fake's `-reasoning` models.
pub(crate) fn openai_model_reasons(model: &str) -> bool {
    ["o1", "o3", "o4", "gpt-5"]
        .iter()
        .any(|p| model.starts_with(p))
        || model.ends_with("-reasoning")
}

/// The parameters reasoning and non-reasoning models refuse, with OpenAI's messages.
fn reasoning_params(body: &Value, problems: &mut Vec<String>) {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    if openai_model_reasons(model) {
        if body.get("max_tokens").is_some() {
            problems.push("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.".into());
        }
        if let Some(t) = body
            .get("temperature")
            .and_then(Value::as_f64)
            .filter(|t| *t != 1.0)
        {
            problems.push(format!("Unsupported value: 'temperature' does not support {t} with this model. Only the default (1) value is supported."));
        }
    } else if body.get("reasoning_effort").is_some() {
        problems.push("Unrecognized request argument supplied: reasoning_effort".into());
    }
}

/// Problems with an OpenAI Chat Completions request body.
pub(crate) fn openai(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if !body.is_object() {
        return vec!["request body must be a JSON object".to_string()];
    }
    check_model(body, &mut problems);
    reasoning_params(body, &mut problems);
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        problems.push("messages: Missing required parameter: 'messages'".to_string());
        return problems;
    };
    if messages.is_empty() {
        problems.push(
            "messages: Invalid 'messages': empty array. Expected an array with minimum length 1"
                .to_string(),
        );
        return problems;
    }

    // Tool call ids of the nearest preceding assistant message, if still open
    // (no user/system/assistant message since), and which of them are answered.
    let mut open: Option<(usize, Vec<String>, HashSet<String>)> = None;
    let close = |open: &mut Option<(usize, Vec<String>, HashSet<String>)>,
                 problems: &mut Vec<String>| {
        if let Some((at, ids, answered)) = open.take() {
            let missing: Vec<&str> = ids
                .iter()
                .map(String::as_str)
                .filter(|id| !answered.contains(*id))
                .collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "messages.{at}: An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                    missing.join(", ")
                ));
            }
        }
    };

    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "system" | "developer" | "user" => {
                close(&mut open, &mut problems);
            }
            "assistant" => {
                close(&mut open, &mut problems);
                let mut ids = Vec::new();
                for (j, call) in msg.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
                    match call.get("id").and_then(Value::as_str) {
                        Some(id) => ids.push(id.to_string()),
                        None => problems.push(format!("messages.{i}.tool_calls.{j}.id: Missing required parameter")),
                    }
                    if call.pointer("/function/name").and_then(Value::as_str).is_none() {
                        problems.push(format!("messages.{i}.tool_calls.{j}.function.name: Missing required parameter"));
                    }
                    if !call.pointer("/function/arguments").is_some_and(Value::is_string) {
                        problems.push(format!("messages.{i}.tool_calls.{j}.function.arguments: must be a JSON string"));
                    }
                }
                if !ids.is_empty() {
                    open = Some((i, ids, HashSet::new()));
                }
            }
            "tool" => {
                let id = msg.get("tool_call_id").and_then(Value::as_str);
                match (&mut open, id) {
                    (_, None) => problems.push(format!("messages.{i}.tool_call_id: Missing required parameter")),
                    (Some((_, ids, answered)), Some(id)) if ids.iter().any(|x| x == id) => {
                        answered.insert(id.to_string());
                    }
                    (_, Some(id)) => problems.push(format!(
                        "messages.{i}: Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (tool_call_id {id} not found)."
                    )),
                }
            }
            other => problems.push(format!(
                "messages.{i}.role: Invalid value: {other:?}. Supported values are: 'system', 'developer', 'user', 'assistant', and 'tool'."
            )),
        }
    }
    close(&mut open, &mut problems);
    problems
}

fn check_model(body: &Value, problems: &mut Vec<String>) {
    match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        Some(_) => problems.push("model: must be a non-empty string".to_string()),
        None => problems.push("model: Field required".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn anthropic_good_tool_round_trip() {
        let body = json!({"model": "m", "max_tokens": 10, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "ok"}]}
        ]});
        assert!(anthropic(&body).is_empty(), "{:?}", anthropic(&body));
    }

    #[test]
    fn anthropic_problems() {
        let body = json!({"messages": [
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "ok"}]},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "t", "input": {}}]}
        ]});
        let p = anthropic(&body).join("\n");
        assert!(p.contains("model: Field required"));
        assert!(p.contains("max_tokens: Field required"));
        assert!(p.contains("first message"));
        assert!(p.contains("alternate"));
        assert!(p.contains("zz"));
        assert!(p.contains("without `tool_result`"));
    }

    #[test]
    fn openai_reasoning_rules() {
        let body = |model: &str, extra: Value| {
            let mut b = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
            if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            b
        };
        assert!(openai(&body(
            "o4-mini",
            json!({"max_completion_tokens": 10, "reasoning_effort": "low"})
        ))
        .is_empty());
        assert!(openai(&body(
            "gpt-4o",
            json!({"max_tokens": 10, "temperature": 0.2})
        ))
        .is_empty());
        let p = openai(&body("o4-mini", json!({"max_tokens": 10}))).join("\n");
        assert!(p.contains("Use 'max_completion_tokens' instead"), "{p}");
        let p = openai(&body("o3", json!({"temperature": 0.2}))).join("\n");
        assert!(p.contains("Only the default (1) value"), "{p}");
        let p = openai(&body("gpt-4o", json!({"reasoning_effort": "high"}))).join("\n");
        assert!(p.contains("reasoning_effort"), "{p}");
    }

    #[test]
    fn anthropic_thinking_rules() {
        let sig = crate::ids::thinking_signature("hm");
        let loop_body = |first: Value, extra: Value| {
            let mut b = json!({"model": "m", "max_tokens": 2048,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [first, {"type": "tool_use", "id": "a", "name": "t", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "ok"}]}
            ]});
            if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            b
        };
        let good = json!({"type": "thinking", "thinking": "hm", "signature": sig});
        assert!(anthropic(&loop_body(good.clone(), json!({}))).is_empty());
        let p = anthropic(&loop_body(json!({"type": "text", "text": "x"}), json!({}))).join("\n");
        assert!(p.contains("must start with a thinking block"), "{p}");
        let forged = json!({"type": "thinking", "thinking": "hm!", "signature": sig});
        let p = anthropic(&loop_body(forged, json!({}))).join("\n");
        assert!(p.contains("Invalid `signature`"), "{p}");
        let p = anthropic(&loop_body(good.clone(), json!({"temperature": 0.5}))).join("\n");
        assert!(p.contains("`temperature` may only be set to 1"), "{p}");
        let p = anthropic(&loop_body(good.clone(), json!({"max_tokens": 1024}))).join("\n");
        assert!(p.contains("`max_tokens` must be greater than"), "{p}");
        let p = anthropic(&loop_body(
            good,
            json!({"thinking": {"type": "enabled", "budget_tokens": 100}}),
        ))
        .join("\n");
        assert!(p.contains("greater than or equal to 1024"), "{p}");
        let bad_redacted = json!({"type": "redacted_thinking", "data": "made-up"});
        let p = anthropic(&loop_body(bad_redacted, json!({}))).join("\n");
        assert!(p.contains("Invalid `data`"), "{p}");
    }

    #[test]
    fn openai_pairs() {
        let good = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "b", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "2"},
            {"role": "assistant", "content": "done"}
        ]});
        assert!(openai(&good).is_empty(), "{:?}", openai(&good));

        let bad = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ]},
            {"role": "user", "content": "hmm"},
            {"role": "tool", "tool_call_id": "a", "content": "late"}
        ]});
        let p = openai(&bad).join("\n");
        assert!(p.contains("did not have response messages: a"), "{p}");
        assert!(p.contains("must be a response to a preceeding"), "{p}");
    }
}
