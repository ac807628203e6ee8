//! The listing rows of every project, kept between requests: `status` and `project list` used
//! to re-read and re-parse every PROJECT.md each time (1,000 reads per `status`). A row is
//! reused while its PROJECT.md has the same [`FileStamp`] (every write Pegasus makes is a
//! rename of a new file, a new inode; an edit by hand moves its times) and is read again
//! otherwise. The folder is still listed on every request, so a new
//! or removed project shows at once.

use crate::supervisor::lock;
use pegasus_proto::ctl::ProjectInfo;
use pegasus_store::{FileStamp, Home, ProjectFile, ScanEntry, StoreError};
use std::{collections::HashMap, sync::Mutex};

/// The cached rows, by project name.
#[derive(Default)]
pub(crate) struct ProjectRows {
    rows: Mutex<HashMap<String, (FileStamp, ProjectInfo)>>,
}

impl ProjectRows {
    /// Every project's row from the files (no live worker facts), sorted by name; `spend`
    /// gives each project's cost.
    pub fn rows(
        &self,
        home: &Home,
        spend: impl Fn(&str) -> f64,
    ) -> Result<Vec<ProjectInfo>, StoreError> {
        let dirs = pegasus_store::scan::project_dirs(home)?;
        let mut cache = lock(&self.rows);
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (name, dir) in dirs {
            // `metadata` never opens the file: a FIFO or a device is only looked at.
            let meta = match std::fs::metadata(dir.join("PROJECT.md")) {
                Ok(m) => m,
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        || e.kind() == std::io::ErrorKind::NotADirectory =>
                {
                    continue
                }
                Err(_) => {
                    // Unreadable metadata: load it and let the load say why.
                    let row = load_row(&name, &dir);
                    out.push(row);
                    continue;
                }
            };
            let key = FileStamp::of(&meta);
            let row = match cache.get(&name) {
                Some((k, row)) if *k == key => row.clone(),
                _ => {
                    let row = load_row(&name, &dir);
                    cache.insert(name.clone(), (key, row.clone()));
                    row
                }
            };
            seen.insert(name);
            out.push(row);
        }
        cache.retain(|name, _| seen.contains(name));
        drop(cache);
        for row in &mut out {
            row.cost_usd = spend(&row.name);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

/// Reads one project's row from its PROJECT.md.
fn load_row(name: &str, dir: &std::path::Path) -> ProjectInfo {
    let entry = ScanEntry {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        project: ProjectFile::load(dir),
    };
    pegasus_store::project_info::from_entry(&entry, 0.0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn rows_are_reused_until_project_md_changes_and_follow_new_and_removed_projects() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let now = chrono::Utc::now();
        for name in ["a", "b"] {
            let np = pegasus_store::NewProject {
                name: name.into(),
                goal: format!("goal {name}"),
                ..Default::default()
            };
            pegasus_store::create_project(&home, &np, now).unwrap();
        }
        let cache = ProjectRows::default();
        let rows = cache.rows(&home, |_| 1.5).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].goal.as_deref(), Some("goal a"));
        assert_eq!(rows[0].cost_usd, 1.5);
        // A rewrite (atomic rename: a new inode) is seen.
        let pdir = home.project_dir("a");
        let mut file = ProjectFile::load(&pdir).unwrap();
        file.apply(pegasus_store::Verb::Suspend, now).unwrap();
        file.save(&pdir).unwrap();
        let rows = cache.rows(&home, |_| 0.0).unwrap();
        assert_eq!(
            rows[0].status,
            Some(pegasus_store::ProjectStatus::Suspended)
        );
        // A removed project disappears; a new one appears.
        std::fs::remove_dir_all(home.project_dir("b")).unwrap();
        let np = pegasus_store::NewProject {
            name: "c".into(),
            goal: "goal c".into(),
            ..Default::default()
        };
        pegasus_store::create_project(&home, &np, now).unwrap();
        let names: Vec<String> = cache
            .rows(&home, |_| 0.0)
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["a", "c"]);
    }
}
