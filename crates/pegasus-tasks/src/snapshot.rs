//! Repository snapshots for a frozen spec: the HEAD commit of every repo in scope, so a replay
//! knows exactly which code the original run saw (seed 004).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pegasus_store::ProjectFile;

use crate::error::TaskError;
use crate::task::RepoSnapshot;

/// The commit `path` has checked out, or `None` when it is not the root of a git repository
/// with at least one commit, or git is not installed.
///
/// Discovery is stopped at `path` itself (`GIT_CEILING_DIRECTORIES`): without that, a plain
/// folder inside some unrelated repository (a dotfiles repo holding the Pegasus home, say)
/// would be snapshotted with that repository's HEAD.
pub fn repo_head(path: &Path) -> Option<String> {
    repo_rev(path, "HEAD")
}

/// The commit `rev` names in the repository at `path` (same rules as [`repo_head`]).
pub fn repo_rev(path: &Path, rev: &str) -> Option<String> {
    let ceiling = path.parent().unwrap_or(path);
    let spec = format!("{rev}^{{commit}}");
    let out = Command::new("git")
        .arg("-C")
        .arg(path)
        .args(["rev-parse", "--verify", "-q", &spec])
        .env("GIT_CEILING_DIRECTORIES", ceiling)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let head = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!head.is_empty() && head.chars().all(|c| c.is_ascii_hexdigit())).then_some(head)
}

/// Fills `head` of every repo with the commit of its base branch (`branch`, default `main`;
/// the checked-out HEAD only when no such branch exists, for repos that are mere context);
/// relative paths are taken relative to the project folder, as PROJECT.md writes them.
pub fn snapshot_repos(project_dir: &Path, repos: &mut [RepoSnapshot]) {
    for r in repos {
        let path = resolve(project_dir, &r.path);
        let branch = r.branch.as_deref().unwrap_or("main");
        r.head = repo_rev(&path, &format!("refs/heads/{branch}"))
            .or_else(|| r.branch.is_none().then(|| repo_head(&path)).flatten());
    }
}

/// A repo path from PROJECT.md made absolute (relative to the project folder).
pub fn resolve(project_dir: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        project_dir.join(p)
    }
}

/// The repos a project's PROJECT.md declares, ready to go into a [`crate::TaskSpec`] (heads
/// are filled in when the spec is frozen). None declared is an empty list.
pub fn project_repos(project_dir: &Path) -> Result<Vec<RepoSnapshot>, TaskError> {
    repos_in(&ProjectFile::load(project_dir)?, project_dir)
}

/// [`project_repos`] of a PROJECT.md already loaded from `project_dir`.
pub fn repos_in(file: &ProjectFile, project_dir: &Path) -> Result<Vec<RepoSnapshot>, TaskError> {
    let declared = file.code().repos.as_ref().map_err(|problem| {
        TaskError::Invalid(format!(
            "{}: {problem}",
            project_dir.join(pegasus_store::PROJECT_FILE).display()
        ))
    })?;
    let Some(entries) = declared else {
        // A workdir that is a git repository is the project's one repo, `main`.
        return Ok(match file.workdir() {
            Some(w) if repo_head(&resolve(project_dir, &w.to_string_lossy())).is_some() => {
                vec![RepoSnapshot {
                    id: "main".to_string(),
                    path: w.to_string_lossy().into_owned(),
                    head: None,
                    branch: None,
                }]
            }
            _ => Vec::new(),
        });
    };
    Ok(entries
        .iter()
        .map(|e| RepoSnapshot {
            id: e.id.clone(),
            path: e.path.clone(),
            head: None,
            branch: e.branch.clone(),
        })
        .collect())
}
