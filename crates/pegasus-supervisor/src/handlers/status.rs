//! `pegasusctl status`: the daemon, its workers (with the running task and its stage) and
//! today's spend.

use super::project::Listing;
use crate::{error::RequestError, main_agent::Held};
use pegasus_proto::ctl::DaemonStatus;
use pegasus_tasks::WaitingCache;

/// The daemon's status: the rows of `listing`, what waits for the user (the MainAgent's `held`
/// messages, then each project's questions and merges, from `waiting`), the spend, and what
/// keeps models from answering (`problems`).
pub(crate) fn status(
    listing: &Listing,
    held: &Held,
    waiting: &WaitingCache,
    uptime_s: u64,
    problems: Vec<String>,
) -> Result<DaemonStatus, RequestError> {
    let projects = listing.infos()?;
    // Questions and pending merges, from the task indexes (a stat per project when none
    // changed).
    let waiting = held
        .line()
        .into_iter()
        .chain(
            projects
                .iter()
                .filter(|p| p.error.is_none())
                .flat_map(|p| waiting.lines(&listing.home.project_dir(&p.name), &p.name)),
        )
        .collect();
    Ok(DaemonStatus {
        pid: std::process::id(),
        uptime_s,
        home: listing.home.root().display().to_string(),
        // The gateway's running total: no ledger read per `status`.
        cost_today_usd: listing.gateway.spent_today() + 0.0,
        projects,
        waiting,
        problems,
        // Every project's (its row has them too) and the MainAgent's (`main`).
        fallbacks: listing.gateway.fallbacks_served(None),
    })
}
