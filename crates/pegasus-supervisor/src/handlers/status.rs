//! `pegasusctl status`: the daemon, its workers (with the running task and its stage) and
//! today's spend.

use crate::{error::RequestError, supervisor::Supervisor};
use pegasus_proto::ctl::DaemonStatus;

pub(crate) fn status(sup: &Supervisor) -> Result<DaemonStatus, RequestError> {
    let projects = super::project::infos(sup)?;
    // Questions and pending merges, from the task indexes (a stat per project when none
    // changed).
    let waiting = sup
        .main_held
        .line()
        .into_iter()
        .chain(
            projects
                .iter()
                .filter(|p| p.error.is_none())
                .flat_map(|p| sup.waiting.lines(&sup.home.project_dir(&p.name), &p.name)),
        )
        .collect();
    Ok(DaemonStatus {
        pid: std::process::id(),
        uptime_s: sup.started.elapsed().as_secs(),
        home: sup.home.root().display().to_string(),
        // The gateway's running total: no ledger read per `status`.
        cost_today_usd: sup.gateway.spent_today() + 0.0,
        projects,
        waiting,
        problems: crate::supervisor::lock(&sup.problems).clone(),
    })
}
