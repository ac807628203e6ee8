//! Finding a task by id alone across every project of a home (ids are unique), for
//! `pegasusctl task show ID` and the dashboard.

use std::path::Path;

use crate::error::TaskError;
use crate::store::{TaskStore, TASKS_DIR};

/// Locates task `id` under `projects_dir` (`<home>/projects`): returns the project's name (its
/// folder name, which PROJECT.md's `name` must equal) and its [`TaskStore`]. Projects are
/// searched in name order; only folders that already have `tasks/` are opened, so searching
/// never creates anything.
pub fn find_task(projects_dir: &Path, id: &str) -> Result<(String, TaskStore), TaskError> {
    let entries = match std::fs::read_dir(projects_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TaskError::NotFound(id.to_string()))
        }
        Err(e) => return Err(TaskError::io(projects_dir)(e)),
    };
    let mut projects = Vec::new();
    for entry in entries {
        let entry = entry.map_err(TaskError::io(projects_dir))?;
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.starts_with('.') && path.join(TASKS_DIR).is_dir() {
            projects.push((name.to_string(), path));
        }
    }
    projects.sort();
    for (name, dir) in projects {
        let store = TaskStore::open(&dir, &name)?;
        match store.events_path(id) {
            Ok(_) => return Ok((name, store)),
            Err(TaskError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(TaskError::NotFound(id.to_string()))
}
