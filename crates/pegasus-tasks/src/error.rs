//! The one error type of this crate.
//!
//! Every message is one line that names the task and says what to do next, so the CLI, the
//! dashboard and a model calling a tool can all show it as is.

use std::path::PathBuf;

use pegasus_store::StoreError;

use crate::state::TaskState;

/// Everything that can go wrong with a task.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The transition table (DESIGN.md §7) forbids the move.
    #[error("cannot move task {id} from {from} to {to}")]
    InvalidTransition {
        /// The task.
        id: String,
        /// The state it is in.
        from: TaskState,
        /// The state that was asked for.
        to: TaskState,
    },
    /// Compare-and-set failed: someone else moved the task since the caller looked at it.
    #[error("task {id} is {actual}, not {expected}: reload and try again")]
    Conflict {
        /// The task.
        id: String,
        /// The state the caller believed it was in.
        expected: TaskState,
        /// The state it is really in.
        actual: TaskState,
    },
    /// The readiness gate: planned/ready need a frozen spec.
    #[error("task {0} has no frozen spec: freeze it first")]
    NotFrozen(String),
    /// A spec change after the task became ready: that would break reproducibility.
    #[error("the spec of task {0} is frozen: create a new task or replay it")]
    Frozen(String),
    /// No such task in this project (or, for `find_task`, in any project).
    #[error("task {0} not found: see `pegasusctl task list PROJECT`")]
    NotFound(String),
    /// `ready → running` while some dependency is not done; lists each as `id (state)`.
    #[error("task {id} waits on {}: finish those first", .waiting_on.join(", "))]
    Waiting {
        /// The task that may not start.
        id: String,
        /// Each unfinished dependency with its state.
        waiting_on: Vec<String>,
    },
    /// Bad input from the caller (an unknown update field, a priority out of range, ...); the
    /// message says which value and what is accepted.
    #[error("{0}")]
    Invalid(String),
    /// A task's event file that cannot be folded into a task (no `created` record).
    #[error("{}: {message}", .path.display())]
    Corrupt {
        /// The event file.
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// Reading or writing a Pegasus file failed; the message names it.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An operating-system error on a named path (the lock file, a task folder, git).
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl TaskError {
    /// Wraps an I/O error with the path it happened on, for `map_err`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TaskError {
        let path = path.into();
        move |source| TaskError::Io { path, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_say_what_to_do() {
        let cases = [
            (
                TaskError::Conflict {
                    id: "t-1".into(),
                    expected: TaskState::Ready,
                    actual: TaskState::Running,
                },
                "task t-1 is running, not ready: reload and try again",
            ),
            (
                TaskError::NotFrozen("t-1".into()),
                "task t-1 has no frozen spec: freeze it first",
            ),
            (
                TaskError::Frozen("t-1".into()),
                "the spec of task t-1 is frozen: create a new task or replay it",
            ),
            (
                TaskError::NotFound("t-1".into()),
                "task t-1 not found: see `pegasusctl task list PROJECT`",
            ),
            (
                TaskError::Waiting {
                    id: "t-1".into(),
                    waiting_on: vec!["t-2 (running)".into(), "t-3 (ready)".into()],
                },
                "task t-1 waits on t-2 (running), t-3 (ready): finish those first",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }
}
