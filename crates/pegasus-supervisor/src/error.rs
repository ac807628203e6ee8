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
