//! A task's worktree in one repository: created (or resumed) on branch `pegasus/task-<id>` from
//! the commit frozen in the task's spec, locked with a reason naming the task and its project,
//! submodules initialised, the env file linked; then committed, brought up to date with the
//! base branch, and removed again.

use std::path::{Path, PathBuf};

use crate::error::CodeError;
use crate::git::{git, git_output, rev};
use crate::repo::Repo;

/// The branch of task `task`.
pub fn task_branch(task: &str) -> String {
    format!("pegasus/task-{task}")
}

/// The lock reason of a worktree Pegasus made: how boot recovery tells its own (and which
/// project's) worktrees from the user's.
pub fn lock_reason(task: &str, project: &str) -> String {
    format!("pegasus task {task} project {project}")
}

/// A task's worktree, ready to work in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTree {
    /// The repo's id.
    pub repo: String,
    /// The worktree's folder.
    pub path: PathBuf,
    /// `pegasus/task-<id>`.
    pub branch: String,
    /// Made now (false: an existing worktree or branch was resumed).
    pub created: bool,
    /// Things that went wrong but do not stop the task (submodules, env link), one line each.
    pub warnings: Vec<String>,
}

/// Creates the worktree of `task` in `repo` starting at `start` (the spec's frozen commit), or
/// resumes it: an existing registered worktree is used as is, an existing branch without a
/// worktree gets one (a retried task keeps its earlier commits). Every git change happens under
/// the repository's lock.
pub fn create(
    repo: &Repo,
    task: &str,
    project: &str,
    start: &str,
    env_file: &str,
) -> Result<TaskTree, CodeError> {
    let path = repo.task_worktree(task);
    let branch = task_branch(task);
    let branch_ref = format!("refs/heads/{branch}");
    let mut warnings = Vec::new();
    let created;
    {
        let _lock = repo.lock()?;
        repo.ensure_excludes(env_file)?;
        let registered = repo
            .worktrees()?
            .into_iter()
            .find(|w| same_path(&w.path, &path));
        match registered {
            Some(w) if !w.prunable && path.exists() => created = false,
            other => {
                if other.is_some() || path.exists() {
                    // A registration whose folder is gone, or a folder git does not know (a
                    // crash between the two): clear both so `add` can start clean.
                    remove_locked(repo, &path)?;
                }
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(CodeError::io(parent))?;
                }
                let p = path.to_string_lossy().into_owned();
                if rev(&repo.root, &branch_ref)?.is_some() {
                    git(&repo.root, &["worktree", "add", &p, &branch])?;
                    created = false;
                } else {
                    let args = ["worktree", "add", "--no-track", "-b", &branch, &p, start];
                    let out = git_output(&repo.root, &args)?;
                    if !out.status.success() {
                        // `add -b` creates the branch even when it then fails: never leave
                        // that orphan behind.
                        let _ = git_output(&repo.root, &["branch", "-D", &branch]);
                        return Err(crate::git::failure(&repo.root, &args, &out));
                    }
                    created = true;
                }
                let reason = lock_reason(task, project);
                git(&repo.root, &["worktree", "lock", "--reason", &reason, &p])?;
            }
        }
        // From here on git runs there only with its repository given, never found through
        // the worktree's `.git` (a resumed worktree's `.git` must still name its own).
        let admin = repo.pin_worktree(&path)?;
        // Locks a killed worker's git left behind (git in a task worktree dies with its
        // worker, and only this task's worker uses it): stale, or the task could never commit.
        for stale in [
            admin.join("index.lock"),
            admin.join("HEAD.lock"),
            repo.common.join(format!("{branch_ref}.lock")),
        ] {
            if std::fs::remove_file(&stale).is_ok() {
                tracing::warn!(lock = %stale.display(), "removed a lock left by a killed git");
            }
        }
    }
    if path.join(".gitmodules").exists() {
        let out = git_output(&path, &["submodule", "update", "--init", "--recursive"])?;
        if !out.status.success() {
            warnings.push(format!(
                "submodules of {} could not be initialised: {}",
                repo.id,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    if let Some(w) = link_env(&repo.root, &path, env_file) {
        warnings.push(w);
    }
    Ok(TaskTree {
        repo: repo.id.clone(),
        path,
        branch,
        created,
        warnings,
    })
}

/// Symlinks `<root>/<env_file>` into `worktree` when the file exists and the worktree has none.
pub(crate) fn link_env(root: &Path, worktree: &Path, env_file: &str) -> Option<String> {
    let name = env_file.trim_start_matches('/');
    if name.is_empty() || name.contains("..") {
        return None;
    }
    let source = root.join(name);
    let target = worktree.join(name);
    if !source.is_file() || std::fs::symlink_metadata(&target).is_ok() {
        return None;
    }
    std::os::unix::fs::symlink(&source, &target)
        .err()
        .map(|e| format!("cannot link {} into the worktree: {e}", source.display()))
}

#[cfg(test)]
mod tests {
    use super::leaves_repo;

    #[test]
    fn links_that_leave_the_repository() {
        for (path, target) in [
            ("a", "/etc/passwd"),
            ("a", "../x"),
            ("d/a", "../../x"),
            ("d/a", "../.git/config"),
            ("a", ".GIT/hooks"),
            ("a", ""),
            ("d/e/a", "../../../../home"),
        ] {
            assert!(leaves_repo(path, target), "{path} -> {target}");
        }
        for (path, target) in [
            ("a", "b"),
            ("d/a", "../b"),
            ("d/e/a", "../../x/./y"),
            ("a", "d/.."),
        ] {
            assert!(!leaves_repo(path, target), "{path} -> {target}");
        }
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    a == b
        || match (a.canonicalize(), b.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}

/// Commits everything in the worktree (`add -A`; excluded files stay out) as one commit with
/// `message`, except symbolic links that leave the repository ([`escaping_links`]: they stay
/// in the worktree, uncommitted). Returns the new commit, or `None` when there was nothing to
/// commit.
pub fn commit_all(worktree: &Path, message: &str) -> Result<Option<String>, CodeError> {
    let refused = escaping_links(worktree)?;
    if !refused.is_empty() {
        let mut args = vec!["reset", "-q", "--"];
        args.extend(refused.iter().map(|l| l.path.as_str()));
        git(worktree, &args)?;
    }
    let staged = git_output(worktree, &["diff", "--cached", "--quiet"])?;
    if staged.status.success() {
        return Ok(None);
    }
    git(worktree, &["commit", "-q", "-m", message])?;
    rev(worktree, "HEAD")
}

/// A symbolic link whose target leaves its repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscapingLink {
    /// The link, relative to the repository's top.
    pub path: String,
    /// Where it points.
    pub target: String,
}

impl std::fmt::Display for EscapingLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {}", self.path, self.target)
    }
}

/// Stages everything (`add -A`) and returns the staged symbolic links, new or changed since
/// `HEAD`, whose target leaves the repository: an absolute target, one that climbs above the
/// top with `..`, or one into a `.git`. Committed and merged, such a link would put
/// `/etc/passwd` or the user's keys a `tar -h` away in the user's checkout.
pub fn escaping_links(worktree: &Path) -> Result<Vec<EscapingLink>, CodeError> {
    git(worktree, &["add", "-A"])?;
    let raw = git(
        worktree,
        &["diff", "--cached", "--raw", "-z", "--no-renames", "HEAD"],
    )?;
    links_leaving(worktree, &raw)
}

/// The links that leave the repository among the changes of `git diff --raw -z` output.
pub(crate) fn links_leaving(dir: &Path, raw: &str) -> Result<Vec<EscapingLink>, CodeError> {
    let mut out = Vec::new();
    let mut fields = raw.split('\0');
    while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
        // ":old_mode new_mode old_sha new_sha status"
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let (Some(&"120000"), Some(sha)) = (parts.get(1), parts.get(3)) else {
            continue;
        };
        let target = git(dir, &["cat-file", "blob", sha])?;
        if leaves_repo(path, &target) {
            out.push(EscapingLink {
                path: path.to_string(),
                target,
            });
        }
    }
    Ok(out)
}

/// Whether a link at `path` (relative to the top) pointing at `target` leaves the repository
/// or points into a `.git`.
fn leaves_repo(path: &str, target: &str) -> bool {
    if target.starts_with('/') || target.is_empty() {
        return true;
    }
    let mut depth: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    depth.pop();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return true;
                }
            }
            c if c.eq_ignore_ascii_case(".git") => return true,
            c => depth.push(c),
        }
    }
    false
}

/// The outcome of bringing a task branch up to date with its base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeIn {
    /// Up to date (nothing to merge, or merged cleanly).
    Clean,
    /// The merge conflicted and was aborted; these files conflicted.
    Conflict(Vec<String>),
}

/// Merges the base branch's current commit into the task worktree (`merge --no-edit`). On a
/// conflict the files are returned and, with `abort`, the merge is aborted so the worktree is as
/// it was; without, the conflict markers stay for the agent to resolve (the next
/// [`commit_all`] concludes the merge).
pub fn merge_base_in(worktree: &Path, base_ref: &str, abort: bool) -> Result<MergeIn, CodeError> {
    let args = ["merge", "--no-edit", "-q", base_ref];
    let out = git_output(worktree, &args)?;
    if out.status.success() {
        return Ok(MergeIn::Clean);
    }
    let files = git(worktree, &["diff", "--name-only", "--diff-filter=U"])?;
    let files: Vec<String> = files.lines().map(str::to_string).collect();
    if files.is_empty() {
        // Not a conflict: something else stopped the merge (a hook, a dirty file).
        let _ = git_output(worktree, &["merge", "--abort"]);
        return Err(crate::git::failure(worktree, &args, &out));
    }
    if abort {
        let _ = git_output(worktree, &["merge", "--abort"]);
    }
    Ok(MergeIn::Conflict(files))
}

/// The files changed on the task branch since `from`.
pub fn changed_files(worktree: &Path, from: &str) -> Result<Vec<String>, CodeError> {
    let out = git(worktree, &["diff", "--name-only", from, "HEAD"])?;
    Ok(out.lines().map(str::to_string).collect())
}

/// The full diff of the task branch since `from` (for the task's artifacts).
pub fn diff(worktree: &Path, from: &str) -> Result<String, CodeError> {
    git(worktree, &["diff", "--stat", "--patch", from, "HEAD"])
}

/// Removes the task's worktree (unlock, `remove --force --force`, prune whatever is left) and,
/// with `delete_branch`, its branch. Missing pieces are not errors: cleanup may be resumed
/// after a crash at any point of it.
pub fn remove(repo: &Repo, task: &str, delete_branch: bool) -> Result<(), CodeError> {
    let _lock = repo.lock()?;
    remove_locked(repo, &repo.task_worktree(task))?;
    if delete_branch {
        let branch_ref = format!("refs/heads/{}", task_branch(task));
        if rev(&repo.root, &branch_ref)?.is_some() {
            git(&repo.root, &["branch", "-D", "-q", &task_branch(task)])?;
        }
    }
    Ok(())
}

/// Removes one worktree folder and its registration; the caller holds the lock.
pub(crate) fn remove_locked(repo: &Repo, path: &Path) -> Result<(), CodeError> {
    crate::git::unpin(path);
    let p = path.to_string_lossy().into_owned();
    let registered = repo.worktrees()?.iter().any(|w| same_path(&w.path, path));
    if registered {
        let _ = git_output(&repo.root, &["worktree", "unlock", &p]);
        let out = git_output(
            &repo.root,
            &["worktree", "remove", "--force", "--force", &p],
        )?;
        if !out.status.success() && path.exists() {
            std::fs::remove_dir_all(path).map_err(CodeError::io(path))?;
        }
    } else if path.exists() {
        std::fs::remove_dir_all(path).map_err(CodeError::io(path))?;
    }
    git(&repo.root, &["worktree", "prune"])?;
    Ok(())
}
