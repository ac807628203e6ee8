//! The project agent's work queue. One agent, one thing at a time: messages (answered together
//! when several wait), ready tasks (retried, replayed, answered ones), and the phases of
//! autonomous runs all go through here, so they never interleave in the transcript.

use pegasus_agent::{Agent, StopKind};
use pegasus_proto::worker::{FromWorker, InboundMessage};
use pegasus_proto::Channel;
use pegasus_runs::{ExecError, ExecuteFuture, PhaseExecutor};
use pegasus_tasks::{Readiness, TaskState};
use tokio::sync::{mpsc, oneshot, watch};

use crate::mcp::McpHub;
use crate::project_ctx::ProjectCtx;
use std::sync::Arc;
use std::time::Duration;

/// The project model's context window as pegasusd said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Tokens (`Init.context_window`, then each `ToWorker::ContextWindow`).
    pub tokens: Option<u64>,
    /// pegasusd is still asking the model's server (`Init.window_pending`).
    pub pending: bool,
}

/// How long the agent's first work waits for a window pegasusd is still learning: a little
/// more than pegasusd's own deadline for asking the server (it then sends the default), so a
/// lost frame cannot hold the agent up for longer. Past it, `default_context_window` applies
/// (and a refusal that names the window still shrinks it).
pub const FIRST_CALL_WINDOW_WAIT: Duration = Duration::from_secs(5);

/// The window the agent's next run uses: waits (at most [`FIRST_CALL_WINDOW_WAIT`], once) while
/// it is pending, then applies the newest one. The worker is Ready all along: only the agent's
/// first model call waits, so it never overruns a small window.
pub struct WindowGate {
    rx: watch::Receiver<Window>,
    gave_up: bool,
}

impl WindowGate {
    pub fn new(rx: watch::Receiver<Window>) -> WindowGate {
        WindowGate { rx, gave_up: false }
    }

    async fn fit(&mut self, agent: &mut Agent) {
        if !self.gave_up && self.rx.borrow().pending {
            let settled = self.rx.wait_for(|w| !w.pending);
            if tokio::time::timeout(FIRST_CALL_WINDOW_WAIT, settled)
                .await
                .is_err()
            {
                tracing::warn!(
                    "pegasusd did not say the model's context window within {} s; using the default until it does",
                    FIRST_CALL_WINDOW_WAIT.as_secs()
                );
                self.gave_up = true;
            }
        }
        if let Some(tokens) = self.rx.borrow_and_update().tokens {
            agent.set_context_window(tokens);
        }
    }
}

/// One piece of work for the agent.
pub enum Job {
    Message(InboundMessage),
    /// Look for ready tasks and run them.
    ReadyTasks,
    /// One attempt of one phase of a run; the answer is the phase's output.
    Phase {
        prompt: String,
        task_id: String,
        reply: oneshot::Sender<Result<String, ExecError>>,
    },
    /// Answered when every job before it is done: the graceful shutdown waits for it.
    Barrier(oneshot::Sender<()>),
}

/// Runs jobs until the queue closes.
pub async fn run_jobs(
    mut agent: Agent,
    ctx: ProjectCtx,
    mut rx: mpsc::UnboundedReceiver<Job>,
    out: mpsc::UnboundedSender<FromWorker>,
    mcp: Arc<McpHub>,
    mut window: WindowGate,
) {
    let stopping = ctx.desk.stop.clone();
    if !mcp.is_empty() {
        mcp.write_status().await;
        mcp.start_eager().await;
    }
    window.fit(&mut agent).await;
    // Code projects: repos recovered and interrupted merges finished before anything runs.
    crate::code_task::boot(&ctx).await;
    // A call that waited for its approval when the last worker stopped gets its answer first:
    // its task blocks the agent as it did before (DESIGN.md §11).
    resume_held(&mut agent, &ctx, &out).await;
    // A restarted worker picks up what was ready before it died (or was made ready meanwhile).
    run_ready_tasks(&mut agent, &ctx, &out).await;
    while let Some(job) = rx.recv().await {
        // Shutting down: no new work starts. Messages stay in the session (the agent sees them
        // next time); a phase already handed over still runs — its run resumes after a restart.
        if stopping.load(std::sync::atomic::Ordering::SeqCst)
            && matches!(job, Job::Message(_) | Job::ReadyTasks)
        {
            continue;
        }
        if !matches!(job, Job::Barrier(_)) {
            window.fit(&mut agent).await;
        }
        // MCP servers start at first use: the first job that runs the agent.
        if !mcp.is_empty() && !matches!(job, Job::Barrier(_)) {
            let offered = mcp.tools(agent.context_window()).await;
            agent.set_mcp_tools(offered.tools, offered.late);
        }
        match job {
            Job::Message(first) => {
                let mut batch = vec![first];
                let mut later = Vec::new();
                while let Ok(more) = rx.try_recv() {
                    match more {
                        Job::Message(m) => batch.push(m),
                        other => later.push(other),
                    }
                }
                answer_messages(&mut agent, batch, &out).await;
                for job in later {
                    run_job(&mut agent, &ctx, job, &out).await;
                }
            }
            other => run_job(&mut agent, &ctx, other, &out).await,
        }
    }
}

async fn run_job(
    agent: &mut Agent,
    ctx: &ProjectCtx,
    job: Job,
    out: &mpsc::UnboundedSender<FromWorker>,
) {
    match job {
        Job::Message(_) => {}
        Job::Barrier(done) => {
            let _ = done.send(());
        }
        Job::ReadyTasks => run_ready_tasks(agent, ctx, out).await,
        Job::Phase {
            prompt,
            task_id,
            reply,
        } => {
            let result = match agent.run_prompt(&prompt, &Channel::Run, &task_id).await {
                Ok(o) if o.stop == StopKind::Answered => Ok(o.text),
                Ok(o) if matches!(o.stop, StopKind::Budget(_)) => Err(ExecError::Budget(o.text)),
                Ok(o) => Err(ExecError::Failed(o.text)),
                Err(e) => Err(ExecError::Failed(format!("the project agent failed: {e}"))),
            };
            let _ = reply.send(result);
        }
    }
}

/// Answers the call left waiting for its approval by the last worker (see
/// [`Agent::resume_held`]), then goes on with its task as the task's role; its messages get
/// the answer.
async fn resume_held(agent: &mut Agent, ctx: &ProjectCtx, out: &mpsc::UnboundedSender<FromWorker>) {
    let Some(task) = agent
        .held_task()
        .and_then(|id| ctx.desk.board.store().get(id).ok())
    else {
        return;
    };
    let role = task
        .role
        .as_ref()
        .and_then(|role_id| agent.role_run(&task, role_id).ok());
    let runnable = !crate::code_task::is_code_task(&task);
    let Some(result) = agent.resume_held(role, runnable).await else {
        return;
    };
    let (text, answered) = match result {
        Ok(o) => {
            tracing::info!(task = %task.id, stop = ?o.stop, "the task that waited for approval went on");
            (o.text, o.stop == StopKind::Answered)
        }
        Err(e) => {
            tracing::error!(task = %task.id, "the task that waited for approval failed: {e}");
            (format!("the project agent failed: {e}"), false)
        }
    };
    reply(out, task.messages, &text, answered);
}

/// Messages waiting together become one task; every one of them gets its answer.
async fn answer_messages(
    agent: &mut Agent,
    batch: Vec<InboundMessage>,
    out: &mpsc::UnboundedSender<FromWorker>,
) {
    for m in &batch {
        agent.enqueue(&m.id, &m.from, &m.text);
    }
    let (text, answered) = match agent.run().await {
        Ok(outcome) => (outcome.text, outcome.stop == StopKind::Answered),
        Err(e) => {
            tracing::error!("agent run failed: {e}");
            (format!("the project agent failed: {e}"), false)
        }
    };
    reply(out, batch.into_iter().map(|m| m.id), &text, answered);
}

/// Sends `text` as the reply to each of `messages`.
fn reply(
    out: &mpsc::UnboundedSender<FromWorker>,
    messages: impl IntoIterator<Item = String>,
    text: &str,
    answered: bool,
) {
    for message_id in messages {
        let _ = out.send(FromWorker::Reply {
            message_id,
            text: text.to_string(),
            answered,
        });
    }
}

/// Runs every ready task whose dependencies are done, highest priority and oldest first; a
/// task waiting on others is skipped and says which. A message's task (re-run after a
/// restart) answers its messages like a fresh one.
async fn run_ready_tasks(
    agent: &mut Agent,
    ctx: &ProjectCtx,
    out: &mpsc::UnboundedSender<FromWorker>,
) {
    // Verified code tasks whose merge is due (`task merge`, or interrupted) go first.
    crate::code_task::merge_due(ctx).await;
    loop {
        let tasks = match ctx.desk.board.store().list() {
            Ok(t) => t,
            Err(e) => return tracing::warn!("cannot list tasks: {e}"),
        };
        let mut ready: Vec<_> = tasks
            .into_iter()
            .filter(|t| t.state == TaskState::Ready)
            .collect();
        ready.sort_by_key(|t| (t.priority, t.created));
        let mut next = None;
        for t in ready {
            match ctx.desk.board.store().readiness(&t.id) {
                Ok(Readiness::Go) => {
                    next = Some(t);
                    break;
                }
                Ok(Readiness::Skip { waiting_on }) => {
                    tracing::info!(task = %t.id, "skipped: waits on {}", waiting_on.join(", "));
                }
                Err(e) => tracing::warn!(task = %t.id, "cannot check dependencies: {e}"),
            }
        }
        let Some(task) = next else { return };
        let role = match &task.role {
            Some(role_id) => match agent.role_run(&task, role_id) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(task = %task.id, "role {role_id}: {e}");
                    ctx.desk
                        .board
                        .fail_unstartable(&task.id, &format!("role {role_id}: {e}"));
                    continue;
                }
            },
            None => None,
        };
        let id = task.id.clone();
        let messages = task.messages.clone();
        if crate::code_task::is_code_task(&task) {
            let (text, answered) = crate::code_task::run(agent, ctx, task, role).await;
            tracing::info!(task = %id, answered, "code task ran");
            reply(out, messages, &text, answered);
            continue;
        }
        let (text, answered) = match agent.run_existing(task, role).await {
            Ok(o) => {
                tracing::info!(task = %id, stop = ?o.stop, "task ran");
                (o.text, o.stop == StopKind::Answered)
            }
            Err(e) => {
                tracing::error!(task = %id, "task failed: {e}");
                (format!("the project agent failed: {e}"), false)
            }
        };
        reply(out, messages, &text, answered);
    }
}

/// A task's frozen spec, or one made of its title.
pub(crate) fn spec_of(task: &pegasus_tasks::Task) -> pegasus_tasks::TaskSpec {
    task.spec
        .clone()
        .unwrap_or_else(|| pegasus_tasks::TaskSpec {
            goal: task.title.clone(),
            constraints: vec![],
            acceptance: vec![],
            role: None,
            model_policy: None,
            repos: vec![],
            budget_usd: None,
        })
}

/// A spec's acceptance criteria and constraints, each a titled list (nothing for an empty
/// one), as the prompts of a task's planner and reviewer show them.
pub(crate) fn spec_lists(spec: &pegasus_tasks::TaskSpec) -> String {
    let mut s = String::new();
    for (head, list) in [
        ("Acceptance criteria", &spec.acceptance),
        ("Constraints", &spec.constraints),
    ] {
        if !list.is_empty() {
            s.push_str(&format!("\n{head}:\n"));
            for item in list {
                s.push_str(&format!("- {item}\n"));
            }
        }
    }
    s
}

/// The run engine's executor: a phase is a job for the agent like any other.
pub struct AgentPhases(pub mpsc::UnboundedSender<Job>);

impl PhaseExecutor for AgentPhases {
    fn execute<'a>(&'a self, prompt: String, task_id: String) -> ExecuteFuture<'a> {
        Box::pin(async move {
            let (reply, rx) = oneshot::channel();
            self.0
                .send(Job::Phase {
                    prompt,
                    task_id,
                    reply,
                })
                .map_err(|_| ExecError::Failed("the project agent is gone".into()))?;
            rx.await.map_err(|_| {
                ExecError::Failed("the project agent stopped before finishing the phase".into())
            })?
        })
    }
}
