//! A coding harness (Claude Code, Codex) as the agent of a task (DESIGN.md §15): the agent keeps
//! everything around the work (the task and its states, the request in the session, the reply,
//! code tasks' verify and merge) and hands the work itself to a [`Harness`] instead of its own
//! loop. The host (the worker) implements [`Harness`] for each kind; this module is the
//! contract, plus [`Mirror`], the one way a harness's events become session records, transcript
//! messages and bus events, so every harness is shown exactly like the built-in loop.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use pegasus_proto::llm::{Block, Message, Role, Usage};
use pegasus_proto::{Stage, WorkerEvent};
use pegasus_store::AgentKind;

use crate::agent_loop::LoopEnd;
use crate::approvals::Approvals;
use crate::error::AgentError;
use crate::outbox::send_event;
use crate::session_writer::{persist, SessionHandle};
use crate::settings::AgentSettings;
use crate::tool::ToolCtx;
use crate::transcript::{push_user, to_content, tool_record};

/// One piece of work handed to a harness.
pub struct HarnessTurn<'a> {
    /// The task it works for (the ledger, the events and the approvals name it).
    pub task_id: &'a str,
    /// What the harness is told: the request, as the session holds it.
    pub prompt: String,
    /// Where it works: the workdir, or the task's worktrees (`ctx.workdir` is the first,
    /// `ctx.repos` all of them); `ctx.settings.sandbox` already lets it write there.
    pub ctx: &'a ToolCtx,
    /// The role it works as (`None`: the project's agent itself).
    pub role: Option<String>,
    /// What the harness's own system prompt is extended with: the role's prompt, else the
    /// project's description (PROJECT.md's body).
    pub system: String,
    /// A code task: Pegasus commits, verifies and merges after it; the harness only edits.
    pub code_task: bool,
    /// Asked while it works: was the task cancelled, or is the process stopping?
    pub cancelled: &'a (dyn Fn() -> bool + Send + Sync),
    /// Where its events are mirrored.
    pub mirror: Mirror<'a>,
}

/// A role asked once about a task (DESIGN.md §10): a code task's reviewer or planner whose
/// assignment names a harness. Not a turn of the task: nothing of it is written to the session,
/// and the harness starts a session of its own every time.
pub struct HarnessConsult<'a> {
    /// The task it is asked about (its model calls are billed to it; approvals name it).
    pub task_id: &'a str,
    /// The role asked (the ledger names it).
    pub role: String,
    /// What it is asked.
    pub prompt: String,
    /// What the harness's own system prompt is extended with: the role's prompt, with the
    /// section naming the instruction files of `repos`.
    pub system: String,
    /// The folders it reads, `(repo id, folder)`; it runs in the first. Nothing in them is
    /// writable to it: what it is asked about must be what it saw.
    pub repos: &'a [(String, PathBuf)],
    /// The role's settings: its model, its time limit and the project's sandbox.
    pub settings: &'a AgentSettings,
    /// The project's approval gate, which its tool calls pass as a task's do.
    pub approvals: Option<Arc<Approvals>>,
    /// Asked while it works: was the task cancelled, or is the process stopping?
    pub cancelled: &'a (dyn Fn() -> bool + Send + Sync),
}

/// What [`Harness::run`] and [`Harness::consult`] return.
pub type HarnessFuture<'a> = Pin<Box<dyn Future<Output = Result<LoopEnd, AgentError>> + Send + 'a>>;

/// A harness the agent can hand a task to, or a role's consultation to. `run` and `consult`
/// work to the end (an answer, a stop, a failure as a [`LoopEnd`]) and leave nothing of the
/// harness running when they return or are dropped; only a failed session write is an `Err`.
pub trait Harness: Send + Sync {
    /// Which harness this is.
    fn kind(&self) -> AgentKind;
    /// Works `turn`.
    fn run<'a>(&'a self, turn: HarnessTurn<'a>) -> HarnessFuture<'a>;
    /// Asks the role of `consult` once, read-only: its final answer is the [`LoopEnd`]'s text
    /// (stop `Answered`); a stop (budget, failure, time limit) says why there is none, as the
    /// built-in loop's would.
    fn consult<'a>(&'a self, consult: HarnessConsult<'a>) -> HarnessFuture<'a>;
}

/// Where a harness's events go: the session (durably, turn by turn), the in-memory transcript
/// and the bus, as the built-in loop writes its own. (The model's text streams to followers
/// from pegasusd's relay, as the built-in loop's does from its proxy: not from here.)
pub struct Mirror<'a> {
    pub(crate) session: &'a SessionHandle,
    pub(crate) transcript: &'a mut Vec<Message>,
    pub(crate) ctx: &'a ToolCtx,
    /// Calls of the last assistant message still waiting for their results.
    open_calls: Vec<String>,
}

impl<'a> Mirror<'a> {
    pub(crate) fn new(
        session: &'a SessionHandle,
        transcript: &'a mut Vec<Message>,
        ctx: &'a ToolCtx,
    ) -> Mirror<'a> {
        Mirror {
            session,
            transcript,
            ctx,
            open_calls: Vec::new(),
        }
    }

    fn event(&self, event: WorkerEvent) {
        send_event(&self.ctx.notices, event);
    }

    /// The harness's model is thinking (a request is on its way).
    pub fn reasoning(&self) {
        self.event(WorkerEvent::Stage {
            task: self.ctx.task_id.clone(),
            depth: 0,
            stage: Stage::Reasoning,
        });
    }

    /// One assistant message of the harness (text and tool calls; thinking is not kept),
    /// with the model it names and its usage. Written at once; durable when it calls no tool
    /// (a crash while its tools run leaves the calls for the loader to close as cancelled).
    pub async fn assistant(
        &mut self,
        blocks: Vec<Block>,
        model: &str,
        usage: Option<Usage>,
    ) -> Result<(), AgentError> {
        // Results still open from the message before are closed first: a transcript is only
        // valid with every call answered.
        self.close_open("not shown: the harness went on without reporting this result")
            .await?;
        let blocks: Vec<Block> = blocks
            .into_iter()
            .filter(|b| match b {
                Block::Text { text } => !text.is_empty(),
                Block::ToolUse { .. } => true,
                _ => false,
            })
            .collect();
        if blocks.is_empty() {
            return Ok(());
        }
        let calls: Vec<(String, String, String)> = blocks
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse {
                    id,
                    name,
                    input_json,
                } => Some((id.clone(), name.clone(), one_line(input_json))),
                _ => None,
            })
            .collect();
        let record = pegasus_store::SessionRecord::Message(pegasus_store::SessionMessage {
            model: Some(model.to_string()).filter(|m| !m.is_empty()),
            usage: usage.and_then(|u| serde_json::to_value(u).ok()),
            ..pegasus_store::SessionMessage::new(
                pegasus_store::Role::Assistant,
                to_content(&blocks),
            )
        });
        self.transcript.push(Message {
            role: Role::Assistant,
            content: blocks,
        });
        persist(self.session, vec![record], calls.is_empty()).await?;
        if !calls.is_empty() {
            self.event(WorkerEvent::Stage {
                task: self.ctx.task_id.clone(),
                depth: 0,
                stage: Stage::Acting,
            });
        }
        for (id, name, summary) in calls {
            self.event(WorkerEvent::ToolStart {
                task: self.ctx.task_id.clone(),
                depth: 0,
                name,
                summary,
            });
            self.open_calls.push(id);
        }
        Ok(())
    }

    /// The results of tool calls, `(call id, tool name, content, is_error)`, as one durable
    /// record; a result for a call not open is dropped (the transcript must stay valid).
    pub async fn results(
        &mut self,
        results: Vec<(String, String, String, bool)>,
    ) -> Result<(), AgentError> {
        let mut blocks = Vec::new();
        for (id, name, content, is_error) in results {
            let Some(at) = self.open_calls.iter().position(|c| *c == id) else {
                continue;
            };
            self.open_calls.remove(at);
            self.event(WorkerEvent::ToolCall {
                task: self.ctx.task_id.clone(),
                depth: 0,
                name,
                is_error,
            });
            blocks.push(Block::ToolResult {
                tool_use_id: id,
                content,
                is_error,
            });
        }
        if blocks.is_empty() {
            return Ok(());
        }
        push_user(self.transcript, blocks.clone());
        persist(self.session, vec![tool_record(&blocks)], true).await
    }

    /// Answers every call still open with `why` (the harness stopped before reporting them),
    /// so the transcript stays valid.
    pub async fn close_open(&mut self, why: &str) -> Result<(), AgentError> {
        let open = std::mem::take(&mut self.open_calls);
        if open.is_empty() {
            return Ok(());
        }
        let blocks: Vec<Block> = open
            .into_iter()
            .map(|id| Block::ToolResult {
                tool_use_id: id,
                content: why.to_string(),
                is_error: true,
            })
            .collect();
        push_user(self.transcript, blocks.clone());
        persist(self.session, vec![tool_record(&blocks)], true).await
    }

    /// Makes what was written so far durable.
    pub async fn flush(&self) -> Result<(), AgentError> {
        persist(self.session, Vec::new(), true).await
    }
}

/// A tool's input (JSON text) as a started call is shown (the built-in loop's way).
fn one_line(input_json: &str) -> String {
    let input: serde_json::Value =
        serde_json::from_str(input_json).unwrap_or(serde_json::Value::Null);
    crate::actor::summary(&input)
}
