//! Code projects seen from the task list: which tasks are over (their kept branches are read by
//! `pegasus-code`), and what waits for the user. Both are read-only views for listings (`status`, `project show`,
//! the dashboard, the MainAgent), so they read the task index without the task lock.

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    sync::Mutex,
    time::SystemTime,
};

use pegasus_store::FileStamp;

/// The project's tasks as its index holds them: no lock taken, nothing created, nothing
/// re-folded. Writers update the index after every change, so it is current except right
/// after a crash, which the next [`crate::TaskStore::list`] repairs. Empty when absent.
pub fn peek_tasks(dir: &Path) -> Vec<crate::Task> {
    let path = index_path(dir);
    if !path.exists() {
        return Vec::new();
    }
    crate::index::read_index(&path)
        .map(|lines| lines.into_iter().map(|l| l.task).collect())
        .unwrap_or_default()
}

/// The ids of the project's tasks that are over ([`crate::state::is_over`]): their kept
/// branches are unmerged work a listing shows (DESIGN.md §10; the branches are read by
/// `pegasus-code`, `unmerged_branches_of`).
pub fn over_tasks(dir: &Path) -> HashSet<String> {
    peek_tasks(dir)
        .into_iter()
        .filter(|t| crate::state::is_over(t.state))
        .map(|t| t.id)
        .collect()
}

/// What of a project waits for the user, one line each: blocked tasks with their question (or
/// reason) and verified tasks whose merge is pending (`status` and the MainAgent show these).
pub fn waiting_on_user(dir: &Path, name: &str) -> Vec<String> {
    let mut tasks = peek_tasks(dir);
    tasks.sort_by_key(|t| t.created);
    tasks
        .into_iter()
        .filter_map(|t| match t.state {
            crate::TaskState::Blocked => Some(match (&t.question, &t.stop_reason) {
                (Some(q), _) => format!(
                    "{name}: task {} asks: {q} (answer with `pegasusctl task answer {} TEXT`)",
                    t.id, t.id
                ),
                (None, r) => format!(
                    "{name}: task {} is blocked: {}",
                    t.id,
                    r.as_deref().unwrap_or("no reason recorded")
                ),
            }),
            crate::TaskState::Verified if t.merge == Some(crate::MergeState::Pending) => {
                Some(format!(
                    "{name}: task {} is verified, merge pending (`pegasusctl task merge {}`)",
                    t.id, t.id
                ))
            }
            _ => None,
        })
        .collect()
}

fn index_path(dir: &Path) -> PathBuf {
    dir.join(crate::store::TASKS_DIR)
        .join(crate::store::INDEX_FILE)
}

/// [`waiting_on_user`] for many projects, each read again only when its task index changed:
/// pegasusd answers every `status` from it with a `stat` per project instead of reading and
/// parsing every index. Every write of an index replaces the file (a new inode, size and
/// change time), so a changed [`FileStamp`] is a changed index; an index written so recently
/// that a second write could keep its stamp (not yet [`FileStamp::settled`]) is read again
/// at each call.
#[derive(Default)]
pub struct WaitingCache {
    seen: Mutex<HashMap<PathBuf, (FileStamp, Vec<String>)>>,
}

impl WaitingCache {
    /// What of project `name` (folder `dir`) waits for the user, as [`waiting_on_user`].
    pub fn lines(&self, dir: &Path, name: &str) -> Vec<String> {
        self.lines_at(dir, name, SystemTime::now())
    }

    /// [`WaitingCache::lines`] with the clock read as `now`.
    fn lines_at(&self, dir: &Path, name: &str, now: SystemTime) -> Vec<String> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(m) = std::fs::metadata(index_path(dir)) else {
            seen.remove(dir);
            return Vec::new();
        };
        let stamp = FileStamp::of(&m);
        match seen.get(dir) {
            Some((s, lines)) if *s == stamp => lines.clone(),
            _ => {
                // Read after the stamp: a change in between is seen at the next call.
                let lines = waiting_on_user(dir, name);
                if stamp.settled(now) {
                    seen.insert(dir.to_path_buf(), (stamp, lines.clone()));
                } else {
                    seen.remove(dir);
                }
                lines
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_index_is_kept_only_once_a_write_in_the_same_tick_could_not_hide() {
        let dir = tempfile::tempdir().unwrap();
        let index = index_path(dir.path());
        std::fs::create_dir_all(index.parent().unwrap()).unwrap();
        std::fs::write(&index, "").unwrap();
        let cache = WaitingCache::default();
        let kept = |c: &WaitingCache| c.seen.lock().unwrap().contains_key(dir.path());
        assert!(cache
            .lines_at(dir.path(), "p", SystemTime::now())
            .is_empty());
        assert!(!kept(&cache), "just written: read again at the next call");
        let later = SystemTime::now() + pegasus_store::stamp::SETTLE + Duration::from_secs(1);
        assert!(cache.lines_at(dir.path(), "p", later).is_empty());
        assert!(kept(&cache), "settled: served from the cache");
        std::fs::remove_file(&index).unwrap();
        assert!(cache.lines_at(dir.path(), "p", later).is_empty());
        assert!(!kept(&cache), "gone: forgotten");
    }
}
