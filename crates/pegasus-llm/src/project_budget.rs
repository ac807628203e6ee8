//! A project's `budget_usd` for each model call: read from its PROJECT.md so that an edit
//! applies at the very next call, yet parsed only when the file changed.
//!
//! Every call stats the file (one syscall); the parsed budget is reused while the file's
//! identity and times are those it was parsed from. Opening, reading and parsing the YAML on
//! every call cost 20–35 µs of pegasusd's time per model call.
//!
//! "Unchanged" is a [`FileStamp`] like the one the file was parsed from; a file changed so
//! recently that a second edit could keep its stamp (not yet [`FileStamp::settled`]) is read
//! again at each call until it has settled.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use pegasus_store::{validate_name, FileStamp, Home, ProjectFile, StoreError};

/// Whether what a read of PROJECT.md gave may stand for the file until it changes: its content
/// or its content's fault, yes; a failure to read it (out of file descriptors, an I/O error),
/// no: that says nothing about the file, and kept it would lift the project's cap for good.
fn worth_keeping(loaded: &Result<ProjectFile, StoreError>) -> bool {
    !matches!(loaded, Err(StoreError::Io { .. }))
}

/// The budgets of the projects, each with the stamp of the file it was read from.
#[derive(Default)]
pub(crate) struct ProjectBudgets {
    known: Mutex<HashMap<String, (FileStamp, Option<f64>)>>,
    /// How many times a PROJECT.md was read and parsed (for tests).
    #[cfg(test)]
    reads: std::sync::atomic::AtomicU64,
}

impl ProjectBudgets {
    /// The `budget_usd` of project `name` as its PROJECT.md says now; `None` when it sets none
    /// or the file cannot be read (a missing or broken file caps nothing, as before).
    pub fn get(&self, home: &Home, name: &str) -> Option<f64> {
        self.get_at(home, name, SystemTime::now())
    }

    fn get_at(&self, home: &Home, name: &str, now: SystemTime) -> Option<f64> {
        validate_name(name).ok()?;
        let dir = home.project_dir(name);
        let stamp = match std::fs::metadata(dir.join("PROJECT.md")) {
            Ok(meta) => FileStamp::of(&meta),
            Err(e) => {
                tracing::debug!(project = name, error = %e, "no project budget readable");
                self.lock().remove(name);
                return None;
            }
        };
        if let Some((known, budget)) = self.lock().get(name) {
            if *known == stamp {
                return *budget;
            }
        }
        // Read after the stat: if the file changes in between, the next call's stamp differs
        // from the one kept here and it is read again.
        let loaded = self.read(&dir);
        let keep = stamp.settled(now) && worth_keeping(&loaded);
        let budget = match loaded {
            Ok(p) => p.budget_usd(),
            Err(e) => {
                tracing::debug!(project = name, error = %e, "no project budget readable");
                None
            }
        };
        let mut known = self.lock();
        if keep {
            known.insert(name.to_string(), (stamp, budget));
        } else {
            known.remove(name);
        }
        budget
    }

    fn read(&self, dir: &Path) -> Result<ProjectFile, StoreError> {
        #[cfg(test)]
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ProjectFile::load(dir)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (FileStamp, Option<f64>)>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pegasus_store::stamp::SETTLE;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    fn project_md(budget: &str) -> String {
        format!("---\nname: p\nstatus: active\ncreated: 2026-02-28T10:00:00Z\n{budget}---\n\n## Goal\nG\n")
    }

    fn home() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        std::fs::create_dir_all(home.project_dir("p")).unwrap();
        (dir, home)
    }

    fn write(home: &Home, text: &str) {
        std::fs::write(home.project_dir("p").join("PROJECT.md"), text).unwrap();
    }

    /// A moment when every file written by the test has settled.
    fn later() -> SystemTime {
        SystemTime::now() + SETTLE + Duration::from_secs(1)
    }

    /// Sets the file's modification time `secs` into the past, so that only its status-change
    /// time is recent (a test cannot wait for a file to settle, nor rely on the file system's
    /// clock being finer than the test).
    fn age(home: &Home, secs: u64) {
        let f = std::fs::File::options()
            .write(true)
            .open(home.project_dir("p").join("PROJECT.md"))
            .unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(secs))
            .unwrap();
    }

    #[test]
    fn a_settled_file_is_parsed_once_and_every_edit_applies_at_the_next_call() {
        let (_d, home) = home();
        let b = ProjectBudgets::default();
        write(&home, &project_md("budget_usd: 5\n"));
        age(&home, 60);
        assert_eq!(b.get_at(&home, "p", later()), Some(5.0));
        assert_eq!(b.get_at(&home, "p", later()), Some(5.0));
        assert_eq!(
            b.reads.load(Ordering::Relaxed),
            1,
            "the second call only stats"
        );
        // In place, same size: the modification time moves.
        write(&home, &project_md("budget_usd: 6\n"));
        assert_eq!(b.get_at(&home, "p", later()), Some(6.0));
        age(&home, 60);
        assert_eq!(b.get_at(&home, "p", later()), Some(6.0));
        // Replaced by a file of the same size with the same modification time: a new inode.
        let path = home.project_dir("p").join("PROJECT.md");
        let tmp = home.project_dir("p").join("PROJECT.md.tmp");
        std::fs::write(&tmp, project_md("budget_usd: 4\n")).unwrap();
        let old = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::File::options()
            .write(true)
            .open(&tmp)
            .unwrap()
            .set_modified(old)
            .unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(b.get_at(&home, "p", later()), Some(4.0));
        // Replaced by one that sets no budget.
        std::fs::write(&tmp, project_md("")).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(b.get_at(&home, "p", later()), None);
        assert_eq!(b.reads.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn a_failed_read_is_never_kept() {
        let io = StoreError::Io {
            path: "/h/projects/p/PROJECT.md".into(),
            source: std::io::Error::from_raw_os_error(24), // EMFILE
        };
        assert!(!worth_keeping(&Err(io)), "it says nothing about the file");
        assert!(worth_keeping(&Err(StoreError::Invalid("bad".into()))));
        assert!(worth_keeping(&Err(StoreError::NotFound("p".into()))));
    }

    #[test]
    fn a_file_changed_just_now_is_read_at_every_call_until_it_settles() {
        let (_d, home) = home();
        let b = ProjectBudgets::default();
        write(&home, &project_md("budget_usd: 5\n"));
        assert_eq!(b.get(&home, "p"), Some(5.0));
        assert_eq!(b.get(&home, "p"), Some(5.0));
        assert_eq!(
            b.reads.load(Ordering::Relaxed),
            2,
            "not kept while it may still change"
        );
        assert_eq!(b.get_at(&home, "p", later()), Some(5.0));
        assert_eq!(b.get_at(&home, "p", later()), Some(5.0));
        assert_eq!(b.reads.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_missing_or_broken_file_caps_nothing() {
        let (_d, home) = home();
        let b = ProjectBudgets::default();
        assert_eq!(b.get_at(&home, "p", later()), None);
        assert_eq!(b.get_at(&home, "../p", later()), None);
        write(&home, "---\nname: [unclosed\n");
        assert_eq!(b.get_at(&home, "p", later()), None);
        write(&home, &project_md("budget_usd: 2.5\n"));
        assert_eq!(b.get_at(&home, "p", later()), Some(2.5));
        std::fs::remove_file(home.project_dir("p").join("PROJECT.md")).unwrap();
        assert_eq!(
            b.get_at(&home, "p", later()),
            None,
            "a removed file caps nothing"
        );
        assert!(b.lock().is_empty(), "and is forgotten");
    }
}
