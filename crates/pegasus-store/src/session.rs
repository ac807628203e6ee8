//! A project's conversation on disk: `session/current.jsonl` (DESIGN.md §3 "Session JSONL").
//!
//! This module owns the line format, the durable append at turn boundaries and the repairing
//! load. It does not decide what a turn contains or when to compact; that is the agent loop's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use pegasus_proto::Channel;

use crate::error::Result;
use crate::jsonl::{read_jsonl_with, JsonlAppender};

/// Version written in the `meta` line; bump when the line format changes incompatibly.
pub const SESSION_VERSION: u32 = 1;

/// Content of the synthetic result that closes a tool call interrupted by a restart.
pub const CANCELLED_TOOL_RESULT: &str = r#"{"cancelled":true,"reason":"process restarted"}"#;

/// Path of the live session file inside a project (or MainAgent) folder.
pub fn session_file(project_dir: &Path) -> PathBuf {
    project_dir.join("session").join("current.jsonl")
}

/// One line of a session file, tagged by `type`.
///
/// Read by one decoder, whoever reads: [`SessionRecord::decode`] for a line of bytes, and
/// serde (`serde_json::from_str::<SessionRecord>`), which goes through the same conversion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", try_from = "RawRecord")]
pub enum SessionRecord {
    /// First line of every session file: what it belongs to and its format version.
    Meta {
        /// [`SESSION_VERSION`] at the time of writing.
        version: u32,
        /// The project (or `main`) this session belongs to.
        project: String,
        /// When the file was started.
        created: DateTime<Utc>,
    },
    /// One conversation message.
    Message(SessionMessage),
    /// Start of a compacted session: a summary of what came before and where it was archived.
    Compaction {
        /// The summary that replaces the archived messages.
        summary: String,
        /// Path of the archived session file.
        archived: String,
        /// When compaction happened.
        ts: DateTime<Utc>,
    },
    /// The process that wrote the records before this one died without finishing its work:
    /// written by the next process when it opens the session, after the synthetic results
    /// that close the tool calls it cut off, so the file (and `project log`) says what
    /// happened, not only the in-memory repair.
    Crash {
        /// What was found cut off.
        reason: String,
        /// When the restart noticed it.
        ts: DateTime<Utc>,
    },
    /// What a lifecycle hook (DESIGN.md §16) did that a person should see: it failed, hung, said
    /// too much, showed a `systemMessage`, or refused messages. The model never sees it.
    Hook {
        /// The event it ran for (`PreToolUse`, ...).
        event: String,
        /// One line saying what happened.
        text: String,
        /// The ids of the inbound messages a `UserPromptSubmit` hook refused: they stay in the
        /// file, as everything sent does, and are left out of the transcript.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        refused: Vec<String>,
        /// When it happened.
        ts: DateTime<Utc>,
    },
}

impl SessionRecord {
    /// The record a session line holds (with or without its line end), or `None` when the
    /// line is not one (not UTF-8, not JSON, an unknown `type` or block, a field missing):
    /// the one decoder of session lines, for the load, the search index, `project log` and
    /// the worker's look at sent ids alike.
    pub fn decode(line: &[u8]) -> Option<SessionRecord> {
        parse_record(line)
    }
}

/// Who a message is from, in provider terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Input to the agent (user, MainAgent, channel).
    User,
    /// The model's output.
    Assistant,
    /// Results of tool calls.
    Tool,
}

/// A message with its content blocks, the model that produced it and what it cost.
///
/// Written with two keys more than it holds, for readers of the file (DESIGN.md §11): a message
/// somebody sent carries `channel` (`cli`, `dashboard`, `telegram`, `main`, `schedule`, ...)
/// and, where the channel knows who, `sender` (the chat id for Telegram, the job of a
/// schedule), both derived from `from`, so they can never disagree with it; reading ignores
/// them, and files without them load as before. It is read by the one decoder of session
/// lines ([`SessionRecord::decode`]): every field but `role`, `content` and `ts` may be left
/// out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawRecord")]
pub struct SessionMessage {
    /// Provider or channel message id, if any.
    pub id: Option<String>,
    /// Who it is from.
    pub role: Role,
    /// Where a user message comes from (`cli`, `telegram:123`, `main`, `task`, ...).
    pub from: Option<Channel>,
    /// The blocks, in order.
    pub content: Vec<ContentBlock>,
    /// `provider/model` actually used (assistant messages).
    pub model: Option<String>,
    /// Token usage as reported by the provider.
    pub usage: Option<serde_json::Value>,
    /// When the message was recorded.
    pub ts: DateTime<Utc>,
    /// The sender's own id for an inbound message (`--id`, `Idempotency-Key`, Telegram's
    /// update): a repeat of it is recognised by it (the worker's `sends`), across restarts,
    /// because it is in the same durable line as the message itself.
    pub client_id: Option<String>,
}

impl SessionMessage {
    /// A message of `role` with `content`, recorded now, with nothing else known about it.
    pub fn new(role: Role, content: Vec<ContentBlock>) -> SessionMessage {
        SessionMessage {
            id: None,
            role,
            from: None,
            content,
            model: None,
            usage: None,
            ts: Utc::now(),
            client_id: None,
        }
    }
}

impl Serialize for SessionMessage {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        /// The line as written: the fields, in their old order, then the derived keys.
        #[derive(Serialize)]
        struct Line<'a> {
            id: &'a Option<String>,
            role: Role,
            from: &'a Option<Channel>,
            content: &'a [ContentBlock],
            model: &'a Option<String>,
            usage: &'a Option<serde_json::Value>,
            ts: &'a DateTime<Utc>,
            #[serde(skip_serializing_if = "Option::is_none")]
            channel: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            sender: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            client_id: Option<&'a str>,
        }
        let sent = self.from.as_ref().filter(|f| f.is_message());
        Line {
            id: &self.id,
            role: self.role,
            from: &self.from,
            content: &self.content,
            model: &self.model,
            usage: &self.usage,
            ts: &self.ts,
            channel: sent.map(Channel::kind),
            sender: sent.and_then(Channel::sender),
            client_id: self.client_id.as_deref(),
        }
        .serialize(ser)
    }
}

/// One block of message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// The model asks for a tool call.
    ToolUse {
        /// Id the result must refer to.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments as JSON.
        input: serde_json::Value,
    },
    /// The outcome of a tool call.
    ToolResult {
        /// The [`ContentBlock::ToolUse`] id this answers.
        tool_use_id: String,
        /// The result text (JSON or prose) shown to the model.
        content: String,
        /// Whether the call failed.
        #[serde(default)]
        is_error: bool,
    },
    /// The model's reasoning (Anthropic extended thinking), kept with its signature so it can
    /// be sent back unchanged.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The provider's signature over it.
        signature: String,
    },
    /// Reasoning the provider encrypted.
    RedactedThinking {
        /// The opaque payload, as received.
        data: String,
    },
}

/// An open session file that appends whole turns durably.
#[derive(Debug)]
pub struct Session {
    appender: JsonlAppender,
}

impl Session {
    /// Opens `<project_dir>/session/current.jsonl` for appending (repairing a torn tail); a new
    /// or empty file first gets a durable `meta` line so every session file says what it is.
    pub fn open(project_dir: &Path, project: &str) -> Result<Session> {
        let mut appender = JsonlAppender::open(&session_file(project_dir))?;
        if appender.is_empty()? {
            appender.append_durable(&SessionRecord::Meta {
                version: SESSION_VERSION,
                project: project.to_string(),
                created: Utc::now(),
            })?;
        }
        Ok(Session { appender })
    }

    /// Appends the records of one turn and fdatasyncs once at the end: a turn is the unit of
    /// durability, and one sync per line would make every turn pay for each message.
    pub fn append_turn(&mut self, records: &[SessionRecord]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.append_unsynced(records)?;
        self.appender.sync()
    }

    /// Appends records WITHOUT an fdatasync: they reach the kernel (so they survive the
    /// process being killed) but are made durable against a machine crash only by the next
    /// [`Session::append_turn`]. For the first half of a turn — the model's tool calls, written
    /// before the tools run — so a turn still costs exactly one fdatasync.
    pub fn append_unsynced(&mut self, records: &[SessionRecord]) -> Result<()> {
        for r in records {
            self.appender.append(r)?;
        }
        Ok(())
    }

    /// The session file path, for logs.
    pub fn path(&self) -> &Path {
        self.appender.path()
    }

    /// Current size of the file in bytes. A caller that notes it can later read exactly the
    /// records appended since (e.g. messages that arrived during a run).
    pub fn len(&self) -> Result<u64> {
        self.appender.len()
    }

    /// True when the file is empty (never the case after [`Session::open`], which writes meta).
    pub fn is_empty(&self) -> Result<bool> {
        self.appender.is_empty()
    }
}

/// A session as loaded, with what had to be repaired so the caller can log it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedSession {
    /// The records in order, including synthetic tool results.
    pub records: Vec<SessionRecord>,
    /// Unparsable lines that were skipped.
    pub skipped: usize,
    /// Whether an unterminated last line (a crash mid-write) was dropped.
    pub torn_tail: bool,
    /// Tool calls that had no result and were closed with [`CANCELLED_TOOL_RESULT`].
    pub repaired_tool_uses: usize,
    /// The synthetic tool messages of that repair, exactly as inserted in `records`: the
    /// caller appends them (with a [`SessionRecord::Crash`]) so the repair is on disk too.
    /// Appended after records that followed the cut-off call (a message that arrived while it
    /// ran), they still answer it: the transcript rebuild files each result under its call.
    pub repairs: Vec<SessionRecord>,
}

/// Loads `<project_dir>/session/current.jsonl`, repairing instead of failing: a torn tail is
/// dropped, bad lines are skipped, and each tool call with no result gets a synthetic
/// cancelled result right after its message (and any results already there), so the transcript
/// sent to a provider is always valid. A missing file is an empty session.
pub fn load_session(project_dir: &Path) -> Result<LoadedSession> {
    load_session_holding(project_dir, &HashSet::new())
}

/// [`load_session`], except that the calls of an assistant message holding one of the `held`
/// tool call ids are left open: a call waiting for a person's approval (DESIGN.md §11) gets its
/// real result when the request is answered, not the cancelled one.
pub fn load_session_holding(project_dir: &Path, held: &HashSet<String>) -> Result<LoadedSession> {
    let read = read_jsonl_with(&session_file(project_dir), parse_record)?;
    let (records, repairs) = close_dangling_tool_uses(read.records, held);
    let repaired_tool_uses = repairs
        .iter()
        .map(|r| match r {
            SessionRecord::Message(m) => m.content.len(),
            _ => 0,
        })
        .sum();
    Ok(LoadedSession {
        records,
        skipped: read.skipped,
        torn_tail: read.torn_tail,
        repaired_tool_uses,
        repairs,
    })
}

fn tool_result_ids(r: &SessionRecord) -> impl Iterator<Item = &str> {
    let blocks: &[ContentBlock] = match r {
        SessionRecord::Message(m) => &m.content,
        _ => &[],
    };
    blocks.iter().filter_map(|b| match b {
        ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
        _ => None,
    })
}

fn is_tool_result_message(r: &SessionRecord) -> bool {
    matches!(r, SessionRecord::Message(m) if m.role == Role::Tool)
}

/// Inserts one synthetic tool message after each message whose tool calls lack results;
/// returns the records and the synthetic messages.
fn close_dangling_tool_uses(
    records: Vec<SessionRecord>,
    held: &HashSet<String>,
) -> (Vec<SessionRecord>, Vec<SessionRecord>) {
    let answered: HashSet<String> = records
        .iter()
        .flat_map(tool_result_ids)
        .map(str::to_string)
        .collect();
    let mut out = Vec::with_capacity(records.len());
    let mut repairs = Vec::new();
    let mut pending: Option<(Vec<ContentBlock>, DateTime<Utc>)> = None;
    for r in records {
        // Pending results go after the run of tool messages that follows the call.
        if pending.is_some() && !is_tool_result_message(&r) {
            flush(&mut pending, &mut out, &mut repairs);
        }
        let holds = |m: &SessionMessage| {
            m.content.iter().any(
                |b| matches!(b, ContentBlock::ToolUse { id, .. } if held.contains(id.as_str())),
            )
        };
        if let Some(m) = match &r {
            SessionRecord::Message(m) if !holds(m) => Some(m),
            _ => None,
        } {
            let missing: Vec<ContentBlock> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, .. } if !answered.contains(id) => {
                        Some(ContentBlock::ToolResult {
                            tool_use_id: id.clone(),
                            content: CANCELLED_TOOL_RESULT.to_string(),
                            is_error: true,
                        })
                    }
                    _ => None,
                })
                .collect();
            if !missing.is_empty() {
                flush(&mut pending, &mut out, &mut repairs);
                pending = Some((missing, m.ts));
            }
        }
        out.push(r);
    }
    flush(&mut pending, &mut out, &mut repairs);
    (out, repairs)
}

fn flush(
    pending: &mut Option<(Vec<ContentBlock>, DateTime<Utc>)>,
    out: &mut Vec<SessionRecord>,
    repairs: &mut Vec<SessionRecord>,
) {
    if let Some((content, ts)) = pending.take() {
        let r = synthetic(content, ts);
        repairs.push(r.clone());
        out.push(r);
    }
}

fn synthetic(content: Vec<ContentBlock>, ts: DateTime<Utc>) -> SessionRecord {
    SessionRecord::Message(SessionMessage {
        ts,
        ..SessionMessage::new(Role::Tool, content)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::fs;

    fn msg(role: Role, content: Vec<ContentBlock>) -> SessionRecord {
        SessionRecord::Message(SessionMessage::new(role, content))
    }

    fn text(role: Role, t: &str) -> SessionRecord {
        msg(role, vec![ContentBlock::Text { text: t.into() }])
    }

    fn tool_use(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "shell".into(),
            input: serde_json::json!({"cmd": "ls"}),
        }
    }

    fn tool_result(id: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    #[test]
    fn open_append_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let turn = vec![
            text(Role::User, "hi"),
            msg(Role::Assistant, vec![tool_use("t1")]),
            msg(Role::Tool, vec![tool_result("t1")]),
            text(Role::Assistant, "done"),
        ];
        let mut s = Session::open(dir.path(), "foo").unwrap();
        s.append_turn(&turn).unwrap();
        drop(s);
        // Reopening an existing session must not write a second meta line.
        let mut s = Session::open(dir.path(), "foo").unwrap();
        s.append_turn(&[text(Role::User, "again")]).unwrap();
        let loaded = load_session(dir.path()).unwrap();
        assert_eq!(loaded.records.len(), 6);
        assert!(
            matches!(&loaded.records[0], SessionRecord::Meta { project, version: 1, .. } if project == "foo")
        );
        assert_eq!(&loaded.records[1..5], &turn[..]);
        assert_eq!(
            (loaded.skipped, loaded.torn_tail, loaded.repaired_tool_uses),
            (0, false, 0)
        );
    }

    #[test]
    fn line_format_is_tagged_by_type() {
        let r = text(Role::User, "hi");
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["type"], "message");
        assert_eq!(v["role"], "user");
        assert_eq!(v["content"][0]["type"], "text");
        let c = SessionRecord::Compaction {
            summary: "s".into(),
            archived: "a.jsonl".into(),
            ts: Utc::now(),
        };
        assert_eq!(serde_json::to_value(&c).unwrap()["type"], "compaction");
    }

    #[test]
    fn torn_tail_is_dropped_and_garbage_line_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Session::open(dir.path(), "foo").unwrap();
        s.append_turn(&[text(Role::User, "one")]).unwrap();
        drop(s);
        let path = session_file(dir.path());
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(b"this is not json\n");
        let good = serde_json::to_string(&text(Role::User, "two")).unwrap();
        bytes.extend_from_slice(format!("{good}\n{{\"type\":\"mess").as_bytes());
        fs::write(&path, bytes).unwrap();

        let loaded = load_session(dir.path()).unwrap();
        assert_eq!(loaded.records.len(), 3);
        assert_eq!(loaded.skipped, 1);
        assert!(loaded.torn_tail);

        // Opening for append cuts the torn tail, so the next turn is on its own line.
        let mut s = Session::open(dir.path(), "foo").unwrap();
        s.append_turn(&[text(Role::User, "three")]).unwrap();
        let loaded = load_session(dir.path()).unwrap();
        assert_eq!(loaded.records.len(), 4);
        assert!(!loaded.torn_tail);
    }

    #[test]
    fn dangling_tool_use_gets_a_cancelled_result() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Session::open(dir.path(), "foo").unwrap();
        s.append_turn(&[
            text(Role::User, "go"),
            msg(Role::Assistant, vec![tool_use("a"), tool_use("b")]),
            msg(Role::Tool, vec![tool_result("a")]),
        ])
        .unwrap();
        s.append_turn(&[text(Role::User, "after restart")]).unwrap();
        let loaded = load_session(dir.path()).unwrap();
        assert_eq!(loaded.repaired_tool_uses, 1);
        // meta, user, assistant, tool(a), synthetic tool(b), user
        assert_eq!(loaded.records.len(), 6);
        match &loaded.records[4] {
            SessionRecord::Message(m) => {
                assert_eq!(m.role, Role::Tool);
                assert_eq!(
                    m.content,
                    vec![ContentBlock::ToolResult {
                        tool_use_id: "b".into(),
                        content: CANCELLED_TOOL_RESULT.into(),
                        is_error: true,
                    }]
                );
                let v: serde_json::Value = serde_json::from_str(CANCELLED_TOOL_RESULT).unwrap();
                assert_eq!(
                    v,
                    serde_json::json!({"cancelled": true, "reason": "process restarted"})
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&loaded.records[5], SessionRecord::Message(m) if m.role == Role::User));
    }

    #[test]
    fn tool_use_at_the_very_end_is_closed_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Session::open(dir.path(), "foo").unwrap();
        s.append_turn(&[msg(Role::Assistant, vec![tool_use("z")])])
            .unwrap();
        let loaded = load_session(dir.path()).unwrap();
        assert_eq!(loaded.repaired_tool_uses, 1);
        assert_eq!(loaded.records.len(), 3);
        assert!(matches!(&loaded.records[2], SessionRecord::Message(m) if m.role == Role::Tool));
    }

    #[test]
    fn missing_session_loads_empty() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = load_session(dir.path()).unwrap();
        assert!(loaded.records.is_empty());
    }
}

/// One session line in the shape of every variant at once: a plain struct deserializes in one
/// pass, where the derived internally tagged enum first buffers the whole line. Loading a long
/// session is nearly all parsing, so [`load_session`] reads lines through this; the result is
/// exactly what `serde_json::from_slice::<SessionRecord>` gives (a test holds them equal).
#[derive(Deserialize)]
struct RawRecord {
    #[serde(rename = "type", default)]
    kind: String,
    version: Option<u32>,
    project: Option<String>,
    created: Option<DateTime<Utc>>,
    id: Option<String>,
    role: Option<Role>,
    from: Option<String>,
    content: Option<Vec<RawBlock>>,
    model: Option<String>,
    usage: Option<serde_json::Value>,
    ts: Option<DateTime<Utc>>,
    summary: Option<String>,
    archived: Option<String>,
    reason: Option<String>,
    client_id: Option<String>,
    event: Option<String>,
    text: Option<String>,
    refused: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<serde_json::Value>,
    tool_use_id: Option<String>,
    content: Option<String>,
    #[serde(default)]
    is_error: bool,
    thinking: Option<String>,
    signature: Option<String>,
    data: Option<String>,
}

fn parse_record(line: &[u8]) -> Option<SessionRecord> {
    // The line is checked as UTF-8 once, whole; parsing it as a `str` then spares serde_json
    // a check per string (a tenth of the load time of a long session).
    let line = std::str::from_utf8(line).ok()?;
    serde_json::from_str(line).ok()
}

/// A line that is JSON but not a session record: an unknown `type` or block, or a field its
/// `type` needs missing.
#[derive(Debug)]
pub struct NotARecord;

impl std::fmt::Display for NotARecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a session record")
    }
}

impl TryFrom<RawRecord> for SessionRecord {
    type Error = NotARecord;

    fn try_from(r: RawRecord) -> std::result::Result<SessionRecord, NotARecord> {
        record(r).ok_or(NotARecord)
    }
}

/// The record `r` holds, if its `type` and fields make one.
fn record(r: RawRecord) -> Option<SessionRecord> {
    Some(match r.kind.as_str() {
        "meta" => SessionRecord::Meta {
            version: r.version?,
            project: r.project?,
            created: r.created?,
        },
        "compaction" => SessionRecord::Compaction {
            summary: r.summary?,
            archived: r.archived?,
            ts: r.ts?,
        },
        "crash" => SessionRecord::Crash {
            reason: r.reason?,
            ts: r.ts?,
        },
        "hook" => SessionRecord::Hook {
            event: r.event?,
            text: r.text?,
            refused: r.refused.unwrap_or_default(),
            ts: r.ts?,
        },
        "message" => SessionRecord::Message(message(r)?),
        _ => return None,
    })
}

impl TryFrom<RawRecord> for SessionMessage {
    type Error = NotARecord;

    fn try_from(r: RawRecord) -> std::result::Result<SessionMessage, NotARecord> {
        message(r).ok_or(NotARecord)
    }
}

/// The message `r` holds (its `type` not looked at), if its fields make one.
fn message(r: RawRecord) -> Option<SessionMessage> {
    let mut content = Vec::new();
    for b in r.content? {
        content.push(match b.kind.as_str() {
            "text" => ContentBlock::Text { text: b.text? },
            "tool_use" => ContentBlock::ToolUse {
                id: b.id?,
                name: b.name?,
                input: b.input?,
            },
            "tool_result" => ContentBlock::ToolResult {
                tool_use_id: b.tool_use_id?,
                content: b.content?,
                is_error: b.is_error,
            },
            "thinking" => ContentBlock::Thinking {
                thinking: b.thinking?,
                signature: b.signature?,
            },
            "redacted_thinking" => ContentBlock::RedactedThinking { data: b.data? },
            _ => return None,
        });
    }
    Some(SessionMessage {
        id: r.id,
        role: r.role?,
        from: r.from.as_deref().map(Channel::parse),
        content,
        model: r.model,
        usage: r.usage,
        ts: r.ts?,
        client_id: r.client_id,
    })
}

#[cfg(test)]
mod fast_parse_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// `from` is typed, and written back as the very word it was read from.
    #[test]
    fn a_message_keeps_the_word_of_its_sender() {
        for (word, channel) in [
            ("cli", Channel::Cli),
            ("dashboard", Channel::Dashboard),
            ("telegram:42", Channel::Telegram(Some(42))),
            ("main", Channel::Main),
            (
                "schedule:nightly",
                Channel::Schedule(Some("nightly".into())),
            ),
            ("project/web", Channel::Project("web".into())),
            ("task", Channel::Task),
            ("run", Channel::Run),
            ("user", Channel::Other("user".into())),
        ] {
            let line = format!(
                r#"{{"type":"message","role":"user","from":"{word}","content":[],"ts":"2026-11-21T10:00:00Z"}}"#
            );
            let Some(SessionRecord::Message(m)) = parse_record(line.as_bytes()) else {
                panic!("{line}");
            };
            assert_eq!(m.from.as_ref(), Some(&channel), "{word}");
            let back = serde_json::to_value(&m).unwrap();
            assert_eq!(back["from"], word);
        }
    }

    /// A message somebody sent is written with its `channel` and `sender` (from its `from`)
    /// and its client id; other records are written as before, and every line reads back the
    /// same.
    #[test]
    fn a_sent_message_is_written_with_its_channel_sender_and_client_id() {
        let written = |from: Option<Channel>, client_id: Option<&str>| {
            let m = SessionMessage {
                id: Some("1-1".into()),
                role: Role::User,
                from,
                content: vec![ContentBlock::Text { text: "hi".into() }],
                model: None,
                usage: None,
                ts: Utc::now(),
                client_id: client_id.map(str::to_string),
            };
            let line = serde_json::to_string(&SessionRecord::Message(m.clone())).unwrap();
            assert_eq!(
                parse_record(line.as_bytes()),
                Some(SessionRecord::Message(m.clone()))
            );
            assert_eq!(
                serde_json::from_str::<SessionRecord>(&line).unwrap(),
                SessionRecord::Message(m)
            );
            serde_json::from_str::<serde_json::Value>(&line).unwrap()
        };
        let v = written(Some(Channel::Telegram(Some(42))), Some("telegram:9"));
        assert_eq!(
            (&v["from"], &v["channel"], &v["sender"], &v["client_id"]),
            (
                &serde_json::json!("telegram:42"),
                &serde_json::json!("telegram"),
                &serde_json::json!("42"),
                &serde_json::json!("telegram:9")
            )
        );
        let v = written(Some(Channel::Dashboard), None);
        assert_eq!(v["channel"], "dashboard");
        assert!(v.get("sender").is_none() && v.get("client_id").is_none());
        let v = written(Some(Channel::Schedule(Some("nightly".into()))), None);
        assert_eq!(
            (&v["channel"], &v["sender"]),
            (
                &serde_json::json!("schedule"),
                &serde_json::json!("nightly")
            )
        );
        // A task's own request and a model's answer are nobody's message.
        for from in [Some(Channel::Task), None] {
            let v = written(from, None);
            assert!(
                v.get("channel").is_none() && v.get("sender").is_none(),
                "{v}"
            );
        }
    }

    /// The fast line parser and the derived deserializer agree on every kind of line, good or
    /// bad.
    #[test]
    fn fast_parser_matches_the_derived_one() {
        let lines = [
            r#"{"type":"meta","version":1,"project":"p","created":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"message","role":"user","from":"cli","content":[{"type":"text","text":"hi"}],"ts":"2026-11-21T10:00:00.5Z"}"#,
            r#"{"type":"message","role":"user","from":"telegram:42","content":[{"type":"text","text":"hi"}],"ts":"2026-11-21T10:00:00.5Z"}"#,
            r#"{"type":"message","role":"user","from":"project/web","content":[{"type":"text","text":"hi"}],"ts":"2026-11-21T10:00:00.5Z"}"#,
            r#"{"type":"message","role":"user","from":"a word from the future","content":[{"type":"text","text":"hi"}],"ts":"2026-11-21T10:00:00.5Z"}"#,
            r#"{"type":"message","id":"9-1","role":"user","from":"telegram:42","content":[{"type":"text","text":"hi"}],"model":null,"usage":null,"ts":"2026-11-21T10:00:00.5Z","channel":"telegram","sender":"42","client_id":"telegram:77"}"#,
            r#"{"type":"message","id":"m1","role":"assistant","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t1","name":"read_file","input":{"path":"a"}}],"model":"fa/x","usage":{"input_tokens":3},"ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"message","role":"tool","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}],"model":null,"usage":null,"ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"compaction","summary":"s","archived":"session/archive/1.jsonl","ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"crash","reason":"worker died","ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"message","role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"c2ln"},{"type":"redacted_thinking","data":"ZW5j"},{"type":"text","text":"x"}],"ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"message","role":"assistant","content":[{"type":"thinking","thinking":"no signature"}],"ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"crash","ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"hook","event":"Stop","text":"hook `x` timed out","ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"hook","event":"UserPromptSubmit","text":"refused","refused":["7-1"],"ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"hook","event":"Stop","ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"message","role":"user","content":[{"type":"image","text":"x"}],"ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"message","role":"robot","content":[],"ts":"2026-11-21T10:00:00Z"}"#,
            r#"{"type":"message","role":"user","content":[]}"#,
            r#"{"type":"nonsense"}"#,
            r#"{"version":1}"#,
            r#"not json"#,
            r#"{"type":"meta","version":1,"project":"p","created":"yesterday"}"#,
        ];
        for line in lines {
            let derived = serde_json::from_slice::<SessionRecord>(line.as_bytes()).ok();
            assert_eq!(parse_record(line.as_bytes()), derived, "{line}");
        }
        // Bytes that are not UTF-8, inside a string and outside one: refused by both.
        let good = r#"{"type":"crash","reason":"worker died","ts":"2026-11-21T10:00:00Z"}"#;
        let mut in_string = good.as_bytes().to_vec();
        let at = good.find("died").unwrap();
        in_string[at] = 0xff;
        let mut after = good.as_bytes().to_vec();
        after.push(0xff);
        for bad in [in_string, after] {
            assert_eq!(parse_record(&bad), None);
            assert_eq!(serde_json::from_slice::<SessionRecord>(&bad).ok(), None);
        }
        assert!(parse_record(good.as_bytes()).is_some());
    }
}
