//! The two state machines of a run: the run's status and each phase's status.
//!
//! Every status change in this crate goes through [`RunStatus::next`] or [`PhaseStatus::next`],
//! so the tables below are the whole truth about what can follow what; the tests check them
//! cell by cell. Two rules matter most: a finished run (completed, failed, cancelled) never
//! moves again, and an `executing` phase always has a way out that is not `executing`
//! (approve, retry, fail, interrupt), so nothing is ever left running after an error.
//!
//! Run table (`-` = refused):
//!
//! | from \ trigger | Planned   | Pause  | Cancel    | Resume{planned: true/false} | Complete  | Fail   |
//! |----------------|-----------|--------|-----------|-----------------------------|-----------|--------|
//! | planning       | executing | paused | cancelled | -                           | -         | failed |
//! | executing      | -         | paused | cancelled | -                           | completed | failed |
//! | paused         | -         | -      | cancelled | executing / planning        | -         | -      |
//! | completed      | -         | -      | -         | -                           | -         | -      |
//! | failed         | -         | -      | -         | -                           | -         | -      |
//! | cancelled      | -         | -      | -         | -                           | -         | -      |
//!
//! Phase table:
//!
//! | from \ trigger | Start     | Approve   | Retry   | Fail   | Interrupt |
//! |----------------|-----------|-----------|---------|--------|-----------|
//! | pending        | executing | -         | -       | -      | -         |
//! | executing      | -         | completed | pending | failed | pending   |
//! | completed      | -         | -         | -       | -      | -         |
//! | failed         | -         | -         | -       | -      | -         |

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a run is. `planning` and `executing` are the live ones: a run found in either after a
/// restart was interrupted and is driven again ([`crate::RunStore::unfinished`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The brief is being turned into phases (or will be, when the run has none yet).
    Planning,
    /// Phases are being worked through.
    Executing,
    /// Stopped on request, at the daily limit or on a budget refusal; `run resume` continues it.
    Paused,
    /// Every phase was approved.
    Completed,
    /// A phase failed (out of attempts or an error), or the plan could not be made.
    Failed,
    /// Cancelled on request.
    Cancelled,
}

/// What happens to a run; the input of [`RunStatus::next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunTrigger {
    /// The plan was read and its phases stored.
    Planned,
    /// Pause: asked from outside, the daily limit, or a budget refusal.
    Pause,
    /// Cancel: asked from outside.
    Cancel,
    /// `run resume`; `planned` says whether the run already has phases (if not, it plans again).
    Resume {
        /// The run has its phases.
        planned: bool,
    },
    /// The last phase was approved.
    Complete,
    /// A phase or the plan failed.
    Fail,
}

impl RunStatus {
    /// Every status, for exhaustive tests and listings.
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Planning,
        RunStatus::Executing,
        RunStatus::Paused,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// The status after `trigger`, or `None` when the table refuses it.
    pub fn next(self, trigger: RunTrigger) -> Option<RunStatus> {
        use RunStatus::*;
        use RunTrigger as T;
        match (self, trigger) {
            (Planning, T::Planned) => Some(Executing),
            (Planning | Executing, T::Pause) => Some(Paused),
            (Planning | Executing | Paused, T::Cancel) => Some(Cancelled),
            (Paused, T::Resume { planned: true }) => Some(Executing),
            (Paused, T::Resume { planned: false }) => Some(Planning),
            (Executing, T::Complete) => Some(Completed),
            (Planning | Executing, T::Fail) => Some(Failed),
            _ => None,
        }
    }

    /// Completed, failed or cancelled: the run will never move again.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }

    /// Planning or executing: some process is (or, after a crash, should be) driving it.
    pub fn is_live(self) -> bool {
        matches!(self, RunStatus::Planning | RunStatus::Executing)
    }

    /// The word used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Planning => "planning",
            RunStatus::Executing => "executing",
            RunStatus::Paused => "paused",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one phase is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseStatus {
    /// Not started, or waiting for its next attempt.
    Pending,
    /// An attempt is under way (or was, when the process died: it is then restarted).
    Executing,
    /// Approved by the reviewer.
    Completed,
    /// Out of attempts, or its work failed.
    Failed,
}

/// What happens to a phase; the input of [`PhaseStatus::next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseTrigger {
    /// An attempt begins.
    Start,
    /// The reviewer approved.
    Approve,
    /// The reviewer rejected and attempts are left.
    Retry,
    /// Out of attempts, or an error.
    Fail,
    /// The run stopped (pause, cancel, budget) before the attempt got a verdict; the attempt
    /// does not count.
    Interrupt,
}

impl PhaseStatus {
    /// Every status, for exhaustive tests.
    pub const ALL: [PhaseStatus; 4] = [
        PhaseStatus::Pending,
        PhaseStatus::Executing,
        PhaseStatus::Completed,
        PhaseStatus::Failed,
    ];

    /// The status after `trigger`, or `None` when the table refuses it.
    pub fn next(self, trigger: PhaseTrigger) -> Option<PhaseStatus> {
        use PhaseStatus::*;
        use PhaseTrigger as T;
        match (self, trigger) {
            (Pending, T::Start) => Some(Executing),
            (Executing, T::Approve) => Some(Completed),
            (Executing, T::Retry | T::Interrupt) => Some(Pending),
            (Executing, T::Fail) => Some(Failed),
            _ => None,
        }
    }

    /// The word used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseStatus::Pending => "pending",
            PhaseStatus::Executing => "executing",
            PhaseStatus::Completed => "completed",
            PhaseStatus::Failed => "failed",
        }
    }
}

impl fmt::Display for PhaseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN_TRIGGERS: [RunTrigger; 7] = [
        RunTrigger::Planned,
        RunTrigger::Pause,
        RunTrigger::Cancel,
        RunTrigger::Resume { planned: true },
        RunTrigger::Resume { planned: false },
        RunTrigger::Complete,
        RunTrigger::Fail,
    ];

    const PHASE_TRIGGERS: [PhaseTrigger; 5] = [
        PhaseTrigger::Start,
        PhaseTrigger::Approve,
        PhaseTrigger::Retry,
        PhaseTrigger::Fail,
        PhaseTrigger::Interrupt,
    ];

    /// Every state × every trigger moves exactly as `allowed` says, and nowhere else.
    fn assert_table<S, T>(
        states: impl IntoIterator<Item = S>,
        triggers: impl IntoIterator<Item = T> + Clone,
        allowed: &[(S, T, S)],
        next: fn(S, T) -> Option<S>,
    ) where
        S: Copy + PartialEq + std::fmt::Display + std::fmt::Debug,
        T: Copy + PartialEq + std::fmt::Debug,
    {
        for from in states {
            for trigger in triggers.clone() {
                let expected = allowed
                    .iter()
                    .find(|(f, t, _)| *f == from && *t == trigger)
                    .map(|(_, _, to)| *to);
                assert_eq!(next(from, trigger), expected, "{from} on {trigger:?}");
            }
        }
    }

    #[test]
    fn run_table_is_exactly_the_documented_one() {
        use RunStatus::*;
        use RunTrigger as T;
        let allowed: &[(RunStatus, RunTrigger, RunStatus)] = &[
            (Planning, T::Planned, Executing),
            (Planning, T::Pause, Paused),
            (Planning, T::Cancel, Cancelled),
            (Planning, T::Fail, Failed),
            (Executing, T::Pause, Paused),
            (Executing, T::Cancel, Cancelled),
            (Executing, T::Complete, Completed),
            (Executing, T::Fail, Failed),
            (Paused, T::Cancel, Cancelled),
            (Paused, T::Resume { planned: true }, Executing),
            (Paused, T::Resume { planned: false }, Planning),
        ];
        assert_table(RunStatus::ALL, RUN_TRIGGERS, allowed, RunStatus::next);
    }

    #[test]
    fn finished_runs_never_move_and_live_runs_can_always_stop() {
        for from in RunStatus::ALL {
            let moves = RUN_TRIGGERS.iter().filter_map(|t| from.next(*t)).count();
            assert_eq!(from.is_finished(), moves == 0, "{from}");
            if from.is_live() {
                assert_eq!(from.next(RunTrigger::Fail), Some(RunStatus::Failed));
                assert_eq!(from.next(RunTrigger::Pause), Some(RunStatus::Paused));
                assert_eq!(from.next(RunTrigger::Cancel), Some(RunStatus::Cancelled));
            }
        }
    }

    #[test]
    fn phase_table_is_exactly_the_documented_one() {
        use PhaseStatus::*;
        use PhaseTrigger as T;
        let allowed: &[(PhaseStatus, PhaseTrigger, PhaseStatus)] = &[
            (Pending, T::Start, Executing),
            (Executing, T::Approve, Completed),
            (Executing, T::Retry, Pending),
            (Executing, T::Fail, Failed),
            (Executing, T::Interrupt, Pending),
        ];
        assert_table(PhaseStatus::ALL, PHASE_TRIGGERS, allowed, PhaseStatus::next);
    }

    #[test]
    fn executing_phase_always_has_a_way_out() {
        for t in PHASE_TRIGGERS {
            assert_ne!(
                PhaseStatus::Executing.next(t),
                Some(PhaseStatus::Executing),
                "{t:?}"
            );
        }
    }

    #[test]
    fn statuses_serialize_as_snake_case_words() {
        for s in RunStatus::ALL {
            let json = serde_json::to_string(&s).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
        for s in PhaseStatus::ALL {
            let json = serde_json::to_string(&s).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
    }
}
