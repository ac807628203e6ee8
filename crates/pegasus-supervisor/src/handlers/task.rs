//! `pegasusctl task cancel|retry|replay|answer`: one verb on one task, found by id in any
//! project. The task store's compare-and-set keeps these safe against the worker writing the
//! same task at the same time; the worker is nudged to look for ready tasks afterwards.

use crate::{error::RequestError, supervisor::Supervisor};
use pegasus_proto::{ctl::TaskVerb, worker::ToWorker};
use pegasus_tasks::TaskState;

/// `task cancel|retry|replay ID`.
pub(crate) fn verb(sup: &Supervisor, id: &str, verb: TaskVerb) -> Result<String, RequestError> {
    let (project, store) = pegasus_tasks::find_task(&sup.home.projects_dir(), id)?;
    let task = store.get(id)?;
    let message = match verb {
        TaskVerb::Cancel => {
            if task.state.is_terminal() {
                return Err(RequestError::refused(format!(
                    "task {id} is {}: nothing to cancel",
                    task.state.as_str()
                )));
            }
            store.transition(
                id,
                task.state,
                TaskState::Cancelled,
                "cli",
                "cancelled by the user",
            )?;
            format!("task {id} cancelled (it stops at its next step)")
        }
        TaskVerb::Retry => {
            store.transition(
                id,
                TaskState::Failed,
                TaskState::Ready,
                "cli",
                "retried by the user",
            )?;
            format!("task {id} is ready again")
        }
        TaskVerb::Replay => {
            let new = store.replay(id, "cli")?;
            store.transition(
                &new.id,
                TaskState::Planned,
                TaskState::Ready,
                "cli",
                &format!("replay of {id}"),
            )?;
            format!(
                "task {} replays {id} from its frozen spec (version {})",
                new.id, new.spec_version
            )
        }
    };
    sup.nudge(&project, ToWorker::TasksChanged);
    Ok(message)
}

/// `task answer ID TEXT`: the answer is recorded on the task, which goes back to ready.
pub(crate) fn answer(sup: &Supervisor, id: &str, text: &str) -> Result<String, RequestError> {
    let (project, store) = pegasus_tasks::find_task(&sup.home.projects_dir(), id)?;
    let task = store.get(id)?;
    if task.state != TaskState::Blocked {
        return Err(RequestError::refused(format!(
            "task {id} is {}, not blocked: there is no question to answer",
            task.state.as_str()
        )));
    }
    store.update(id, "answer", serde_json::json!(text), "cli")?;
    store.transition(id, TaskState::Blocked, TaskState::Ready, "cli", "answered")?;
    sup.nudge(&project, ToWorker::TasksChanged);
    Ok(format!("task {id} answered; it is ready again"))
}
