//! A project's conversation as a person reads it: the agent's text as Markdown (rendered by
//! [`crate::markdown`], escaped), each tool call folded (`<details>`) with its result inside,
//! the messages that only carry results left out (their results are shown with their calls),
//! and who spoke in words, not enum names.

use maud::{html, Markup};
use pegasus_proto::Channel;
use pegasus_store::{ContentBlock, Role, SessionMessage};
use std::collections::HashMap;

/// How much of a tool call's arguments or result a fold shows.
const FOLD_CHARS: usize = 4000;
/// How much of a call's arguments its one-line summary shows.
const SUMMARY_CHARS: usize = 80;

/// Renders `messages` (oldest first).
pub(crate) fn render(messages: &[&SessionMessage]) -> Markup {
    // Results by the call they answer, so each is shown inside its call's fold.
    let mut results: HashMap<&str, (&str, bool)> = HashMap::new();
    let mut calls: std::collections::HashSet<&str> = Default::default();
    for m in messages {
        for b in &m.content {
            match b {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    results.insert(tool_use_id, (content, *is_error));
                }
                ContentBlock::ToolUse { id, .. } => {
                    calls.insert(id);
                }
                _ => {}
            }
        }
    }
    html! {
        @for m in messages {
            @let shown: Vec<&ContentBlock> = m.content.iter().filter(|b| match b {
                // A result whose call is on the page is shown in the call's fold.
                ContentBlock::ToolResult { tool_use_id, .. } => !calls.contains(tool_use_id.as_str()),
                ContentBlock::RedactedThinking { .. } => false,
                _ => true,
            }).collect();
            @if !shown.is_empty() {
                @let role = role_class(m.role);
                div class={ "msg " (role) } {
                    div .who {
                        b { (speaker(m)) }
                        @if let Some(model) = &m.model { " · " small { (model) } }
                        " · " time datetime=(m.ts.to_rfc3339()) title=(m.ts.to_rfc3339()) { (m.ts.format("%H:%M")) }
                    }
                    @for b in shown { (block(b, m.role, &results)) }
                }
            }
        }
    }
}

fn role_class(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// Who a message is from, in words.
pub(crate) fn speaker(m: &SessionMessage) -> String {
    match (m.role, &m.from) {
        (Role::Assistant, _) => "agent".into(),
        (Role::Tool, _) => "tool results".into(),
        (Role::User, None) => "you".into(),
        (Role::User, Some(from)) => match from {
            Channel::Cli => "you · command line".into(),
            Channel::Dashboard => "you · dashboard".into(),
            Channel::Telegram(_) => "you · Telegram".into(),
            Channel::Email(_) => "you · e-mail".into(),
            Channel::Main => "the MainAgent".into(),
            Channel::Schedule(Some(job)) => format!("schedule {job}"),
            Channel::Schedule(None) => "a schedule".into(),
            Channel::Project(p) => format!("project {p}"),
            Channel::Task => "the task's request".into(),
            Channel::Run => "the run".into(),
            Channel::Asana => "you · Asana".into(),
            Channel::Other(w) => w.clone(),
        },
    }
}

fn block(b: &ContentBlock, role: Role, results: &HashMap<&str, (&str, bool)>) -> Markup {
    match b {
        // The model writes Markdown; what people type is shown as they typed it.
        ContentBlock::Text { text } if role == Role::Assistant => {
            html! { div .md { (crate::markdown::render(text)) } }
        }
        ContentBlock::Text { text } => html! { div .plain { (text) } },
        ContentBlock::ToolUse { id, name, input } => {
            let result = results.get(id.as_str());
            let mark = match result {
                None => "…",
                Some((_, true)) => "✗",
                Some((_, false)) => "✓",
            };
            html! {
                details .tool .failed[matches!(result, Some((_, true)))] {
                    summary {
                        span .mark { (mark) } " " b { (name) } " " small { (args_summary(input)) }
                    }
                    div .fold {
                        small { "arguments" }
                        pre { (cut(&pretty(input), FOLD_CHARS)) }
                        @match result {
                            Some((content, is_error)) => {
                                small { @if *is_error { "error" } @else { "result" } }
                                pre { (cut(content, FOLD_CHARS)) }
                            }
                            None => small { "no result yet" },
                        }
                    }
                }
            }
        }
        // A result whose call is not on the page (it scrolled out of the last messages).
        ContentBlock::ToolResult {
            content, is_error, ..
        } => html! {
            details .tool .failed[*is_error] {
                summary { span .mark { @if *is_error { "✗" } @else { "✓" } } " " small { "result of an earlier call" } }
                div .fold { pre { (cut(content, FOLD_CHARS)) } }
            }
        },
        ContentBlock::Thinking { thinking, .. } => html! {
            details .thinking {
                summary { small { "thinking" } }
                div .fold .plain { (cut(thinking, FOLD_CHARS)) }
            }
        },
        ContentBlock::RedactedThinking { .. } => html! {},
    }
}

/// A call's arguments on one line: the values of a JSON object (its first few), cut short.
fn args_summary(input: &serde_json::Value) -> String {
    let line = match input {
        serde_json::Value::Object(map) => map
            .values()
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" · "),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    cut(&line.replace(['\n', '\r'], " "), SUMMARY_CHARS)
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// `text` cut at `max` characters, saying how much was left out.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((i, _)) => format!(
            "{}… ({} more characters)",
            &text[..i],
            text[i..].chars().count()
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn msg(role: Role, content: Vec<ContentBlock>) -> SessionMessage {
        // From JSON, as the session file holds it: fields added later default.
        serde_json::from_value(json!({
            "role": role,
            "from": (role == Role::User).then_some("dashboard"),
            "content": content,
            "ts": chrono::Utc::now(),
        }))
        .unwrap()
    }

    #[test]
    fn a_tool_call_is_folded_with_its_result_and_the_result_message_is_not_repeated() {
        let call = msg(
            Role::Assistant,
            vec![
                ContentBlock::Text {
                    text: "Let me **look**.".into(),
                },
                ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "list_dir".into(),
                    input: json!({"path": "notes"}),
                },
            ],
        );
        let result = msg(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                tool_use_id: "c1".into(),
                content: "a.txt\n<b>.txt".into(),
                is_error: false,
            }],
        );
        let h = render(&[&call, &result]).into_string();
        assert!(h.contains("<strong>look</strong>"), "{h}");
        let fold = &h[h.find("<details").unwrap()..h.find("</details>").unwrap()];
        assert!(fold.contains("<b>list_dir</b>"), "{fold}");
        assert!(fold.contains("notes"), "{fold}");
        assert!(fold.contains("a.txt\n&lt;b&gt;.txt"), "{fold}");
        assert_eq!(
            h.matches("class=\"msg").count(),
            1,
            "the result message is folded: {h}"
        );
        assert_eq!(h.matches("a.txt").count(), 1, "{h}");
    }

    #[test]
    fn a_failed_call_is_marked_and_an_unanswered_one_says_so() {
        let call = msg(
            Role::Assistant,
            vec![
                ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "exec".into(),
                    input: json!({"command": "false"}),
                },
                ContentBlock::ToolUse {
                    id: "c2".into(),
                    name: "exec".into(),
                    input: json!({"command": "sleep 100"}),
                },
            ],
        );
        let result = msg(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                tool_use_id: "c1".into(),
                content: "exit 1".into(),
                is_error: true,
            }],
        );
        let h = render(&[&call, &result]).into_string();
        assert!(h.contains("class=\"tool failed\""), "{h}");
        assert!(h.contains("no result yet"), "{h}");
    }

    #[test]
    fn user_text_stays_text_and_speakers_are_words() {
        let m = msg(
            Role::User,
            vec![ContentBlock::Text {
                text: "**not bold** <i>x</i>".into(),
            }],
        );
        let h = render(&[&m]).into_string();
        assert!(h.contains("**not bold** &lt;i&gt;x&lt;/i&gt;"), "{h}");
        assert!(h.contains("you · dashboard"), "{h}");
        assert_eq!(speaker(&msg(Role::Assistant, vec![])), "agent");
    }

    #[test]
    fn long_text_is_cut_with_what_was_left_out() {
        assert_eq!(cut("abcdef", 3), "abc… (3 more characters)");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(args_summary(&json!({"path": "a\nb"})), "a b");
    }
}
