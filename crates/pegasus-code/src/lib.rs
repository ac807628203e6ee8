//! Code projects (DESIGN.md §10): the git side of tasks that change real repositories.
//!
//! Everything shells out to the user's own `git` (hooks, LFS, submodules and config behave as
//! they do for the user; see `design/code-projects.md` of the spec): [`git`] is the one place
//! that runs it. Every worktree, branch and ref change of a repository runs under
//! [`RepoLock`], an `flock` in its git common dir shared by every Pegasus process.
//!
//! * [`worktree`]: a task's worktree on `pegasus/task-<id>` — create or resume, commit, merge
//!   the base in, remove.
//! * [`merge`]: the checks (`hydrate`, `verify`) and the safe merge through a staging worktree,
//!   all repos or none.
//! * [`recover`]: what a worker does with its repos when it boots.
//!
//! All functions block (they wait for git and for the project's commands): call them from a
//! blocking thread.

pub mod error;
pub mod git;
pub mod lock;
pub mod merge;
pub mod recover;
pub mod repo;
pub mod shell;
pub mod worktree;

pub use error::CodeError;
pub use lock::RepoLock;
pub use merge::{run_checks, safe_merge, CheckRun, Checks, MergeOutcome};
pub use recover::{
    recover, unmerged_branches, unmerged_branches_of, unmerged_lines, KeptBranch, Recovery,
    TaskFate,
};
pub use repo::Repo;
pub use shell::{run_shell, ShellResult};
pub use worktree::{task_branch, MergeIn, TaskTree};
