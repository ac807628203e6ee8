//! The restart scan: the project list is the `projects/` folder itself, with no index file
//! that could disagree with it.

use std::path::PathBuf;

use crate::error::{Result, StoreError};
use crate::home::Home;
use crate::home_guard::load_checked;
use crate::project::ProjectFile;

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

/// The candidate project folders of `projects/` (name, path), unsorted: every folder or
/// symlink that is not hidden (like the `.tmp-*` of an interrupted create). Whether it holds a
/// PROJECT.md is for the caller to find out; a missing `projects/` is an empty list.
pub fn project_dirs(home: &Home) -> Result<Vec<(String, PathBuf)>> {
    let projects = home.projects_dir();
    let entries = match std::fs::read_dir(&projects) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(&projects)(e)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::io(&projects))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // A symlinked project folder is followed like a real one.
        let is_dir = entry
            .file_type()
            .is_ok_and(|t| t.is_dir() || t.is_symlink());
        if name.starts_with('.') || !is_dir {
            continue;
        }
        let dir = entry.path();
        dirs.push((name, dir));
    }
    Ok(dirs)
}

/// Every folder in `projects/` that holds a PROJECT.md, loaded with [`load_checked`] and
/// sorted by name. Folders without one and hidden folders (like the `.tmp-*` of an interrupted
/// create) are ignored; a missing `projects/` is an empty list.
///
/// This is on the path of every listing and of the restart scan (1,000 projects are read for
/// one `project list`), so it costs one `open`+`read` per project and nothing more: the folder
/// type comes from the directory listing, a missing PROJECT.md is learnt from the failed read,
/// and the files are read and parsed on every core.
pub fn scan_projects(home: &Home) -> Result<Vec<ScanEntry>> {
    let dirs = project_dirs(home)?;
    let threads = if dirs.len() < 64 { 1 } else { 8 };
    let loaded = par_map(&dirs, threads, |(name, dir)| {
        match load_checked(home, dir) {
            // No PROJECT.md (or not a folder after all): not a project.
            Err(StoreError::NotFound(_)) => None,
            Err(StoreError::Io { ref source, .. })
                if source.kind() == std::io::ErrorKind::NotADirectory =>
            {
                None
            }
            project => Some(ScanEntry {
                name: name.clone(),
                dir: dir.clone(),
                project,
            }),
        }
    });
    let mut out: Vec<ScanEntry> = loaded.into_iter().flatten().collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// `f` of every item, in order, on up to `threads` threads (never more than the machine has
/// cores, nor than items), each taking one contiguous chunk. A panic in `f` reaches the caller.
pub fn par_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(threads)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(&f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| scope.spawn(move || c.iter().map(f).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            // A chunk that panicked is not dropped from the answer: the panic goes on here.
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::project::{create_project, NewProject};
    use chrono::Utc;
    use std::fs;

    #[test]
    fn par_map_keeps_the_order_whatever_the_threads() {
        let items: Vec<usize> = (0..1000).collect();
        let doubled: Vec<usize> = items.iter().map(|i| i * 2).collect();
        for threads in [0, 1, 3, 8, 2000] {
            assert_eq!(par_map(&items, threads, |i| i * 2), doubled);
        }
        assert!(par_map(&[] as &[usize], 8, |i| *i).is_empty());
        // A panic in one chunk is the caller's, not a shorter list.
        let items: Vec<usize> = (0..100).collect();
        let caught = std::panic::catch_unwind(|| {
            par_map(&items, 4, |i| if *i == 70 { panic!("item 70") } else { *i })
        });
        assert!(caught.is_err(), "a panicking chunk must not vanish");
    }

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
