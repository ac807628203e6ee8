//! The one error type of this crate.
//!
//! Only failures the agent cannot turn into something the model or the task log can carry end
//! up here: the session or the task log could not be written. A model that fails, a tool that
//! fails or a guard that trips is a [`crate::StopKind`] or a tool error instead, because the
//! agent must keep serving its project after them.

use pegasus_store::StoreError;

/// A failure that stops the agent from keeping its files straight.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Reading or writing a Pegasus file (session, task log, a folder of the project) failed;
    /// the message names it.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The task store refused or failed (a lost compare-and-set, an unreadable task file).
    #[error("{0}")]
    Tasks(String),
    /// [`crate::Agent::run`] was called with no message queued: enqueue one first.
    #[error("nothing to run: enqueue a message before calling run")]
    NothingQueued,
    /// A blocking file operation running on tokio's blocking pool did not finish (it panicked
    /// or the runtime is shutting down).
    #[error("a background file operation failed: {0}")]
    Background(String),
}

impl From<pegasus_fs::BlockingError> for AgentError {
    fn from(e: pegasus_fs::BlockingError) -> AgentError {
        AgentError::Background(e.to_string())
    }
}

impl AgentError {
    /// Wraps a task store error, for `map_err`.
    pub fn tasks(e: pegasus_tasks::TaskError) -> Self {
        AgentError::Tasks(e.to_string())
    }
}
