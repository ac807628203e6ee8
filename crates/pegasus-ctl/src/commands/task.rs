//! `pegasusctl task ...`: list and show read the task files (no daemon needed); cancel,
//! retry, replay and answer go through the daemon, which tells the project's worker.

use crate::{cli::TaskCommand, output, CtlError};
use pegasus_proto::ctl::{CtlRequest, TaskVerb};
use pegasus_store::Home;
use pegasus_tasks::{board, find_task, TaskStore};

fn err(e: impl std::fmt::Display) -> CtlError {
    CtlError::Failed(e.to_string())
}

pub async fn run(home: &Home, json: bool, cmd: TaskCommand) -> Result<(), CtlError> {
    match cmd {
        TaskCommand::List {
            name,
            board: as_board,
        } => {
            pegasus_store::validate_name(&name)?;
            let dir = home.project_dir(&name);
            if !dir.join("PROJECT.md").exists() {
                return Err(CtlError::Failed(format!(
                    "project {name} not found: see `pegasusctl project list`"
                )));
            }
            let tasks = TaskStore::open(&dir, &name)
                .and_then(|s| s.list())
                .map_err(err)?;
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
                print!("{}", output::task_table(&tasks));
            }
            Ok(())
        }
        TaskCommand::Show { id } => {
            let (_, store) = find_task(&home.projects_dir(), &id).map_err(err)?;
            let task = store.get(&id).map_err(err)?;
            let history = store.history(&id).map_err(err)?;
            if json {
                return super::print_json(&serde_json::json!({"task": task, "history": history}));
            }
            print!("{}", output::task_details(&task, &history));
            Ok(())
        }
        TaskCommand::Cancel { id } => {
            super::mutate(
                home,
                json,
                CtlRequest::TaskVerb {
                    id,
                    verb: TaskVerb::Cancel,
                },
            )
            .await
        }
        TaskCommand::Retry { id } => {
            super::mutate(
                home,
                json,
                CtlRequest::TaskVerb {
                    id,
                    verb: TaskVerb::Retry,
                },
            )
            .await
        }
        TaskCommand::Replay { id } => {
            super::mutate(
                home,
                json,
                CtlRequest::TaskVerb {
                    id,
                    verb: TaskVerb::Replay,
                },
            )
            .await
        }
        TaskCommand::Answer { id, text } => {
            super::mutate(home, json, CtlRequest::TaskAnswer { id, text }).await
        }
    }
}
