//! `pegasusctl task add|cancel|retry|replay|answer`: a new task for a project, or one verb on
//! one task, found by id in any project. The task store's compare-and-set keeps these safe against the worker writing the
//! same task at the same time; the worker is nudged to look for ready tasks afterwards.

use crate::{error::RequestError, supervisor::Slots};
use pegasus_proto::{
    ctl::{AddTask, TaskVerb},
    worker::ToWorker,
    Channel,
};
use pegasus_store::{Home, ProjectRegistry, ProjectStatus};
use pegasus_tasks::{
    blocked_from_verified, MergeState, NewTask, Task, TaskSpec, TaskState, TaskStore, TaskUpdate,
};

/// Longest title made from a goal.
const TITLE_CHARS: usize = 80;

/// `task add PROJECT --goal ...`: the task is created with its spec frozen (the repos' heads
/// recorded) in state `to` (`ready`, or `planned` to wait for `task approve`), by `from` (`cli`,
/// `schedule:<job>`, ...: the events' actor); the project's worker runs it when its
/// dependencies are done, by priority. Returns the task's id and a one-line summary.
pub(crate) fn add(
    home: &Home,
    projects: &ProjectRegistry,
    slots: &Slots,
    req: AddTask,
    to: TaskState,
    from: &Channel,
) -> Result<(String, String), RequestError> {
    let actor = &from.to_string();
    pegasus_store::validate_name(&req.project)?;
    let dir = home.project_dir(&req.project);
    let Some(file) = projects.get(&req.project) else {
        return Err(RequestError::ProjectNotFound(req.project));
    };
    let status = file
        .map_err(|why| RequestError::Store(pegasus_store::StoreError::Invalid(why)))?
        .status();
    if matches!(status, ProjectStatus::Completed | ProjectStatus::Archived) {
        return Err(RequestError::refused(format!(
            "project {} is {}: a task can be added to an active or suspended project only",
            req.project, status
        )));
    }
    let goal = req.goal.trim().to_string();
    if goal.is_empty() {
        return Err(RequestError::refused(
            "a task needs a goal: say what must be achieved with --goal",
        ));
    }
    let role = match &req.role {
        Some(r) => Some(pegasus_roles::find_role(&home.roles_dir(), r)?.id),
        None => None,
    };
    let declared = pegasus_tasks::project_repos(&dir, pegasus_code::git::repo_rev)?;
    let mut repos = Vec::new();
    for id in &req.repos {
        match declared.iter().find(|r| &r.id == id) {
            Some(r) if !repos.contains(r) => repos.push(r.clone()),
            Some(_) => {}
            None => {
                let known: Vec<&str> = declared.iter().map(|r| r.id.as_str()).collect();
                return Err(RequestError::refused(format!(
                    "project {} has no repo `{id}`: its repos are [{}] (PROJECT.md `repos:`)",
                    req.project,
                    known.join(", ")
                )));
            }
        }
    }
    let title = match req.title.as_deref().map(str::trim) {
        Some(t) if !t.is_empty() => t.to_string(),
        _ => title_of(&goal),
    };
    let store = TaskStore::open(&dir, &req.project)?;
    let task = store.create_frozen(
        NewTask {
            title,
            kind: if repos.is_empty() { "task" } else { "code" }.to_string(),
            priority: req.priority,
            role: role.clone(),
            depends_on: req.depends_on,
            messages: Vec::new(),
        },
        TaskSpec {
            goal,
            constraints: Vec::new(),
            acceptance: req.acceptance,
            role,
            model_policy: None,
            repos,
            budget_usd: req.budget_usd,
        },
        to,
        actor,
        &format!("added by {actor}"),
    )?;
    slots.nudge(&req.project, ToWorker::TasksChanged);
    let waits = if task.depends_on.is_empty() {
        String::new()
    } else {
        format!("; it starts when {} are done", task.depends_on.join(", "))
    };
    let how = if to == TaskState::Ready {
        format!("ready{waits}")
    } else {
        format!(
            "planned: start it with `pegasusctl task approve {}`",
            task.id
        )
    };
    Ok((
        task.id.clone(),
        format!("task {} added to {} ({how})", task.id, req.project),
    ))
}

/// A listing title from a goal: its first line, cut at [`TITLE_CHARS`] characters.
fn title_of(goal: &str) -> String {
    let line = goal.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(TITLE_CHARS) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

/// `task cancel|retry|replay|approve|merge ID`, asked on channel `from` (the events' actor).
pub(crate) fn verb(
    home: &Home,
    slots: &Slots,
    id: &str,
    verb: TaskVerb,
    from: &Channel,
) -> Result<String, RequestError> {
    on_task(home, slots, id, from, |store, task, actor| {
        let move_to = |from, to, why: &str| store.transition(id, from, to, actor, why);
        Ok(match verb {
            TaskVerb::Cancel => {
                if task.state.is_terminal() {
                    return Err(RequestError::refused(format!(
                        "task {id} is {}: nothing to cancel",
                        task.state.as_str()
                    )));
                }
                move_to(task.state, TaskState::Cancelled, "cancelled by the user")?;
                format!("task {id} cancelled (it stops at its next step)")
            }
            TaskVerb::Approve => {
                move_to(TaskState::Planned, TaskState::Ready, "approved by the user")?;
                format!("task {id} approved; it runs when its dependencies are done")
            }
            TaskVerb::Merge => {
                // The worker merges it (its project's work is serialized there); this records
                // that the user asked.
                match task.state {
                    TaskState::Verified => {}
                    TaskState::Blocked
                        if store.history(id).is_ok_and(|h| blocked_from_verified(&h)) =>
                    {
                        move_to(
                            TaskState::Blocked,
                            TaskState::Verified,
                            "merge asked for by the user",
                        )?;
                    }
                    other => {
                        return Err(RequestError::refused(format!(
                            "task {id} is {}: only a verified code task (or one whose merge was blocked) can be merged",
                            other.as_str()
                        )))
                    }
                }
                store.update(id, TaskUpdate::Merge(Some(MergeState::Requested)), actor)?;
                format!("task {id}: merge requested; its project merges it now (see `pegasusctl task show {id}`)")
            }
            TaskVerb::Retry => {
                move_to(TaskState::Failed, TaskState::Ready, "retried by the user")?;
                format!("task {id} is ready again")
            }
            TaskVerb::Replay => {
                let new = store.replay(id, actor)?;
                store.transition(
                    &new.id,
                    TaskState::Planned,
                    TaskState::Ready,
                    actor,
                    &format!("replay of {id}"),
                )?;
                format!(
                    "task {} replays {id} from its frozen spec (version {})",
                    new.id, new.spec_version
                )
            }
        })
    })
}

/// Runs `act` on task `id`, found in any project, with the name of the actor on channel
/// `from`; then the project's worker is nudged to look at its tasks again.
fn on_task(
    home: &Home,
    slots: &Slots,
    id: &str,
    from: &Channel,
    act: impl FnOnce(&TaskStore, Task, &str) -> Result<String, RequestError>,
) -> Result<String, RequestError> {
    let (project, store) = pegasus_tasks::find_task(&home.projects_dir(), id)?;
    let message = act(&store, store.get(id)?, &from.to_string())?;
    slots.nudge(&project, ToWorker::TasksChanged);
    Ok(message)
}

/// `task answer ID TEXT`: the answer is recorded on the task, which goes back to ready.
pub(crate) fn answer(
    home: &Home,
    slots: &Slots,
    id: &str,
    text: &str,
    from: &Channel,
) -> Result<String, RequestError> {
    on_task(home, slots, id, from, |store, task, actor| {
        if task.state != TaskState::Blocked {
            return Err(RequestError::refused(format!(
                "task {id} is {}, not blocked: there is no question to answer",
                task.state.as_str()
            )));
        }
        store.update(id, TaskUpdate::Answer(Some(text.to_string())), actor)?;
        store.transition(id, TaskState::Blocked, TaskState::Ready, actor, "answered")?;
        Ok(format!("task {id} answered; it is ready again"))
    })
}

#[cfg(test)]
mod tests {
    use super::title_of;

    #[test]
    fn titles_are_the_goals_first_line_cut_short() {
        assert_eq!(title_of("Fix the login\nand more"), "Fix the login");
        let long = "x".repeat(100);
        assert_eq!(title_of(&long).chars().count(), 81);
    }
}
