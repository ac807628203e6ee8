//! The one sweeper of escaped processes in pegasusd. pegasusd is a child subreaper, so what a
//! dead worker's commands had orphaned is re-parented to it; finding those means scanning
//! `/proc`, which costs milliseconds with a thousand workers. So slots do not scan themselves:
//! after a worker exits they ask for a sweep, and this task runs at most one scan per
//! [`COALESCE`] however many workers ended (a restart or a stop of a thousand is one or two
//! scans, not a thousand). The daemon sweeps once more after its last worker stopped.

use std::{sync::Arc, time::Duration};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long requests are gathered into one scan.
const COALESCE: Duration = Duration::from_millis(200);

/// Requests for a sweep.
#[derive(Default)]
pub(crate) struct Sweeper {
    wanted: Notify,
}

impl Sweeper {
    /// Asks for a sweep soon; never blocks.
    pub fn request(&self) {
        self.wanted.notify_one();
    }
}

/// Kills and reaps adopted escapees off the async threads; logs what it killed.
pub(crate) async fn sweep_now() {
    match pegasus_fs::blocking(pegasus_sandbox::adopted::sweep_adopted).await {
        Ok(0) | Err(_) => {}
        Ok(n) => tracing::info!(
            killed = n,
            "killed processes that escaped the commands of ended workers"
        ),
    }
}

/// The sweeper task: runs until the daemon stops.
pub(crate) async fn run(sweeper: Arc<Sweeper>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = sweeper.wanted.notified() => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(COALESCE) => {}
        }
        sweep_now().await;
    }
}
