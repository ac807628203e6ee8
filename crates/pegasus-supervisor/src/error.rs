//! The one error type of the supervisor crate.

use std::path::PathBuf;

/// Why pegasusd cannot start or go on. Each message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("pegasusd is already running on {home} (pid {pid}); stop it with `pegasusctl --home {home} stop`")]
    AlreadyRunning { home: String, pid: String },
    #[error("cannot start the LLM gateway: {0}")]
    Llm(pegasus_proto::llm::LlmError),
    #[error(transparent)]
    Store(#[from] pegasus_store::StoreError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot find the project-worker binary at {0}: install it beside pegasusd or set PEGASUS_WORKER_BIN")]
    WorkerBinary(PathBuf),
}

impl SupervisorError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SupervisorError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// Why one control request was refused or failed. Callers match on the kind; the one line a
/// user reads is made from it only at the edge (the control connection, later the dashboard's
/// JSON error), and each line says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No project of that name.
    #[error("project {0} not found: see `pegasusctl project list`")]
    ProjectNotFound(String),
    /// The request is understood but not allowed now (wrong state, bad argument, stopping).
    #[error("{0}")]
    Refused(String),
    /// A model call was refused by a budget.
    #[error("{0}")]
    BudgetExceeded(pegasus_proto::llm::LlmError),
    /// Something the request needed is not running (a worker, the MainAgent) or went away.
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(#[from] pegasus_store::StoreError),
    #[error(transparent)]
    Task(#[from] pegasus_tasks::TaskError),
    #[error(transparent)]
    Role(#[from] pegasus_roles::RoleError),
    #[error(transparent)]
    Run(#[from] pegasus_runs::RunError),
}

impl RequestError {
    pub(crate) fn refused(line: impl Into<String>) -> Self {
        RequestError::Refused(line.into())
    }

    pub(crate) fn unavailable(line: impl Into<String>) -> Self {
        RequestError::Unavailable(line.into())
    }
}

impl From<pegasus_proto::llm::LlmError> for RequestError {
    fn from(e: pegasus_proto::llm::LlmError) -> Self {
        match e {
            e @ pegasus_proto::llm::LlmError::BudgetExceeded { .. } => {
                RequestError::BudgetExceeded(e)
            }
            e => RequestError::Unavailable(e.to_string()),
        }
    }
}
