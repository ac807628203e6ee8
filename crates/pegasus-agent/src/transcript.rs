//! The in-memory transcript sent to the model, and how it is rebuilt from the session file.
//!
//! The session file records what happened, in the order it was written; a provider needs a
//! transcript with strict rules: it starts with a user message, roles alternate, and every
//! tool_result answers a tool_use of the immediately preceding assistant message, all of which
//! are answered. Crashes and messages arriving mid-turn break those rules in the file, so
//! [`rebuild`] restores them instead of trusting the order on disk.

use std::collections::HashMap;

use pegasus_proto::llm::{tool_uses, Block, ChatResponse, Message, Role};
use pegasus_proto::Channel;
use pegasus_store::{
    ContentBlock, Role as SRole, SessionMessage, SessionRecord, CANCELLED_TOOL_RESULT,
};

/// How a compaction summary opens the transcript it replaces.
pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation: ";

/// Placeholder first message when the file starts with an assistant message (its beginning was
/// lost), because providers require the transcript to start with the user.
const LOST_START: &str = "(the start of this conversation is not available)";

/// Builds the provider transcript from session records (see the module doc for the rules).
pub fn rebuild(records: &[SessionRecord]) -> Vec<Message> {
    rebuild_owned(records.iter().cloned())
}

/// [`rebuild`] from records the caller no longer needs: their text moves into the transcript
/// instead of being copied (a worker's start, where this is a sixth of a long session's load).
pub fn rebuild_owned(records: impl IntoIterator<Item = SessionRecord>) -> Vec<Message> {
    let records: Vec<SessionRecord> = records.into_iter().collect();
    // Messages a UserPromptSubmit hook refused (DESIGN.md §16) never reach the model.
    let refused: std::collections::HashSet<String> = records
        .iter()
        .filter_map(|r| match r {
            SessionRecord::Hook { refused, .. } => Some(refused.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect();
    let mut b = Builder::default();
    for r in records {
        match r {
            // A crash record only tells the reader; the repair it announces is in the records.
            // A hook's line is for people.
            SessionRecord::Meta { .. }
            | SessionRecord::Crash { .. }
            | SessionRecord::Hook { .. } => {}
            SessionRecord::Message(m) if m.id.as_ref().is_some_and(|id| refused.contains(id)) => {}
            // Everything before a compaction is in its summary.
            SessionRecord::Compaction { summary, .. } => {
                b = Builder::default();
                push_user(
                    &mut b.out,
                    vec![Block::Text {
                        text: format!("{SUMMARY_PREFIX}{summary}"),
                    }],
                );
            }
            SessionRecord::Message(m) => b.message(m),
        }
    }
    b.finish()
}

#[derive(Default)]
struct Builder {
    out: Vec<Message>,
    /// Tool calls of the last assistant message, in order, and whether each is answered.
    calls: Vec<(String, bool)>,
    /// User text that arrived while tool calls were unanswered; it goes after the results.
    deferred: Vec<Block>,
}

impl Builder {
    fn pending(&self) -> bool {
        self.calls.iter().any(|(_, done)| !done)
    }

    fn message(&mut self, m: SessionMessage) {
        match m.role {
            SRole::Assistant => self.assistant(m),
            SRole::User | SRole::Tool => self.user(m),
        }
    }

    fn assistant(&mut self, m: SessionMessage) {
        let blocks: Vec<Block> = m
            .content
            .into_iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } if !text.is_empty() => Some(Block::Text { text }),
                ContentBlock::ToolUse { id, name, input } => Some(Block::ToolUse {
                    id,
                    name,
                    input_json: input_json(input),
                }),
                ContentBlock::Thinking {
                    thinking,
                    signature,
                } => Some(Block::Thinking {
                    thinking,
                    signature,
                }),
                ContentBlock::RedactedThinking { data } => Some(Block::RedactedThinking { data }),
                _ => None,
            })
            .collect();
        // Reasoning alone (an answer cut before any text) says nothing to send back.
        if blocks
            .iter()
            .all(|b| matches!(b, Block::Thinking { .. } | Block::RedactedThinking { .. }))
        {
            return;
        }
        self.close_calls();
        self.calls = tool_use_ids(&blocks)
            .into_iter()
            .map(|id| (id, false))
            .collect();
        if self.out.is_empty() {
            let text = LOST_START.into();
            push_user(&mut self.out, vec![Block::Text { text }]);
        }
        match self.out.last_mut() {
            // Two assistant turns in a row (the first made no calls): one message.
            Some(last) if last.role == Role::Assistant => last.content.extend(blocks),
            _ => self.out.push(Message {
                role: Role::Assistant,
                content: blocks,
            }),
        }
    }

    fn user(&mut self, m: SessionMessage) {
        let mut texts = Vec::new();
        for b in m.content {
            match b {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => self.result(Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                }),
                ContentBlock::Text { text } if !text.is_empty() => texts.push(Block::Text { text }),
                _ => {}
            }
        }
        if texts.is_empty() {
            return;
        }
        if self.pending() {
            self.deferred.extend(texts);
        } else {
            push_user(&mut self.out, texts);
        }
    }

    /// Files a tool result under the call it answers; a result for no open call (its call was
    /// compacted away, or it is a duplicate) is dropped, since a provider would reject it.
    fn result(&mut self, block: Block) {
        let Block::ToolResult { tool_use_id, .. } = &block else {
            return;
        };
        let Some(slot) = self
            .calls
            .iter_mut()
            .find(|(id, done)| id == tool_use_id && !done)
        else {
            tracing::debug!(
                tool_use_id,
                "dropping a tool result that answers no open call"
            );
            return;
        };
        slot.1 = true;
        match self.out.last_mut() {
            Some(last) if last.role == Role::User => last.content.push(block),
            _ => self.out.push(Message {
                role: Role::User,
                content: vec![block],
            }),
        }
        if !self.pending() {
            self.settle();
        }
    }

    /// Answers every open call with the synthetic cancelled result, then settles.
    fn close_calls(&mut self) {
        let open: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, done)| !done)
            .map(|(id, _)| id.clone())
            .collect();
        for id in open {
            self.result(Block::ToolResult {
                tool_use_id: id,
                content: CANCELLED_TOOL_RESULT.into(),
                is_error: true,
            });
        }
        self.settle();
    }

    /// All calls answered: put results in call order and release the deferred user text.
    fn settle(&mut self) {
        if !self.calls.is_empty() {
            let order: HashMap<&str, usize> = self
                .calls
                .iter()
                .enumerate()
                .map(|(i, (id, _))| (id.as_str(), i))
                .collect();
            if let Some(last) = self.out.last_mut().filter(|m| m.role == Role::User) {
                last.content.sort_by_key(|b| match b {
                    Block::ToolResult { tool_use_id, .. } => order
                        .get(tool_use_id.as_str())
                        .copied()
                        .unwrap_or(usize::MAX),
                    _ => usize::MAX,
                });
            }
        }
        self.calls.clear();
        let deferred = std::mem::take(&mut self.deferred);
        if !deferred.is_empty() {
            push_user(&mut self.out, deferred);
        }
    }

    fn finish(mut self) -> Vec<Message> {
        self.close_calls();
        self.out
    }
}

/// Appends user blocks, merging into a trailing user message so roles keep alternating.
pub fn push_user(out: &mut Vec<Message>, blocks: Vec<Block>) {
    match out.last_mut() {
        Some(last) if last.role == Role::User => last.content.extend(blocks),
        _ => out.push(Message {
            role: Role::User,
            content: blocks,
        }),
    }
}

/// The ids of the tool calls in `blocks`, in order.
pub fn tool_use_ids(blocks: &[Block]) -> Vec<String> {
    tool_uses(blocks).map(|(id, ..)| id.to_string()).collect()
}

/// Tool input as the JSON text a provider expects. A model's unparsable arguments were stored
/// as a JSON string (tool inputs are objects, so a string cannot be a real input): give back
/// the raw text.
fn input_json(input: serde_json::Value) -> String {
    match input {
        serde_json::Value::String(raw) => raw,
        other => other.to_string(),
    }
}

/// The inverse of [`input_json`] for storing a call in the session file.
fn input_value(input_json: &str) -> serde_json::Value {
    serde_json::from_str(input_json)
        .unwrap_or_else(|_| serde_json::Value::String(input_json.into()))
}

/// Session content of provider blocks.
pub fn to_content(blocks: &[Block]) -> Vec<ContentBlock> {
    blocks
        .iter()
        .cloned()
        .map(|b| match b {
            Block::Text { text } => ContentBlock::Text { text },
            Block::ToolUse {
                id,
                name,
                input_json,
            } => ContentBlock::ToolUse {
                id,
                name,
                input: input_value(&input_json),
            },
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            },
            Block::Thinking {
                thinking,
                signature,
            } => ContentBlock::Thinking {
                thinking,
                signature,
            },
            Block::RedactedThinking { data } => ContentBlock::RedactedThinking { data },
        })
        .collect()
}

/// The session record of a model response (what it said, which model, what it used).
pub fn assistant_record(blocks: &[Block], resp: &ChatResponse) -> SessionRecord {
    SessionRecord::Message(SessionMessage {
        id: Some(resp.request_id.clone()).filter(|s| !s.is_empty()),
        model: Some(resp.model.clone()).filter(|s| !s.is_empty()),
        usage: serde_json::to_value(resp.usage).ok(),
        ..SessionMessage::new(SRole::Assistant, to_content(blocks))
    })
}

/// The session record of one turn's tool results.
pub fn tool_record(results: &[Block]) -> SessionRecord {
    SessionRecord::Message(SessionMessage::new(SRole::Tool, to_content(results)))
}

/// The session record of an inbound message.
pub fn user_record(id: &str, from: &Channel, text: &str) -> SessionRecord {
    sent_record(id, from, text, None)
}

/// The session record of an inbound message with its sender's own id for it (DESIGN.md §11), by
/// which a repeat is recognised.
pub fn sent_record(id: &str, from: &Channel, text: &str, client_id: Option<&str>) -> SessionRecord {
    SessionRecord::Message(SessionMessage {
        id: Some(id.to_string()).filter(|s| !s.is_empty()),
        from: Some(from.clone()),
        client_id: client_id.map(str::to_string),
        ..SessionMessage::new(SRole::User, vec![ContentBlock::Text { text: text.into() }])
    })
}

/// Takes `texts` (the messages just enqueued, in order) back off the end of the transcript: a
/// refused message never reaches the model (DESIGN.md §16).
pub fn drop_trailing_texts(transcript: &mut Vec<Message>, texts: &[String]) {
    let Some(last) = transcript.last_mut().filter(|m| m.role == Role::User) else {
        return;
    };
    for text in texts.iter().rev() {
        let at = last
            .content
            .iter()
            .rposition(|b| matches!(b, Block::Text { text: t } if t == text));
        if let Some(at) = at {
            last.content.remove(at);
        }
    }
    if last.content.is_empty() {
        transcript.pop();
    }
}

/// Checks the provider rules of the module doc; `Err` says the first one broken. Used by tests
/// and debug assertions, and available to anyone who builds transcripts by hand.
pub fn check_valid(messages: &[Message]) -> Result<(), String> {
    let Some(first) = messages.first() else {
        return Ok(());
    };
    if first.role != Role::User {
        return Err("the transcript does not start with a user message".into());
    }
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if m.content.is_empty() {
            return Err(format!("message {i} is empty"));
        }
        if i > 0 && messages[i - 1].role == m.role {
            return Err(format!("messages {} and {i} have the same role", i - 1));
        }
        match m.role {
            Role::Assistant => {
                if m.content
                    .iter()
                    .any(|b| matches!(b, Block::ToolResult { .. }))
                {
                    return Err(format!("assistant message {i} holds a tool result"));
                }
                open = tool_use_ids(&m.content);
            }
            Role::User => {
                for b in &m.content {
                    match b {
                        Block::ToolResult { tool_use_id, .. } => {
                            let Some(pos) = open.iter().position(|id| id == tool_use_id) else {
                                return Err(format!(
                                    "message {i}: tool result {tool_use_id} answers no call of the previous message"
                                ));
                            };
                            open.remove(pos);
                        }
                        Block::ToolUse { .. } => {
                            return Err(format!("user message {i} holds a tool call"))
                        }
                        Block::Thinking { .. } | Block::RedactedThinking { .. } => {
                            return Err(format!("user message {i} holds a thinking block"))
                        }
                        Block::Text { .. } => {}
                    }
                }
                if !open.is_empty() {
                    return Err(format!(
                        "message {i} leaves tool calls unanswered: {open:?}"
                    ));
                }
            }
        }
    }
    if !open.is_empty() {
        return Err(format!(
            "the last message's tool calls are unanswered: {open:?}"
        ));
    }
    Ok(())
}

/// The transcript as plain text for the reflector and the summariser, keeping the last
/// `max_chars` characters (the most recent part matters most). Tool output is shortened.
pub fn render(messages: &[Message], max_chars: usize) -> String {
    const TOOL_CHARS: usize = 1500;
    let mut s = String::new();
    for m in messages {
        for b in &m.content {
            match (m.role, b) {
                (Role::User, Block::Text { text }) => s.push_str(&format!("User: {text}\n")),
                (Role::Assistant, Block::Text { text }) => {
                    s.push_str(&format!("Assistant: {text}\n"))
                }
                (
                    _,
                    Block::ToolUse {
                        name, input_json, ..
                    },
                ) => s.push_str(&format!(
                    "Tool call: {name} {}\n",
                    clip(input_json, TOOL_CHARS)
                )),
                (
                    _,
                    Block::ToolResult {
                        content, is_error, ..
                    },
                ) => s.push_str(&format!(
                    "Tool {}: {}\n",
                    if *is_error { "error" } else { "result" },
                    clip(content, TOOL_CHARS)
                )),
                // Reasoning is the model's scratch work, not what happened.
                (_, Block::Thinking { .. } | Block::RedactedThinking { .. }) => {}
            }
        }
    }
    let n = s.chars().count();
    if n > max_chars {
        s = s.chars().skip(n - max_chars).collect();
    }
    s
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push_str(" …");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use chrono::Utc;

    fn msg(role: SRole, content: Vec<ContentBlock>) -> SessionRecord {
        SessionRecord::Message(SessionMessage::new(role, content))
    }
    fn text(role: SRole, t: &str) -> SessionRecord {
        msg(role, vec![ContentBlock::Text { text: t.into() }])
    }
    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "read_file".into(),
            input: serde_json::json!({"path": id}),
        }
    }
    fn res(id: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: format!("r{id}"),
            is_error: false,
        }
    }

    #[test]
    fn plain_turns_map_one_to_one() {
        let t = rebuild(&[
            text(SRole::User, "hi"),
            msg(SRole::Assistant, vec![call("a")]),
            msg(SRole::Tool, vec![res("a")]),
            text(SRole::Assistant, "done"),
        ]);
        check_valid(&t).unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(
            t[1].content[0],
            Block::ToolUse {
                id: "a".into(),
                name: "read_file".into(),
                input_json: r#"{"path":"a"}"#.into()
            }
        );
    }

    #[test]
    fn mid_turn_user_text_moves_after_the_results_which_follow_call_order() {
        let t = rebuild(&[
            text(SRole::User, "go"),
            msg(SRole::Assistant, vec![call("a"), call("b")]),
            text(SRole::User, "by the way"),
            msg(SRole::Tool, vec![res("b")]),
            msg(SRole::Tool, vec![res("a")]),
            text(SRole::Assistant, "ok"),
        ]);
        check_valid(&t).unwrap();
        assert_eq!(t.len(), 4);
        let kinds: Vec<String> = t[2]
            .content
            .iter()
            .map(|b| match b {
                Block::ToolResult { tool_use_id, .. } => tool_use_id.clone(),
                Block::Text { text } => text.clone(),
                _ => "?".into(),
            })
            .collect();
        assert_eq!(kinds, vec!["a", "b", "by the way"]);
    }

    #[test]
    fn dangling_calls_get_cancelled_results_and_orphans_are_dropped() {
        let t = rebuild(&[
            msg(SRole::Tool, vec![res("zz")]),
            text(SRole::User, "go"),
            msg(SRole::Assistant, vec![call("a")]),
            text(SRole::User, "hello?"),
        ]);
        check_valid(&t).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            t[2].content[0],
            Block::ToolResult {
                tool_use_id: "a".into(),
                content: CANCELLED_TOOL_RESULT.into(),
                is_error: true
            }
        );
        assert_eq!(
            t[2].content[1],
            Block::Text {
                text: "hello?".into()
            }
        );
    }

    #[test]
    fn compaction_restarts_the_transcript_with_its_summary() {
        let t = rebuild(&[
            text(SRole::User, "old"),
            SessionRecord::Compaction {
                summary: "we did X".into(),
                archived: "a.jsonl".into(),
                ts: Utc::now(),
            },
            text(SRole::User, "new"),
        ]);
        check_valid(&t).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            t[0].content,
            vec![
                Block::Text {
                    text: format!("{SUMMARY_PREFIX}we did X")
                },
                Block::Text { text: "new".into() }
            ]
        );
    }

    #[test]
    fn leading_assistant_and_repeated_roles_are_made_valid() {
        let t = rebuild(&[
            text(SRole::Assistant, "a1"),
            text(SRole::Assistant, "a2"),
            text(SRole::User, "u1"),
            text(SRole::User, "u2"),
        ]);
        check_valid(&t).unwrap();
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn bad_json_arguments_round_trip_as_raw_text() {
        let blocks = vec![Block::ToolUse {
            id: "x".into(),
            name: "exec".into(),
            input_json: "{not json".into(),
        }];
        let content = to_content(&blocks);
        let t = rebuild(&[text(SRole::User, "go"), msg(SRole::Assistant, content)]);
        assert_eq!(t[1].content, blocks);
    }

    #[test]
    fn check_valid_catches_each_rule() {
        let u = |b: Vec<Block>| Message {
            role: Role::User,
            content: b,
        };
        let a = |b: Vec<Block>| Message {
            role: Role::Assistant,
            content: b,
        };
        let t = |s: &str| Block::Text { text: s.into() };
        let c = |id: &str| Block::ToolUse {
            id: id.into(),
            name: "n".into(),
            input_json: "{}".into(),
        };
        let r = |id: &str| Block::ToolResult {
            tool_use_id: id.into(),
            content: String::new(),
            is_error: false,
        };
        assert!(check_valid(&[a(vec![t("x")])]).is_err());
        assert!(check_valid(&[u(vec![t("x")]), u(vec![t("y")])]).is_err());
        assert!(check_valid(&[u(vec![t("x")]), a(vec![c("1")])]).is_err());
        assert!(check_valid(&[u(vec![t("x")]), a(vec![c("1")]), u(vec![r("2")])]).is_err());
        assert!(check_valid(&[u(vec![t("x")]), a(vec![c("1")]), u(vec![r("1"), t("y")])]).is_ok());
    }
}
