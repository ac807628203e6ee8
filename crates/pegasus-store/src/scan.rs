//! The restart scan: the project list is the `projects/` folder itself, with no index file
//! that could disagree with it.

use std::path::PathBuf;

use crate::error::{Result, StoreError};
use crate::home::Home;
use crate::project::{ProjectFile, PROJECT_FILE};

/// One project folder found by [`scan_projects`]. A malformed PROJECT.md is reported here
/// instead of failing the scan, so one bad project never hides the others.
#[derive(Debug)]
pub struct ScanEntry {
    /// The folder name (what the project should be called).
    pub name: String,
    /// The project folder.
    pub dir: PathBuf,
    /// The loaded PROJECT.md, or why it could not be loaded.
    pub project: Result<ProjectFile, StoreError>,
}

/// Every folder in `projects/` that holds a PROJECT.md, loaded with [`ProjectFile::load`] and
/// sorted by name. Folders without one and hidden folders (like the `.tmp-*` of an interrupted
/// create) are ignored; a missing `projects/` is an empty list.
pub fn scan_projects(home: &Home) -> Result<Vec<ScanEntry>> {
    let projects = home.projects_dir();
    let entries = match std::fs::read_dir(&projects) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(StoreError::Io {
                path: projects,
                source: e,
            })
        }
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io(&projects))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        if name.starts_with('.') || !dir.is_dir() || !dir.join(PROJECT_FILE).is_file() {
            continue;
        }
        let project = ProjectFile::load(&dir);
        out.push(ScanEntry { name, dir, project });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::project::{create_project, NewProject};
    use chrono::Utc;
    use std::fs;

    #[test]
    fn scan_lists_valid_malformed_and_mismatched_projects_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let np = |name: &str| NewProject {
            name: name.into(),
            goal: "g".into(),
            ..Default::default()
        };
        create_project(&home, &np("zeta"), Utc::now()).unwrap();
        create_project(&home, &np("alpha"), Utc::now()).unwrap();
        let bad = home.project_dir("broken");
        fs::create_dir_all(&bad).unwrap();
        fs::write(
            bad.join("PROJECT.md"),
            "---\nname: broken\nstatus: actve\n---\n",
        )
        .unwrap();
        let other = home.project_dir("moved");
        fs::create_dir_all(&other).unwrap();
        let text = fs::read_to_string(home.project_dir("alpha").join("PROJECT.md")).unwrap();
        fs::write(other.join("PROJECT.md"), text).unwrap();
        fs::create_dir_all(home.project_dir("empty-dir")).unwrap();
        fs::create_dir_all(home.projects_dir().join(".tmp-x-1")).unwrap();
        fs::write(home.projects_dir().join(".tmp-x-1/PROJECT.md"), "junk").unwrap();

        let found = scan_projects(&home).unwrap();
        let names: Vec<_> = found.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["alpha", "broken", "moved", "zeta"]);
        assert_eq!(found[0].project.as_ref().unwrap().name(), "alpha");
        let err = found[1].project.as_ref().unwrap_err().to_string();
        assert!(
            err.contains("PROJECT.md:3") && err.contains("status"),
            "{err}"
        );
        let err = found[2].project.as_ref().unwrap_err().to_string();
        assert!(err.contains("does not match its folder `moved`"), "{err}");
        assert!(found[3].project.is_ok());
        assert_eq!(found[3].dir, home.project_dir("zeta"));
    }

    #[test]
    fn scan_of_missing_projects_dir_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert!(scan_projects(&Home::new(dir.path().join("none")))
            .unwrap()
            .is_empty());
    }
}
