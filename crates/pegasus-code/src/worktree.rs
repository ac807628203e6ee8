//! A task's worktree in one repository: created (or resumed) on branch `pegasus/task-<id>` from
//! the commit frozen in the task's spec, locked with a reason naming the task and its project,
//! submodules initialised, the env file linked; then committed, brought up to date with the
//! base branch, and removed again.

use std::collections::{HashMap, VecDeque};
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
                let p = add_target(&path)?;
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
    // Submodules of the base's own `.gitmodules`, once, in a worktree no model has touched yet.
    if created && path.join(".gitmodules").exists() {
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

/// Makes the folder `git worktree add` puts `path` in; returns `path` as its argument.
pub(crate) fn add_target(path: &Path) -> Result<String, CodeError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(CodeError::io(parent))?;
    }
    Ok(path.to_string_lossy().into_owned())
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
    use std::collections::HashMap;

    #[test]
    fn links_that_leave_the_repository() {
        let one = |path: &str, target: &str| {
            let links: HashMap<String, String> = [(path.to_string(), target.to_string())]
                .into_iter()
                .collect();
            leaves_repo(&links, path)
        };
        for (path, target) in [
            ("a", "/etc/passwd"),
            ("a", "../x"),
            ("d/a", "../../x"),
            ("d/a", "../.git/config"),
            ("a", ".GIT/hooks"),
            ("a", ""),
            ("d/e/a", "../../../../home"),
        ] {
            assert!(one(path, target), "{path} -> {target}");
        }
        for (path, target) in [
            ("a", "b"),
            ("d/a", "../b"),
            ("d/e/a", "../../x/./y"),
            ("a", "d/.."),
        ] {
            assert!(!one(path, target), "{path} -> {target}");
        }
        // A chain: `up` is the top, so three more `..` after it climb out, whatever the text
        // of `esc` alone says.
        let chain: HashMap<String, String> = [
            ("d1/d2/d3/up", "../../.."),
            ("esc", "d1/d2/d3/up/../../../etc/passwd"),
            ("fine", "d1/d2/d3/up/a.txt"),
            ("loop1", "loop2"),
            ("loop2", "loop1/x"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert!(!leaves_repo(&chain, "d1/d2/d3/up"));
        assert!(leaves_repo(&chain, "esc"));
        assert!(!leaves_repo(&chain, "fine"));
        assert!(
            leaves_repo(&chain, "loop1"),
            "a loop is refused, not followed forever"
        );
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// Commits everything in the worktree (`add -A`; excluded files stay out) as one commit with
/// `message`, except what [`refused_entries`] refuses (it stays in the worktree, uncommitted).
/// Returns the new commit, or `None` when there was nothing to commit.
pub fn commit_all(worktree: &Path, message: &str) -> Result<Option<String>, CodeError> {
    let refused = refused_entries(worktree)?;
    if !refused.is_empty() {
        let mut args = vec!["--literal-pathspecs", "reset", "-q", "--"];
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

/// A change Pegasus does not commit or merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedEntry {
    /// The entry, relative to the repository's top.
    pub path: String,
    /// Why, for the agent: where a link points, or that it is a nested repository.
    pub why: String,
}

impl std::fmt::Display for RefusedEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.path, self.why)
    }
}

/// Stages everything (`add -A`) and returns the staged changes since `HEAD` that must not be
/// committed: symbolic links whose target leaves the repository (absolute, climbing above the
/// top, through other links, or into a `.git`) — committed and merged, they would put
/// `/etc/passwd` or the user's keys a `tar -h` away in the user's checkout — and nested
/// repositories (gitlinks), inside which git would read a configuration the model wrote.
pub fn refused_entries(worktree: &Path) -> Result<Vec<RefusedEntry>, CodeError> {
    git(worktree, &["add", "-A"])?;
    // Index against a commit: no submodule is entered, so gitlinks may be listed (the
    // `--ignore-submodules=all` every diff gets would hide a new one).
    let raw = git(
        worktree,
        &[
            "diff",
            "--cached",
            "--raw",
            "-z",
            "--no-renames",
            "--ignore-submodules=none",
            "HEAD",
        ],
    )?;
    refused_in(worktree, &raw)
}

/// What must not be committed among the changes of `git diff --raw -z` output, whose new side
/// is in the index of `dir`.
pub(crate) fn refused_in(dir: &Path, raw: &str) -> Result<Vec<RefusedEntry>, CodeError> {
    let mut out = Vec::new();
    let mut links: Option<HashMap<String, String>> = None;
    let mut fields = raw.split('\0');
    while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
        // ":old_mode new_mode old_sha new_sha status"
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        match parts.get(1) {
            Some(&"160000") => out.push(RefusedEntry {
                path: path.to_string(),
                why: "a nested git repository".into(),
            }),
            Some(&"120000") => {
                if links.is_none() {
                    links = Some(index_links(dir)?);
                }
                let Some(links) = links.as_ref() else {
                    continue;
                };
                if let Some(target) = links.get(path) {
                    if leaves_repo(links, path) {
                        out.push(RefusedEntry {
                            path: path.to_string(),
                            why: format!("a link to {target}, outside the repository"),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Every symbolic link of the index of `dir`, with its target.
fn index_links(dir: &Path) -> Result<HashMap<String, String>, CodeError> {
    let listed = git(dir, &["ls-files", "-s", "-z"])?;
    let mut links = HashMap::new();
    for entry in listed.split('\0') {
        let Some((meta, path)) = entry.split_once('\t') else {
            continue;
        };
        let mut m = meta.split(' ');
        if let (Some("120000"), Some(sha)) = (m.next(), m.next()) {
            links.insert(path.to_string(), git(dir, &["cat-file", "blob", sha])?);
        }
    }
    Ok(links)
}

/// Whether the link at `path` leaves the repository, resolved inside the tree itself: each
/// link met on the way is followed (a chain of links is a chain, whatever folder the tree is
/// checked out in), and the path may not climb above the top, turn absolute or enter a
/// `.git`.
fn leaves_repo(links: &HashMap<String, String>, path: &str) -> bool {
    let mut stack: Vec<String> = path.split('/').map(str::to_string).collect();
    stack.pop();
    let Some(mut todo) = links.get(path).and_then(|t| target_parts(t)) else {
        return true;
    };
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        match c.as_str() {
            "" | "." => {}
            ".." => {
                if stack.pop().is_none() {
                    return true;
                }
            }
            c if c.eq_ignore_ascii_case(".git") => return true,
            _ => {
                stack.push(c);
                if let Some(next) = links.get(&stack.join("/")) {
                    hops += 1;
                    let Some(mut parts) = target_parts(next).filter(|_| hops <= 40) else {
                        return true;
                    };
                    stack.pop();
                    parts.extend(todo);
                    todo = parts;
                }
            }
        }
    }
    false
}

/// The components of a relative link target; `None` for an absolute or empty one.
fn target_parts(target: &str) -> Option<VecDeque<String>> {
    if target.is_empty() || target.starts_with('/') {
        return None;
    }
    Some(target.split('/').map(str::to_string).collect())
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
    let files = conflicted_files(worktree)?;
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

/// The files a merge in `dir` left conflicted.
pub(crate) fn conflicted_files(dir: &Path) -> Result<Vec<String>, CodeError> {
    let out = git(dir, &["diff", "--name-only", "--diff-filter=U"])?;
    Ok(out.lines().map(str::to_string).collect())
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

/// What a worktree holds, as far as a commit could take it: its `HEAD`, the status of every path
/// that is not ignored, and the diff of its tracked files against `HEAD`. Two equal snapshots:
/// nothing was committed, changed, added or deleted in between (ignored files aside). The
/// review gate takes one before and after the reviewer reads (DESIGN.md §15).
pub fn snapshot(worktree: &Path) -> Result<String, CodeError> {
    let head = git(worktree, &["rev-parse", "HEAD"])?;
    let status = git(
        worktree,
        &["status", "--porcelain=v1", "-z", "--untracked-files=all"],
    )?;
    let diff = git(worktree, &["diff", "--binary", "--no-ext-diff", "HEAD"])?;
    Ok(format!("{head}\0{status}\0{diff}"))
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
