//! The project registry: pegasusd's one reader of PROJECT.md. The listing rows (`status`,
//! `project list`, the dashboard), each model call's `budget_usd` (the gateway) and each
//! worker's model (its slot) all come from here, so they can never disagree about what a file
//! says, and a file is parsed once per change instead of once per look.
//!
//! Every look stats the file (one syscall, a few microseconds); what was parsed is reused while
//! the file's [`FileStamp`] is the one it was parsed from. A file changed so recently that a
//! second edit could keep its stamp (not yet [`FileStamp::settled`]) is read again at each look
//! until it has settled; a failed read (out of file descriptors, an I/O error) is never kept,
//! since it says nothing about the file. An edit by hand applies at the very next look. The
//! folder is listed for every listing, so a new or removed project shows at once.
//!
//! Writes do not go through here: every PROJECT.md write is a rename of a new file (a new
//! inode), which the next look sees.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use pegasus_proto::ctl::ProjectInfo;

use crate::{validate_name, FileStamp, Home, ProjectFile, ScanEntry, StoreError};

/// Whether what a read of PROJECT.md gave may stand for the file until it changes: its content
/// or its content's fault, yes; a failure to read it (out of file descriptors, an I/O error),
/// no: that says nothing about the file, and kept it would, say, lift the project's cap for
/// good.
fn worth_keeping(loaded: &Result<ProjectFile, StoreError>) -> bool {
    !matches!(loaded, Err(StoreError::Io { .. }))
}

/// One project as its PROJECT.md said when it had `stamp`.
#[derive(Clone)]
struct Known {
    /// `None` for a look that is not kept (its metadata could not be read).
    stamp: Option<FileStamp>,
    /// The parsed file, or why it does not load.
    file: Result<Arc<ProjectFile>, String>,
    /// Its listing row, without the live facts (worker, task, cost).
    row: ProjectInfo,
}

/// Every project of one home, each as its PROJECT.md says now (see the module doc).
pub struct ProjectRegistry {
    home: Home,
    known: Mutex<HashMap<String, Known>>,
    /// How many times a PROJECT.md was read and parsed (for tests).
    #[cfg(test)]
    reads: std::sync::atomic::AtomicU64,
}

impl ProjectRegistry {
    /// A registry of `home`'s projects; nothing is read until asked.
    pub fn new(home: Home) -> Self {
        ProjectRegistry {
            home,
            known: Mutex::default(),
            #[cfg(test)]
            reads: Default::default(),
        }
    }

    /// Project `name` as its PROJECT.md says now: `None` when there is no such project,
    /// `Some(Err(why))` when its file does not load.
    pub fn get(&self, name: &str) -> Option<Result<Arc<ProjectFile>, String>> {
        Some(self.look_at(name, SystemTime::now())?.file)
    }

    /// Project `name` as its PROJECT.md says now; `None` when there is no such project or the
    /// file does not load.
    pub fn project(&self, name: &str) -> Option<Arc<ProjectFile>> {
        self.get(name)?.ok()
    }

    /// The `budget_usd` of project `name` as its PROJECT.md says now; `None` when it sets none
    /// or the file cannot be read (a missing or broken file caps nothing).
    pub fn budget_usd(&self, name: &str) -> Option<f64> {
        self.project(name)?.budget_usd()
    }

    /// The `model` of project `name` as its PROJECT.md says now (`None`: the default).
    pub fn model(&self, name: &str) -> Option<String> {
        self.project(name)?.model().map(str::to_string)
    }

    /// The `fallback:` list of project `name` as its PROJECT.md says now; `None` when it sets
    /// none (config.yml's list applies) or the file cannot be read.
    pub fn fallback(&self, name: &str) -> Option<Vec<String>> {
        self.project(name)?.fallback().map(<[String]>::to_vec)
    }

    /// Every project's listing row from its PROJECT.md (no live worker facts), sorted by name;
    /// `spend` gives each project's cost.
    pub fn rows(&self, spend: impl Fn(&str) -> f64) -> Result<Vec<ProjectInfo>, StoreError> {
        let now = SystemTime::now();
        let dirs = crate::scan::project_dirs(&self.home)?;
        let mut out = Vec::with_capacity(dirs.len());
        let mut seen = HashSet::with_capacity(dirs.len());
        for (name, dir) in dirs {
            if let Some(known) = self.look(&name, &dir, now) {
                seen.insert(name);
                out.push(known.row);
            }
        }
        self.lock().retain(|name, _| seen.contains(name));
        for row in &mut out {
            row.cost_usd = spend(&row.name);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn look_at(&self, name: &str, now: SystemTime) -> Option<Known> {
        validate_name(name).ok()?;
        self.look(name, &self.home.project_dir(name), now)
    }

    /// The project in `dir` as its file says at `now`; `None` when it has no PROJECT.md.
    fn look(&self, name: &str, dir: &Path, now: SystemTime) -> Option<Known> {
        // `metadata` never opens the file: a FIFO or a device is only looked at.
        let stamp = match std::fs::metadata(dir.join("PROJECT.md")) {
            Ok(meta) => Some(FileStamp::of(&meta)),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.kind() == std::io::ErrorKind::NotADirectory =>
            {
                self.lock().remove(name);
                return None;
            }
            // Unreadable metadata: load it and let the load say why (never kept).
            Err(_) => None,
        };
        if let Some(stamp) = stamp {
            if let Some(known) = self.lock().get(name).filter(|k| k.stamp == Some(stamp)) {
                return Some(known.clone());
            }
        }
        // Read after the stat: if the file changes in between, the next look's stamp differs
        // from the one kept here and it is read again.
        let loaded = self.read(dir);
        let keep = worth_keeping(&loaded);
        let entry = ScanEntry {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            project: loaded,
        };
        let row = crate::project_info::from_entry(&entry, 0.0);
        let file = entry.project.map(Arc::new).map_err(|e| e.to_string());
        let mut known = self.lock();
        match stamp {
            Some(stamp) if keep && stamp.settled(now) => {
                let k = Known {
                    stamp: Some(stamp),
                    file,
                    row,
                };
                known.insert(name.to_string(), k.clone());
                Some(k)
            }
            stamp => {
                known.remove(name);
                Some(Known { stamp, file, row })
            }
        }
    }

    fn read(&self, dir: &Path) -> Result<ProjectFile, StoreError> {
        #[cfg(test)]
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::home_guard::load_checked(&self.home, dir)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Known>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    impl ProjectRegistry {
        fn budget_at(&self, name: &str, now: SystemTime) -> Option<f64> {
            self.look_at(name, now)?.file.ok()?.budget_usd()
        }
    }
    use crate::stamp::SETTLE;
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
        let b = ProjectRegistry::new(home.clone());
        write(&home, &project_md("budget_usd: 5\n"));
        age(&home, 60);
        assert_eq!(b.budget_at("p", later()), Some(5.0));
        assert_eq!(b.budget_at("p", later()), Some(5.0));
        assert_eq!(
            b.reads.load(Ordering::Relaxed),
            1,
            "the second call only stats"
        );
        // In place, same size: the modification time moves.
        write(&home, &project_md("budget_usd: 6\n"));
        assert_eq!(b.budget_at("p", later()), Some(6.0));
        age(&home, 60);
        assert_eq!(b.budget_at("p", later()), Some(6.0));
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
        assert_eq!(b.budget_at("p", later()), Some(4.0));
        // Replaced by one that sets no budget.
        std::fs::write(&tmp, project_md("")).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(b.budget_at("p", later()), None);
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
        let b = ProjectRegistry::new(home.clone());
        write(&home, &project_md("budget_usd: 5\n"));
        assert_eq!(b.budget_usd("p"), Some(5.0));
        assert_eq!(b.budget_usd("p"), Some(5.0));
        assert_eq!(
            b.reads.load(Ordering::Relaxed),
            2,
            "not kept while it may still change"
        );
        assert_eq!(b.budget_at("p", later()), Some(5.0));
        assert_eq!(b.budget_at("p", later()), Some(5.0));
        assert_eq!(b.reads.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_missing_or_broken_file_caps_nothing() {
        let (_d, home) = home();
        let b = ProjectRegistry::new(home.clone());
        assert_eq!(b.budget_at("p", later()), None);
        assert_eq!(b.budget_at("../p", later()), None);
        write(&home, "---\nname: [unclosed\n");
        assert_eq!(b.budget_at("p", later()), None);
        write(&home, &project_md("budget_usd: 2.5\n"));
        assert_eq!(b.budget_at("p", later()), Some(2.5));
        std::fs::remove_file(home.project_dir("p").join("PROJECT.md")).unwrap();
        assert_eq!(
            b.budget_at("p", later()),
            None,
            "a removed file caps nothing"
        );
        assert!(b.lock().is_empty(), "and is forgotten");
    }

    /// The rows, the budget and the model are one read of one file: they always agree.
    #[test]
    fn rows_budget_and_model_come_from_one_read_and_follow_new_and_removed_projects() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let now = chrono::Utc::now();
        for name in ["a", "b"] {
            let np = crate::NewProject {
                name: name.into(),
                goal: format!("goal {name}"),
                model: Some("openai/m".into()),
                ..Default::default()
            };
            crate::create_project(&home, &np, now).unwrap();
        }
        let reg = ProjectRegistry::new(home.clone());
        let rows = reg.rows(|_| 1.5).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].goal.as_deref(), Some("goal a"));
        assert_eq!(rows[0].cost_usd, 1.5);
        assert_eq!(reg.model("a").as_deref(), Some("openai/m"));
        // A rewrite (atomic rename: a new inode) is seen by every look.
        let pdir = home.project_dir("a");
        let mut file = ProjectFile::load(&pdir).unwrap();
        file.apply(crate::Verb::Suspend, now).unwrap();
        file.save(&pdir).unwrap();
        let rows = reg.rows(|_| 0.0).unwrap();
        assert_eq!(rows[0].status, Some(crate::ProjectStatus::Suspended));
        assert_eq!(
            reg.project("a").map(|p| p.status()),
            Some(crate::ProjectStatus::Suspended)
        );
        // A removed project disappears; a new one appears.
        std::fs::remove_dir_all(home.project_dir("b")).unwrap();
        assert_eq!(reg.model("b"), None);
        let np = crate::NewProject {
            name: "c".into(),
            goal: "goal c".into(),
            ..Default::default()
        };
        crate::create_project(&home, &np, now).unwrap();
        let names: Vec<String> = reg
            .rows(|_| 0.0)
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(reg.model("c"), None, "no model: the default");
    }
}
