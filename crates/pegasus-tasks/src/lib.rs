//! Pegasus tasks (DESIGN.md §7, seeds 004, 000, 001).
//!
//! This crate is for the life of a task inside one project: the state machine
//! ([`TaskState`], [`check_transition`]), frozen specs with repo snapshots ([`TaskSpec`]),
//! replay, dependencies ([`Readiness`]), splits into subtasks ([`split`]), the restart rule,
//! the board view ([`board()`]), and the files that hold it all —
//! `tasks/<YYYY-MM-DD>/<id>.jsonl` (the events, the truth) and `tasks/index.jsonl` (a cache of
//! their fold) — through [`TaskStore`]. Every write takes the
//! project's task lock, so transitions are compare-and-set across threads and processes, and
//! every event is durable before the index mentions it.
//!
//! It is not for running tasks: it never calls a model, spawns a process or decides *which*
//! task runs next; the worker and the agent do, through this API. It runs no git either: the
//! commits a frozen spec records and the branches a listing shows are asked of `pegasus-code`,
//! which owns git. It is synchronous on purpose, like `pegasus-store`: its writes are
//! small, and async callers wrap them in `pegasus_fs::blocking`.

pub mod board;
pub mod code;
pub mod error;
pub mod event;
pub mod find;
pub mod id;
mod index;
mod lock;
pub mod merge;
pub mod readiness;
pub mod schedule;
pub mod snapshot;
pub mod split;
pub mod state;
pub mod store;
pub mod task;

pub use board::{board, BoardColumn};
pub use code::{over_tasks, peek_tasks, waiting_on_user, WaitingCache};
pub use error::TaskError;
pub use event::{fold, TaskEvent};
pub use find::find_task;
pub use id::new_task_id;
pub use merge::{blocked_from_verified, MergeState};
pub use readiness::Readiness;
pub use snapshot::{project_repos, repo_paths, ReadRev};
pub use split::{check_steps, Step, MAX_STEPS};
pub use state::{check_transition, column, is_over, TaskState};
pub use store::{
    Recovered, Recovery, TaskStore, CRASHED_TWICE_REASON, RECOVERY_ACTOR, RERUN_REASON,
    RESTART_REASON, SHUTDOWN_REASON,
};
pub use task::{NewTask, RepoSnapshot, Task, TaskSpec, TaskUpdate, UPDATABLE_FIELDS};
