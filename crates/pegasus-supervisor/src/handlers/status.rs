//! `pegasusctl status`: the daemon, its workers (with the running task and its stage) and
//! today's spend.

use crate::{error::RequestError, supervisor::Supervisor};
use pegasus_proto::ctl::DaemonStatus;

pub(crate) fn status(sup: &Supervisor) -> Result<DaemonStatus, RequestError> {
    Ok(DaemonStatus {
        pid: std::process::id(),
        uptime_s: sup.started.elapsed().as_secs(),
        home: sup.home.root().display().to_string(),
        // The gateway's running total: no ledger read per `status`.
        cost_today_usd: sup.gateway.spent_today() + 0.0,
        projects: super::project::infos(sup)?,
    })
}
