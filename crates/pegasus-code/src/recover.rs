//! Boot recovery of one repository for one project: `git worktree prune`, every task or
//! staging worktree of this project whose task is not live removed, branches of this project's
//! dead tasks deleted when they hold nothing the base lacks and **kept** (and reported) when
//! they hold unmerged commits. Worktrees and branches of other projects are left alone.

use std::{collections::HashSet, path::PathBuf};

use crate::error::CodeError;
use crate::git::{git, is_ancestor};
use crate::repo::Repo;
use crate::worktree::{lock_reason, remove_locked};

/// What recovery knows of a task id it finds in a worktree or branch name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFate {
    /// A task of this project that may still use its worktree (not terminal).
    Live,
    /// A task of this project that is over (done, failed, cancelled).
    Over,
    /// Not a task of this project: someone else's, leave it.
    Foreign,
}

/// A task branch kept because it has commits its base does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptBranch {
    /// The repo's id.
    pub repo: String,
    /// `pegasus/task-<id>`.
    pub branch: String,
    /// The task's id.
    pub task: String,
}

impl std::fmt::Display for KeptBranch {
    /// `repo: branch (task ID)`, as `project show` lists it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} (task {})", self.repo, self.branch, self.task)
    }
}

/// What recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Worktree folders removed.
    pub removed: Vec<PathBuf>,
    /// Branches deleted (nothing unmerged on them).
    pub deleted_branches: Vec<String>,
    /// Branches kept with unmerged work.
    pub kept: Vec<KeptBranch>,
}

/// Recovers `repo` for `project`; `fate` says what each task id found is. Staging worktrees of
/// this project are always removed (no merge runs while a worker boots).
pub fn recover(
    repo: &Repo,
    project: &str,
    fate: &dyn Fn(&str) -> TaskFate,
) -> Result<Recovery, CodeError> {
    let _lock = repo.lock()?;
    let mut report = Recovery::default();
    git(&repo.root, &["worktree", "prune"])?;
    let dir = repo.worktrees_dir();
    let canon_dir = dir.canonicalize().unwrap_or(dir.clone());
    let mut registered = Vec::new();
    for w in repo.worktrees()? {
        let Some(name) = w
            .path
            .strip_prefix(&canon_dir)
            .or_else(|_| w.path.strip_prefix(&dir))
            .ok()
            .and_then(|p| p.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        registered.push(name.clone());
        let (task, staging) = match (name.strip_prefix("task-"), name.strip_prefix("staging-")) {
            (Some(t), _) => (t.to_string(), false),
            (_, Some(t)) => (t.to_string(), true),
            _ => continue,
        };
        // Only worktrees this project locked: another project's task may share the repo.
        let ours = w.locked.as_deref() == Some(lock_reason(&task, project).as_str());
        if !ours || fate(&task) == TaskFate::Foreign {
            continue;
        }
        if staging || fate(&task) == TaskFate::Over {
            remove_locked(repo, &w.path)?;
            report.removed.push(w.path.clone());
        }
    }
    // Folders under .pegasus/worktrees that git does not know (a crash mid-add, or after a
    // prune): nothing refers to them.
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if registered.contains(&name) {
                continue;
            }
            if let Some(t) = name
                .strip_prefix("task-")
                .or_else(|| name.strip_prefix("staging-"))
            {
                if fate(t) != TaskFate::Foreign {
                    let p = e.path();
                    std::fs::remove_dir_all(&p).map_err(CodeError::io(&p))?;
                    report.removed.push(p);
                }
            }
        }
    }
    for (kept, merged) in over_branches(repo, fate)? {
        if merged {
            git(&repo.root, &["branch", "-D", "-q", &kept.branch])?;
            report.deleted_branches.push(kept.branch);
        } else {
            report.kept.push(kept);
        }
    }
    Ok(report)
}

/// [`unmerged_branches`] of every repo `(id, path, base branch)` that opens, in order; a repo
/// that does not open or cannot be read lists nothing (for `project show`, which lists what it
/// can).
pub fn unmerged_branches_of(
    repos: &[(String, PathBuf, String)],
    fate: &dyn Fn(&str) -> TaskFate,
) -> Vec<KeptBranch> {
    let mut out = Vec::new();
    for (id, path, branch) in repos {
        if let Ok(repo) = Repo::open(id, path, branch) {
            out.extend(unmerged_branches(&repo, fate).unwrap_or_default());
        }
    }
    out
}

/// `repo: branch (task ID)` of every kept branch with unmerged commits among `repos` (`(id,
/// path, base branch)`), the tasks in `over` being over (`pegasus_tasks::over_tasks`): what
/// `project show` lists.
pub fn unmerged_lines(repos: &[(String, PathBuf, String)], over: &HashSet<String>) -> Vec<String> {
    let fate = |id: &str| {
        if over.contains(id) {
            TaskFate::Over
        } else {
            TaskFate::Live
        }
    };
    unmerged_branches_of(repos, &fate)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The task branches of this project's over tasks with unmerged commits, without changing
/// anything (for `project show`).
pub fn unmerged_branches(
    repo: &Repo,
    fate: &dyn Fn(&str) -> TaskFate,
) -> Result<Vec<KeptBranch>, CodeError> {
    Ok(over_branches(repo, fate)?
        .into_iter()
        .filter(|(_, merged)| !merged)
        .map(|(kept, _)| kept)
        .collect())
}

/// Every `pegasus/task-*` branch whose task is over, and whether it is already in the base.
fn over_branches(
    repo: &Repo,
    fate: &dyn Fn(&str) -> TaskFate,
) -> Result<Vec<(KeptBranch, bool)>, CodeError> {
    let base = repo.base_ref();
    let branches = git(
        &repo.root,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/pegasus/",
        ],
    )?;
    let mut out = Vec::new();
    for branch in branches.lines() {
        let Some(task) = branch.strip_prefix("pegasus/task-") else {
            continue;
        };
        if fate(task) == TaskFate::Over {
            let merged = is_ancestor(&repo.root, branch, &base)?;
            let kept = KeptBranch {
                repo: repo.id.clone(),
                branch: branch.to_string(),
                task: task.to_string(),
            };
            out.push((kept, merged));
        }
    }
    Ok(out)
}
