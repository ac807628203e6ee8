//! A project's repos as a frozen spec records them: each with the commit of its base branch,
//! so a replay knows exactly which code the original run saw (seed 004). This crate runs no
//! git: whoever asks passes the one reader, `pegasus_code::git::repo_rev` ([`ReadRev`]).

use std::path::{Path, PathBuf};

use pegasus_store::ProjectFile;

use crate::error::TaskError;
use crate::task::RepoSnapshot;

/// The commit `rev` names in the git repository at a path; `None` when the path is no
/// repository or `rev` names no commit. Callers pass `pegasus_code::git::repo_rev`.
pub type ReadRev = fn(&Path, &str) -> Option<String>;

/// Fills `head` of every repo with the commit of its base branch (`branch`, default `main`;
/// the checked-out HEAD only when no such branch exists, for repos that are mere context);
/// relative paths are taken relative to the project folder, as PROJECT.md writes them.
fn snapshot_repos(project_dir: &Path, repos: &mut [RepoSnapshot], read_rev: ReadRev) {
    for r in repos {
        let path = resolve(project_dir, &r.path);
        let branch = r.branch.as_deref().unwrap_or("main");
        r.head = read_rev(&path, &format!("refs/heads/{branch}")).or_else(|| {
            r.branch
                .is_none()
                .then(|| read_rev(&path, "HEAD"))
                .flatten()
        });
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

/// The repos a project's PROJECT.md declares, each with the commit of its base branch now,
/// ready to go into a [`crate::TaskSpec`] (the store records them as given when the spec is
/// frozen). None declared is an empty list.
pub fn project_repos(
    project_dir: &Path,
    read_rev: ReadRev,
) -> Result<Vec<RepoSnapshot>, TaskError> {
    let mut repos = declared_repos(&ProjectFile::load(project_dir)?, project_dir, read_rev)?;
    snapshot_repos(project_dir, &mut repos, read_rev);
    Ok(repos)
}

/// The repos of a PROJECT.md already loaded from `project_dir`, as `(id, absolute path, base
/// branch)`: what the code side of a project (its worktrees, its kept branches) works on.
pub fn repo_paths(
    file: &ProjectFile,
    project_dir: &Path,
    read_rev: ReadRev,
) -> Result<Vec<(String, PathBuf, String)>, TaskError> {
    Ok(declared_repos(file, project_dir, read_rev)?
        .into_iter()
        .map(|r| {
            let path = resolve(project_dir, &r.path);
            (r.id, path, r.branch.unwrap_or_else(|| "main".to_string()))
        })
        .collect())
}

/// The repos a loaded PROJECT.md declares, heads not read.
fn declared_repos(
    file: &ProjectFile,
    project_dir: &Path,
    read_rev: ReadRev,
) -> Result<Vec<RepoSnapshot>, TaskError> {
    let declared = file.code().repos.as_ref().map_err(|problem| {
        TaskError::Invalid(format!(
            "{}: {problem}",
            project_dir.join(pegasus_store::PROJECT_FILE).display()
        ))
    })?;
    let Some(entries) = declared else {
        // A workdir that is a git repository is the project's one repo, `main`.
        return Ok(match file.workdir() {
            Some(w) if read_rev(&resolve(project_dir, &w.to_string_lossy()), "HEAD").is_some() => {
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
