//! The lines of `runs/<id>.events.jsonl`: one tagged record per step, appended and synced as it
//! happens, so the history of a run (every attempt, verdict and request) survives even though
//! the run file only holds its latest state.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::run::RunRequest;

/// One line of the log: when, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    /// When it happened.
    pub ts: DateTime<Utc>,
    /// What happened; flattened so a line reads `{"ts":..,"event":"phase_started",..}`.
    #[serde(flatten)]
    pub event: RunEvent,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run was created.
    Created {
        /// The brief.
        brief: String,
        /// Attempts per phase.
        max_attempts: u32,
    },
    /// The plan was read.
    Planned {
        /// How many phases it has.
        phases: u32,
    },
    /// An attempt began (`restarted`: the same attempt again, after a crash or a pause).
    PhaseStarted {
        /// Phase number.
        phase: u32,
        /// Attempt number.
        attempt: u32,
        /// The task id its model calls carry.
        task: String,
        /// Same attempt again rather than a new one.
        restarted: bool,
    },
    /// The executor returned output.
    Executed {
        /// Phase number.
        phase: u32,
        /// Attempt number.
        attempt: u32,
        /// Length of the output in characters.
        chars: usize,
    },
    /// The summary was made (`fallback`: the summary call failed, the output's start was used).
    Summarised {
        /// Phase number.
        phase: u32,
        /// Attempt number.
        attempt: u32,
        /// The summary call failed.
        fallback: bool,
    },
    /// The reviewer answered.
    Reviewed {
        /// Phase number.
        phase: u32,
        /// Attempt number.
        attempt: u32,
        /// The verdict.
        approved: bool,
        /// The rejection reason, if rejected.
        reason: Option<String>,
    },
    /// The phase was approved.
    PhaseCompleted {
        /// Phase number.
        phase: u32,
        /// Its cost over all attempts.
        cost_usd: f64,
    },
    /// The phase was rejected and will be tried again.
    PhaseRetry {
        /// Phase number.
        phase: u32,
        /// The attempt that was rejected.
        attempt: u32,
        /// Why.
        feedback: String,
    },
    /// The phase failed.
    PhaseFailed {
        /// Phase number.
        phase: u32,
        /// Why.
        error: String,
    },
    /// An outsider asked for a cancel or pause.
    Requested {
        /// What.
        request: RunRequest,
    },
    /// The run paused.
    Paused {
        /// Why (a request, the daily limit, a budget refusal).
        reason: String,
    },
    /// `run resume`.
    Resumed,
    /// The run was cancelled.
    Cancelled,
    /// Every phase was approved.
    Completed {
        /// Total cost.
        cost_usd: f64,
    },
    /// The run failed.
    Failed {
        /// Why.
        error: String,
    },
}
