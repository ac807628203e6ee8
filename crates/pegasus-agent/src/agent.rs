//! The agent of one project (or of the MainAgent): its transcript, its session file, its task
//! log, and the run that turns queued messages into an answer.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use pegasus_proto::llm::{Block, Message};
use pegasus_proto::{Stage, WorkerEvent};
use pegasus_store::{load_session, Session};
use tokio::sync::mpsc::UnboundedSender;

use crate::agent_loop::{run_loop, LoopSpec};
use crate::compaction::{self, compact, RunMark};
use crate::error::AgentError;
use crate::journal::SessionHandle;
use crate::model::ChatModel;
use crate::notice::{send_event, Notice};
use crate::outcome::{Outcome, StopKind};
use crate::prompt::system_prompt;
use crate::reflector::reflect;
use crate::roles::RoleRun;
use crate::settings::AgentSettings;
use crate::tool::ToolCtx;
use crate::toolset::ToolSet;
use crate::transcript::{push_user, rebuild};
use pegasus_tasks::{NewTask, Task, TaskSpec, TaskState, TaskStore};

/// Compaction attempts that may fail in a row before the agent stops trying (SPEC §3).
const MAX_COMPACTION_FAILURES: u32 = 3;

/// The agent of one project (or of the MainAgent, with other tools and folder): owns the
/// in-memory transcript, the session appender and the task log.
///
/// The host (worker or supervisor) records every inbound message durably the moment it
/// arrives ([`crate::record_inbound`] through [`Agent::session_handle`]), enqueues it when
/// the agent is free ([`Agent::enqueue`]) and calls [`Agent::run`] to answer what is queued.
pub struct Agent {
    dir: PathBuf,
    workdir: PathBuf,
    name: String,
    system_base: String,
    global_skills: PathBuf,
    tools: ToolSet,
    model: Arc<dyn ChatModel>,
    notices: UnboundedSender<Notice>,
    settings: AgentSettings,
    session: SessionHandle,
    transcript: Vec<Message>,
    /// Texts enqueued since the last run: what the next task is about.
    queued: Vec<String>,
    tasks: TaskStore,
    compaction_failures: u32,
    /// Set by the host when the process is asked to stop: a task stops at its next turn.
    stop_flag: Arc<std::sync::atomic::AtomicBool>,
}

impl Agent {
    /// `dir` is the project folder (or `<home>/main` for the MainAgent): session/, memory/,
    /// skills/, tasks/ live under it; `workdir` is where file tools and exec act (created if
    /// missing). Loads the session (repairing what a crash left) and rebuilds a valid
    /// transcript from it; marks any task left `running` as `failed` with reason
    /// `process restarted`. A user message recorded but never answered before a restart stays
    /// in the transcript and is seen with the next message; it is not re-run on its own, since
    /// it may be what brought the worker down.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        dir: &Path,
        workdir: &Path,
        name: &str,
        system_base: String,
        global_skills: PathBuf,
        tools: ToolSet,
        model: Arc<dyn ChatModel>,
        notices: UnboundedSender<Notice>,
        settings: AgentSettings,
    ) -> Result<Agent, AgentError> {
        for d in [
            dir.join("session"),
            dir.join("memory").join("facts"),
            dir.join("memory").join("episodes"),
            dir.join("skills"),
            dir.join("tasks"),
            workdir.to_path_buf(),
        ] {
            std::fs::create_dir_all(&d).map_err(AgentError::io(&d))?;
        }
        let loaded = load_session(dir)?;
        if loaded.skipped > 0 || loaded.torn_tail || loaded.repaired_tool_uses > 0 {
            tracing::warn!(
                agent = name,
                skipped = loaded.skipped,
                torn_tail = loaded.torn_tail,
                cancelled_tool_calls = loaded.repaired_tool_uses,
                "session repaired on load"
            );
        }
        let transcript = rebuild(&loaded.records);
        let session = Arc::new(Mutex::new(Session::open(dir, name)?));
        let tasks = TaskStore::open(dir, name).map_err(AgentError::tasks)?;
        let interrupted = tasks.recover_after_restart().map_err(AgentError::tasks)?;
        for id in &interrupted {
            send_event(
                &notices,
                WorkerEvent::Task {
                    task: id.clone(),
                    title: None,
                    state: TaskState::Failed,
                    reason: Some("process restarted".into()),
                },
            );
        }
        Ok(Agent {
            dir: dir.to_path_buf(),
            workdir: workdir.to_path_buf(),
            name: name.to_string(),
            system_base,
            global_skills,
            tools,
            model,
            notices,
            settings,
            session,
            transcript,
            queued: Vec::new(),
            tasks,
            compaction_failures: 0,
            stop_flag: Arc::default(),
        })
    }

    /// The shared session appender, for [`crate::record_inbound`] from another task while a
    /// run holds `&mut self`.
    pub fn session_handle(&self) -> SessionHandle {
        self.session.clone()
    }

    /// Adds an already recorded inbound message to the in-memory transcript at the current
    /// point (merged into a trailing user message so roles alternate).
    pub fn enqueue(&mut self, id: &str, from: &str, text: &str) {
        tracing::debug!(agent = %self.name, id, from, "message enqueued");
        push_user(
            &mut self.transcript,
            vec![Block::Text {
                text: text.to_string(),
            }],
        );
        self.queued.push(text.to_string());
    }

    /// Whether messages are waiting for a run.
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// The transcript the next model call would get.
    pub fn transcript(&self) -> &[Message] {
        &self.transcript
    }

    /// The agent's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The base of its system prompt (the PROJECT.md body): the project overview of role
    /// prompts and subagents.
    pub fn system_base(&self) -> &str {
        &self.system_base
    }

    /// The flag the host sets on a graceful shutdown: a running task finishes its current
    /// turn, then stops and is recorded as `failed` with reason `interrupted by shutdown` (it
    /// can be retried). Phases of runs are not interrupted: their run resumes after a restart.
    pub fn stop_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.stop_flag.clone()
    }

    /// Its settings.
    pub fn settings(&self) -> &AgentSettings {
        &self.settings
    }

    /// Its tasks (for the task runner, `task list` and the dashboard).
    pub fn tasks(&self) -> &TaskStore {
        &self.tasks
    }

    /// Skill folders, project first.
    fn skill_dirs(&self) -> Vec<PathBuf> {
        vec![self.dir.join("skills"), self.global_skills.clone()]
    }

    /// The system prompt as the next run would send it.
    pub fn system_prompt(&self) -> String {
        system_prompt(
            &self.system_base,
            &self.skill_dirs(),
            &self.dir.join("memory"),
        )
    }

    /// Size of the session file now; 0 if it cannot be read (then compaction carries over
    /// every user message of the file, which can only duplicate, never lose, a message).
    fn session_len(&self) -> u64 {
        let s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        s.len().unwrap_or(0)
    }

    fn task_event(&self, task: &Task) {
        send_event(
            &self.notices,
            WorkerEvent::Task {
                task: task.id.clone(),
                title: Some(task.title.clone()),
                state: task.state,
                reason: task.stop_reason.clone(),
            },
        );
    }

    /// Runs the loop for the queued messages as one task: records the task (`created`, then
    /// `running`, then `done`/`failed`/`blocked` with the stop's reason), runs the loop,
    /// reflects on an answered task, compacts the session if the context is nearly full, and
    /// returns the final answer. `Err` only when the session or task log cannot be written.
    pub async fn run(&mut self) -> Result<Outcome, AgentError> {
        if self.queued.is_empty() {
            return Err(AgentError::NothingQueued);
        }
        // A message becomes a task (SPEC §7): created, its spec (the request) frozen, ready.
        let goal = self.queued.join("\n\n");
        self.queued.clear();
        let title: String = goal
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(80)
            .collect();
        let new = NewTask {
            title,
            kind: "chat".into(),
            priority: 2,
            role: None,
            depends_on: Vec::new(),
        };
        let spec = TaskSpec {
            goal,
            constraints: Vec::new(),
            acceptance: Vec::new(),
            role: None,
            model_policy: None,
            repos: pegasus_tasks::project_repos(&self.dir).unwrap_or_default(),
        };
        let task = self
            .tasks
            .create(new, "agent")
            .and_then(|t| self.tasks.freeze(&t.id, spec, "agent"))
            .and_then(|t| {
                self.tasks.transition(
                    &t.id,
                    TaskState::Planned,
                    TaskState::Ready,
                    "agent",
                    "a message",
                )
            })
            .map_err(AgentError::tasks)?;
        self.task_event(&task);
        self.run_task(task.id, true, None).await
    }

    /// Runs a task that was made elsewhere (replayed, retried, answered, a run's phase): its
    /// goal — with the answer to its question, when it was blocked on one — is recorded in the
    /// session as a message from `task`, then the task runs like a message's would. With a
    /// role, the agent works as that role (prompt, tools, model settings).
    pub async fn run_existing(
        &mut self,
        task: Task,
        role: Option<RoleRun>,
    ) -> Result<Outcome, AgentError> {
        let mut text = task
            .spec
            .as_ref()
            .map(|s| s.goal.clone())
            .unwrap_or_else(|| task.title.clone());
        if let Some(spec) = &task.spec {
            if !spec.acceptance.is_empty() {
                text.push_str("\n\nAcceptance criteria:\n");
                for a in &spec.acceptance {
                    text.push_str(&format!("- {a}\n"));
                }
            }
        }
        if let Some(answer) = task_answer(&self.tasks, &task.id) {
            text.push_str(&format!("\n\nAnswer to your question: {answer}"));
        }
        // A message's task that was still ready when the process died: its request is already
        // the unanswered end of the transcript; do not write it a second time.
        let already_there = self.transcript.last().is_some_and(|m| {
            m.role == pegasus_proto::llm::Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, Block::Text { text: t } if *t == text))
        });
        if !already_there {
            crate::journal::record_inbound(&self.session, &task.id, "task", &text)?;
            push_user(&mut self.transcript, vec![Block::Text { text }]);
        }
        self.run_task(task.id, true, role).await
    }

    /// Runs a prompt that is not a task of this project's task list — a phase of an
    /// autonomous run — with `ledger_task` as the task its model calls are billed to (the run
    /// sums its costs from the ledger by that id). The prompt is recorded in the session as a
    /// message from `from`.
    pub async fn run_prompt(
        &mut self,
        text: &str,
        from: &str,
        ledger_task: &str,
    ) -> Result<Outcome, AgentError> {
        crate::journal::record_inbound(&self.session, ledger_task, from, text)?;
        push_user(
            &mut self.transcript,
            vec![Block::Text {
                text: text.to_string(),
            }],
        );
        self.run_task(ledger_task.to_string(), false, None).await
    }

    /// The run shared by [`Agent::run`] and [`Agent::run_existing`]: `task` is ready.
    /// `tracked`: `task_id` is a task of the store, `ready`, and its states are recorded;
    /// otherwise it only names the spend in the ledger.
    async fn run_task(
        &mut self,
        task_id: String,
        tracked: bool,
        role: Option<RoleRun>,
    ) -> Result<Outcome, AgentError> {
        if tracked {
            match self.tasks.transition(
                &task_id,
                TaskState::Ready,
                TaskState::Running,
                "agent",
                "started",
            ) {
                Ok(t) => self.task_event(&t),
                Err(e) => {
                    // Cancelled (or otherwise moved) between being queued and starting.
                    return Ok(Outcome {
                        task_id,
                        text: format!("Not started: {e}"),
                        stop: StopKind::Cancelled,
                        turns: 0,
                        cost_usd: 0.0,
                    });
                }
            }
        }
        let (system, tools, settings, role_name) = match role {
            Some(r) => (r.system, r.tools, r.settings, Some(r.role)),
            None => (
                self.system_prompt(),
                self.tools.clone(),
                self.settings.clone(),
                None,
            ),
        };

        let ctx = ToolCtx {
            workdir: self.workdir.clone(),
            memory_dir: self.dir.join("memory"),
            skill_dirs: self.skill_dirs(),
            notices: self.notices.clone(),
            task_id: Some(task_id.clone()),
            depth: 0,
            settings,
            model: self.model.clone(),
            project_overview: self.system_base.clone(),
            subagents_spawned: Arc::new(AtomicU32::new(0)),
        };
        // The task's part of the transcript starts at the user message holding its request.
        let task_start = self.transcript.len().saturating_sub(1);
        let mark = RunMark {
            file_len: self.session_len(),
            request: request_texts(self.transcript.get(task_start)),
        };
        let store = self.tasks.clone();
        let watched = task_id.clone();
        let stopping = self.stop_flag.clone();
        let cancelled = move || {
            if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                return true;
            }
            store
                .get(&watched)
                .map(|t| t.state == TaskState::Cancelled)
                .unwrap_or(false)
        };
        let spec = LoopSpec {
            system: &system,
            tools: &tools,
            ctx: &ctx,
            session: Some(&self.session),
            role: role_name,
            cancelled: tracked.then_some(&cancelled as &(dyn Fn() -> bool + Send + Sync)),
        };
        let end = match run_loop(spec, &mut self.transcript).await {
            Ok(end) => end,
            Err(e) => {
                // The file is the truth; the in-memory copy may hold an unpersisted turn.
                if let Ok(loaded) = load_session(&self.dir) {
                    self.transcript = rebuild(&loaded.records);
                }
                if tracked {
                    if let Ok(t) = self.tasks.transition(
                        &task_id,
                        TaskState::Running,
                        TaskState::Failed,
                        "agent",
                        "session write failed",
                    ) {
                        self.task_event(&t);
                    }
                }
                return Err(e);
            }
        };
        let mut cost = end.cost_usd;

        if end.stop == StopKind::Answered && self.settings.reflection {
            send_event(
                &self.notices,
                WorkerEvent::Stage {
                    task: Some(task_id.clone()),
                    depth: 0,
                    stage: Stage::Reflecting,
                },
            );
            let r = reflect(
                &ctx,
                &self.transcript[task_start.min(self.transcript.len())..],
            )
            .await;
            cost += r.cost_usd;
        }

        if let Some(usage) = end.last_usage {
            cost += self
                .maybe_compact(&ctx, usage.input_tokens + usage.output_tokens, mark)
                .await;
        }

        let (mut state, mut reason) = end.stop.task_state(end.token_capped);
        let mut text = end.text;
        // A stop at a turn boundary that the user did not ask for: the process is shutting
        // down. The task can be retried; it is not cancelled.
        if end.stop == StopKind::Cancelled
            && self.stop_flag.load(std::sync::atomic::Ordering::SeqCst)
            && self
                .tasks
                .get(&task_id)
                .map(|t| t.state == TaskState::Running)
                .unwrap_or(false)
        {
            state = TaskState::Failed;
            reason = Some("interrupted by shutdown");
            text = format!("Stopped: the project is shutting down; retry with `pegasusctl task retry {task_id}`.");
        }
        let end = crate::agent_loop::LoopEnd { text, ..end };
        if !tracked {
            return Ok(Outcome {
                task_id,
                text: end.text,
                stop: end.stop,
                turns: end.turns,
                cost_usd: cost,
            });
        }
        let changed = files_changed(&self.transcript[task_start.min(self.transcript.len())..]);
        if !changed.is_empty() {
            let _ = self.tasks.update(
                &task_id,
                "files_changed",
                serde_json::json!(changed),
                "agent",
            );
        }
        let summary: String = end.text.chars().take(500).collect();
        let _ = self.tasks.update(
            &task_id,
            "result_summary",
            serde_json::json!(summary),
            "agent",
        );
        let _ = self
            .tasks
            .update(&task_id, "cost", serde_json::json!(cost), "agent");
        if let Some(r) = reason.filter(|_| state == TaskState::Done) {
            let _ = self
                .tasks
                .update(&task_id, "stop_reason", serde_json::json!(r), "agent");
        }
        // A cancelled task is already where it belongs; everything else leaves `running` now.
        if state != TaskState::Cancelled {
            let t = self
                .tasks
                .transition(
                    &task_id,
                    TaskState::Running,
                    state,
                    "agent",
                    reason.unwrap_or("answered"),
                )
                .map_err(AgentError::tasks)?;
            self.task_event(&t);
        } else if let Ok(t) = self.tasks.get(&task_id) {
            self.task_event(&t);
        }
        Ok(Outcome {
            task_id,
            text: end.text,
            stop: end.stop,
            turns: end.turns,
            cost_usd: cost,
        })
    }

    /// Compacts when `used` tokens pass 80% of the context window, unless the last attempts
    /// all failed; returns what it cost.
    async fn maybe_compact(&mut self, ctx: &ToolCtx, used: u64, mark: RunMark) -> f64 {
        if !compaction::needed(used, self.settings.context_window) {
            return 0.0;
        }
        if self.compaction_failures >= MAX_COMPACTION_FAILURES {
            tracing::warn!(agent = %self.name, "context nearly full, but compaction failed {MAX_COMPACTION_FAILURES} times in a row; not trying again");
            return 0.0;
        }
        let (result, cost) = compact(
            &self.dir,
            &self.name,
            &self.session,
            ctx,
            &self.transcript,
            mark,
        )
        .await;
        match result {
            Ok(c) => {
                tracing::info!(agent = %self.name, archived = %c.archived.display(), "session compacted");
                self.transcript = c.transcript;
                self.compaction_failures = 0;
                send_event(
                    &self.notices,
                    WorkerEvent::Compaction {
                        task: ctx.task_id.clone(),
                        archived: c.archived.to_string_lossy().into_owned(),
                    },
                );
            }
            Err(e) => {
                self.compaction_failures += 1;
                tracing::warn!(agent = %self.name, error = %e, failures = self.compaction_failures, "compaction failed");
            }
        }
        cost
    }
}

/// The request's text blocks of a task's first message, without an earlier summary (a new
/// compaction replaces it).
fn request_texts(m: Option<&Message>) -> Vec<String> {
    m.map(|m| {
        m.content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } if !text.starts_with(crate::transcript::SUMMARY_PREFIX) => {
                    Some(text.clone())
                }
                _ => None,
            })
            .collect()
    })
    .unwrap_or_default()
}

/// The answer given to a task's question (`task answer`), if any: the last `answer` update.
fn task_answer(tasks: &TaskStore, id: &str) -> Option<String> {
    tasks
        .history(id)
        .ok()?
        .into_iter()
        .rev()
        .find_map(|e| match e {
            pegasus_tasks::TaskEvent::Update { field, value, .. } if field == "answer" => {
                value.as_str().map(str::to_string)
            }
            _ => None,
        })
}

/// The workdir paths a task's successful `write_file` and `edit_file` calls touched, in order,
/// each once (seed 001's "files changed" of a task).
fn files_changed(transcript: &[Message]) -> Vec<String> {
    let mut ok = std::collections::HashSet::new();
    for m in transcript {
        for b in &m.content {
            if let Block::ToolResult {
                tool_use_id,
                is_error: false,
                ..
            } = b
            {
                ok.insert(tool_use_id.clone());
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    for m in transcript {
        for b in &m.content {
            if let Block::ToolUse {
                id,
                name,
                input_json,
            } = b
            {
                if (name == "write_file" || name == "edit_file") && ok.contains(id) {
                    let path = serde_json::from_str::<serde_json::Value>(input_json)
                        .ok()
                        .and_then(|v| v.get("path").and_then(|p| p.as_str()).map(str::to_string));
                    if let Some(p) = path.filter(|p| !out.contains(p)) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pegasus_proto::llm::Role;

    #[test]
    fn files_changed_lists_successful_writes_and_edits_once() {
        let use_ = |id: &str, name: &str, path: &str| Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input_json: serde_json::json!({"path": path}).to_string(),
        };
        let result = |id: &str, err: bool| Block::ToolResult {
            tool_use_id: id.into(),
            content: String::new(),
            is_error: err,
        };
        let t = vec![
            Message {
                role: Role::Assistant,
                content: vec![
                    use_("1", "write_file", "a.txt"),
                    use_("2", "edit_file", "b.txt"),
                    use_("3", "read_file", "c.txt"),
                ],
            },
            Message {
                role: Role::User,
                content: vec![result("1", false), result("2", true), result("3", false)],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    use_("4", "edit_file", "a.txt"),
                    use_("5", "write_file", "d.txt"),
                ],
            },
            Message {
                role: Role::User,
                content: vec![result("4", false), result("5", false)],
            },
        ];
        assert_eq!(files_changed(&t), ["a.txt", "d.txt"]);
    }
}
