//! What a project's host shares with its agent: the project's folder and name, its task board
//! and its stop flag. The host (the worker, or pegasusd for the MainAgent) makes the [`Desk`]
//! first and hands a clone to every part that uses it — the agent, the approval gate, the work
//! queue, code tasks — so nobody asks the agent for them.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use pegasus_tasks::{Task, TaskState, TaskStore, TaskUpdate};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::AgentError;
use crate::outbox::Notice;
use crate::task_record;

/// One project's (or the MainAgent's) shared handles.
#[derive(Clone)]
pub struct Desk {
    /// The project folder (or `<home>/main`): session/, memory/, skills/, tasks/ live under it.
    pub dir: PathBuf,
    /// The project's name (or the MainAgent's).
    pub name: String,
    /// Its tasks, every change reported.
    pub board: TaskBoard,
    /// Set by the host when the process is asked to stop: a running task finishes its current
    /// turn, then stops and is recorded as `failed` with reason `interrupted by shutdown` (it
    /// can be retried); a call waiting for its approval is held for the next start. Phases of
    /// runs are not interrupted: their run resumes after a restart.
    pub stop: Arc<AtomicBool>,
}

impl Desk {
    /// Opens the task store of the project in `dir` (creating its folder); moves are reported
    /// to `notices`, which the host turns into events.
    pub fn open(
        dir: &Path,
        name: &str,
        notices: UnboundedSender<Notice>,
    ) -> Result<Desk, AgentError> {
        let tasks_dir = dir.join("tasks");
        std::fs::create_dir_all(&tasks_dir).map_err(pegasus_store::StoreError::io(&tasks_dir))?;
        let store = TaskStore::open(dir, name).map_err(AgentError::tasks)?;
        Ok(Desk {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            board: TaskBoard { store, notices },
            stop: Arc::default(),
        })
    }
}

/// A project's tasks as its agent and host change them: each move is written to the task store
/// and reported as a [`pegasus_proto::WorkerEvent::Task`] in one call (DESIGN.md §7). Reads, and
/// changes that are not a move (a planner's split), go to [`TaskBoard::store`].
#[derive(Clone)]
pub struct TaskBoard {
    store: TaskStore,
    notices: UnboundedSender<Notice>,
}

impl TaskBoard {
    /// The task store, for reads and for changes that are not a move (a planner's split).
    pub fn store(&self) -> &TaskStore {
        &self.store
    }

    /// Where moves are reported.
    pub fn notices(&self) -> &UnboundedSender<Notice> {
        &self.notices
    }

    /// Moves task `id` from `from` to `to` (actor `pegasus`), reported like every move.
    pub fn move_task(
        &self,
        id: &str,
        from: TaskState,
        to: TaskState,
        reason: &str,
    ) -> Result<Task, AgentError> {
        self.move_task_with(id, from, to, reason, &[])
    }

    /// Like [`TaskBoard::move_task`], with field updates written in the same step (one write
    /// under the task lock, so nobody sees the move without them).
    pub fn move_task_with(
        &self,
        id: &str,
        from: TaskState,
        to: TaskState,
        reason: &str,
        updates: &[TaskUpdate],
    ) -> Result<Task, AgentError> {
        let t = self
            .store
            .finish(id, updates, Some((from, to, reason)), "pegasus")
            .map_err(AgentError::tasks)?;
        task_record::report(&self.notices, &t);
        Ok(t)
    }

    /// Records one field of task `id` (actor `pegasus`).
    pub fn update(&self, id: &str, update: TaskUpdate) -> Result<(), AgentError> {
        self.store
            .update(id, update, "pegasus")
            .map(|_| ())
            .map_err(AgentError::tasks)
    }

    /// Fails a ready task that cannot start (its role cannot be prepared, a hook refused it):
    /// `ready → running → failed` with `why`, each move reported like any other.
    pub fn fail_unstartable(&self, id: &str, why: &str) {
        if task_record::start(&self.store, &self.notices, id).is_ok() {
            task_record::fail_running(&self.store, &self.notices, id, why);
        }
    }

    /// The text a task starts from: its goal, acceptance criteria and the answer to its
    /// question, if any.
    pub fn request_of(&self, task: &Task) -> String {
        task_record::request_of(&self.store, task)
    }
}
