//! Scheduled agents (SPEC §10): every [`TICK`] (and once at start, after the restart scan)
//! the jobs of `<home>/schedules.yml` that are due add their task to their project — `ready`
//! with `auto: true`, else `planned`, waiting for `pegasusctl task approve`. The rules (a
//! missed window runs once, a failing job waits for its next time) live in
//! `pegasus_tasks::schedule`; this is the clock and the hands.

use crate::{handlers::task, supervisor::Supervisor};
use pegasus_proto::{ctl::AddTask, Channel};
use pegasus_tasks::{schedule, TaskState};
use std::{sync::Arc, time::Duration};

/// How often due jobs are looked for; a job fires within this of its cron time.
const TICK: Duration = Duration::from_secs(20);

/// The scheduler task: runs until the daemon stops.
pub(crate) async fn run(sup: Arc<Supervisor>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last load error, logged once until it changes.
    let mut last_error = String::new();
    loop {
        tokio::select! {
            _ = sup.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let s = sup.clone();
        match pegasus_fs::blocking(move || fire_due(&s)).await {
            Ok(Ok(())) => last_error.clear(),
            Ok(Err(e)) if e != last_error => {
                tracing::warn!("schedules not run: {e}");
                last_error = e;
            }
            Ok(Err(_)) => {}
            Err(e) => tracing::error!("the scheduler failed: {e}"),
        }
    }
}

/// Adds the task of every due job and records each attempt (state written atomically).
fn fire_due(sup: &Supervisor) -> Result<(), String> {
    let jobs = schedule::load_jobs(&sup.home.schedules_file()).map_err(|e| e.to_string())?;
    let state_file = sup.home.schedules_state_file();
    if jobs.is_empty() && !state_file.exists() {
        return Ok(());
    }
    let mut state = schedule::load_state(&state_file);
    let before = state.clone();
    let now = chrono::Utc::now();
    for job in schedule::due_jobs(&jobs, &mut state, now) {
        let j = &job.job;
        let req = AddTask {
            project: j.project.clone(),
            goal: j.goal.clone(),
            title: Some(format!("{} (scheduled)", j.name)),
            role: j.role.clone(),
            priority: 2,
            ..AddTask::default()
        };
        let to = if j.auto {
            TaskState::Ready
        } else {
            TaskState::Planned
        };
        let result = task::add(sup, req, to, &Channel::Schedule(Some(j.name.clone())));
        match &result {
            Ok((id, _)) => {
                tracing::info!(job = %j.name, task = %id, project = %j.project, "scheduled task added")
            }
            Err(e) => {
                tracing::warn!(job = %j.name, "scheduled task not added (tried again at its next time): {e}")
            }
        }
        schedule::record(
            &mut state,
            &j.name,
            now,
            result.map(|_| ()).map_err(|e| e.to_string()),
        );
    }
    if state != before {
        schedule::save_state(&state_file, &state).map_err(|e| e.to_string())?;
    }
    Ok(())
}
