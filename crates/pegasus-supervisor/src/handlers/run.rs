//! `pegasusctl project run` and `run cancel|pause|resume`: the run is created or steered on
//! disk (the run's loop re-reads its file at every step), then the worker is nudged to drive
//! it. `run status` reads the files and needs no daemon.

use crate::{error::RequestError, supervisor::Slots};
use pegasus_proto::{ctl::RunAction, worker::ToWorker};
use pegasus_store::Home;

/// `project run NAME --brief TEXT`.
pub(crate) fn start(
    home: &Home,
    slots: &Slots,
    project: &str,
    brief: &str,
    max_attempts: u32,
) -> Result<String, RequestError> {
    pegasus_store::validate_name(project)?;
    if brief.trim().is_empty() {
        return Err(RequestError::refused(
            "the brief is empty: say what the run should achieve with --brief",
        ));
    }
    if max_attempts == 0 {
        return Err(RequestError::refused("--max-attempts must be at least 1"));
    }
    if slots.cmd(project).is_none() {
        return Err(RequestError::refused(format!(
            "project {project} has no worker: resume it with `pegasusctl project resume {project}`"
        )));
    }
    let store = pegasus_runs::RunStore::open(&home.project_dir(project))?;
    if let Some(run) = store.latest()? {
        use pegasus_runs::RunStatus::*;
        if matches!(run.status, Planning | Executing | Paused) {
            return Err(RequestError::refused(format!(
                "project {project} already has run {} ({:?}): cancel it first with `pegasusctl run cancel {project}`",
                run.id, run.status
            )));
        }
    }
    let run = store.create(project, brief, max_attempts)?;
    drive(slots, project, &run.id);
    Ok(format!(
        "run {} started on project {project}: follow it with `pegasusctl run status {project}`",
        run.id
    ))
}

/// `run cancel|pause|resume NAME`: on the project's latest run.
pub(crate) fn control(
    home: &Home,
    slots: &Slots,
    project: &str,
    action: RunAction,
) -> Result<String, RequestError> {
    pegasus_store::validate_name(project)?;
    let store = pegasus_runs::RunStore::open(&home.project_dir(project))?;
    let run = store.latest()?.ok_or_else(|| {
        RequestError::refused(format!(
            "project {project} has no run: start one with `pegasusctl project run {project} --brief TEXT`"
        ))
    })?;
    let request = match action {
        RunAction::Cancel => pegasus_runs::RunRequest::Cancel,
        RunAction::Pause => pegasus_runs::RunRequest::Pause,
        RunAction::Resume => {
            store.resume(&run.id)?;
            drive(slots, project, &run.id);
            return Ok(format!("run {} resumed", run.id));
        }
    };
    store.request(&run.id, request)?;
    Ok(format!(
        "run {}: {} requested; it takes effect at the run's next step",
        run.id,
        action.as_str()
    ))
}

/// Nudges `project`'s worker to drive run `id` (a new or resumed one).
fn drive(slots: &Slots, project: &str, id: &str) {
    let run_id = id.to_string();
    slots.nudge(project, ToWorker::RunStart { run_id });
}
