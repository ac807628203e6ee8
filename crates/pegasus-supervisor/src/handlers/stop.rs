//! `pegasusctl stop`: graceful daemon shutdown. The answer goes out first; the daemon's main
//! task then stops every worker, drains the MainAgent and open connections, and exits.

use pegasus_store::Home;
use tokio_util::sync::CancellationToken;

pub(crate) fn stop(home: &Home, shutdown: &CancellationToken) -> String {
    tracing::info!("stop requested over the control socket");
    mark_stopping(home);
    shutdown.cancel();
    "pegasusd is stopping".into()
}

/// Says in the pid file that this daemon is stopping, before anything stops: from then on
/// `pegasusctl status` and a second `pegasusd` say "stopping" until the lock is released.
pub(crate) fn mark_stopping(home: &Home) {
    if let Err(e) = pegasus_store::daemon_lock::mark_stopping(&home.pid_file(), std::process::id())
    {
        tracing::warn!("cannot mark the pid file as stopping: {e}");
    }
}
