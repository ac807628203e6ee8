//! The one error type of the supervisor crate.

use pegasus_proto::ctl::ErrorKind;
use pegasus_roles::RoleError;
use pegasus_runs::RunError;
use pegasus_store::StoreError;
use pegasus_tasks::TaskError;
use std::path::PathBuf;

/// Why pegasusd cannot start or go on. Each message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Another pegasusd holds this home's pid lock.
    #[error("pegasusd is already running on {home} (pid {pid}); stop it with `pegasusctl --home {home} stop`")]
    AlreadyRunning {
        /// The home's root folder, as the user would pass it to `--home`.
        home: String,
        /// The pid written in the pid file, or `unknown` when it cannot be read.
        pid: String,
    },
    /// The pegasusd holding this home's pid lock wrote `stopping` into it (finishing its workers).
    #[error("pegasusd (pid {pid}) is stopping on {home}: start it again once it has exited (`pegasusctl --home {home} stop` waits for that)")]
    Stopping {
        /// The home's root folder, as the user would pass it to `--home`.
        home: String,
        /// The pid written in the pid file, or `unknown` when it cannot be read.
        pid: String,
    },
    /// The LLM gateway could not be built from the config.
    #[error("cannot start the LLM gateway: {0}")]
    Llm(pegasus_proto::llm::LlmError),
    /// The home's store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A system call at start failed (home folder, pid file, socket, signals, runtime).
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done, as the start of the line (`cannot open pid file`).
        what: &'static str,
        /// The file or folder it was done to (the home's root for the signals and runtime).
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// No project-worker binary at the path pegasusd would start workers from.
    #[error("cannot find the project-worker binary at {0}: install it beside pegasusd or set PEGASUS_WORKER_BIN")]
    WorkerBinary(PathBuf),
    /// Remote workers cannot be served as configured (the line names the key).
    #[error("{0}")]
    Remote(String),
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
    /// Something else the request names does not exist (an approval request); the line says
    /// where to look.
    #[error("{0}")]
    NotFound(String),
    /// The request is understood but not allowed now (wrong state, bad argument, stopping).
    #[error("{0}")]
    Refused(String),
    /// A model call was refused by a budget.
    #[error("{0}")]
    BudgetExceeded(pegasus_proto::llm::LlmError),
    /// Something the request needed is not running (a worker, the MainAgent) or went away.
    #[error("{0}")]
    Unavailable(String),
    /// pegasusd failed at its own part (a handler that panicked); its log says more.
    #[error("{0}")]
    Internal(String),
    /// An id the request carries was used before for something else (a send's client id
    /// with another text).
    #[error("{0}")]
    Conflict(String),
    /// The store refused or failed the request's read or write.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The task store refused or failed the request (unknown task, wrong state, bad field).
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The role the request names is missing, invalid or cannot be used as asked.
    #[error(transparent)]
    Role(#[from] RoleError),
    /// The run store refused or failed the request (unknown run, wrong state).
    #[error(transparent)]
    Run(#[from] RunError),
}

impl RequestError {
    /// What kind of refusal this is, for the client to act on (the text is for people).
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            RequestError::ProjectNotFound(_) | RequestError::NotFound(_) => ErrorKind::NotFound,
            RequestError::Refused(_) => ErrorKind::Refused,
            RequestError::BudgetExceeded(_) => ErrorKind::BudgetExceeded,
            RequestError::Unavailable(_) => ErrorKind::Unavailable,
            RequestError::Internal(_) => ErrorKind::Internal,
            RequestError::Conflict(_) => ErrorKind::Conflict,
            RequestError::Store(e) => store_kind(e),
            RequestError::Task(e) => match e {
                TaskError::NotFound(_) => ErrorKind::NotFound,
                TaskError::Invalid(_) => ErrorKind::Invalid,
                TaskError::InvalidTransition { .. }
                | TaskError::Conflict { .. }
                | TaskError::NotFrozen(_)
                | TaskError::Frozen(_)
                | TaskError::Waiting { .. } => ErrorKind::Refused,
                TaskError::Store(e) => store_kind(e),
                TaskError::Corrupt { .. } | TaskError::Io { .. } => ErrorKind::Internal,
            },
            RequestError::Role(e) => match e {
                RoleError::NotFound(_) => ErrorKind::NotFound,
                RoleError::UndeclaredPlaceholder { .. }
                | RoleError::MissingVariable { .. }
                | RoleError::UnknownVariable { .. }
                | RoleError::BadId(_)
                | RoleError::ToolNotAllowed { .. }
                | RoleError::Assignment { .. } => ErrorKind::Invalid,
                RoleError::Io { .. } | RoleError::Parse { .. } => ErrorKind::Internal,
            },
            RequestError::Run(e) => match e {
                RunError::NotFound(_) => ErrorKind::NotFound,
                RunError::Invalid(_) => ErrorKind::Invalid,
                RunError::Refused(_) => ErrorKind::Refused,
                RunError::Store(e) => store_kind(e),
                RunError::Corrupt { .. }
                | RunError::Transition { .. }
                | RunError::PhaseTransition { .. }
                | RunError::Background(_) => ErrorKind::Internal,
            },
        }
    }

    pub(crate) fn refused(line: impl Into<String>) -> Self {
        RequestError::Refused(line.into())
    }

    pub(crate) fn unavailable(line: impl Into<String>) -> Self {
        RequestError::Unavailable(line.into())
    }

    /// A handler's work on the blocking pool did not finish (it panicked).
    pub(crate) fn failed_inside(what: &str, e: pegasus_fs::BlockingError) -> Self {
        RequestError::Internal(format!("{what} failed inside pegasusd ({e}); see its log"))
    }
}

/// The kind of a store error met while serving a request.
fn store_kind(e: &StoreError) -> ErrorKind {
    match e {
        StoreError::NotFound(_) => ErrorKind::NotFound,
        StoreError::Invalid(_) => ErrorKind::Invalid,
        StoreError::Transition { .. } | StoreError::Exists(_) => ErrorKind::Refused,
        StoreError::Io { .. } | StoreError::Parse { .. } => ErrorKind::Internal,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_classed_by_its_type_never_its_wording() {
        let cases: Vec<(RequestError, ErrorKind)> = vec![
            (
                RequestError::ProjectNotFound("p".into()),
                ErrorKind::NotFound,
            ),
            (StoreError::NotFound("p".into()).into(), ErrorKind::NotFound),
            (
                TaskError::NotFound("t-1".into()).into(),
                ErrorKind::NotFound,
            ),
            (
                RoleError::NotFound("coder".into()).into(),
                ErrorKind::NotFound,
            ),
            (RunError::NotFound("r-1".into()).into(), ErrorKind::NotFound),
            // Wording that once decided a 404 no longer does.
            (
                RequestError::refused("project x not found"),
                ErrorKind::Refused,
            ),
            (StoreError::Exists("p".into()).into(), ErrorKind::Refused),
            (
                TaskError::Store(StoreError::NotFound("p".into())).into(),
                ErrorKind::NotFound,
            ),
            (
                TaskError::Invalid("bad id".into()).into(),
                ErrorKind::Invalid,
            ),
            (
                RoleError::BadId(pegasus_store::project::BadRoleId("X".into())).into(),
                ErrorKind::Invalid,
            ),
            (
                RunError::Refused("running".into()).into(),
                ErrorKind::Refused,
            ),
            (
                pegasus_proto::llm::LlmError::BudgetExceeded {
                    scope: "daily".into(),
                    limit: 1.0,
                    spent: 2.0,
                }
                .into(),
                ErrorKind::BudgetExceeded,
            ),
            (
                RequestError::unavailable("no worker"),
                ErrorKind::Unavailable,
            ),
            (
                StoreError::Io {
                    path: "/x".into(),
                    source: std::io::ErrorKind::PermissionDenied.into(),
                }
                .into(),
                ErrorKind::Internal,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error}");
        }
    }
}
