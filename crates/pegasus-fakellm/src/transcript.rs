//! A provider-neutral view of a request's conversation.
//!
//! Rules ([`crate::Match`]) and the default token estimate must work the same
//! for both wire formats, so both bodies are flattened into a [`Transcript`].
//! Building one never fails: unknown or malformed parts are skipped (the
//! validator, not this module, complains about them).

use serde_json::Value;

use crate::record::Format;

/// One message of the conversation, reduced to what rules look at.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// `user`, `assistant`, `tool`, `system`, `developer` (as sent).
    pub role: String,
    pub texts: Vec<String>,
    /// Tool call inputs as JSON text (OpenAI `arguments` verbatim).
    pub tool_inputs: Vec<String>,
    /// Text content of each tool result carried by this message.
    pub tool_results: Vec<String>,
}

/// The flattened conversation of one request.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    /// Anthropic top-level `system` texts (OpenAI keeps system as turns).
    pub system: Vec<String>,
    pub turns: Vec<Turn>,
}

impl Transcript {
    pub fn from_body(format: Format, body: &Value) -> Transcript {
        if format == Format::Responses {
            return responses_transcript(body);
        }
        let messages = body.get("messages").and_then(Value::as_array);
        let turns = messages.into_iter().flatten().map(|msg| {
            let turn = Turn {
                role: msg
                    .get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                ..Turn::default()
            };
            match format {
                Format::Anthropic => anthropic_turn(turn, msg),
                Format::OpenAi | Format::Responses => openai_turn(turn, msg),
            }
        });
        Transcript {
            system: match format {
                Format::Anthropic => body.get("system").map(content_texts).unwrap_or_default(),
                Format::OpenAi | Format::Responses => Vec::new(),
            },
            turns: turns.collect(),
        }
    }

    /// Text of the last user-role message that has any text.
    pub fn last_user_text(&self) -> Option<String> {
        self.turns
            .iter()
            .rev()
            .find(|t| t.role == "user" && !t.texts.is_empty())
            .map(|t| t.texts.join("\n"))
    }

    /// System prompt texts in either format.
    pub fn system_texts(&self) -> impl Iterator<Item = &str> {
        self.system.iter().map(String::as_str).chain(
            self.turns
                .iter()
                .filter(|t| t.role == "system" || t.role == "developer")
                .flat_map(|t| t.texts.iter().map(String::as_str)),
        )
    }

    /// Every piece of text in the request.
    pub fn all_text(&self) -> impl Iterator<Item = &str> {
        self.system
            .iter()
            .map(String::as_str)
            .chain(self.turns.iter().flat_map(|t| {
                t.texts
                    .iter()
                    .chain(t.tool_inputs.iter())
                    .chain(t.tool_results.iter())
                    .map(String::as_str)
            }))
    }

    /// Tool results at the very end of the conversation (see
    /// [`crate::Match::LastToolResultContains`]).
    pub fn last_tool_results(&self) -> Vec<&str> {
        let mut out = Vec::new();
        // A mid-conversation system message after the results (Anthropic) does not end them.
        let turns = self.turns.iter().rev().skip_while(|t| t.role == "system");
        for turn in turns {
            if turn.role == "tool" {
                out.extend(turn.tool_results.iter().map(String::as_str));
                continue;
            }
            if out.is_empty() && turn.role == "user" {
                out.extend(turn.tool_results.iter().map(String::as_str));
            }
            break;
        }
        out
    }

    pub fn has_tool_result(&self) -> bool {
        self.turns.iter().any(|t| !t.tool_results.is_empty())
    }

    /// Total characters of all text, the basis of the default input estimate.
    pub fn char_count(&self) -> usize {
        self.all_text().map(|t| t.chars().count()).sum()
    }
}

/// Text of a content value that is a string or an array of `{type:"text"}` parts.
fn content_texts(content: &Value) -> Vec<String> {
    match content {
        Value::String(s) => vec![s.clone()],
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Text of a tool result's content: its text parts, and the name of each tool a tool search
/// loaded (`{"type": "tool_reference", "tool_name": ...}`, as Claude Code's `ToolSearch`
/// answers).
fn result_texts(content: &Value) -> Vec<String> {
    let mut texts = content_texts(content);
    let references = content
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("tool_reference"))
        .filter_map(|p| p.get("tool_name").and_then(Value::as_str));
    texts.extend(references.map(str::to_string));
    texts
}

/// A Responses request's conversation: `instructions` as the system prompt; each `input` item
/// a turn (messages by their role, with their `input_text`/`output_text` parts; a
/// `function_call` or `custom_tool_call` an assistant turn with the call's arguments; its output
/// a `tool` turn); a string `input` is one user message. Reasoning items carry no text.
fn responses_transcript(body: &Value) -> Transcript {
    let system = body
        .get("instructions")
        .and_then(Value::as_str)
        .map(|s| vec![s.to_string()])
        .unwrap_or_default();
    let text_of = |v: &Value| match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    let turns = match body.get("input") {
        Some(Value::String(s)) => vec![Turn {
            role: "user".into(),
            texts: vec![s.clone()],
            ..Turn::default()
        }],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|item| {
                let kind = item
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("message");
                let turn = |role: &str| Turn {
                    role: role.to_string(),
                    ..Turn::default()
                };
                Some(match kind {
                    "message" => Turn {
                        texts: item.get("content").map(text_of).unwrap_or_default(),
                        ..turn(item.get("role").and_then(Value::as_str).unwrap_or(""))
                    },
                    "function_call" | "custom_tool_call" => {
                        let key = if kind == "function_call" {
                            "arguments"
                        } else {
                            "input"
                        };
                        let input = item.get(key).and_then(Value::as_str).unwrap_or("");
                        Turn {
                            tool_inputs: vec![input.to_string()],
                            ..turn("assistant")
                        }
                    }
                    "function_call_output" | "custom_tool_call_output" => Turn {
                        tool_results: vec![item
                            .get("output")
                            .map(text_of)
                            .unwrap_or_default()
                            .join("\n")],
                        ..turn("tool")
                    },
                    _ => return None,
                })
            })
            .collect(),
        _ => Vec::new(),
    };
    Transcript { system, turns }
}

fn anthropic_turn(mut turn: Turn, msg: &Value) -> Turn {
    let content = msg.get("content");
    turn.texts = content.map(content_texts).unwrap_or_default();
    for block in content.and_then(Value::as_array).into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("tool_use") => {
                let input = block.get("input").cloned().unwrap_or(Value::Null);
                turn.tool_inputs.push(input.to_string());
            }
            Some("tool_result") => {
                let text = block.get("content").map(result_texts).unwrap_or_default();
                turn.tool_results.push(text.join("\n"));
            }
            _ => {}
        }
    }
    turn
}

fn openai_turn(mut turn: Turn, msg: &Value) -> Turn {
    let texts = msg.get("content").map(content_texts).unwrap_or_default();
    if turn.role == "tool" {
        turn.tool_results.push(texts.join("\n"));
    } else {
        turn.texts = texts;
    }
    let calls = msg.get("tool_calls").and_then(Value::as_array);
    for call in calls.into_iter().flatten() {
        turn.tool_inputs
            .push(match call.pointer("/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            });
    }
    turn
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn anthropic_view() {
        let body = json!({
            "system": [{"type": "text", "text": "You are Pegasus"}],
            "messages": [
                {"role": "user", "content": "weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "let me check"},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]}
                ]}
            ]
        });
        let tr = Transcript::from_body(Format::Anthropic, &body);
        assert_eq!(tr.last_user_text().as_deref(), Some("weather in Paris?"));
        assert_eq!(tr.last_tool_results(), vec!["sunny"]);
        assert!(tr.has_tool_result());
        assert!(tr.system_texts().any(|t| t.contains("Pegasus")));
        assert!(tr.all_text().any(|t| t.contains("\"city\"")));
    }

    #[test]
    fn responses_view() {
        let body = json!({
            "instructions": "be brief",
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
                {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
                {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
                {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "Success."}]}
            ]
        });
        let tr = Transcript::from_body(Format::Responses, &body);
        assert_eq!(tr.last_user_text().as_deref(), Some("list files"));
        assert_eq!(tr.last_tool_results(), vec!["Success."]);
        assert!(tr.system_texts().any(|t| t == "be brief"));
        assert!(tr.system_texts().any(|t| t == "You are Codex"));
        assert!(tr.all_text().any(|t| t.contains("\"ls\"")));
        let plain = Transcript::from_body(Format::Responses, &json!({"input": "hello"}));
        assert_eq!(plain.last_user_text().as_deref(), Some("hello"));
        assert!(!plain.has_tool_result());
    }

    #[test]
    fn openai_view() {
        let body = json!({
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "list files"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"dir\":\"/\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{\"dir\":\"/tmp\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "bin etc"},
                {"role": "tool", "tool_call_id": "c2", "content": "x.txt"}
            ]
        });
        let tr = Transcript::from_body(Format::OpenAi, &body);
        assert_eq!(tr.last_user_text().as_deref(), Some("list files"));
        assert_eq!(tr.last_tool_results(), vec!["x.txt", "bin etc"]);
        assert!(tr.system_texts().any(|t| t == "be brief"));
        assert!(tr.all_text().any(|t| t.contains("/tmp")));
    }
}
