//! The one error type of this crate.
//!
//! These are failures of the *caller's* request or of the run's files. What goes wrong inside a
//! run (a rejected phase, a failed model call, an executor error) is not an error here: it is
//! recorded on the run (`status` failed or paused, `error` set) and the run is returned, because
//! the user reads it with `run status` long after the call that drove it.

use pegasus_store::StoreError;

use crate::status::{PhaseStatus, PhaseTrigger, RunStatus, RunTrigger};

/// Why a run could not be created, read, changed or driven.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Reading or writing a file failed; the message names it.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No `runs/<id>.json` in this project.
    #[error("run {0} not found: `run status NAME` shows the project's latest run")]
    NotFound(String),
    /// A run file that is not a run (hand-edited or from another version).
    #[error("{path}: not a readable run file ({message}); fix it by hand or move it out of runs/")]
    Corrupt {
        /// The file, as text for the message.
        path: String,
        /// What the JSON parser said.
        message: String,
    },
    /// A verb that does not apply to the run as it is (cancel a completed run, resume a running
    /// one); the message says what is possible instead.
    #[error("{0}")]
    Refused(String),
    /// Bad input from the caller (an empty brief, zero attempts).
    #[error("{0}")]
    Invalid(String),
    /// The engine asked its state machine for a move the table forbids: a bug, reported rather
    /// than papered over.
    #[error("run {id} cannot go from {from} on {trigger:?}: this is a bug in pegasus-runs, please report it")]
    Transition {
        /// The run.
        id: String,
        /// The status it was in.
        from: RunStatus,
        /// The refused trigger.
        trigger: RunTrigger,
    },
    /// The same, for a phase.
    #[error("run {id}: phase {phase} cannot go from {from} on {trigger:?}: this is a bug in pegasus-runs, please report it")]
    PhaseTransition {
        /// The run.
        id: String,
        /// The phase number.
        phase: u32,
        /// The status it was in.
        from: PhaseStatus,
        /// The refused trigger.
        trigger: PhaseTrigger,
    },
    /// A blocking file operation on tokio's blocking pool did not finish (it panicked or the
    /// runtime is shutting down).
    #[error("a background file operation failed: {0}")]
    Background(String),
}

impl From<pegasus_fs::BlockingError> for RunError {
    fn from(e: pegasus_fs::BlockingError) -> RunError {
        RunError::Background(e.to_string())
    }
}
