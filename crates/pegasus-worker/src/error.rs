//! The one error type of the worker crate.

/// Why the worker stops before or outside a requested shutdown.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("usage: project-worker <project-dir> (the spawn token comes on stdin); it is started by pegasusd, not by hand")]
    Usage,
    #[error("{0} is not inside a Pegasus home (expected <home>/projects/<name>)")]
    NotAProject(String),
    #[error("cannot reach pegasusd at {path}: {source}")]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the spawn token from stdin: {0}")]
    Token(std::io::Error),
    #[error(transparent)]
    Proto(#[from] pegasus_proto::ProtoError),
    #[error(transparent)]
    Store(#[from] pegasus_store::StoreError),
    #[error("pegasusd did not answer the hello: {0}")]
    Handshake(String),
    #[error(transparent)]
    Agent(#[from] pegasus_agent::AgentError),
    #[error("{0}")]
    Config(String),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Lock(#[from] pegasus_store::worker_lock::LockError),
    #[error("cannot reach pegasusd over its remote link: {0}")]
    Link(String),
}
