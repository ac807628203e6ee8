//! What a working agent reports while it works: one typed enum, [`WorkerEvent`], built by the
//! agent, carried by [`crate::worker::FromWorker::Event`], and matched on by every consumer in
//! pegasusd (the running-task tracker behind `status`, the watchdog, `log -f`, later the
//! dashboard and Telegram).
//!
//! Why typed: an event used to be a name and a JSON text, built ad hoc on one side and parsed
//! ad hoc on the other, so a renamed field failed silently. Now a change to an event is a
//! compile error on both sides. The task state and the cognitive stage live here too, so the
//! words a task's log, a frame and the dashboard use cannot drift apart.
//!
//! Frames are `bincode`: plain structs and externally tagged enums only (see the crate docs).

use crate::llm::{StopReason, Usage};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a task is in its life (DESIGN.md §7). Serialized in snake_case (`"verifying"`), the same
/// string as [`TaskState::as_str`], so files, frames and the dashboard all read the same word.
/// Which moves are allowed is decided in `pegasus-tasks` (`check_transition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Being written; the spec may still change freely.
    Draft,
    /// The spec is frozen (`spec_version >= 1`); may still get a new spec version.
    Planned,
    /// Frozen and bound to its project: may be picked up by the runner.
    Ready,
    /// Being executed; its [`Stage`] says reasoning/acting/reflecting.
    Running,
    /// Executed; its acceptance checks are running.
    Verifying,
    /// Every check passed; waiting to be finalised.
    Verified,
    /// Finished successfully. Terminal.
    Done,
    /// Execution or verification failed; may be retried (→ ready).
    Failed,
    /// Given up by the user or the system. Terminal.
    Cancelled,
    /// Stuck until someone answers `question` or lifts the budget; → ready resumes it.
    Blocked,
}

impl TaskState {
    /// Every state, in lifecycle order, for exhaustive tests, help texts and parsing.
    pub const ALL: [TaskState; 10] = [
        TaskState::Draft,
        TaskState::Planned,
        TaskState::Ready,
        TaskState::Running,
        TaskState::Verifying,
        TaskState::Verified,
        TaskState::Done,
        TaskState::Failed,
        TaskState::Cancelled,
        TaskState::Blocked,
    ];

    /// The lowercase name used in files, commands and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Draft => "draft",
            TaskState::Planned => "planned",
            TaskState::Ready => "ready",
            TaskState::Running => "running",
            TaskState::Verifying => "verifying",
            TaskState::Verified => "verified",
            TaskState::Done => "done",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::Blocked => "blocked",
        }
    }

    /// Parses the lowercase name; `None` for anything else so callers can list the valid ones.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// `done` and `cancelled`: nothing may leave them. `failed` is not terminal, because a
    /// failed task can be retried.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Done | TaskState::Cancelled)
    }

    /// States a dead process leaves behind: nobody is executing or verifying them any more,
    /// so the restart rule fails them (DESIGN.md §7).
    pub fn is_interrupted_by_restart(self) -> bool {
        matches!(self, TaskState::Running | TaskState::Verifying)
    }

    /// The task no longer runs: it ended, failed, or waits for somebody.
    pub fn has_stopped(self) -> bool {
        matches!(
            self,
            TaskState::Done | TaskState::Failed | TaskState::Blocked | TaskState::Cancelled
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cognitive stage of a running task (seed 000's TaskFSM, DESIGN.md §7), shown in `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Waiting for the model to decide.
    Reasoning,
    /// Running the tool calls the model asked for.
    Acting,
    /// Writing what was learnt to memory after the answer.
    Reflecting,
}

impl Stage {
    /// Every stage, for exhaustive tests.
    pub const ALL: [Stage; 3] = [Stage::Reasoning, Stage::Acting, Stage::Reflecting];

    /// The lowercase name shown in `status` and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Reasoning => "reasoning",
            Stage::Acting => "acting",
            Stage::Reflecting => "reflecting",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing an agent did that its supervisor, its logs and its watchers want to know.
///
/// `task` is the id of the task the agent works on (`None` for work outside a task, such as
/// compaction between tasks); `depth` is 0 for the task's own agent and 1+ for its subagents,
/// whose stages and calls count as their parent task's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WorkerEvent {
    /// A task moved to `state` (with why, for a stop that was not an answer).
    Task {
        /// The task's id.
        task: String,
        /// The task's one-line title; `None` when the restart rule reports a task it moved.
        title: Option<String>,
        /// The state it moved to.
        state: TaskState,
        /// Why it moved there (the task's stop reason, or what the restart rule did); `None` when
        /// nothing says why.
        reason: Option<String>,
    },
    /// A running task entered a cognitive stage.
    Stage {
        /// The task's id; `None` for work outside a task.
        task: Option<String>,
        /// 0 for the task's own agent, 1+ for its subagents.
        depth: u32,
        /// The stage it entered.
        stage: Stage,
    },
    /// A tool call started: its tool and what it was given, cut to a line (`project log -f`
    /// shows the agent at work with it).
    ToolStart {
        /// The task's id; `None` for work outside a task.
        task: Option<String>,
        /// 0 for the task's own agent, 1+ for its subagents.
        depth: u32,
        /// The tool's name (`exec`, `read_file`, `mcp__NAME__TOOL`, ...).
        name: String,
        /// What the tool was given, cut to one line.
        summary: String,
    },
    /// A tool call finished.
    ToolCall {
        /// The task's id; `None` for work outside a task.
        task: Option<String>,
        /// 0 for the task's own agent, 1+ for its subagents.
        depth: u32,
        /// The tool's name, as in its [`WorkerEvent::ToolStart`].
        name: String,
        /// Whether the tool's output is an error (given to the model as the call's result).
        is_error: bool,
    },
    /// A model call answered: what it used and cost.
    ModelUsage {
        /// The task's id; `None` for work outside a task (compaction between tasks).
        task: Option<String>,
        /// 0 for the task's own agent, 1+ for its subagents.
        depth: u32,
        /// `provider/model` actually used.
        model: String,
        /// Tokens the call used, as the provider reported them.
        usage: Usage,
        /// `None` when the price table does not know the model.
        cost_usd: Option<f64>,
        /// Why the model stopped.
        stop_reason: StopReason,
    },
    /// A streamed piece of the model's text, as it arrives.
    TextDelta {
        /// The task's id; `None` for work outside a task.
        task: Option<String>,
        /// The next piece of the answer's text, to append to the pieces before it.
        text: String,
    },
    /// The session was compacted; the old file was archived at `archived`.
    Compaction {
        /// The task's id; `None` for compaction between tasks.
        task: Option<String>,
        /// Path of the archived session file.
        archived: String,
    },
    /// A call of the task waits for a person's yes (DESIGN.md §11); its task is blocked.
    Approval {
        /// The waiting call, as `approvals` lists it.
        request: crate::ctl::ApprovalInfo,
    },
    /// A request got its answer (`approved`, `denied`, `expired` or `withdrawn`).
    ApprovalAnswered {
        /// The task whose call it was; `None` when the request names none.
        task: Option<String>,
        /// The approval's id (`ap-...`), as [`crate::ctl::ApprovalInfo::id`].
        id: String,
        /// `approved`, `denied`, `expired` or `withdrawn`.
        decision: String,
    },
}

impl WorkerEvent {
    /// The event's short name, for log lines and the dashboard's event types.
    pub fn kind(&self) -> &'static str {
        match self {
            WorkerEvent::Task { .. } => "task",
            WorkerEvent::Stage { .. } => "task_stage",
            WorkerEvent::ToolStart { .. } => "tool_start",
            WorkerEvent::ToolCall { .. } => "tool_call",
            WorkerEvent::ModelUsage { .. } => "model_response",
            WorkerEvent::TextDelta { .. } => "text_delta",
            WorkerEvent::Compaction { .. } => "compaction",
            WorkerEvent::Approval { .. } => "approval",
            WorkerEvent::ApprovalAnswered { .. } => "approval_answered",
        }
    }

    /// The task the event is about, if any.
    pub fn task(&self) -> Option<&str> {
        match self {
            WorkerEvent::Task { task, .. } => Some(task),
            WorkerEvent::Approval { request } => Some(&request.task),
            WorkerEvent::Stage { task, .. }
            | WorkerEvent::ToolStart { task, .. }
            | WorkerEvent::ToolCall { task, .. }
            | WorkerEvent::ModelUsage { task, .. }
            | WorkerEvent::TextDelta { task, .. }
            | WorkerEvent::Compaction { task, .. }
            | WorkerEvent::ApprovalAnswered { task, .. } => task.as_deref(),
        }
    }
}

/// One event on pegasusd's bus, as every consumer (the status tracker, the watchdog,
/// `pegasusctl ... -f`, the dashboard) receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusEvent {
    /// Position on the bus since the daemon started: strictly increasing, so a follower can
    /// tell a gap (and resume after one, where a ring buffer allows).
    pub seq: u64,
    /// When the daemon published it, in milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// The project it is about (`main` for the MainAgent).
    pub project: String,
    /// What happened.
    pub body: BusBody,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BusBody {
    /// Something the project's agent did.
    Worker(WorkerEvent),
    /// The project's worker process changed state.
    WorkerState {
        /// The worker's new state.
        state: crate::WorkerState,
        /// The worker's process id in that state; `None` when no process runs.
        pid: Option<u32>,
    },
    /// The worker ended without being asked to (`exit code 3`, `signal 9 (SIGKILL)`, ...).
    Crash {
        /// How it ended, one line (`exit code 3`, `signal 9 (SIGKILL)`, ...).
        reason: String,
    },
    /// A model call of the project started or ended in the gateway; `in_flight` counts the
    /// project's calls still waiting after this one, so a consumer that missed events is right
    /// again at the next one.
    LlmCall {
        /// The task that made the call; `None` for a call outside a task.
        task: Option<String>,
        /// `false` when the call starts, `true` when it ended (answered or failed).
        ended: bool,
        /// The project's calls still waiting after this one.
        in_flight: u32,
        /// What the call cost; `None` at its start, for a failed call, or when the price table does
        /// not know the model.
        cost_usd: Option<f64>,
    },
    /// The project told the MainAgent something (`notify`).
    Notify {
        /// The `notify` tool's text, as the project's agent wrote it.
        text: String,
    },
}

impl BusBody {
    /// A short name, for log lines and the dashboard's SSE event types.
    pub fn kind(&self) -> &'static str {
        match self {
            BusBody::Worker(e) => e.kind(),
            BusBody::WorkerState { .. } => "worker_state",
            BusBody::Crash { .. } => "crash",
            BusBody::LlmCall { .. } => "llm_call",
            BusBody::Notify { .. } => "notify",
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{decode, encode};

    /// One value of every variant; the `match` makes adding a variant without a sample here a
    /// compile error, so the round trip below stays exhaustive.
    pub(crate) fn samples() -> Vec<WorkerEvent> {
        let all = vec![
            WorkerEvent::Task {
                task: "t-1".into(),
                title: Some("Write the page".into()),
                state: TaskState::Failed,
                reason: Some("loop_capped".into()),
            },
            WorkerEvent::Stage {
                task: Some("t-1".into()),
                depth: 1,
                stage: Stage::Acting,
            },
            WorkerEvent::ToolStart {
                task: None,
                depth: 0,
                name: "exec".into(),
                summary: "cargo test".into(),
            },
            WorkerEvent::ToolCall {
                task: None,
                depth: 0,
                name: "exec".into(),
                is_error: true,
            },
            WorkerEvent::ModelUsage {
                task: Some("t-2".into()),
                depth: 0,
                model: "anthropic/claude-sonnet-4-5".into(),
                usage: Usage {
                    input_tokens: 10,
                    output_tokens: 20,
                    cache_read_tokens: 3,
                    cache_write_tokens: 4,
                },
                cost_usd: Some(0.25),
                stop_reason: StopReason::ToolUse,
            },
            WorkerEvent::TextDelta {
                task: Some("t-2".into()),
                text: "Hel".into(),
            },
            WorkerEvent::Compaction {
                task: None,
                archived: "/h/projects/p/session/archive-1.jsonl".into(),
            },
            WorkerEvent::Approval {
                request: crate::ctl::ApprovalInfo {
                    id: "ap-abc".into(),
                    project: "web".into(),
                    task: "t-3".into(),
                    tool: "exec".into(),
                    summary: "rm -rf build".into(),
                    asked_at: "2026-11-26T10:00:00Z".into(),
                    input: "{\"command\":\"rm -rf build\"}".into(),
                },
            },
            WorkerEvent::ApprovalAnswered {
                task: Some("t-3".into()),
                id: "ap-abc".into(),
                decision: "approved".into(),
            },
        ];
        for e in &all {
            match e {
                WorkerEvent::Task { .. }
                | WorkerEvent::Stage { .. }
                | WorkerEvent::ToolStart { .. }
                | WorkerEvent::ToolCall { .. }
                | WorkerEvent::ModelUsage { .. }
                | WorkerEvent::TextDelta { .. }
                | WorkerEvent::Compaction { .. }
                | WorkerEvent::Approval { .. }
                | WorkerEvent::ApprovalAnswered { .. } => {}
            }
        }
        all
    }

    #[test]
    fn every_worker_event_round_trips_through_the_codec() {
        let samples = samples();
        let kinds: std::collections::HashSet<_> = samples.iter().map(|e| e.kind()).collect();
        assert_eq!(kinds.len(), samples.len(), "one sample per variant");
        for event in samples {
            let frame = crate::worker::FromWorker::Event(event.clone());
            let back: crate::worker::FromWorker = decode(&encode(&frame).unwrap()).unwrap();
            assert_eq!(back, frame);
        }
    }

    #[test]
    fn every_bus_event_round_trips_through_the_codec() {
        let mut bodies: Vec<BusBody> = samples().into_iter().map(BusBody::Worker).collect();
        bodies.extend([
            BusBody::WorkerState {
                state: crate::WorkerState::CrashLooping,
                pid: Some(42),
            },
            BusBody::Crash {
                reason: "signal 9 (SIGKILL)".into(),
            },
            BusBody::LlmCall {
                task: Some("t-1".into()),
                ended: true,
                in_flight: 2,
                cost_usd: Some(0.5),
            },
            BusBody::Notify {
                text: "done".into(),
            },
        ]);
        for (seq, body) in bodies.into_iter().enumerate() {
            match &body {
                BusBody::Worker(_)
                | BusBody::WorkerState { .. }
                | BusBody::Crash { .. }
                | BusBody::LlmCall { .. }
                | BusBody::Notify { .. } => {}
            }
            let frame = crate::ctl::CtlResponse::Event(BusEvent {
                seq: seq as u64,
                ts_ms: 1_700_000_000_000,
                project: "web".into(),
                body,
            });
            let back: crate::ctl::CtlResponse = decode(&encode(&frame).unwrap()).unwrap();
            assert_eq!(back, frame);
        }
    }

    #[test]
    fn every_task_state_and_stage_round_trips_by_name_and_codec() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.as_str()), Some(s));
            assert_eq!(decode::<TaskState>(&encode(&s).unwrap()).unwrap(), s);
        }
        assert_eq!(TaskState::parse("Running"), None);
        for s in Stage::ALL {
            assert_eq!(decode::<Stage>(&encode(&s).unwrap()).unwrap(), s);
        }
    }
}
