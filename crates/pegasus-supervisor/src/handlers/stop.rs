//! `pegasusctl stop`: graceful daemon shutdown. The answer goes out first; the daemon's main
//! task then stops every worker, drains the MainAgent and open connections, and exits.

use crate::supervisor::Supervisor;

pub(crate) fn stop(sup: &Supervisor) -> String {
    tracing::info!("stop requested over the control socket");
    sup.shutdown.cancel();
    "pegasusd is stopping".into()
}
