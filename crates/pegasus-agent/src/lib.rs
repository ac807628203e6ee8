//! The agent that works inside a `project-worker` (and, with other tools, the MainAgent in
//! pegasusd): the loop, its guards, the built-in tools, memory, skills, subagents and the task
//! records of a run (DESIGN.md §6, seed 000's Thinker → Actor → PostTaskReflector).
//!
//! What it is for: given a project folder, a system prompt, a tool set and a [`ChatModel`],
//! turn queued messages into answers, persisting every turn so a `kill -9` at any point
//! leaves a session that loads into a valid transcript. Tools act inside the project's workdir
//! and memory folder only; `exec` runs in its own process group that dies on timeout, cancel,
//! or the worker's death.
//!
//! What it is not for: it holds no credentials and knows no provider (the [`ChatModel`] is a
//! proxy to the gateway), it speaks no socket protocol (the worker turns [`Notice`]s into
//! frames), and it never writes PROJECT.md or decides a project's lifecycle; the supervisor
//! does. It does not read config.yml either: the host resolves [`AgentSettings`].
//!
//! Map: [`agent`] (the per-project agent and its runs), [`desk`] (what the host shares with it:
//! the folder, the task board, the stop flag), [`task_record`] (how a message becomes
//! a task and how its states are recorded), [`session_writer`] (durable session appends),
//! [`outbox`] (what the agent tells its host), [`approvals`] (the gate of calls that need a
//! person's yes), [`agent_loop`] (the loop and its guards), [`thinker`] / [`actor`] / [`reflector`] (the three stages), [`transcript`]
//! (session records ↔ a provider-valid transcript), [`compaction`], [`context`] (staying inside
//! the context window), [`roles`],
//! [`prompt`], [`instructions`] (AGENTS.md and CLAUDE.md), [`skills`], [`memory`], [`memory_compaction`] (old episodes condensed into
//! facts), [`paths`] (workdir confinement), [`tools`] (one file
//! per tool).

pub mod actor;
pub mod agent;
pub mod agent_loop;
pub mod approvals;
pub mod compaction;
pub mod context;
pub mod desk;
pub mod error;
pub mod guards;
pub mod harness;
pub mod hooks;
pub mod instructions;
pub mod memory;
pub mod memory_compaction;
pub mod model;
pub mod outbox;
pub mod outcome;
pub mod paths;
pub mod prompt;
pub mod reflector;
pub mod roles;
pub mod session_writer;
pub mod settings;
pub mod skills;
pub mod task_record;
pub mod thinker;
pub mod tool;
pub mod tools;
pub mod toolset;
pub mod transcript;

pub use agent::{Agent, Workspace};
pub use approvals::Approvals;
pub use desk::{Desk, TaskBoard};
pub use error::AgentError;
pub use harness::{Harness, HarnessConsult, HarnessFuture, HarnessTurn, Mirror};
pub use model::{ChatFuture, ChatModel};
pub use outbox::Notice;
pub use outcome::{RunOutcome, StopKind};
pub use roles::{prepare_role, RoleRun};
pub use session_writer::{record_inbound, record_sent, SessionHandle};
pub use settings::AgentSettings;
pub use tool::{Tool, ToolCtx, ToolFuture, ToolOutput, TypedTool};
pub use toolset::{LateTools, ToolSet};
