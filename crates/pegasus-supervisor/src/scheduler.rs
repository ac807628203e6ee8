//! Scheduled agents (DESIGN.md §10): every [`TICK`] (and once at start, after the restart scan)
//! the jobs of `<home>/schedules.yml` that are due add their task to their project — `ready`
//! with `auto: true`, else `planned`, waiting for `pegasusctl task approve`. The rules (a
//! missed window runs once, a failing job waits for its next time) live in
//! `pegasus_tasks::schedule`; this is the clock, and its hands are requests through the front
//! door (as `schedule:<job>`), like any other client's.

use crate::{
    front_door::{refusal, FrontDoor},
    handlers::Request,
};
use pegasus_proto::{
    ctl::{AddTask, CtlRequest, CtlResponse},
    Channel,
};
use pegasus_tasks::schedule;
use std::time::Duration;

/// How often due jobs are looked for; a job fires within this of its cron time.
const TICK: Duration = Duration::from_secs(20);

/// Why the due jobs were not looked at.
enum Fault {
    /// `schedules.yml` or the state file: said once until it changes.
    Files(String),
    /// The blocking work itself failed.
    Inside(tokio::task::JoinError),
}

/// The scheduler task: runs until the daemon stops.
pub(crate) async fn run(door: FrontDoor) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last load error, logged once until it changes.
    let mut last_error = String::new();
    loop {
        tokio::select! {
            _ = door.shutdown().cancelled() => return,
            _ = tick.tick() => {}
        }
        match fire_due(&door).await {
            Ok(()) => last_error.clear(),
            Err(Fault::Files(e)) if e != last_error => {
                tracing::warn!("schedules not run: {e}");
                last_error = e;
            }
            Err(Fault::Files(_)) => {}
            Err(Fault::Inside(e)) => tracing::error!("the scheduler failed: {e}"),
        }
    }
}

/// Adds the task of every due job through the front door and records each attempt (state
/// written atomically).
async fn fire_due(door: &FrontDoor) -> Result<(), Fault> {
    let home = door.home().clone();
    let loaded = tokio::task::spawn_blocking(move || {
        let jobs = schedule::load_jobs(&home.schedules_file()).map_err(|e| e.to_string())?;
        let state_file = home.schedules_state_file();
        if jobs.is_empty() && !state_file.exists() {
            return Ok(None);
        }
        let state = schedule::load_state(&state_file);
        Ok(Some((jobs, state_file, state)))
    })
    .await
    .map_err(Fault::Inside)?
    .map_err(Fault::Files)?;
    let Some((jobs, state_file, mut state)) = loaded else {
        return Ok(());
    };
    let before = state.clone();
    let now = chrono::Utc::now();
    for job in schedule::due_jobs(&jobs, &mut state, now) {
        let j = &job.job;
        let add = AddTask {
            project: j.project.clone(),
            goal: j.goal.clone(),
            title: Some(format!("{} (scheduled)", j.name)),
            role: j.role.clone(),
            priority: 2,
            ..AddTask::default()
        };
        let req = if j.auto {
            Request::Ctl(CtlRequest::TaskAdd(add))
        } else {
            Request::AddPlannedTask(add)
        };
        let from = Channel::Schedule(Some(j.name.clone()));
        let result = match door.ask(&from, req).await {
            CtlResponse::TaskAdded { id, .. } => {
                tracing::info!(job = %j.name, task = %id, project = %j.project, "scheduled task added");
                Ok(())
            }
            refused => {
                let e = refusal(refused);
                tracing::warn!(job = %j.name, "scheduled task not added (tried again at its next time): {e}");
                Err(e)
            }
        };
        schedule::record(&mut state, &j.name, now, result);
    }
    if state != before {
        tokio::task::spawn_blocking(move || schedule::save_state(&state_file, &state))
            .await
            .map_err(Fault::Inside)?
            .map_err(|e| Fault::Files(e.to_string()))?;
    }
    Ok(())
}
