//! Turning what is on disk about a project into the [`ProjectInfo`] that listings show — the
//! one conversion both pegasusd (adding its live worker facts) and the daemon-less
//! `pegasusctl project list` use, so both print the same thing.

use crate::ScanEntry;
use pegasus_proto::{ctl::ProjectInfo, WorkerState};

/// The file-only view of a project (no worker). `pegasusctl` uses it too when the daemon is
/// down, so both paths print the same thing.
pub fn from_entry(entry: &ScanEntry, cost_usd: f64) -> ProjectInfo {
    let ts =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut info = ProjectInfo {
        name: entry.name.clone(),
        status: None,
        model: None,
        workdir: None,
        worker_pid: None,
        worker_host: None,
        worker_state: WorkerState::Stopped,
        restarts: 0,
        last_crash: None,
        last_crash_at: None,
        cost_usd,
        created: None,
        suspended: None,
        completed: None,
        goal: None,
        error: None,
        task: None,
        stage: None,
        unmerged_branches: Vec::new(),
        // Not in PROJECT.md: pegasusd counts them from its bus, the CLI from the files.
        approvals: 0,
        // Not in PROJECT.md alone: pegasusd knows the defaults and what the kernel applies.
        limits: None,
        // Not in PROJECT.md alone: config.yml's list applies where it sets none.
        fallback_models: None,
        // Only pegasusd knows which answered.
        fallbacks: Vec::new(),
    };
    match &entry.project {
        Ok(p) => {
            info.status = Some(p.status());
            info.model = p.model().map(str::to_string);
            // Its own list; pegasusd puts config.yml's in its place when it sets none.
            info.fallback_models = p.fallback().map(<[String]>::to_vec);
            info.workdir = p.workdir().map(|w| w.display().to_string());
            info.created = Some(ts(p.created()));
            info.suspended = p.suspended().map(ts);
            info.completed = p.completed().map(ts);
            info.goal = p.goal();
        }
        Err(e) => info.error = Some(e.to_string()),
    }
    info
}
