//! Repository snapshots for a frozen spec: the HEAD commit of every repo in scope, so a replay
//! knows exactly which code the original run saw (seed 004). git itself runs in `pegasus-code`
//! ([`pegasus_code::git::repo_rev`]).

use std::path::{Path, PathBuf};

use pegasus_code::git::{repo_head, repo_rev};
use pegasus_store::ProjectFile;

use crate::error::TaskError;
use crate::task::RepoSnapshot;

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
