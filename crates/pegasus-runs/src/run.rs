//! The persisted records: a [`Run`] and its [`Phase`]s, exactly as `runs/<id>.json` holds them.
//!
//! Status changes go through [`Run::apply`] and [`Phase::apply`], which consult the tables in
//! [`crate::status`] and stamp the times, so no code path can put a record into a state the
//! table does not allow.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::RunError;
use crate::plan::PlannedPhase;
use crate::status::{PhaseStatus, PhaseTrigger, RunStatus, RunTrigger};

/// What an outsider (pegasusd on `run cancel|pause`) asked of a live run. The engine acts on it
/// at the top of its next loop turn, never in the middle of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunRequest {
    /// Stop for good.
    Cancel,
    /// Stop until `run resume`.
    Pause,
}

impl RunRequest {
    /// The verb, for messages.
    pub fn verb(self) -> &'static str {
        match self {
            RunRequest::Cancel => "cancel",
            RunRequest::Pause => "pause",
        }
    }
}

/// One step of a run, with its acceptance criteria and everything its attempts left behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// 1-based, assigned by the engine from the plan's order; unique per run.
    pub number: u32,
    /// Short name from the plan.
    pub title: String,
    /// What to do, from the plan.
    pub description: String,
    /// What the reviewer checks.
    pub acceptance: Vec<String>,
    /// See [`PhaseStatus`].
    pub status: PhaseStatus,
    /// Attempts started and not abandoned: an attempt that never got a verdict (crash, pause,
    /// cancel, budget refusal) is restarted under the same number rather than counted again.
    pub attempt: u32,
    /// The last rejection reason (the first line of the review after `REJECTED:`).
    pub feedback: Option<String>,
    /// The last summary (cheap model, or the output's first 500 characters if that failed).
    pub summary: Option<String>,
    /// The last attempt's output.
    pub output: Option<String>,
    /// Why the phase failed.
    pub error: Option<String>,
    /// Spend over all attempts, summed from the ledger lines of the attempts' task ids.
    pub cost_usd: f64,
    /// Ledger lines of those task ids with no price (counted, not guessed).
    pub unpriced_calls: u32,
    /// When the first attempt started.
    pub started: Option<DateTime<Utc>>,
    /// When it completed or failed.
    pub finished: Option<DateTime<Utc>>,
    /// The whole text of the last review, so a retry sees the reviewer's details and not only
    /// the one-line reason.
    #[serde(default)]
    pub review: Option<String>,
}

impl Phase {
    /// A fresh pending phase from the plan.
    pub fn from_plan(number: u32, planned: PlannedPhase) -> Phase {
        Phase {
            number,
            title: planned.title,
            description: planned.description,
            acceptance: planned.acceptance,
            status: PhaseStatus::Pending,
            attempt: 0,
            feedback: None,
            summary: None,
            output: None,
            error: None,
            cost_usd: 0.0,
            unpriced_calls: 0,
            started: None,
            finished: None,
            review: None,
        }
    }

    /// Moves the phase by the table; a refused move is a bug in the engine, reported as such.
    pub fn apply(&mut self, run_id: &str, trigger: PhaseTrigger) -> Result<(), RunError> {
        let next = self
            .status
            .next(trigger)
            .ok_or_else(|| RunError::PhaseTransition {
                id: run_id.to_string(),
                phase: self.number,
                from: self.status,
                trigger,
            })?;
        let now = Utc::now();
        match trigger {
            PhaseTrigger::Start => {
                self.started.get_or_insert(now);
            }
            PhaseTrigger::Approve | PhaseTrigger::Fail => self.finished = Some(now),
            PhaseTrigger::Retry | PhaseTrigger::Interrupt => {}
        }
        self.status = next;
        Ok(())
    }
}

/// One autonomous run of a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// `r-<YYYYMMDD>-<hex>`; also the file name.
    pub id: String,
    /// The project it belongs to (ledger lines carry it too).
    pub project: String,
    /// What the user asked for.
    pub brief: String,
    /// See [`RunStatus`].
    pub status: RunStatus,
    /// Attempts per phase before the phase (and the run) fails; at least 1.
    pub max_attempts: u32,
    /// Empty until planned.
    pub phases: Vec<Phase>,
    /// The phase being (or last) worked on.
    pub current_phase: Option<u32>,
    /// Cancel or pause asked from outside and not yet acted on. Kept in its own file
    /// (`runs/<id>.request`) that only outsiders write, so the engine's rewrites of the run file
    /// can never lose it; [`crate::RunStore::get`] fills it in.
    pub requested: Option<RunRequest>,
    /// The plan call plus every phase's cost.
    pub cost_usd: f64,
    /// Why the run failed or paused, one line.
    pub error: Option<String>,
    /// When it was created.
    pub created: DateTime<Utc>,
    /// Last change.
    pub updated: DateTime<Utc>,
    /// Ledger lines of this run with no price (plan call and every phase).
    #[serde(default)]
    pub unpriced_calls: u32,
}

impl Run {
    /// Moves the run by the table; a refused move is a bug in the engine (or a refused verb in
    /// the store, which checks first and says so in plain words).
    pub fn apply(&mut self, trigger: RunTrigger) -> Result<(), RunError> {
        let next = self.status.next(trigger).ok_or(RunError::Transition {
            id: self.id.clone(),
            from: self.status,
            trigger,
        })?;
        self.status = next;
        self.updated = Utc::now();
        Ok(())
    }

    /// The task id of the plan call; its ledger lines count towards the run.
    pub fn plan_task_id(&self) -> String {
        format!("{}-plan", self.id)
    }

    /// The task id of one attempt of one phase: every model call of that attempt (executor,
    /// summary, review) carries it, so the ledger can be summed per phase.
    pub fn attempt_task_id(&self, phase: u32, attempt: u32) -> String {
        format!("{}-p{phase}-a{attempt}", self.id)
    }

    /// The phase with this number.
    pub fn phase(&self, number: u32) -> Option<&Phase> {
        self.phases.iter().find(|p| p.number == number)
    }
}

/// A new run id: `r-<YYYYMMDD>-<6 hex>`, mixing the clock's nanoseconds, the pid and a counter
/// so two runs made in the same instant still differ (the store also refuses to overwrite).
pub fn new_run_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let now = Utc::now();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let mix = (now.timestamp_subsec_nanos()
        ^ std::process::id().rotate_left(11)
        ^ seq.wrapping_mul(0x9e37_79b9))
        & 0xff_ffff;
    format!("r-{}-{mix:06x}", now.format("%Y%m%d"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_have_the_documented_shape_and_differ() {
        let a = new_run_id();
        let b = new_run_id();
        assert_ne!(a, b);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[0], "r");
        assert_eq!(parts[1].len(), 8);
        assert!(parts[1].chars().all(|c| c.is_ascii_digit()));
        assert_eq!(parts[2].len(), 6);
        assert!(parts[2].chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn phase_times_are_stamped_by_the_moves() {
        let mut p = Phase::from_plan(
            1,
            PlannedPhase {
                title: "t".into(),
                description: "d".into(),
                acceptance: vec![],
            },
        );
        assert!(p.apply("r", PhaseTrigger::Approve).is_err());
        assert!(p.apply("r", PhaseTrigger::Start).is_ok());
        let started = p.started;
        assert!(started.is_some());
        assert!(p.apply("r", PhaseTrigger::Retry).is_ok());
        assert!(p.apply("r", PhaseTrigger::Start).is_ok());
        assert_eq!(p.started, started, "the first start is kept");
        assert!(p.finished.is_none());
        assert!(p.apply("r", PhaseTrigger::Approve).is_ok());
        assert!(p.finished.is_some());
        assert_eq!(p.status, PhaseStatus::Completed);
    }
}
