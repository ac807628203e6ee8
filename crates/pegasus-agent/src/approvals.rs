//! The approval gate (DESIGN.md §11, "people in the loop"): before a tool call runs, the project's
//! policy says allow, deny or ask; an asked call writes a durable request
//! (`pegasus_approvals`), blocks its task (`blocked`, reason `approval`) and waits until
//! a person answers (through pegasusd: `approve`, the dashboard, Telegram) or its time runs
//! out. Approved, it runs once: the request is marked as run first, so no crash can run it
//! again. Anything else goes back to the model as the tool's result, in DESIGN.md's words.
//!
//! A request outlives the process: after a restart the agent holds the call open (the session
//! repair leaves it alone) and [`crate::Agent::resume_held`] waits for the answer again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pegasus_approvals::{
    self as store, Answer, AnswerError, ApprovalRequest, ApprovalsConfig, Decision, Policy,
    PolicyDecision, PolicyRefusal, ProjectPolicy, RequestState,
};
use pegasus_proto::{TaskState, WorkerEvent};
use pegasus_tasks::TaskStore;
use tokio::sync::mpsc::UnboundedSender;

use crate::outbox::{send_event, Notice};
use crate::tool::ToolOutput;

/// The stop reason of a task waiting for an approval.
pub const APPROVAL_REASON: &str = "approval";

/// How often a waiting call looks at its files even if nobody woke it (an answer written while
/// pegasusd could not tell us, a cancelled task).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// What an asked call does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Approved: run the call (request `id` is marked as run), then [`Approvals::done`].
    Run(String),
    /// Not run: this is its result.
    Result(ToolOutput),
    /// The process is stopping while the call waits: leave it, and its request, for the next
    /// start.
    Held,
}

/// What a handed-off call ([`Approvals::hand_off`]) does next.
#[derive(Debug)]
pub enum Handed {
    /// Approved: hand the approval to the asker, then [`Handoff::ran`].
    Approved(Handoff),
    /// Not run: what the asker is told (the request is closed).
    Refused(String),
    /// The process is stopping while the call waits: its request is left for the next start.
    Held,
}

/// The request of a call that runs outside this process (a harness's, DESIGN.md §15), from
/// its writing until its asker has the approval in hand: only then is it marked as run
/// ([`Handoff::ran`]). Dropped before that (its asker went away, its run ended), a request
/// still waiting is withdrawn, or held if the process is stopping (as [`Approvals::wait`]
/// holds a call); an answer that won the race stands, and the request closes without running.
/// Either way the request ends in exactly one state.
pub struct Handoff {
    gate: Arc<Approvals>,
    /// Who asked (`Claude Code`), for the withdrawal's words.
    asker: String,
    /// `None` once settled: nothing is left to let go.
    request: Option<Box<ApprovalRequest>>,
    /// Its answer came (and was reported).
    answered: bool,
}

impl Handoff {
    /// The asker has the approval in hand: the request is marked as run and closed. Refused
    /// (the call must not run) when the mark cannot be written: the words for the asker.
    pub fn ran(mut self) -> Result<(), String> {
        let Some(request) = self.request.take() else {
            return Ok(());
        };
        let marked = store::mark_ran(&self.gate.dir, &request.id);
        self.gate.done(&request.id);
        marked.map_err(|e| {
            tracing::error!(id = %request.id, "cannot mark the approval as run: {e}");
            unmarked(&e)
        })
    }
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("asker", &self.asker)
            .field("request", &self.request.as_ref().map(|r| &r.id))
            .field("answered", &self.answered)
            .finish()
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            self.gate.let_go(&request, &self.asker, self.answered);
        }
    }
}

/// One project's gate.
pub struct Approvals {
    project: String,
    dir: PathBuf,
    policy: ProjectPolicy,
    tasks: TaskStore,
    notices: UnboundedSender<Notice>,
    stop: Arc<AtomicBool>,
    wake: tokio::sync::Notify,
    /// A call was left waiting because the process is stopping (a subagent's too: its parent
    /// must hold its own turn then).
    holding: AtomicBool,
    /// When the earliest detached (merge) request runs out of time: its task is settled then.
    merge_expiry: std::sync::Mutex<Option<chrono::DateTime<Utc>>>,
}

impl Approvals {
    /// The gate of `desk`'s project, under config.yml's `approvals` (PROJECT.md's block is
    /// read again whenever the file changed, so `approve --always` and a hand edit count at the
    /// next call). A waiting call is held when the desk's stop flag is set.
    pub fn new(desk: &crate::desk::Desk, config: ApprovalsConfig) -> Approvals {
        Approvals {
            project: desk.name.clone(),
            dir: desk.dir.clone(),
            policy: ProjectPolicy::new(&desk.name, &desk.dir, config),
            tasks: desk.board.store().clone(),
            notices: desk.board.notices().clone(),
            stop: desk.stop.clone(),
            wake: tokio::sync::Notify::new(),
            holding: AtomicBool::new(false),
            merge_expiry: std::sync::Mutex::new(None),
        }
    }

    /// The policy in force: config.yml's, under PROJECT.md's; refused while PROJECT.md does
    /// not load (never config.yml's alone, which may be looser).
    pub fn policy(&self) -> Result<Arc<Policy>, PolicyRefusal> {
        self.policy.get()
    }

    /// What the policy says about a call of `tool` with `input`.
    pub fn check(
        &self,
        tool: &str,
        input: &serde_json::Value,
    ) -> Result<PolicyDecision, PolicyRefusal> {
        Ok(self
            .policy()?
            .decide(tool, store::call_target(tool, input).as_deref()))
    }

    /// Whether a call was left waiting because the process is stopping.
    pub fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    /// An answer may be on disk: every waiting call looks now.
    pub fn wake(&self) {
        self.wake.notify_waiters();
    }

    /// Asks for the call `call_id` of `tool` in task `task`, and waits for the answer.
    /// `hook_reason`: why a `PreToolUse` hook asked (`permissionDecisionReason`), shown to the
    /// person with the call.
    pub async fn ask(
        &self,
        task: Option<&str>,
        call_id: &str,
        tool: &str,
        input: &serde_json::Value,
        hook_reason: Option<&str>,
    ) -> Gate {
        match self.request_for(task, call_id, tool, input, hook_reason) {
            Ok(request) => self.ask_request(request).await,
            Err(refusal) => Gate::Result(ToolOutput::error(refusal)),
        }
    }

    /// The request that asks for the call `call_id` of `tool` in task `task`; refused while
    /// the policy does not load.
    fn request_for(
        &self,
        task: Option<&str>,
        call_id: &str,
        tool: &str,
        input: &serde_json::Value,
        hook_reason: Option<&str>,
    ) -> Result<ApprovalRequest, String> {
        let command = command_of(tool, input);
        let timeout_s = self.policy().map_err(|r| r.to_string())?.timeout();
        Ok(ApprovalRequest {
            id: store::new_id(),
            project: self.project.clone(),
            task: task.unwrap_or_default().to_string(),
            tool: tool.to_string(),
            summary: match hook_reason {
                Some(why) => format!("{} (a hook asks: {why})", store::summary(tool, input)),
                None => store::summary(tool, input),
            },
            asked_at: Utc::now(),
            call_id: call_id.to_string(),
            input_json: input.to_string(),
            timeout_s,
            always: command.unwrap_or_else(|| tool.to_string()),
        })
    }

    /// Asks for a call that runs outside this process (a harness's, DESIGN.md §15: `asker`
    /// names it, `Claude Code`), and waits for the answer. An approval is handed back unmarked:
    /// the call counts as run only once its asker has the approval in hand
    /// ([`Handoff::ran`]); dropped before that, the request is let go (see [`Handoff`]).
    pub async fn hand_off(
        self: &Arc<Self>,
        asker: &str,
        task: &str,
        call_id: &str,
        tool: &str,
        input: &serde_json::Value,
    ) -> Handed {
        let request = match self.request_for(Some(task), call_id, tool, input, None) {
            Ok(r) => r,
            Err(refusal) => return Handed::Refused(refusal),
        };
        if let Err(e) = self.ask_detached(&request, TaskState::Running) {
            tracing::error!(id = %request.id, "cannot write the approval request: {e}");
            return Handed::Refused(unsaved(&e));
        }
        // From here on, this future dropped (its asker gone, its run over) lets go of it.
        let mut handoff = Handoff {
            gate: self.clone(),
            asker: asker.to_string(),
            request: Some(Box::new(request.clone())),
            answered: false,
        };
        let Some(answer) = self.answer_of(&request).await else {
            handoff.request = None;
            return Handed::Held;
        };
        handoff.answered = true;
        match answer.decision.refusal() {
            None => Handed::Approved(handoff),
            Some(text) => {
                handoff.request = None;
                self.done(&request.id);
                Handed::Refused(text)
            }
        }
    }

    /// Asks with a request made by the caller (a merge), and waits for the answer.
    pub async fn ask_request(&self, request: ApprovalRequest) -> Gate {
        if let Err(e) = self.ask_detached(&request, TaskState::Running) {
            tracing::error!(id = %request.id, "cannot write the approval request: {e}");
            return Gate::Result(ToolOutput::error(unsaved(&e)));
        }
        self.wait(&request).await
    }

    /// Records a request that nobody waits for in-process (a merge, DESIGN.md §11 `merge: ask`):
    /// written, its task moved `from` → `blocked` (reason `approval`), announced. Whoever
    /// settles it later reads its answer from the files.
    pub fn ask_detached(&self, request: &ApprovalRequest, from: TaskState) -> Result<(), String> {
        store::write_request(&self.dir, request).map_err(|e| e.to_string())?;
        // Blocked only once the request is on disk: a crash in between leaves a running task,
        // which the restart fails, and a request that the restart withdraws.
        self.move_task(
            &request.task,
            &[(from, TaskState::Blocked)],
            APPROVAL_REASON,
        );
        tracing::info!(id = %request.id, tool = %request.tool, task = %request.task, "waiting for approval");
        send_event(
            &self.notices,
            WorkerEvent::Approval {
                request: request.info(),
            },
        );
        Ok(())
    }

    /// Remembers when a detached request runs out of time (the earliest one counts).
    pub fn expires_detached(&self, at: chrono::DateTime<Utc>) {
        let mut e = self.merge_expiry.lock().unwrap_or_else(|p| p.into_inner());
        *e = Some(e.map_or(at, |old| old.min(at)));
    }

    /// Whether a detached request has run out of time since it was last settled (cheap: no
    /// file is read); clears the mark.
    pub fn detached_due(&self) -> bool {
        let mut e = self.merge_expiry.lock().unwrap_or_else(|p| p.into_inner());
        match *e {
            Some(at) if Utc::now() >= at => {
                *e = None;
                true
            }
            _ => false,
        }
    }

    /// The answer of a detached request, once it has one (its time running out is an answer
    /// too); reported like any answer.
    pub fn detached_answer(&self, request: &ApprovalRequest) -> Option<Answer> {
        let answer = match store::read_answer(&self.dir, &request.id) {
            Some(a) => a,
            None if Utc::now() >= request.expires_at() => self.answer_or_theirs(
                request,
                Decision::Expired {
                    after_s: request.timeout_s,
                },
            ),
            None => return None,
        };
        send_event(
            &self.notices,
            WorkerEvent::ApprovalAnswered {
                task: Some(request.task.clone()),
                id: request.id.clone(),
                decision: answer.decision.word().to_string(),
            },
        );
        Some(answer)
    }

    /// The project's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits for the answer of `request` (or its timeout, or its task's end).
    pub async fn wait(&self, request: &ApprovalRequest) -> Gate {
        let Some(answer) = self.answer_of(request).await else {
            return Gate::Held;
        };
        match answer.decision.refusal() {
            None => {
                // Marked before it runs: after a crash from here on, it never runs again.
                if let Err(e) = store::mark_ran(&self.dir, &request.id) {
                    tracing::error!(id = %request.id, "cannot mark the approval as run: {e}");
                    return Gate::Result(ToolOutput::error(unmarked(&e)));
                }
                Gate::Run(request.id.clone())
            }
            Some(text) => {
                self.done(&request.id);
                Gate::Result(ToolOutput::error(text))
            }
        }
    }

    /// The answer of `request` once it has one (its timeout and its task's end answer it
    /// too), reported, its task moved on; `None` when the process is stopping first (the
    /// call is held).
    async fn answer_of(&self, request: &ApprovalRequest) -> Option<Answer> {
        let answer = loop {
            let woken = self.wake.notified();
            if let Some(a) = store::read_answer(&self.dir, &request.id) {
                break a;
            }
            let now = Utc::now();
            if now >= request.expires_at() {
                break self.answer_or_theirs(
                    request,
                    Decision::Expired {
                        after_s: request.timeout_s,
                    },
                );
            }
            if let Some(why) = self.moved_on(request) {
                break self.answer_or_theirs(request, Decision::Withdrawn { why });
            }
            if self.stop.load(Ordering::SeqCst) {
                self.holding.store(true, Ordering::SeqCst);
                return None;
            }
            let left = (request.expires_at() - now)
                .to_std()
                .unwrap_or(Duration::ZERO)
                .min(LOOK_EVERY);
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(left) => {}
            }
        };
        if !matches!(answer.decision, Decision::Withdrawn { .. }) {
            self.answered(request, &answer);
        } else {
            self.report(request, &answer);
        }
        Some(answer)
    }

    /// Why `request` is withdrawn if its task no longer waits for it (cancelled, say).
    fn moved_on(&self, request: &ApprovalRequest) -> Option<String> {
        if request.task.is_empty() {
            return None;
        }
        let t = self.tasks.get(&request.task).ok()?;
        (t.state != TaskState::Blocked)
            .then(|| format!("task {} was {} while it waited", t.id, t.state))
    }

    /// Reports `request`'s answer (log, event).
    fn report(&self, request: &ApprovalRequest, answer: &Answer) {
        tracing::info!(id = %request.id, decision = answer.decision.word(), by = %answer.by, "approval answered");
        send_event(
            &self.notices,
            WorkerEvent::ApprovalAnswered {
                task: (!request.task.is_empty()).then(|| request.task.clone()),
                id: request.id.clone(),
                decision: answer.decision.word().to_string(),
            },
        );
    }

    /// Reports `request`'s answer and moves its task on from `blocked`: its call goes on,
    /// run or not.
    fn answered(&self, request: &ApprovalRequest, answer: &Answer) {
        self.report(request, answer);
        self.move_task(
            &request.task,
            &[
                (TaskState::Blocked, TaskState::Ready),
                (TaskState::Ready, TaskState::Running),
            ],
            answer.decision.word(),
        );
    }

    /// A handed-off request whose asker went away before it had the answer in hand
    /// ([`Handoff`]'s drop): held if the process is stopping and it waits still; else
    /// withdrawn unless answered first, its task moved on (its harness goes on without the
    /// call, or its run ends), and closed, never marked as run.
    fn let_go(&self, request: &ApprovalRequest, asker: &str, answered: bool) {
        if !answered && self.stop.load(Ordering::SeqCst) {
            self.holding.store(true, Ordering::SeqCst);
            tracing::info!(id = %request.id, "held: the process stops while the call waits");
            return;
        }
        if !answered {
            // Its task's end, if that is what ended the run, says why best.
            let why = self
                .moved_on(request)
                .unwrap_or_else(|| format!("{asker} stopped waiting for the answer"));
            let answer = self.answer_or_theirs(request, Decision::Withdrawn { why });
            self.answered(request, &answer);
        }
        tracing::info!(id = %request.id, "not run: {asker} went away before it had the answer");
        self.done(&request.id);
    }

    /// The call of request `id` has its result: the request is closed.
    pub fn done(&self, id: &str) {
        if let Err(e) = store::close(&self.dir, id) {
            tracing::warn!(id, "cannot close the approval request: {e}");
        }
    }

    /// Withdraws a request whose call will never get an answer's result (its task ended, or
    /// its call is not in the session any more).
    pub fn withdraw(&self, request: &ApprovalRequest, why: &str) {
        let _ = self.answer_or_theirs(
            request,
            Decision::Withdrawn {
                why: why.to_string(),
            },
        );
        self.done(&request.id);
    }

    /// Records `decision` as the answer unless someone answered first; the winning answer.
    fn answer_or_theirs(&self, request: &ApprovalRequest, decision: Decision) -> Answer {
        let mine = Answer {
            decision,
            by: "policy".into(),
            at: Utc::now(),
        };
        match store::answer(&self.dir, &request.id, &mine) {
            Ok(()) => mine,
            Err(AnswerError::Already(theirs)) => theirs,
            Err(e) => {
                tracing::warn!(id = %request.id, "cannot record the approval's answer: {e:?}");
                mine
            }
        }
    }

    /// Moves `task` along `steps`, each only if the task is in its `from` state (reported like
    /// every move).
    fn move_task(&self, task: &str, steps: &[(TaskState, TaskState)], reason: &str) {
        if task.is_empty() {
            return;
        }
        for (from, to) in steps {
            match self.tasks.transition(task, *from, *to, "pegasus", reason) {
                Ok(t) => crate::task_record::report(&self.notices, &t),
                Err(e) => {
                    tracing::debug!(task, "approval: task not moved {from} -> {to}: {e}");
                    return;
                }
            }
        }
    }
}

/// The refusal of a call whose request could not be written.
fn unsaved(e: &dyn std::fmt::Display) -> String {
    format!("not run: this call needs a person's approval and the request could not be saved ({e})")
}

/// The refusal of an approved call whose run could not be recorded.
fn unmarked(e: &dyn std::fmt::Display) -> String {
    format!("not run: approved, but Pegasus could not record that it runs ({e})")
}

/// The exec command line of a call, if it is one.
fn command_of(tool: &str, input: &serde_json::Value) -> Option<String> {
    (tool == "exec")
        .then(|| input.get("command").and_then(|c| c.as_str()))
        .flatten()
        .map(str::to_string)
}

/// At a start, before the session loads: the request whose call the session must leave open
/// (its task is still blocked on it, and it never ran), and that call's id. Every other open
/// request is settled here: one that ran (its call was cut off) is closed, one whose task
/// moved on is withdrawn. At most one call waits at a time (the agent does one thing at a
/// time); should there be more, the oldest is held and the rest withdrawn.
pub fn held_after_restart(
    dir: &Path,
    tasks: &TaskStore,
) -> (Option<ApprovalRequest>, std::collections::HashSet<String>) {
    let mut held = None;
    let mut calls = std::collections::HashSet::new();
    for open in store::open_requests(dir) {
        let r = open.request;
        // A merge's request has no call: the code task's merge step settles it.
        if r.tool == store::MERGE_TOOL && r.call_id.is_empty() {
            continue;
        }
        let blocked = tasks
            .get(&r.task)
            .map(|t| t.state == TaskState::Blocked)
            .unwrap_or(false);
        let settle = |decision: Decision| {
            if open.state == RequestState::Pending {
                let a = Answer {
                    decision,
                    by: "policy".into(),
                    at: Utc::now(),
                };
                let _ = store::answer(dir, &r.id, &a);
            }
            if let Err(e) = store::close(dir, &r.id) {
                tracing::warn!(id = %r.id, "cannot close the approval request: {e}");
            }
        };
        // Marked as run: its call started before the restart and was cut off.
        let cut_off = match &open.state {
            RequestState::Ran => true,
            RequestState::Pending
            | RequestState::Approved { .. }
            | RequestState::Denied { .. }
            | RequestState::Expired { .. }
            | RequestState::Withdrawn { .. }
            | RequestState::Unreadable
            | RequestState::Closed => false,
        };
        if cut_off {
            tracing::warn!(id = %r.id, "an approved call was cut off by the restart: it is not run again");
            settle(Decision::Withdrawn {
                why: "cut off by a restart".into(),
            });
        } else if blocked && held.is_none() && !r.call_id.is_empty() {
            calls.insert(r.call_id.clone());
            held = Some(r);
        } else {
            tracing::info!(id = %r.id, "withdrawn: its task is no longer waiting for it");
            settle(Decision::Withdrawn {
                why: "its task no longer waits for it".into(),
            });
        }
    }
    (held, calls)
}
