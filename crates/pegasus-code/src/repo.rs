//! One repository as a code project sees it: its main worktree, its git common dir (where the
//! lock and `info/exclude` live), its base branch, and the worktrees Pegasus keeps under
//! `<repo>/.pegasus/worktrees/`.

use std::path::{Path, PathBuf};

use crate::error::CodeError;
use crate::git::{canonical, check_version, git, git_output, rev};
use crate::lock::RepoLock;

/// The folder under a repo's root that holds Pegasus's worktrees.
pub const WORKTREES_DIR: &str = ".pegasus/worktrees";

/// The worktree of task `task` in the repository whose work tree is `root` (shown on an Asana
/// board as the task's Worktree Path).
pub fn task_worktree_in(root: &Path, task: &str) -> PathBuf {
    root.join(WORKTREES_DIR).join(format!("task-{task}"))
}

/// A repository bound to a project (`repos:` in PROJECT.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// Its id in PROJECT.md.
    pub id: String,
    /// The top of its main worktree (canonical).
    pub root: PathBuf,
    /// `git rev-parse --git-common-dir`, absolute.
    pub common: PathBuf,
    /// The base branch tasks start from and merge into (`main` unless PROJECT.md says).
    pub branch: String,
}

/// One entry of `git worktree list --porcelain -z`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorktreeEntry {
    /// Where it is.
    pub path: PathBuf,
    /// The commit it has checked out (absent for a bare entry).
    pub head: Option<String>,
    /// `refs/heads/...` it has checked out; `None` when detached.
    pub branch: Option<String>,
    /// The lock reason (`Some("")` when locked without one).
    pub locked: Option<String>,
    /// Git considers it prunable (its folder is gone).
    pub prunable: bool,
}

impl Repo {
    /// Opens the repository at `path` (which must be the top of a git work tree) with base
    /// branch `branch`, which must exist. Checks the git version first.
    pub fn open(id: &str, path: &Path, branch: &str) -> Result<Repo, CodeError> {
        check_version()?;
        let canon = path.canonicalize().map_err(|e| {
            CodeError::repo(
                id,
                format!(
                    "{} is not usable: {e}; fix `path:` of this repo in PROJECT.md",
                    path.display()
                ),
            )
        })?;
        let top = git(&canon, &["rev-parse", "--show-toplevel"]).map_err(|_| {
            CodeError::repo(
                id,
                format!(
                    "{} is not a git repository: run `git init` there or fix `path:` in PROJECT.md",
                    canon.display()
                ),
            )
        })?;
        let root = PathBuf::from(&top)
            .canonicalize()
            .map_err(CodeError::io(&top))?;
        if root != canon {
            return Err(CodeError::repo(
                id,
                format!(
                    "{} is inside the repository {}, not its top: point `path:` at the top",
                    canon.display(),
                    root.display()
                ),
            ));
        }
        let common = git(
            &root,
            &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        )?;
        let common = PathBuf::from(common);
        let git_dir = git(&root, &["rev-parse", "--absolute-git-dir"])?;
        crate::git::pin(&root, Path::new(&git_dir))?;
        if git_output(&root, &["rev-parse", "--is-bare-repository"])
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "true")
        {
            return Err(CodeError::repo(
                id,
                "a bare repository has no work tree to change; use a clone with a checkout",
            ));
        }
        let repo = Repo {
            id: id.to_string(),
            root,
            common,
            branch: branch.to_string(),
        };
        if repo.base_commit()?.is_none() {
            return Err(CodeError::repo(
                id,
                format!(
                    "the base branch `{branch}` does not exist in {}: create it (or set `branch:` of this repo in PROJECT.md)",
                    repo.root.display()
                ),
            ));
        }
        Ok(repo)
    }

    /// `refs/heads/<branch>`.
    pub fn base_ref(&self) -> String {
        format!("refs/heads/{}", self.branch)
    }

    /// The commit the base branch is at now.
    pub fn base_commit(&self) -> Result<Option<String>, CodeError> {
        rev(&self.root, &self.base_ref())
    }

    /// Takes the repository's cross-process lock.
    pub fn lock(&self) -> Result<RepoLock, CodeError> {
        RepoLock::acquire(&self.common)
    }

    /// `<root>/.pegasus/worktrees`.
    pub fn worktrees_dir(&self) -> PathBuf {
        self.root.join(WORKTREES_DIR)
    }

    /// The worktree of task `task`.
    pub fn task_worktree(&self, task: &str) -> PathBuf {
        task_worktree_in(&self.root, task)
    }

    /// The staging worktree where task `task` is merged and checked before the base moves.
    pub fn staging_worktree(&self, task: &str) -> PathBuf {
        self.worktrees_dir().join(format!("staging-{task}"))
    }

    /// Makes sure `/.pegasus/` and the env link (`/<env_file>`) are in the common
    /// `info/exclude` (never in the user's `.gitignore`). Call under the lock.
    pub fn ensure_excludes(&self, env_file: &str) -> Result<(), CodeError> {
        let info = self.common.join("info");
        std::fs::create_dir_all(&info).map_err(CodeError::io(&info))?;
        let path = info.join("exclude");
        let current = match std::fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(CodeError::Io { path, source: e }),
        };
        let mut wanted = vec!["/.pegasus/".to_string()];
        let env = env_file.trim_start_matches('/');
        if !env.is_empty() && !env.contains('\n') {
            wanted.push(format!("/{env}"));
        }
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|w| !current.lines().any(|l| l.trim() == w.as_str()))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut next = current.clone();
        if !next.is_empty() && !next.ends_with('\n') {
            next.push('\n');
        }
        next.push_str("# added by Pegasus (task worktrees and their env link)\n");
        for m in missing {
            next.push_str(m);
            next.push('\n');
        }
        pegasus_fs::write_atomic(&path, next.as_bytes()).map_err(CodeError::from)
    }

    /// Pins the linked worktree at `path` to its administrative folder in this repository's
    /// common dir (see [`crate::git`]): the one whose `gitdir` names `path/.git`, and which
    /// `path/.git` names back. A `.git` that names anything else is [`CodeError::Tampered`].
    pub fn pin_worktree(&self, path: &Path) -> Result<PathBuf, CodeError> {
        let dot = canonical(&path.join(".git"));
        let admin_root = self.common.join("worktrees");
        let admin = std::fs::read_dir(&admin_root)
            .map_err(CodeError::io(&admin_root))?
            .flatten()
            .map(|e| e.path())
            .find(|a| {
                std::fs::read_to_string(a.join("gitdir"))
                    .is_ok_and(|g| canonical(&a.join(g.trim())) == dot)
            });
        let tampered = || CodeError::Tampered {
            dir: path.to_path_buf(),
        };
        let admin = admin.ok_or_else(tampered)?;
        let meta = std::fs::symlink_metadata(path.join(".git")).map_err(|_| tampered())?;
        let text = std::fs::read_to_string(path.join(".git")).map_err(|_| tampered())?;
        let named = text
            .trim()
            .strip_prefix("gitdir: ")
            .map(|g| canonical(&path.join(g)));
        if !meta.file_type().is_file() || named != Some(canonical(&admin)) {
            return Err(tampered());
        }
        crate::git::pin(path, &admin)?;
        Ok(admin)
    }

    /// Every worktree git knows of for this repository.
    pub fn worktrees(&self) -> Result<Vec<WorktreeEntry>, CodeError> {
        let out = git(&self.root, &["worktree", "list", "--porcelain", "-z"])?;
        Ok(parse_worktree_list(&out))
    }

    /// The worktree that has `refs/heads/<branch>` checked out, if any.
    pub fn checked_out_at(&self, branch_ref: &str) -> Result<Option<PathBuf>, CodeError> {
        Ok(self
            .worktrees()?
            .into_iter()
            .find(|w| w.branch.as_deref() == Some(branch_ref))
            .map(|w| w.path))
    }
}

/// Parses `git worktree list --porcelain -z`: records separated by an empty field.
pub fn parse_worktree_list(out: &str) -> Vec<WorktreeEntry> {
    let mut all = Vec::new();
    let mut cur: Option<WorktreeEntry> = None;
    for field in out.split('\0') {
        if field.is_empty() {
            all.extend(cur.take());
            continue;
        }
        let (key, value) = field.split_once(' ').unwrap_or((field, ""));
        if key == "worktree" {
            all.extend(cur.take());
            cur = Some(WorktreeEntry {
                path: PathBuf::from(value),
                ..Default::default()
            });
            continue;
        }
        let Some(w) = cur.as_mut() else { continue };
        match key {
            "HEAD" => w.head = Some(value.to_string()),
            "branch" => w.branch = Some(value.to_string()),
            "locked" => w.locked = Some(value.to_string()),
            "prunable" => w.prunable = true,
            _ => {}
        }
    }
    all.extend(cur);
    all
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn worktree_list_is_parsed() {
        let out = "worktree /r\0HEAD abc\0branch refs/heads/main\0\0worktree /r/.pegasus/worktrees/task-1\0HEAD def\0branch refs/heads/pegasus/task-1\0locked pegasus task 1 project p\0\0worktree /gone\0HEAD 123\0detached\0prunable gitdir file points to non-existent location\0\0";
        let l = parse_worktree_list(out);
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].branch.as_deref(), Some("refs/heads/main"));
        assert_eq!(l[1].locked.as_deref(), Some("pegasus task 1 project p"));
        assert!(l[2].prunable && l[2].branch.is_none());
    }
}
