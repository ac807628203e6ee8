//! The one error type of the worker crate.

/// Why the worker stops before or outside a requested shutdown.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The command line is not one project folder.
    #[error("usage: project-worker <project-dir> (the spawn token comes on stdin); it is started by pegasusd, not by hand")]
    Usage,
    /// The folder given is not `<home>/projects/<name>` (it holds the path as given).
    #[error("{0} is not inside a Pegasus home (expected <home>/projects/<name>)")]
    NotAProject(String),
    /// pegasusd's worker socket could not be reached.
    #[error("cannot reach pegasusd at {path}: {source}")]
    Connect {
        /// The socket's path.
        path: String,
        /// Why the connection failed.
        #[source]
        source: std::io::Error,
    },
    /// The spawn token could not be read from stdin.
    #[error("cannot read the spawn token from stdin: {0}")]
    Token(std::io::Error),
    /// The link to pegasusd broke or carried a bad frame or protocol version.
    #[error(transparent)]
    Proto(#[from] pegasus_proto::ProtoError),
    /// The project's files in the home could not be read or written.
    #[error(transparent)]
    Store(#[from] pegasus_store::StoreError),
    /// pegasusd did not send `Init` after the hello (closed, timed out, or sent something else).
    #[error("pegasusd did not answer the hello: {0}")]
    Handshake(String),
    /// The project agent could not be opened on the project's files.
    #[error(transparent)]
    Agent(#[from] pegasus_agent::AgentError),
    /// What pegasusd sent or the project holds cannot be used (the line says which and why).
    #[error("{0}")]
    Config(String),
    /// The async runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    /// The project's worker lock stayed held by another worker, or could not be taken.
    #[error(transparent)]
    Lock(#[from] pegasus_store::worker_lock::LockError),
    /// On another host: the launch's bootstrap values are unusable or the TLS link failed.
    #[error("cannot reach pegasusd over its remote link: {0}")]
    Link(String),
}
