//! The agent of one project (or of the MainAgent): its transcript, its session file, its task
//! log, and the run that turns queued messages into an answer.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use pegasus_proto::llm::{Block, Message};
use pegasus_proto::{Channel, Stage, WorkerEvent};
use pegasus_store::{load_session, Session, StoreError};
use tokio::sync::mpsc::UnboundedSender;

use crate::agent_loop::{run_loop, LoopSpec};
use crate::compaction::{self, Compactor, RunMark};
use crate::desk::{Desk, TaskBoard};
use crate::error::AgentError;
use crate::model::ChatModel;
use crate::outbox::{send_event, Notice};
use crate::outcome::{RunOutcome, StopKind};
use crate::prompt::system_prompt;
use crate::reflector::reflect;
use crate::roles::RoleRun;
use crate::session_writer::SessionHandle;
use crate::settings::AgentSettings;
use crate::task_record;
use crate::tool::ToolCtx;

/// Where a code task works: its worktrees, `(repo id, folder)`, the first being the default
/// for file tools and `exec` (DESIGN.md §10).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workspace {
    /// The task's worktrees.
    pub repos: Vec<(String, PathBuf)>,
}
use crate::toolset::ToolSet;
use crate::transcript::{push_user, rebuild};
use pegasus_tasks::{Task, TaskState};

mod consult;

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
    /// The ids of those messages: the task lists them.
    queued_ids: Vec<String>,
    /// Acknowledged messages (id, text) no task took up before the last stop, found at open.
    untaken: Vec<(String, String)>,
    board: TaskBoard,
    /// Set by the host when the process is asked to stop: a task stops at its next turn.
    stop_flag: Arc<std::sync::atomic::AtomicBool>,
    /// The approval gate of a project's agent (DESIGN.md §11), set by the host.
    approvals: Option<Arc<crate::approvals::Approvals>>,
    /// A call that was waiting for its approval when the last process stopped, left open in
    /// the session; [`Agent::resume_held`] answers it.
    held: Option<pegasus_approvals::ApprovalRequest>,
    /// The instruction files (AGENTS.md, CLAUDE.md) read so far, kept until they change.
    instruction_files: crate::instructions::FileCache,
    /// The project's lifecycle hooks (DESIGN.md §16), set by the host.
    hooks: Option<Arc<crate::hooks::Hooks>>,
    /// The `source` of the `SessionStart` due before the next task: `startup` or `resume`
    /// for the worker's first, `compact` after a compaction; `None` once fired.
    session_start: Option<&'static str>,
    /// The project's agent (PROJECT.md `agent:`, DESIGN.md §15).
    agent_kind: pegasus_store::AgentKind,
    /// The harnesses the host can run, by kind; a task whose agent is not the built-in loop
    /// is handed to its harness.
    harnesses:
        std::collections::BTreeMap<pegasus_store::AgentKind, Arc<dyn crate::harness::Harness>>,
}

impl Agent {
    /// The agent of `desk`'s project (or the MainAgent's: `<home>/main`); `workdir` is where
    /// file tools and exec act (created if missing). Loads the session, repairing what a crash left and writing that repair into
    /// the file (the synthetic cancelled results of cut-off tool calls and a `crash` record),
    /// and rebuilds a valid transcript from it; applies the restart rule to the tasks (see
    /// [`pegasus_tasks::TaskStore::recover_after_restart`]: a task left `running` fails with `process
    /// restarted`, a message's task runs again once). Messages acknowledged but never taken
    /// up are made a task by [`Agent::adopt_pending_messages`].
    pub fn open(
        desk: &Desk,
        workdir: &Path,
        system_base: String,
        global_skills: PathBuf,
        tools: ToolSet,
        model: Arc<dyn ChatModel>,
        settings: AgentSettings,
    ) -> Result<Agent, AgentError> {
        let (dir, name) = (desk.dir.as_path(), desk.name.as_str());
        let notices = desk.board.notices().clone();
        for d in [
            dir.join("session"),
            dir.join("memory").join("facts"),
            dir.join("memory").join("episodes"),
            dir.join("skills"),
            dir.join("tasks"),
            workdir.to_path_buf(),
        ] {
            std::fs::create_dir_all(&d).map_err(StoreError::io(&d))?;
        }
        // Temp files of atomic writes cut short by a kill (older than any write in progress).
        for d in [dir.to_path_buf(), dir.join("session"), dir.join("tasks")] {
            let n = pegasus_store::remove_stale_temps(&d, std::time::Duration::from_secs(60));
            if n > 0 {
                tracing::info!(agent = name, dir = %d.display(), removed = n, "removed temp files left by a crash");
            }
        }
        let tasks = desk.board.store().clone();
        let (held, held_calls) = crate::approvals::held_after_restart(dir, &tasks);
        let loaded = pegasus_store::load_session_holding(dir, &held_calls)?;
        if loaded.skipped > 0 || loaded.torn_tail || loaded.repaired_tool_uses > 0 {
            tracing::warn!(
                agent = name,
                skipped = loaded.skipped,
                torn_tail = loaded.torn_tail,
                cancelled_tool_calls = loaded.repaired_tool_uses,
                "session repaired on load"
            );
        }
        let session = Arc::new(Mutex::new(Session::open(dir, name)?));
        let recovered = tasks.recover_after_restart().map_err(AgentError::tasks)?;
        task_record::report_recovered(&notices, &recovered);
        write_crash_record(&session, &loaded, &recovered)?;
        // A project's acknowledged messages that no task took up (see
        // `adopt_pending_messages`), found in the session just loaded.
        let untaken = match settings.project {
            Some(_) => {
                let listed = tasks.list().map_err(AgentError::tasks)?;
                task_record::untaken_messages(&loaded.records, &listed)
            }
            None => Vec::new(),
        };
        // Last: the records move into the transcript.
        let transcript = crate::transcript::rebuild_owned(loaded.records);
        let session_start = Some(if transcript.is_empty() {
            "startup"
        } else {
            "resume"
        });
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
            queued_ids: Vec::new(),
            untaken,
            board: desk.board.clone(),
            stop_flag: desk.stop.clone(),
            approvals: None,
            held,
            instruction_files: Default::default(),
            hooks: None,
            session_start,
            agent_kind: pegasus_store::AgentKind::Builtin,
            harnesses: Default::default(),
        })
    }

    /// The project's agent is `kind` (DESIGN.md §15), and these are the harnesses it and its
    /// roles may use; a kind with no harness here runs the built-in loop.
    pub fn set_harnesses(
        &mut self,
        kind: pegasus_store::AgentKind,
        harnesses: Vec<Arc<dyn crate::harness::Harness>>,
    ) {
        self.agent_kind = kind;
        self.harnesses = harnesses.into_iter().map(|h| (h.kind(), h)).collect();
    }

    /// The harness that works for an agent of `kind` (a role's assignment; `None`: the project's
    /// own agent); `None` when that is the built-in loop.
    fn harness_of(
        &self,
        kind: Option<pegasus_store::AgentKind>,
    ) -> Option<Arc<dyn crate::harness::Harness>> {
        self.harnesses
            .get(&kind.unwrap_or(self.agent_kind))
            .cloned()
    }

    /// Runs the project's lifecycle hooks (DESIGN.md §16: config.yml's, then PROJECT.md's) at
    /// the agent's events from now on; nothing when both are empty.
    pub fn set_hooks(
        &mut self,
        config: &pegasus_store::hooks::HooksConfig,
        project: &pegasus_store::hooks::HooksConfig,
        place: crate::hooks::HookPlace,
    ) {
        self.hooks =
            crate::hooks::Hooks::new(config, project, place, self.session.clone()).map(Arc::new);
    }

    /// Puts the project's approval gate in front of every tool call from now on.
    pub fn set_approvals(&mut self, gate: Arc<crate::approvals::Approvals>) {
        self.approvals = Some(gate);
    }

    /// The task of a call left waiting for its approval by the last process, if any.
    pub fn held_task(&self) -> Option<&str> {
        self.held.as_ref().map(|r| r.task.as_str())
    }

    /// Answers the call that waited for its approval when the last process stopped (DESIGN.md
    /// §11): waits for the request's answer, runs the call once if approved (when `runnable`;
    /// a code task's call needs its worktree, so it is not run and its task fails), records the
    /// turn's results (the turn's other calls were cut off: cancelled), then goes on with the
    /// task as `role`. `None` when nothing waited.
    pub async fn resume_held(
        &mut self,
        role: Option<RoleRun>,
        runnable: bool,
    ) -> Option<Result<RunOutcome, AgentError>> {
        let request = self.held.take()?;
        let gate = self.approvals.clone()?;
        Some(self.answer_held(&gate, request, role, runnable).await)
    }

    async fn answer_held(
        &mut self,
        gate: &crate::approvals::Approvals,
        request: pegasus_approvals::ApprovalRequest,
        role: Option<RoleRun>,
        runnable: bool,
    ) -> Result<RunOutcome, AgentError> {
        let task_id = request.task.clone();
        let outcome = |stop: StopKind, text: String| RunOutcome {
            task_id: task_id.clone(),
            text,
            stop,
            turns: 0,
            cost_usd: 0.0,
        };
        tracing::info!(id = %request.id, task = %task_id, "a call waits for its approval since before the restart");
        // The turn that holds the call, as the session has it.
        let loaded = load_session(&self.dir)?;
        let calls = loaded
            .records
            .iter()
            .rev()
            .find_map(|r| match r {
                pegasus_store::SessionRecord::Message(m)
                    if m.content.iter().any(|b| {
                        matches!(b, pegasus_store::ContentBlock::ToolUse { id, .. } if *id == request.call_id)
                    }) =>
                {
                    Some(crate::transcript::rebuild(std::slice::from_ref(r)))
                }
                _ => None,
            })
            .and_then(|msgs| msgs.into_iter().find(|m| m.role == pegasus_proto::llm::Role::Assistant))
            .map(|m| crate::actor::Call::from_blocks(&m.content))
            .unwrap_or_default();
        // A harness's call (DESIGN.md §15): the harness was stopped with it, so the task starts
        // over and the harness, resuming its session, asks again if it still wants the call.
        let harnessed = self
            .harness_of(role.as_ref().and_then(|r| r.agent))
            .is_some();
        if calls.is_empty() || harnessed {
            // A subagent's call (its turns live only in memory): the task starts over.
            let why = if harnessed {
                "the harness that made the call was stopped by the restart"
            } else {
                "the call was a subagent's, cut off by the restart"
            };
            gate.withdraw(&request, why);
            if harnessed {
                // The call the session held open is closed, as a restart closes any other.
                let closed = Block::ToolResult {
                    tool_use_id: request.call_id.clone(),
                    content: pegasus_store::CANCELLED_TOOL_RESULT.to_string(),
                    is_error: true,
                };
                crate::session_writer::persist(
                    &self.session,
                    vec![crate::transcript::tool_record(&[closed])],
                    true,
                )
                .await?;
                self.transcript = rebuild(&load_session(&self.dir)?.records);
            }
            self.board
                .move_task(&task_id, TaskState::Blocked, TaskState::Ready, "restarted")?;
            return Ok(outcome(
                StopKind::Cancelled,
                format!("Task {task_id} starts over: its waiting call was cut off."),
            ));
        }
        let gate_says = gate.wait(&request).await;
        if gate_says == crate::approvals::Gate::Held {
            return Ok(outcome(
                StopKind::Held,
                "Waiting for approval: the call goes on when the project is back.".into(),
            ));
        }
        let ctx = self.tool_ctx(task_id.clone(), self.settings.clone(), None);
        let mut results = Vec::with_capacity(calls.len());
        for call in &calls {
            let out = if call.id != request.call_id {
                crate::tool::ToolOutput::error(pegasus_store::CANCELLED_TOOL_RESULT)
            } else {
                match &gate_says {
                    crate::approvals::Gate::Run(id) => {
                        let out = match self.tools.get(&call.name) {
                            Some(tool) if runnable => {
                                let input = serde_json::from_str(&call.input_json)
                                    .unwrap_or(serde_json::Value::Object(Default::default()));
                                tool.call(input, &ctx).await
                            }
                            Some(_) => crate::tool::ToolOutput::error(
                                "not run: approved, but the worker restarted while it waited and this task's worktree is gone; the task failed, retry it",
                            ),
                            None => crate::tool::ToolOutput::error(format!(
                                "not run: the tool `{}` is not offered any more",
                                call.name
                            )),
                        };
                        gate.done(id);
                        out
                    }
                    crate::approvals::Gate::Result(out) => out.clone(),
                    crate::approvals::Gate::Held => unreachable_held(),
                }
            };
            results.push(call.result(crate::tool::ToolOutput {
                content: crate::context::cap_tool_result(
                    out.content,
                    self.settings.tool_result_cap(),
                ),
                is_error: out.is_error,
            }));
        }
        if !results.is_empty() {
            crate::session_writer::persist(
                &self.session,
                vec![crate::transcript::tool_record(&results)],
                true,
            )
            .await?;
        }
        // The file is the truth: the in-memory transcript had closed the call as cancelled.
        self.transcript = rebuild(&load_session(&self.dir)?.records);
        let state = self.board.store().get(&task_id).map(|t| t.state).ok();
        if state != Some(TaskState::Running) {
            return Ok(outcome(
                StopKind::Cancelled,
                format!("Task {task_id} ended while its call waited for approval."),
            ));
        }
        if !runnable {
            let t = self.board.move_task(
                &task_id,
                TaskState::Running,
                TaskState::Failed,
                "the worker restarted while a call waited for approval",
            )?;
            return Ok(outcome(
                StopKind::ModelError(format!(
                    "the worker restarted while a call waited for approval; retry with `pegasusctl task retry {}`",
                    t.id
                )),
                format!("Stopped: the worker restarted while a call waited for approval; retry with `pegasusctl task retry {}`.", t.id),
            ));
        }
        self.run_task(task_id.clone(), true, true, role, None).await
    }

    /// The shared session appender, for [`crate::record_inbound`] from another task while a
    /// run holds `&mut self`.
    pub fn session_handle(&self) -> SessionHandle {
        self.session.clone()
    }

    /// Adds an already recorded inbound message to the in-memory transcript at the current
    /// point (merged into a trailing user message so roles alternate).
    pub fn enqueue(&mut self, id: &str, from: &Channel, text: &str) {
        tracing::debug!(agent = %self.name, id, %from, "message enqueued");
        push_user(
            &mut self.transcript,
            vec![Block::Text {
                text: text.to_string(),
            }],
        );
        self.queued.push(text.to_string());
        if !id.is_empty() {
            self.queued_ids.push(id.to_string());
        }
    }

    /// Makes a task of every inbound message that was acknowledged (it is in the session) but
    /// never taken up by a task — the worker died, or was stopped, before it got to them —
    /// so the work queue runs them like any ready task (DESIGN.md §6). They were found by
    /// [`Agent::open`] (a project's agent only); call this once after it, before new messages
    /// are recorded. Returns the task made, if any.
    pub fn adopt_pending_messages(&mut self) -> Result<Option<Task>, AgentError> {
        let pending = std::mem::take(&mut self.untaken);
        if pending.is_empty() {
            return Ok(None);
        }
        let ids: Vec<String> = pending.iter().map(|(id, _)| id.clone()).collect();
        let goal = pending
            .into_iter()
            .map(|(_, text)| text)
            .collect::<Vec<_>>()
            .join("\n\n");
        tracing::warn!(agent = %self.name, messages = ?ids, "messages acknowledged before the restart were never taken up: they run now");
        let task = task_record::task_for_message(
            self.board.store(),
            &self.dir,
            goal,
            ids,
            TaskState::Ready,
        )?;
        task_record::report(&self.notices, &task);
        Ok(Some(task))
    }

    /// Whether messages are waiting for a run.
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// The transcript the next model call would get.
    pub fn transcript(&self) -> &[Message] {
        &self.transcript
    }

    /// Skill folders, project first.
    fn skill_dirs(&self) -> Vec<PathBuf> {
        vec![self.dir.join("skills"), self.global_skills.clone()]
    }

    /// The system prompt as the next run would send it.
    fn system_prompt(&self) -> String {
        system_prompt(
            &self.system_base,
            self.settings.preferences.as_deref(),
            &self.skill_dirs(),
            &self.dir.join("memory"),
            self.settings.context_window,
        )
    }

    /// Size of the session file now; 0 if it cannot be read (then compaction carries over
    /// every user message of the file, which can only duplicate, never lose, a message).
    fn session_len(&self) -> u64 {
        let s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        s.len().unwrap_or(0)
    }

    /// Runs the loop for the queued messages as one task: records the task (`created`, then
    /// `running`, then `done`/`failed`/`blocked` with the stop's reason), runs the loop,
    /// reflects on an answered task, compacts the session if the context is nearly full, and
    /// returns the final answer. `Err` only when the session or task log cannot be written.
    pub async fn run(&mut self) -> Result<RunOutcome, AgentError> {
        if self.queued.is_empty() {
            return Err(AgentError::NothingQueued);
        }
        // A message becomes a task (DESIGN.md §7): created, its spec (the request) frozen, ready.
        let texts = std::mem::take(&mut self.queued);
        let goal = texts.join("\n\n");
        // Only a project's messages are re-run after a restart (DESIGN.md §6): the MainAgent's
        // senders (`chat`, channels) were told it stopped, and nothing would run its tasks.
        let ids = std::mem::take(&mut self.queued_ids);
        let ids = if self.settings.project.is_some() {
            ids
        } else {
            Vec::new()
        };
        let refused_ids = ids.clone();
        let task = task_record::task_for_message(
            self.board.store(),
            &self.dir,
            goal.clone(),
            ids,
            TaskState::Running,
        )?;
        task_record::report(&self.notices, &task);
        if let Some(refused) = self.user_prompt_submit(&texts, refused_ids).await? {
            task_record::fail_running(self.board.store(), &self.notices, &task.id, &refused);
            return Ok(RunOutcome::refused_by_hook(task.id, refused));
        }
        self.run_task(task.id, true, true, None, None).await
    }

    /// The `UserPromptSubmit` hooks of the queued messages (`prompt`): `Some(why)` when they
    /// refused them (then the messages are out of the transcript, now and after a restart,
    /// and the session says so); their context joins the request otherwise.
    async fn user_prompt_submit(
        &mut self,
        texts: &[String],
        ids: Vec<String>,
    ) -> Result<Option<String>, AgentError> {
        use crate::hooks::Input;
        use pegasus_store::hooks::HookEvent;
        let Some(hooks) = self
            .hooks
            .clone()
            .filter(|h| h.has(HookEvent::UserPromptSubmit))
        else {
            return Ok(None);
        };
        let prompt = texts.join("\n\n");
        let verdict = hooks
            .fire(Input::UserPromptSubmit { prompt: &prompt }, &self.workdir)
            .await;
        if let Some(reason) = verdict.block.or(verdict.stop) {
            let why = format!("Refused by a UserPromptSubmit hook: {reason}");
            crate::transcript::drop_trailing_texts(&mut self.transcript, texts);
            hooks.note(HookEvent::UserPromptSubmit, &why, ids).await;
            return Ok(Some(why));
        }
        self.add_context(HookEvent::UserPromptSubmit, &verdict.context)?;
        Ok(None)
    }

    /// Adds hooks' context for the model to the request at the end of the transcript, and to
    /// the session, so a restart sees it too.
    fn add_context(
        &mut self,
        event: pegasus_store::hooks::HookEvent,
        context: &[String],
    ) -> Result<(), AgentError> {
        let Some(text) = crate::hooks::context_text(event, context) else {
            return Ok(());
        };
        let record = pegasus_store::SessionRecord::Message(pegasus_store::SessionMessage::new(
            pegasus_store::Role::User,
            vec![pegasus_store::ContentBlock::Text { text: text.clone() }],
        ));
        crate::session_writer::append_blocking(&self.session, &[record])?;
        push_user(&mut self.transcript, vec![Block::Text { text }]);
        Ok(())
    }

    /// The `SessionStart` hooks, when one is due (the worker's first task, the first after a
    /// compaction); their context joins the request.
    async fn session_start(&mut self, cwd: &Path) -> Result<(), AgentError> {
        use pegasus_store::hooks::HookEvent;
        let Some(hooks) = self.hooks.clone() else {
            return Ok(());
        };
        let Some(source) = self.session_start.take() else {
            return Ok(());
        };
        if !hooks.has(HookEvent::SessionStart) {
            return Ok(());
        }
        let verdict = hooks
            .fire(crate::hooks::Input::SessionStart { source }, cwd)
            .await;
        self.add_context(HookEvent::SessionStart, &verdict.context)
    }

    /// Offers MCP servers' tools (`mcp__NAME__TOOL`, DESIGN.md §13) from now on besides the
    /// agent's own; replaces the MCP tools given before. `late`: the deferred MCP tools, which
    /// join while a loop runs once found (DESIGN.md §13).
    pub fn set_mcp_tools(
        &mut self,
        mcp: Vec<Arc<dyn crate::tool::Tool>>,
        late: Option<Arc<dyn crate::toolset::LateTools>>,
    ) {
        self.tools = self.tools.with_mcp(mcp, late);
    }

    /// The model's context window the next run plans for, when known.
    pub fn context_window(&self) -> Option<u64> {
        self.settings.context_window
    }

    /// Task `task` worked as role `role_id` (DESIGN.md §9): the role's prompt over this
    /// project's overview, its tools out of the agent's, its model settings, for the task's
    /// frozen goal and acceptance (else its title).
    pub fn role_run(&self, task: &Task, role_id: &str) -> Result<RoleRun, String> {
        let (goal, acceptance) = match &task.spec {
            Some(spec) => (spec.goal.as_str(), spec.acceptance.as_slice()),
            None => (task.title.as_str(), &[][..]),
        };
        crate::roles::prepare_role(
            role_id,
            &self.settings.role_assignments,
            &self.settings,
            &self.tools,
            &self.system_base,
            &self.dir.join("memory"),
            &self.skill_dirs(),
            goal,
            acceptance,
        )
    }

    /// Uses `tokens` as the model's context window from the next run on (what its server
    /// said, after the worker started with the default).
    pub fn set_context_window(&mut self, tokens: u64) {
        if tokens > 0 && self.settings.context_window != Some(tokens) {
            tracing::info!(window = tokens, "the model's context window");
            self.settings.context_window = Some(tokens);
        }
    }

    /// Runs a task that was made elsewhere (replayed, retried, answered, a run's phase): its
    /// goal — with the answer to its question, when it was blocked on one — is recorded in the
    /// session as a message from `task`, then the task runs like a message's would. With a
    /// role, the agent works as that role (prompt, tools, model settings).
    pub async fn run_existing(
        &mut self,
        task: Task,
        role: Option<RoleRun>,
    ) -> Result<RunOutcome, AgentError> {
        // A message's task that runs again (the process stopped before it was answered,
        // perhaps while its UserPromptSubmit hooks ran): they are asked again, as nothing
        // says what they answered.
        if !task.messages.is_empty() {
            let prompt = task_record::request_of(self.board.store(), &task);
            if let Some(refused) = self
                .user_prompt_submit(&[prompt], task.messages.clone())
                .await?
            {
                // The messages are out of the transcript as the session now says.
                if let Ok(loaded) = load_session(&self.dir) {
                    self.transcript = rebuild(&loaded.records);
                }
                if task_record::start(self.board.store(), &self.notices, &task.id).is_ok() {
                    task_record::fail_running(
                        self.board.store(),
                        &self.notices,
                        &task.id,
                        &refused,
                    );
                }
                return Ok(RunOutcome::refused_by_hook(task.id, refused));
            }
        }
        let text =
            if task.messages.is_empty() {
                task_record::request_of(self.board.store(), &task)
            } else {
                // A message's task (re-run after a restart, or taken up late): its messages are
                // already in the session and the transcript, with whatever work was cut off.
                format!(
                "(Pegasus restarted before the message{} above {} answered. Any tool call that \
                 was cut off shows as cancelled; check what was already done, then answer.)",
                if task.messages.len() == 1 { "" } else { "s" },
                if task.messages.len() == 1 { "was" } else { "were" },
            )
            };
        // A task that was still ready when the process died: its request is already the
        // unanswered end of the transcript; do not write it a second time.
        let already_there = self.transcript.last().is_some_and(|m| {
            m.role == pegasus_proto::llm::Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, Block::Text { text: t } if *t == text))
        });
        if !already_there {
            self.record_request(&task.id, &Channel::Task, text)?;
        }
        self.run_task(task.id, true, false, role, None).await
    }

    /// Runs one attempt of a code task (DESIGN.md §10) in its worktrees: `text` (the task, or what
    /// came back from verify or a merge) is recorded in the session as a message from `task`,
    /// then the agent works with file tools and `exec` inside `workspace`. An answered attempt
    /// leaves the task `verifying` (not done): the caller commits, merges and verifies.
    /// `started`: the task is already `running` (a later attempt).
    pub async fn run_code(
        &mut self,
        task_id: &str,
        text: String,
        role: Option<RoleRun>,
        workspace: &Workspace,
        started: bool,
    ) -> Result<RunOutcome, AgentError> {
        self.record_request(task_id, &Channel::Task, text)?;
        self.run_task(task_id.to_string(), true, started, role, Some(workspace))
            .await
    }

    /// Runs a prompt that is not a task of this project's task list — a phase of an
    /// autonomous run — with `ledger_task` as the task its model calls are billed to (the run
    /// sums its costs from the ledger by that id). The prompt is recorded in the session as a
    /// message from `from`.
    pub async fn run_prompt(
        &mut self,
        text: &str,
        from: &Channel,
        ledger_task: &str,
    ) -> Result<RunOutcome, AgentError> {
        self.record_request(ledger_task, from, text.to_string())?;
        self.run_task(ledger_task.to_string(), false, false, None, None)
            .await
    }

    /// Records `text` in the session as a message from `from` (id `id`) and adds it to the
    /// transcript: the request a run starts from.
    fn record_request(&mut self, id: &str, from: &Channel, text: String) -> Result<(), AgentError> {
        crate::session_writer::record_inbound(&self.session, id, from, &text)?;
        push_user(&mut self.transcript, vec![Block::Text { text }]);
        Ok(())
    }

    /// What the tool calls of task `task_id` may use; `place` is a code task's workdir and
    /// worktrees (the project's workdir otherwise).
    fn tool_ctx(
        &self,
        task_id: String,
        settings: AgentSettings,
        place: Option<(PathBuf, Vec<(String, PathBuf)>)>,
    ) -> ToolCtx {
        let (workdir, repos) = place.unwrap_or_else(|| (self.workdir.clone(), Vec::new()));
        ToolCtx {
            workdir,
            repos,
            memory_dir: self.dir.join("memory"),
            skill_dirs: self.skill_dirs(),
            notices: self.notices.clone(),
            task_id: Some(task_id),
            depth: 0,
            settings,
            model: self.model.clone(),
            project_overview: self.system_base.clone(),
            subagents_spawned: Arc::new(AtomicU32::new(0)),
            approvals: self.approvals.clone(),
            offered: None,
            proposed: Default::default(),
            touched: Default::default(),
            hooks: self.hooks.clone(),
        }
    }

    /// The instruction files of a task in `workspace` (the workdir's without one), and the
    /// roots' section of its system prompt, built once so it stays the same for all its turns
    /// (DESIGN.md §16).
    fn instructions(
        &self,
        settings: &AgentSettings,
        workspace: Option<&Workspace>,
    ) -> (crate::instructions::TaskInstructions, String) {
        let mut ins = crate::instructions::TaskInstructions::new(
            settings,
            self.instruction_roots(workspace),
            self.instruction_files.clone(),
        );
        let section = ins.system_section();
        (ins, section)
    }

    /// The folders whose instruction files a task starts with (DESIGN.md §16): the workdir, and
    /// each worktree of a code task; the workdir is left out when it is itself one of the
    /// task's repos (its worktree, at the task's commit, stands for it).
    fn instruction_roots(&self, workspace: Option<&Workspace>) -> Vec<crate::instructions::Root> {
        use crate::instructions::Root;
        let repos = workspace.map_or(&[][..], |w| &w.repos[..]);
        let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let worktrees_of_workdir = real(&self.workdir).join(".pegasus").join("worktrees");
        let workdir_is_repo = repos
            .iter()
            .any(|(_, p)| real(p).starts_with(&worktrees_of_workdir));
        let mut roots = Vec::new();
        if !workdir_is_repo {
            roots.push(Root::workdir(&self.workdir));
        }
        roots.extend(repos.iter().map(|(id, p)| Root::repo(id, p)));
        roots
    }

    /// What a harness is told for task `task_id` whose request is the transcript's message at
    /// `at`: the request itself; for a message's task run again after a restart (whose request
    /// is only a note pointing at the messages above, which the harness's own session may not
    /// hold), the task's request and that note.
    fn harness_prompt(&self, task_id: &str, at: usize) -> String {
        let request = request_texts(self.transcript.get(at)).join("\n\n");
        if !request.starts_with("(Pegasus restarted before the message") {
            return request;
        }
        match self.board.store().get(task_id) {
            Ok(task) => format!(
                "{}\n\n(Pegasus restarted while this was being worked on: check what was already done, then go on and answer.)",
                task_record::request_of(self.board.store(), &task)
            ),
            Err(_) => request,
        }
    }

    /// The run shared by [`Agent::run`] and [`Agent::run_existing`].
    /// `tracked`: `task_id` is a task of the store and its states are recorded (it is `ready`,
    /// or already `running` when `started`: a message's task is created running); otherwise it
    /// only names the spend in the ledger.
    async fn run_task(
        &mut self,
        task_id: String,
        tracked: bool,
        started: bool,
        role: Option<RoleRun>,
        workspace: Option<&Workspace>,
    ) -> Result<RunOutcome, AgentError> {
        if tracked && !started {
            if let Err(e) = task_record::start(self.board.store(), &self.notices, &task_id) {
                // Cancelled (or otherwise moved) between being queued and starting.
                return Ok(RunOutcome {
                    task_id,
                    text: format!("Not started: {e}"),
                    stop: StopKind::Cancelled,
                    turns: 0,
                    cost_usd: 0.0,
                });
            }
        }
        let harness = self.harness_of(role.as_ref().and_then(|r| r.agent));
        let harnessed = harness.is_some();
        let (mut system, tools, settings, role_name) = match role {
            Some(r) => (r.system, r.tools, r.settings, Some(r.role)),
            // A harness has its own prompt; it is told the project's description only.
            None if harness.is_some() => (
                self.system_base.clone(),
                self.tools.clone(),
                self.settings.clone(),
                None,
            ),
            None => (
                self.system_prompt(),
                self.tools.clone(),
                self.settings.clone(),
                None,
            ),
        };

        let mut settings = settings;
        let (workdir, repos) = match workspace {
            Some(w) if !w.repos.is_empty() => {
                // Commands may write in every worktree of the task, not only the first.
                if let Some(sb) = settings.sandbox.as_mut() {
                    sb.writable.extend(w.repos.iter().map(|(_, p)| p.clone()));
                }
                (w.repos[0].1.clone(), w.repos.clone())
            }
            _ => (self.workdir.clone(), Vec::new()),
        };
        self.session_start(&workdir).await?;
        let (mut instructions, section) = self.instructions(&settings, workspace);
        system = crate::instructions::with_section(&system, &section);
        let mut ctx = self.tool_ctx(task_id.clone(), settings, Some((workdir, repos)));
        // Subagents follow them too: they are told the project's overview.
        ctx.project_overview = crate::instructions::with_section(&ctx.project_overview, &section);
        // The task's part of the transcript starts at the user message holding its request.
        let task_start = self.transcript.len().saturating_sub(1);
        let mark = RunMark {
            file_len: self.session_len(),
            request: request_texts(self.transcript.get(task_start)),
        };
        let store = self.board.store().clone();
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
        let mut compactor = Compactor::new(&self.dir, &self.name, &self.session, mark);
        let spec = LoopSpec {
            system: &system,
            tools: &tools,
            ctx: &ctx,
            session: Some(&self.session),
            role: role_name,
            cancelled: tracked.then_some(&cancelled as &(dyn Fn() -> bool + Send + Sync)),
            compactor: Some(&mut compactor),
            instructions: Some(&mut instructions),
        };
        let ran = match harness {
            Some(harness) => {
                let prompt = self.harness_prompt(&task_id, task_start);
                let turn = crate::harness::HarnessTurn {
                    task_id: &task_id,
                    prompt,
                    ctx: &ctx,
                    role: spec.role.clone(),
                    system: system.clone(),
                    code_task: workspace.is_some(),
                    cancelled: &cancelled,
                    mirror: crate::harness::Mirror::new(&self.session, &mut self.transcript, &ctx),
                };
                drop(spec);
                harness.run(turn).await
            }
            None => run_loop(spec, &mut self.transcript).await,
        };
        let end = match ran {
            Ok(end) => end,
            Err(e) => {
                // The file is the truth; the in-memory copy may hold an unpersisted turn.
                if let Ok(loaded) = load_session(&self.dir) {
                    self.transcript = rebuild(&loaded.records);
                }
                if tracked {
                    let why = "session write failed";
                    task_record::fail_running(self.board.store(), &self.notices, &task_id, why);
                }
                return Err(e);
            }
        };
        let mut cost = end.cost_usd;
        // Stopping while a call waits for its approval: the task stays blocked and the call
        // open (nothing of the turn is recorded); the next start answers it.
        if end.stop == StopKind::Held {
            return Ok(RunOutcome::of(task_id, end, cost));
        }

        // A harness keeps its own memory and context: no reflection, no compaction here.
        if end.stop == StopKind::Answered && self.settings.reflection && !harnessed {
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
            cost += crate::memory_compaction::condense_episodes(&ctx)
                .await
                .cost_usd;
        }

        // After the task: compact now if the next message would start near the window.
        if let Some(usage) = end.last_usage {
            let used = usage.input_tokens + usage.output_tokens;
            if compaction::needed(used, ctx.settings.context_window) {
                cost += compactor.run(&ctx, &mut self.transcript, false).await.1;
            }
        }
        // A provider refused a request as too long and showed a smaller window than the
        // settings say: the next runs compact for that one (until the worker restarts and asks
        // the server again).
        if let Some(w) = compactor.learned_window() {
            tracing::info!(
                window = w,
                "the model's window is smaller than configured; using it"
            );
            self.settings.context_window = Some(w);
        }
        // A compaction replaced the transcript: all of it is this task's part now, and the
        // next task starts a session anew for the hooks (`SessionStart` with `compact`).
        let task_start = if compactor.compacted() {
            self.session_start = Some("compact");
            0
        } else {
            task_start
        };

        let (mut state, mut reason) = end.stop.task_state(end.token_capped);
        // A code task's answer is where verification starts, not the end.
        if workspace.is_some() && state == TaskState::Done {
            state = TaskState::Verifying;
            reason = Some("work finished: committing and verifying");
        }
        let mut text = end.text;
        // A stop at a turn boundary that the user did not ask for: the process is shutting
        // down. The task can be retried; it is not cancelled.
        if end.stop == StopKind::Cancelled
            && self.stop_flag.load(std::sync::atomic::Ordering::SeqCst)
            && self
                .board
                .store()
                .get(&task_id)
                .map(|t| t.state == TaskState::Running)
                .unwrap_or(false)
        {
            state = TaskState::Failed;
            reason = Some(pegasus_tasks::SHUTDOWN_REASON);
            text = format!("Stopped: the project is shutting down; retry with `pegasusctl task retry {task_id}`.");
        }
        let end = crate::agent_loop::LoopEnd { text, ..end };
        if !tracked {
            return Ok(RunOutcome::of(task_id, end, cost));
        }
        task_record::finish(
            self.board.store(),
            &self.notices,
            &task_id,
            task_record::Finish {
                state,
                reason,
                text: &end.text,
                cost_usd: cost,
                transcript: &self.transcript[task_start.min(self.transcript.len())..],
                question: match &end.stop {
                    StopKind::Question(q) => Some(q),
                    _ => None,
                },
            },
        )?;
        Ok(RunOutcome::of(task_id, end, cost))
    }
}

/// A held gate is returned before the results are built; it cannot reach them.
fn unreachable_held() -> crate::tool::ToolOutput {
    crate::tool::ToolOutput::error(
        "not run: the project stopped while this call waited for approval",
    )
}

/// Writes the repair of a crash into the session: the synthetic results that close the tool
/// calls it cut off, and a `crash` record saying what was cut off. Nothing is written when the
/// last process stopped cleanly.
fn write_crash_record(
    session: &SessionHandle,
    loaded: &pegasus_store::LoadedSession,
    recovered: &[pegasus_tasks::Recovered],
) -> Result<(), AgentError> {
    if loaded.repairs.is_empty() && recovered.is_empty() {
        return Ok(());
    }
    let calls = loaded.repaired_tool_uses;
    let mut parts = vec!["the process stopped before finishing its work".to_string()];
    if calls > 0 {
        parts.push(format!(
            "{calls} tool call{} cut off (cancelled)",
            if calls == 1 { "" } else { "s" }
        ));
    }
    for r in recovered {
        parts.push(format!("task {}: {}", r.id, r.action.reason()));
    }
    let mut records = loaded.repairs.clone();
    records.push(pegasus_store::SessionRecord::Crash {
        reason: parts.join("; "),
        ts: chrono::Utc::now(),
    });
    crate::session_writer::append_blocking(session, &records)
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
