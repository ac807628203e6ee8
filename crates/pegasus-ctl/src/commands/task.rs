//! `pegasusctl task ...`: list and show read the task files (no daemon needed); add, cancel,
//! retry, replay and answer go through the daemon, which tells the project's worker.

use crate::{cli::TaskCommand, output, CtlError};
use pegasus_proto::ctl::{AddTask, CtlRequest, CtlResponse, TaskVerb};
use pegasus_store::Home;
use pegasus_tasks::{board, find_task, Readiness, Task, TaskState, TaskStore};

pub async fn run(home: &Home, json: bool, cmd: TaskCommand) -> Result<(), CtlError> {
    match cmd {
        TaskCommand::List {
            name,
            board: as_board,
        } => {
            let (tasks, shown) = listing(home, &name)?;
            if json && as_board {
                let columns: Vec<_> = board(&tasks)
                    .into_iter()
                    .map(|(col, ts)| serde_json::json!({"column": col, "tasks": ts}))
                    .collect();
                return super::print_json(&columns);
            }
            if json {
                return super::print_json(&tasks);
            }
            if as_board {
                print!("{}", output::task_board(&board(&tasks)));
            } else {
                print!("{shown}");
            }
            Ok(())
        }
        TaskCommand::Add(add) => {
            let (message, task) = add_task(home, add.into()).await?;
            if json {
                return super::print_json(&task);
            }
            println!("{message}");
            Ok(())
        }
        TaskCommand::Show { id } => {
            let (_, store) = find_task(&home.projects_dir(), &id).map_err(CtlError::failed)?;
            let task = store.get(&id).map_err(CtlError::failed)?;
            let history = store.history(&id).map_err(CtlError::failed)?;
            if json {
                return super::print_json(&serde_json::json!({"task": task, "history": history}));
            }
            print!("{}", output::task_details(&task, &history));
            Ok(())
        }
        TaskCommand::Cancel { id } => task_verb(home, json, id, TaskVerb::Cancel).await,
        TaskCommand::Retry { id } => task_verb(home, json, id, TaskVerb::Retry).await,
        TaskCommand::Approve { id } => task_verb(home, json, id, TaskVerb::Approve).await,
        TaskCommand::Replay { id } => task_verb(home, json, id, TaskVerb::Replay).await,
        TaskCommand::Merge { id } => task_verb(home, json, id, TaskVerb::Merge).await,
        TaskCommand::Answer { id, text } => {
            super::mutate(home, json, CtlRequest::TaskAnswer { id, text }).await
        }
    }
}

/// A project's tasks, newest first, and the table `task list` prints of them (a ready task
/// the worker skips says what it waits on).
pub(crate) fn listing(home: &Home, name: &str) -> Result<(Vec<Task>, String), CtlError> {
    let dir = super::project_dir(home, name)?;
    let store = TaskStore::open(&dir, name).map_err(CtlError::failed)?;
    let tasks = store.list().map_err(CtlError::failed)?;
    let waiting = tasks
        .iter()
        .filter(|t| t.state == TaskState::Ready && !t.depends_on.is_empty())
        .filter_map(|t| match store.readiness(&t.id) {
            Ok(Readiness::Skip { waiting_on }) => Some((t.id.clone(), waiting_on.join(", "))),
            _ => None,
        })
        .collect();
    let shown = output::task_table(&tasks, &waiting);
    Ok((tasks, shown))
}

/// Adds a task through the daemon: its one-line answer and the task as its file holds it.
pub(crate) async fn add_task(home: &Home, add: AddTask) -> Result<(String, Task), CtlError> {
    let mut client = crate::client::Client::connect(home).await?;
    match crate::client::ok(client.request(CtlRequest::TaskAdd(add)).await?)? {
        CtlResponse::TaskAdded { id, message } => {
            let (_, store) = find_task(&home.projects_dir(), &id).map_err(CtlError::failed)?;
            let task = store.get(&id).map_err(CtlError::failed)?;
            Ok((message, task))
        }
        other => Err(CtlError::Failed(format!("unexpected answer: {other:?}"))),
    }
}

/// Asks the daemon to apply `verb` to task `id` and prints its answer.
async fn task_verb(home: &Home, json: bool, id: String, verb: TaskVerb) -> Result<(), CtlError> {
    super::mutate(home, json, CtlRequest::TaskVerb { id, verb }).await
}
