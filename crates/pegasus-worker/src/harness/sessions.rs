//! The harness session ids a project keeps (`<project>/harness/<kind>/sessions.json`, written
//! atomically): one for the project's own work (its messages, run phases and plain tasks, all
//! in the workdir), one per code task (in its worktree). Every run of a place resumes its
//! session, across restarts of the worker and of pegasusd.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file, below the harness's folder.
const FILE: &str = "sessions.json";

/// The place a session belongs to: `project`, or `task-<id>` for a code task.
pub fn place(task_id: &str, code_task: bool) -> String {
    if code_task {
        format!("task-{task_id}")
    } else {
        "project".to_string()
    }
}

/// The session ids of one harness of one project.
pub struct Sessions {
    path: PathBuf,
}

impl Sessions {
    /// The ids kept below `dir` (the harness's folder of the project).
    pub fn new(dir: &Path) -> Sessions {
        Sessions {
            path: dir.join(FILE),
        }
    }

    fn read(&self) -> BTreeMap<String, String> {
        pegasus_store::read_text_limited(&self.path, 1 << 20)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// The session of `place`, if it has one.
    pub fn get(&self, place: &str) -> Option<String> {
        self.read().remove(place)
    }

    /// Keeps `id` as the session of `place` (durably, before it is used).
    pub fn set(&self, place: &str, id: &str) -> Result<(), String> {
        let mut all = self.read();
        if all.get(place).map(String::as_str) == Some(id) {
            return Ok(());
        }
        all.insert(place.to_string(), id.to_string());
        let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
        pegasus_store::write_atomic(&self.path, text.as_bytes()).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ids_are_kept_per_place_and_survive_a_new_reader() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sessions::new(dir.path());
        assert_eq!(s.get("project"), None);
        s.set("project", "a").unwrap();
        s.set(&place("t1", true), "b").unwrap();
        let again = Sessions::new(dir.path());
        assert_eq!(again.get("project").as_deref(), Some("a"));
        assert_eq!(again.get("task-t1").as_deref(), Some("b"));
        assert_eq!(place("t1", false), "project");
    }
}
