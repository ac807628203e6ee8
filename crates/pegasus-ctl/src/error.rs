//! The one error type of the client, and its exit codes.

/// A failed command. Each message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Exit code 3.
    #[error("pegasusd is not running on {home}: start it with `pegasusd --home {home}`")]
    NotRunning {
        /// The home directory, as shown to the user.
        home: String,
    },
    /// Exit code 1: a pegasusd holds the home but does not answer on its socket: it is stopping
    /// (its workers finish) or still starting. `status`, `stop` and a second `pegasusd` agree.
    #[error("{}", not_serving(.home, .pid, *.stopping))]
    NotServing {
        /// The home directory, as shown to the user.
        home: String,
        /// The holding pegasusd's pid from its pid file, or `unknown`.
        pid: String,
        /// Whether its pid file says it is stopping (else it is starting).
        stopping: bool,
    },
    /// Exit code 1: the daemon refused, or something failed.
    #[error("{0}")]
    Failed(String),
}

fn not_serving(home: &str, pid: &str, stopping: bool) -> String {
    if stopping {
        format!("pegasusd (pid {pid}) is stopping on {home}: its workers are finishing; wait for it to exit (`pegasusctl --home {home} stop` waits), then start it with `pegasusd --home {home}`")
    } else {
        format!("pegasusd (pid {pid}) is starting on {home}: try again in a moment")
    }
}

impl CtlError {
    /// A failure whose message is `e`'s, for `map_err`.
    pub fn failed(e: impl std::fmt::Display) -> Self {
        CtlError::Failed(e.to_string())
    }

    /// The process exit code for this error: 3 when no daemon runs, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::NotRunning { .. } => 3,
            CtlError::Failed(_) | CtlError::NotServing { .. } => 1,
        }
    }
}

impl From<pegasus_store::StoreError> for CtlError {
    fn from(e: pegasus_store::StoreError) -> Self {
        CtlError::Failed(e.to_string())
    }
}

impl From<pegasus_proto::ProtoError> for CtlError {
    fn from(e: pegasus_proto::ProtoError) -> Self {
        CtlError::Failed(format!(
            "lost the connection to pegasusd ({e}); check `pegasusctl status`"
        ))
    }
}
