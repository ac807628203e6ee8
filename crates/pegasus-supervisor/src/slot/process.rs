//! The worker process as a slot sees it, wherever it runs: its pid, how to wait for its end and
//! how to end it. A local worker is pegasusd's child in its own process group; a remote one
//! (DESIGN.md §14) was started elsewhere by a launcher and is judged by its link alone: the link's
//! end is its end, and ending it means closing the link (the worker exits when its link is
//! gone) and killing what the launcher started here. The launcher command's own exit is not a
//! crash.

use crate::spawn;
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

pub(crate) enum WorkerProcess {
    /// A child of pegasusd, leading its own process group.
    Local { child: Child, pid: u32 },
    /// A worker on another host.
    Remote {
        /// The worker's own pid on its host (as it said in its hello), for `status`.
        pid: u32,
        /// What started it here (`ssh ...`, `ip netns exec ...`), in its own process group.
        launched: Option<Child>,
        /// Cancelled when the link ends (read side closed) or when the slot ends it.
        gone: CancellationToken,
    },
}

impl WorkerProcess {
    pub fn pid(&self) -> u32 {
        match self {
            WorkerProcess::Local { pid, .. } | WorkerProcess::Remote { pid, .. } => *pid,
        }
    }

    /// Whether the worker runs on another host.
    pub fn is_remote(&self) -> bool {
        matches!(self, WorkerProcess::Remote { .. })
    }

    /// Waits for the worker's end; says how it ended (`exit code 3`, `signal 9 (SIGKILL)`,
    /// `link lost`).
    pub async fn wait(&mut self) -> String {
        match self {
            WorkerProcess::Local { child, .. } => match child.wait().await {
                Ok(status) => spawn::describe_exit(status),
                Err(e) => e.to_string(),
            },
            WorkerProcess::Remote { gone, .. } => {
                gone.cancelled().await;
                "link lost".to_string()
            }
        }
    }

    /// Ends the worker: a local one's whole process group is killed; a remote one's link is
    /// closed and what its launcher started here is killed.
    pub fn kill(&self) {
        match self {
            WorkerProcess::Local { pid, .. } => spawn::kill_group(*pid),
            WorkerProcess::Remote { launched, gone, .. } => {
                gone.cancel();
                kill_launched(launched);
            }
        }
    }
}

/// Kills the group of a launcher command that still runs.
fn kill_launched(launched: &Option<Child>) {
    if let Some(pid) = launched.as_ref().and_then(Child::id) {
        spawn::kill_group(pid);
    }
}

impl Drop for WorkerProcess {
    /// A launcher command outlives nothing of ours: whatever it still runs here goes with the
    /// slot's hold on the worker.
    fn drop(&mut self) {
        if let WorkerProcess::Remote { launched, .. } = self {
            kill_launched(launched);
        }
    }
}
