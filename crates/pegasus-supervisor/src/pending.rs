//! The spawns waiting for their worker's hello, keyed by their one-time token: a slot
//! announces each one, and the worker sockets (this machine's and `workers.listen`) claim it
//! when its worker says hello.

use crate::{slot::WorkerConn, supervisor::lock};
use std::{collections::HashMap, sync::Mutex};
use tokio::sync::oneshot;

/// A spawn whose worker has not said hello yet.
pub(crate) struct PendingSpawn {
    pub project: String,
    pub tx: oneshot::Sender<WorkerConn>,
    /// A local worker's pid, once spawned: the only process that may say this spawn's hello
    /// on the worker socket. `None` for a launch elsewhere (it comes over TLS).
    pub pid: Option<u32>,
}

/// Every spawn waiting for its hello.
#[derive(Default)]
pub(crate) struct PendingSpawns {
    by_token: Mutex<HashMap<String, PendingSpawn>>,
}

impl PendingSpawns {
    /// Announces a spawn; the accept loop completes the receiver when its worker says hello.
    pub fn register(&self, token: &str, project: &str) -> oneshot::Receiver<WorkerConn> {
        let (tx, rx) = oneshot::channel();
        lock(&self.by_token).insert(
            token.to_string(),
            PendingSpawn {
                project: project.to_string(),
                tx,
                pid: None,
            },
        );
        rx
    }

    /// Records the pid of a local spawn's worker, before it is handed its token: from then on
    /// the worker socket lets that process (and only it) say the spawn's hello.
    pub fn spawned(&self, token: &str, pid: u32) {
        if let Some(p) = lock(&self.by_token).get_mut(token) {
            p.pid = Some(pid);
        }
    }

    /// Whether `pid` is a worker pegasusd spawned that has not said hello yet: the only peers
    /// the worker socket serves.
    pub fn awaits_hello_from(&self, pid: u32) -> bool {
        lock(&self.by_token).values().any(|p| p.pid == Some(pid))
    }

    /// Forgets a spawn that will never say hello (it died or timed out).
    pub fn cancel(&self, token: &str) {
        lock(&self.by_token).remove(token);
    }

    /// Claims a spawn by token; each token works once.
    pub fn take(&self, token: &str) -> Option<PendingSpawn> {
        lock(&self.by_token).remove(token)
    }
}
