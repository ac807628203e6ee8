//! Repository snapshots for a frozen spec: the HEAD commit of every repo in scope, so a replay
//! knows exactly which code the original run saw (seed 004).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pegasus_store::ProjectFile;
use serde::Deserialize;

use crate::error::TaskError;
use crate::task::RepoSnapshot;

/// The commit `path` has checked out, or `None` when it is not the root of a git repository
/// with at least one commit, or git is not installed.
///
/// Discovery is stopped at `path` itself (`GIT_CEILING_DIRECTORIES`): without that, a plain
/// folder inside some unrelated repository (a dotfiles repo holding the Pegasus home, say)
/// would be snapshotted with that repository's HEAD.
pub fn repo_head(path: &Path) -> Option<String> {
    let ceiling = path.parent().unwrap_or(path);
    let out = Command::new("git")
        .arg("-C")
        .arg(path)
        .args(["rev-parse", "--verify", "-q", "HEAD"])
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

/// Fills `head` of every repo from the working tree; relative paths are taken relative to the
/// project folder, as PROJECT.md writes them.
pub fn snapshot_repos(project_dir: &Path, repos: &mut [RepoSnapshot]) {
    for r in repos {
        r.head = repo_head(&resolve(project_dir, &r.path));
    }
}

fn resolve(project_dir: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        project_dir.join(p)
    }
}

/// A `repos` entry of PROJECT.md (`{id, path, role}`); role is not part of a snapshot.
#[derive(Debug, Deserialize)]
struct RepoEntry {
    id: String,
    path: String,
}

/// The repos a project's PROJECT.md declares, ready to go into a [`crate::TaskSpec`] (heads
/// are filled in when the spec is frozen). None declared is an empty list.
pub fn project_repos(project_dir: &Path) -> Result<Vec<RepoSnapshot>, TaskError> {
    let file = ProjectFile::load(project_dir)?;
    let Some(value) = file.get("repos") else {
        return Ok(Vec::new());
    };
    let entries: Vec<RepoEntry> = serde_norway::from_value(value).map_err(|e| {
        TaskError::Invalid(format!(
            "{}: key `repos` must be a list of {{id, path, role}}: {e}",
            project_dir.join(pegasus_store::PROJECT_FILE).display()
        ))
    })?;
    Ok(entries
        .into_iter()
        .map(|e| RepoSnapshot {
            id: e.id,
            path: e.path,
            head: None,
        })
        .collect())
}
