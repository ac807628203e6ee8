//! The harness session ids a project keeps (`<project>/harness/<kind>/sessions.json`, written
//! atomically): one for the project's own work (its messages, run phases and plain tasks, all
//! in the workdir), one per code task (in its worktree). Every run of a place resumes its
//! session, across restarts of the worker and of pegasusd. A code task's entry is dropped the
//! next time the file is written after its task is over (done, failed or cancelled).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pegasus_tasks::TaskStore;

/// The file, below the harness's folder.
const FILE: &str = "sessions.json";

/// The prefix of a code task's place.
const TASK_PLACE: &str = "task-";

/// The place a session belongs to: `project`, or `task-<id>` for a code task.
pub fn place(task_id: &str, code_task: bool) -> String {
    if code_task {
        format!("{TASK_PLACE}{task_id}")
    } else {
        "project".to_string()
    }
}

/// The session ids of one harness of one project.
pub struct Sessions {
    path: PathBuf,
    /// The project's tasks: a code task's entry goes once its task is over.
    tasks: TaskStore,
}

impl Sessions {
    /// The ids kept below `dir` (the harness's folder of the project whose tasks are `tasks`).
    pub fn new(dir: &Path, tasks: &TaskStore) -> Sessions {
        Sessions {
            path: dir.join(FILE),
            tasks: tasks.clone(),
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

    /// Keeps `id` as the session of `place` (durably, before it is used), dropping the
    /// entries of code tasks that are over (a task whose state cannot be read keeps its own).
    pub fn set(&self, place: &str, id: &str) -> Result<(), String> {
        let mut all = self.read();
        if all.get(place).map(String::as_str) == Some(id) {
            return Ok(());
        }
        all.retain(|p, _| {
            let over = p.strip_prefix(TASK_PLACE).is_some_and(|task| {
                self.tasks
                    .get(task)
                    .is_ok_and(|t| pegasus_tasks::is_over(t.state))
            });
            !over
        });
        all.insert(place.to_string(), id.to_string());
        let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
        pegasus_store::write_atomic(&self.path, text.as_bytes()).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pegasus_proto::TaskState;

    /// A project folder with a task store.
    fn project() -> (tempfile::TempDir, TaskStore) {
        let dir = tempfile::tempdir().unwrap();
        let tasks = TaskStore::open(dir.path(), "demo").unwrap();
        (dir, tasks)
    }

    /// A task of `tasks`, running.
    fn running(tasks: &TaskStore) -> String {
        let spec = serde_json::from_value(serde_json::json!({"goal": "g"})).unwrap();
        let new = pegasus_tasks::NewTask {
            title: "t".into(),
            ..Default::default()
        };
        tasks
            .create_frozen(new, spec, TaskState::Running, "test", "test")
            .unwrap()
            .id
    }

    #[test]
    fn ids_are_kept_per_place_and_survive_a_new_reader() {
        let (dir, tasks) = project();
        let s = Sessions::new(dir.path(), &tasks);
        assert_eq!(s.get("project"), None);
        s.set("project", "a").unwrap();
        s.set(&place("t1", true), "b").unwrap();
        let again = Sessions::new(dir.path(), &tasks);
        assert_eq!(again.get("project").as_deref(), Some("a"));
        assert_eq!(again.get("task-t1").as_deref(), Some("b"));
        assert_eq!(place("t1", false), "project");
    }

    #[test]
    fn the_entries_of_tasks_that_are_over_go_at_the_next_write() {
        let (dir, tasks) = project();
        let s = Sessions::new(dir.path(), &tasks);
        let [done, failed, cancelled, open] = [0; 4].map(|_| running(&tasks));
        for (i, t) in [&done, &failed, &cancelled, &open].iter().enumerate() {
            s.set(&place(t, true), &format!("s{i}")).unwrap();
        }
        s.set("project", "p").unwrap();
        s.set("task-t-unknown", "u").unwrap();
        for (t, to) in [
            (&done, TaskState::Done),
            (&failed, TaskState::Failed),
            (&cancelled, TaskState::Cancelled),
        ] {
            tasks
                .transition(t, TaskState::Running, to, "test", "test")
                .unwrap();
        }
        // Nothing goes before the file is written again.
        assert_eq!(s.get(&place(&done, true)).as_deref(), Some("s0"));
        let new = running(&tasks);
        s.set(&place(&new, true), "n").unwrap();
        let kept: Vec<(String, String)> = Sessions::new(dir.path(), &tasks)
            .read()
            .into_iter()
            .collect();
        let mut want = vec![
            (place(&open, true), "s3".to_string()),
            (place(&new, true), "n".to_string()),
            ("project".to_string(), "p".to_string()),
            ("task-t-unknown".to_string(), "u".to_string()),
        ];
        want.sort();
        assert_eq!(kept, want);
    }
}
