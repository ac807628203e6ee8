//! The loop that drives a run: plan, then per phase execute → summarise → review → verdict.
//!
//! Every loop turn starts from the run file on disk, not from memory. That one rule gives the
//! three properties the seed asks for: a cancel or pause written by pegasusd is seen at the next
//! turn; a run interrupted at any point (crash, `kill -9`, daemon restart) continues from what
//! was last persisted; and the in-memory copy can never drift from what `run status` shows.
//!
//! Safety checks at the top of every turn, in this order:
//! 1. a pending request: cancel → `cancelled`, pause → `paused`;
//! 2. the daily limit: today's (UTC) ledger spend of all projects ≥ `daily_limit_usd` → `paused`
//!    with "daily limit reached ..."; `run resume` continues it (after midnight UTC, or once the
//!    limit was raised, or it pauses again at the next turn);
//! 3. then the work: plan if the run has no phases, else the first phase not completed.
//!
//! Rules for what never stays `executing`:
//! * A phase is marked `executing` and persisted *before* any work, so a crash is visible.
//! * A phase found `executing` at the top of a turn was interrupted by a crash: its attempt is
//!   restarted under the same number (and task id). The attempt counter is NOT incremented for
//!   an attempt that never got a verdict: a crash is not the work's fault and must not eat the
//!   retries. Its spend is still counted, because costs are summed from the ledger by task id.
//! * A budget refusal from the gateway ([`LlmError::BudgetExceeded`], or the executor's
//!   [`ExecError::Budget`]) anywhere pauses the run with the refusal as its error; the phase goes back
//!   to `pending` with the attempt uncounted, like a crash. Raise the budget, then `run resume`.
//! * Any other error mid-phase (the executor's, the review call's, or a file write's) marks the
//!   phase and the run `failed` with the message.
//!
//! One driver per run at a time: the caller (the worker) makes sure of that.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::Utc;
use pegasus_proto::llm::ChatModel;
use pegasus_proto::llm::LlmError;

use crate::error::RunError;
use crate::events::RunEvent;
use crate::executor::{ExecError, PhaseExecutor};
use crate::ledger::{ledger_cost_on_day, ledger_costs_for_run};
use crate::plan::parse_plan;
use crate::prompt::{
    chat_request, fallback_summary, phase_prompt, plan_user, review_user, summary_user,
    PLANNER_SYSTEM, REVIEW_SYSTEM, SUMMARY_SYSTEM,
};
use crate::run::{Phase, Run, RunRequest};
use crate::settings::RunSettings;
use crate::status::{PhaseStatus, PhaseTrigger, RunTrigger};
use crate::store::RunStore;
use crate::verdict::{parse_verdict, ReviewVerdict};

/// Drives runs of one project.
pub struct RunEngine {
    store: RunStore,
    model: Arc<dyn ChatModel>,
    executor: Arc<dyn PhaseExecutor>,
    ledger: PathBuf,
    settings: RunSettings,
}

/// Whether the loop goes on after a step.
enum Flow {
    Continue,
    Stop(Run),
}

/// How one attempt ended.
enum AttemptEnd {
    /// The reviewer answered.
    ReviewVerdict {
        verdict: ReviewVerdict,
        review: String,
    },
    /// The work or the review failed: the phase and the run fail with this line.
    Failed(String),
    /// A budget refusal: the run pauses with this line and the attempt does not count.
    Budget(String),
}

impl RunEngine {
    /// An engine over one project's runs. `ledger` is the gateway's `costs/ledger.jsonl`.
    pub fn new(
        store: RunStore,
        model: Arc<dyn ChatModel>,
        executor: Arc<dyn PhaseExecutor>,
        ledger: PathBuf,
        settings: RunSettings,
    ) -> Self {
        RunEngine {
            store,
            model,
            executor,
            ledger,
            settings,
        }
    }

    /// The store the engine writes.
    pub fn store(&self) -> &RunStore {
        &self.store
    }

    /// Drives a run to an end or a pause: planning (if it has no phases yet) then the phase
    /// loop. Returns the run as it ended this drive; a run that is not live (paused or finished)
    /// is returned as it is. Never leaves a phase or the run `executing` on an error: an error
    /// mid-phase marks the phase and the run failed with the message, and the failed run is
    /// returned; `Err` only when even that could not be written (or the run cannot be read).
    /// Resumes correctly a run interrupted at any point (see the module doc for the attempt
    /// counter rule).
    pub async fn drive(&self, run_id: &str) -> Result<Run, RunError> {
        let run = self.load(run_id).await?;
        if !run.status.is_live() {
            return Ok(run);
        }
        match self.drive_loop(run_id).await {
            Ok(run) => Ok(run),
            Err(e) => self.fail_on_error(run_id, e).await,
        }
    }

    async fn drive_loop(&self, run_id: &str) -> Result<Run, RunError> {
        loop {
            let run = self.load(run_id).await?;
            if !run.status.is_live() {
                return Ok(run);
            }
            if let Some(req) = run.requested {
                return self.honour_request(run, req).await;
            }
            if let Some(limit) = self.settings.daily_limit_usd {
                let spent = self.spent_today().await?;
                if spent >= limit {
                    let reason = format!(
                        "daily limit reached: ${spent:.2} of ${limit:.2} spent today (UTC); `run resume` continues after midnight UTC or once the limit is raised"
                    );
                    return self.pause(run, reason).await;
                }
            }
            let flow = if run.phases.is_empty() {
                self.plan(run).await?
            } else {
                self.next_phase(run).await?
            };
            if let Flow::Stop(run) = flow {
                return Ok(run);
            }
        }
    }

    /// The plan call: turns the brief into numbered phases, or fails (or pauses) the run.
    async fn plan(&self, mut run: Run) -> Result<Flow, RunError> {
        tracing::info!(run = %run.id, "planning");
        let req = chat_request(
            &self.settings.planner_model,
            PLANNER_SYSTEM,
            plan_user(&run.brief),
            self.settings.max_tokens,
            &run.project,
            run.plan_task_id(),
            "planner",
        );
        let answer = self.model.chat(req).await;
        self.refresh_costs(&mut run).await?;
        let text = match answer {
            Ok(resp) => resp.text(),
            Err(e @ LlmError::BudgetExceeded { .. }) => {
                return Ok(Flow::Stop(self.pause(run, e.to_string()).await?))
            }
            Err(e) => {
                let error = format!("planning failed: {e}");
                return Ok(Flow::Stop(self.fail(run, None, error).await?));
            }
        };
        let planned = match parse_plan(&text) {
            Ok(p) => p,
            Err(why) => {
                let error = format!("the plan could not be read: {why}");
                return Ok(Flow::Stop(self.fail(run, None, error).await?));
            }
        };
        run.phases = planned
            .into_iter()
            .zip(1u32..)
            .map(|(p, n)| Phase::from_plan(n, p))
            .collect();
        if run.status == crate::RunStatus::Planning {
            run.apply(RunTrigger::Planned)?;
        }
        let phases = run.phases.len() as u32;
        self.record(&mut run, RunEvent::Planned { phases }).await?;
        Ok(Flow::Continue)
    }

    /// Picks the first phase not completed and runs one attempt of it; completes the run when
    /// there is none.
    async fn next_phase(&self, mut run: Run) -> Result<Flow, RunError> {
        let Some(idx) = run
            .phases
            .iter()
            .position(|p| p.status != PhaseStatus::Completed)
        else {
            run.apply(RunTrigger::Complete)?;
            run.error = None;
            let cost_usd = run.cost_usd;
            self.record(&mut run, RunEvent::Completed { cost_usd })
                .await?;
            tracing::info!(run = %run.id, cost_usd = run.cost_usd, "run completed");
            return Ok(Flow::Stop(run));
        };
        if run.phases[idx].status == PhaseStatus::Failed {
            // Only a hand-edited file gets here: the phase and the run fail in one write.
            let phase = &run.phases[idx];
            let error = format!(
                "phase {} failed: {}",
                phase.number,
                phase.error.as_deref().unwrap_or("no reason recorded")
            );
            return Ok(Flow::Stop(self.fail(run, None, error).await?));
        }
        self.attempt(run, idx).await
    }

    /// One attempt of phase `idx`, from marking it executing to acting on its verdict.
    async fn attempt(&self, mut run: Run, idx: usize) -> Result<Flow, RunError> {
        let restarted = run.phases[idx].status == PhaseStatus::Executing;
        {
            let phase = &mut run.phases[idx];
            if !restarted {
                phase.attempt += 1;
                phase.apply(&run.id, PhaseTrigger::Start)?;
            }
            phase.error = None;
        }
        let (number, attempt) = (run.phases[idx].number, run.phases[idx].attempt);
        let task = run.attempt_task_id(number, attempt);
        run.current_phase = Some(number);
        // Persisted before any work, so a crash from here on is seen as "executing" on restart.
        self.record(
            &mut run,
            RunEvent::PhaseStarted {
                phase: number,
                attempt,
                task: task.clone(),
                restarted,
            },
        )
        .await?;
        tracing::info!(run = %run.id, phase = number, attempt, restarted, "phase attempt");

        let end = self.work(&mut run, idx, task).await?;
        self.refresh_costs(&mut run).await?;
        match end {
            AttemptEnd::ReviewVerdict { verdict, review } => {
                let (approved, reason) = match &verdict {
                    ReviewVerdict::Approved => (true, None),
                    ReviewVerdict::Rejected { reason } => (false, Some(reason.clone())),
                };
                run.phases[idx].review = Some(review);
                self.log(
                    &run.id,
                    RunEvent::Reviewed {
                        phase: number,
                        attempt,
                        approved,
                        reason,
                    },
                )
                .await?;
                match verdict {
                    ReviewVerdict::Approved => self.approve(run, idx).await,
                    ReviewVerdict::Rejected { reason } => self.reject(run, idx, reason).await,
                }
            }
            AttemptEnd::Failed(error) => {
                let run_error = format!("phase {number} failed: {error}");
                Ok(Flow::Stop(
                    self.fail(run, Some((idx, error)), run_error).await?,
                ))
            }
            AttemptEnd::Budget(reason) => Ok(Flow::Stop(self.pause(run, reason).await?)),
        }
    }

    /// Execute, summarise, review. Output and summary are persisted as they arrive so
    /// `run status` shows them while the review is pending.
    async fn work(&self, run: &mut Run, idx: usize, task: String) -> Result<AttemptEnd, RunError> {
        let number = run.phases[idx].number;
        let attempt = run.phases[idx].attempt;
        let prompt = phase_prompt(run, &run.phases[idx]);
        let output = match self.executor.execute(prompt, task.clone()).await {
            Ok(output) => output,
            Err(ExecError::Budget(msg)) => return Ok(AttemptEnd::Budget(msg)),
            Err(ExecError::Failed(msg)) => return Ok(AttemptEnd::Failed(msg)),
        };
        run.phases[idx].output = Some(output.clone());
        self.record(
            run,
            RunEvent::Executed {
                phase: number,
                attempt,
                chars: output.chars().count(),
            },
        )
        .await?;

        let req = chat_request(
            &self.settings.summary_model,
            SUMMARY_SYSTEM,
            summary_user(&run.phases[idx], &output),
            self.settings.max_tokens,
            &run.project,
            task.clone(),
            "summary",
        );
        // Best effort: a summary is a convenience for later phases, not worth failing a phase.
        let summary = match self.model.chat(req).await {
            Ok(resp) => Some(resp.text()).filter(|s| !s.trim().is_empty()),
            Err(e @ LlmError::BudgetExceeded { .. }) => {
                return Ok(AttemptEnd::Budget(e.to_string()))
            }
            Err(e) => {
                tracing::warn!(run = %run.id, phase = number, "summary call failed, using the output's start: {e}");
                None
            }
        };
        let fallback = summary.is_none();
        run.phases[idx].summary = Some(summary.unwrap_or_else(|| fallback_summary(&output)));
        self.record(
            run,
            RunEvent::Summarised {
                phase: number,
                attempt,
                fallback,
            },
        )
        .await?;

        let req = chat_request(
            &self.settings.review_model,
            REVIEW_SYSTEM,
            review_user(run, &run.phases[idx], &output),
            self.settings.max_tokens,
            &run.project,
            task,
            "reviewer",
        );
        match self.model.chat(req).await {
            Ok(resp) => {
                let review = resp.text();
                Ok(AttemptEnd::ReviewVerdict {
                    verdict: parse_verdict(&review),
                    review,
                })
            }
            Err(e @ LlmError::BudgetExceeded { .. }) => Ok(AttemptEnd::Budget(e.to_string())),
            Err(e) => Ok(AttemptEnd::Failed(format!("the review call failed: {e}"))),
        }
    }

    async fn approve(&self, mut run: Run, idx: usize) -> Result<Flow, RunError> {
        let phase = &mut run.phases[idx];
        phase.apply(&run.id, PhaseTrigger::Approve)?;
        let event = RunEvent::PhaseCompleted {
            phase: phase.number,
            cost_usd: phase.cost_usd,
        };
        self.record(&mut run, event).await?;
        Ok(Flow::Continue)
    }

    /// A rejection (real or garbled): retry with the reason as feedback while attempts are
    /// left, else fail the phase and the run.
    async fn reject(&self, mut run: Run, idx: usize, reason: String) -> Result<Flow, RunError> {
        let (number, attempt) = (run.phases[idx].number, run.phases[idx].attempt);
        run.phases[idx].feedback = Some(reason.clone());
        if attempt < run.max_attempts {
            run.phases[idx].apply(&run.id, PhaseTrigger::Retry)?;
            self.record(
                &mut run,
                RunEvent::PhaseRetry {
                    phase: number,
                    attempt,
                    feedback: reason,
                },
            )
            .await?;
            return Ok(Flow::Continue);
        }
        let phase_error = format!("rejected {attempt} times: {reason}");
        let run_error = format!("phase {number} {phase_error}");
        Ok(Flow::Stop(
            self.fail(run, Some((idx, phase_error)), run_error).await?,
        ))
    }

    /// Fails the run with `run_error`, and first the phase `phase.0` with `phase.1` when the
    /// failure is the phase's. The new state is saved before it is logged: the run file is what
    /// must not stay `executing`; the log is history.
    async fn fail(
        &self,
        mut run: Run,
        phase: Option<(usize, String)>,
        run_error: String,
    ) -> Result<Run, RunError> {
        let events = mark_failed(&mut run, phase, run_error)?;
        self.save(&run).await?;
        for event in events {
            self.log(&run.id, event).await?;
        }
        tracing::warn!(run = %run.id, "run failed: {}", run.error.as_deref().unwrap_or(""));
        Ok(run)
    }

    /// Pauses the run: an executing phase goes back to pending with its attempt uncounted.
    async fn pause(&self, mut run: Run, reason: String) -> Result<Run, RunError> {
        interrupt_phases(&mut run)?;
        run.apply(RunTrigger::Pause)?;
        run.error = Some(reason.clone());
        self.record(
            &mut run,
            RunEvent::Paused {
                reason: reason.clone(),
            },
        )
        .await?;
        tracing::info!(run = %run.id, "run paused: {reason}");
        Ok(run)
    }

    /// Acts on a cancel or pause written by an outsider, then removes the request (after the
    /// new status is on disk, so a crash in between cannot lose it).
    async fn honour_request(&self, mut run: Run, req: RunRequest) -> Result<Run, RunError> {
        let run = match req {
            RunRequest::Pause => {
                run.requested = None;
                self.pause(run, "paused on request".into()).await?
            }
            RunRequest::Cancel => {
                interrupt_phases(&mut run)?;
                run.apply(RunTrigger::Cancel)?;
                run.requested = None;
                self.record(&mut run, RunEvent::Cancelled).await?;
                tracing::info!(run = %run.id, "run cancelled");
                run
            }
        };
        let id = run.id.clone();
        self.blocking(move |s| s.clear_request(&id)).await?;
        Ok(run)
    }

    /// Last resort when a step itself failed (a file could not be written, a bug): records the
    /// failure on the run as last persisted, so nothing stays `executing`. The log is written
    /// best-effort here, since it may be what failed.
    async fn fail_on_error(&self, run_id: &str, err: RunError) -> Result<Run, RunError> {
        tracing::error!(run = %run_id, "run step failed: {err}");
        let Ok(mut run) = self.load(run_id).await else {
            return Err(err);
        };
        if !run.status.is_live() {
            return Err(err);
        }
        let phase = run
            .phases
            .iter()
            .position(|p| p.status == PhaseStatus::Executing)
            .map(|idx| (idx, err.to_string()));
        let run_error = match &phase {
            Some((idx, _)) => format!("phase {} failed: {err}", run.phases[*idx].number),
            None => err.to_string(),
        };
        let Ok(events) = mark_failed(&mut run, phase, run_error) else {
            return Err(err);
        };
        if self.save(&run).await.is_err() {
            return Err(err);
        }
        for event in events {
            if let Err(e) = self.log(&run.id, event).await {
                tracing::warn!(run = %run.id, "cannot log the failure: {e}");
            }
        }
        Ok(run)
    }

    /// Recomputes the run's and its phases' costs from the ledger.
    async fn refresh_costs(&self, run: &mut Run) -> Result<(), RunError> {
        let ledger = self.ledger.clone();
        let id = run.id.clone();
        let costs = self
            .blocking(move |_| Ok(ledger_costs_for_run(&ledger, &id)))
            .await?;
        let (mut usd, mut unpriced) = costs.plan;
        for phase in &mut run.phases {
            let (p_usd, p_unpriced) = costs.phases.get(&phase.number).copied().unwrap_or_default();
            phase.cost_usd = p_usd;
            phase.unpriced_calls = p_unpriced;
            usd += p_usd;
            unpriced += p_unpriced;
        }
        run.cost_usd = usd;
        run.unpriced_calls = unpriced;
        Ok(())
    }

    async fn spent_today(&self) -> Result<f64, RunError> {
        let ledger = self.ledger.clone();
        self.blocking(move |_| Ok(ledger_cost_on_day(&ledger, Utc::now().date_naive())))
            .await
    }

    async fn load(&self, id: &str) -> Result<Run, RunError> {
        let id = id.to_string();
        self.blocking(move |s| s.get(&id)).await
    }

    /// Saves the run, stamped now, then logs `event`: the file first, so the log never tells
    /// of a state the run file does not have.
    async fn record(&self, run: &mut Run, event: RunEvent) -> Result<(), RunError> {
        run.updated = Utc::now();
        self.save(run).await?;
        self.log(&run.id, event).await
    }

    async fn save(&self, run: &Run) -> Result<(), RunError> {
        let run = run.clone();
        self.blocking(move |s| s.save(&run)).await
    }

    async fn log(&self, id: &str, event: RunEvent) -> Result<(), RunError> {
        let id = id.to_string();
        self.blocking(move |s| s.log(&id, event)).await
    }

    /// Runs file work on tokio's blocking pool: the store fsyncs, which must not stall the
    /// worker's other tasks.
    async fn blocking<T, F>(&self, f: F) -> Result<T, RunError>
    where
        T: Send + 'static,
        F: FnOnce(&RunStore) -> Result<T, RunError> + Send + 'static,
    {
        let store = self.store.clone();
        pegasus_fs::blocking(move || f(&store)).await?
    }
}

/// Marks the run (and a phase) failed in memory; returns the log lines that say so.
fn mark_failed(
    run: &mut Run,
    phase: Option<(usize, String)>,
    run_error: String,
) -> Result<Vec<RunEvent>, RunError> {
    let mut events = Vec::new();
    if let Some((idx, error)) = phase {
        let id = run.id.clone();
        let p = &mut run.phases[idx];
        if p.status == PhaseStatus::Executing {
            p.apply(&id, PhaseTrigger::Fail)?;
        }
        p.error = Some(error.clone());
        events.push(RunEvent::PhaseFailed {
            phase: p.number,
            error,
        });
    }
    run.apply(RunTrigger::Fail)?;
    run.error = Some(run_error.clone());
    events.push(RunEvent::Failed { error: run_error });
    Ok(events)
}

/// Puts every executing phase back to pending with its attempt uncounted: the run is stopping
/// before that attempt got a verdict (see the module doc).
fn interrupt_phases(run: &mut Run) -> Result<(), RunError> {
    let id = run.id.clone();
    for phase in run
        .phases
        .iter_mut()
        .filter(|p| p.status == PhaseStatus::Executing)
    {
        phase.apply(&id, PhaseTrigger::Interrupt)?;
        phase.attempt = phase.attempt.saturating_sub(1);
    }
    Ok(())
}
