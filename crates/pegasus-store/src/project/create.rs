//! Making a new project: the [`NewProject`] a `project create` supplies, the fresh PROJECT.md
//! rendered from it, and the folder tree built in a hidden temp folder and renamed into place
//! in one step.

use std::fs;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde_norway::Value;

use super::edit::render_entry;
use super::parse::check_model;
use super::{format_ts, validate_name, ProjectFile, ProjectStatus, PROJECT_FILE, PROJECT_SUBDIRS};
use crate::atomic::{create_dir_all_durable, fsync_dir, unique_suffix};
use crate::error::{Result, StoreError};
use crate::home::Home;

/// What `project create` supplies.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewProject {
    /// Folder and project name; see [`validate_name`].
    pub name: String,
    /// What the project should achieve; the first section of the system prompt.
    pub goal: String,
    /// Context the agent needs (optional `## Background`).
    pub background: Option<String>,
    /// Rules the agent must follow (optional `## Constraints`).
    pub constraints: Option<String>,
    /// `provider/model` override of the configured default.
    pub model: Option<String>,
    /// External working directory for code projects.
    pub workdir: Option<PathBuf>,
}

impl ProjectFile {
    /// Renders a fresh PROJECT.md for a new project: `status: active`, `created: <now>`,
    /// `suspended`/`completed` null, and a body with `## Goal` plus the optional sections.
    pub fn new(p: &NewProject, now: DateTime<Utc>) -> Result<Self> {
        validate_name(&p.name)?;
        let goal = p.goal.trim();
        if goal.is_empty() {
            return Err(StoreError::Invalid(
                "a project needs a goal: say in a sentence what it should achieve".into(),
            ));
        }
        let mut fm = String::new();
        let mut entry = |k: &str, v: Value| -> Result<()> {
            fm.push_str(&render_entry(k, &v)?);
            fm.push('\n');
            Ok(())
        };
        entry("name", Value::String(p.name.clone()))?;
        entry(
            "status",
            Value::String(ProjectStatus::Active.as_str().into()),
        )?;
        if let Some(m) = &p.model {
            check_model(m).map_err(StoreError::Invalid)?;
            entry("model", Value::String(m.clone()))?;
        }
        if let Some(w) = &p.workdir {
            let w = w.to_str().filter(|w| !w.trim().is_empty()).ok_or_else(|| {
                StoreError::Invalid(format!(
                    "workdir {} must be a non-empty UTF-8 path",
                    w.display()
                ))
            })?;
            entry("workdir", Value::String(w.into()))?;
        }
        fm.push_str(&format!("created: {}\n", format_ts(now)));
        fm.push_str("suspended: null\ncompleted: null\n");
        let mut body = format!("\n## Goal\n\n{goal}\n");
        for (title, text) in [
            ("Background", &p.background),
            ("Constraints", &p.constraints),
        ] {
            if let Some(t) = text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
                body.push_str(&format!("\n## {title}\n\n{t}\n"));
            }
        }
        Self::parse(&format!("---\n{fm}---\n{body}"), Path::new(PROJECT_FILE))
    }
}

/// Creates a new project: the DESIGN.md §3 folder tree and its PROJECT.md, built in a hidden temp
/// folder and renamed into `projects/` in one step, so a crash never leaves a half-made
/// project (scans ignore hidden folders). Refuses an existing project with `Exists`.
pub fn create_project(home: &Home, p: &NewProject, now: DateTime<Utc>) -> Result<ProjectFile> {
    let file = ProjectFile::new(p, now)?;
    if let Some(w) = &p.workdir {
        // Over the wire a relative path means nothing (pegasusd's own folder is no one's).
        if !w.is_absolute() {
            return Err(StoreError::Invalid(format!(
                "workdir {} is a relative path: give an absolute one",
                w.display()
            )));
        }
        crate::home_guard::check_outside_home(home.root(), "workdir", Path::new("/"), w)
            .map_err(StoreError::Invalid)?;
    }
    let projects = home.projects_dir();
    create_dir_all_durable(&projects)?;
    let target = projects.join(&p.name);
    if target.symlink_metadata().is_ok() {
        return Err(StoreError::Exists(p.name.clone()));
    }
    let tmp = projects.join(format!(".tmp-{}-{}", p.name, unique_suffix()));
    fs::create_dir(&tmp).map_err(StoreError::io(&tmp))?;
    let built = build_tree(&tmp, &file).and_then(|()| rename_new(&tmp, &target, &p.name));
    if let Err(e) = built {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    fsync_dir(&projects)?;
    Ok(file)
}

/// Fills a fresh project folder: subfolders first, PROJECT.md last.
fn build_tree(dir: &Path, file: &ProjectFile) -> Result<()> {
    for sub in PROJECT_SUBDIRS {
        let d = dir.join(sub);
        fs::create_dir_all(&d).map_err(StoreError::io(&d))?;
    }
    fsync_dir(&dir.join("memory"))?;
    file.save(dir)
}

/// Renames `from` to `to` unless `to` exists (atomically where the OS allows), so two creators
/// racing for one name cannot overwrite each other.
fn rename_new(from: &Path, to: &Path, name: &str) -> Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::errno::Errno;
        use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
        match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(Errno::EEXIST | Errno::ENOTEMPTY) => return Err(StoreError::Exists(name.into())),
            // File systems without RENAME_NOREPLACE: fall back to the checked rename below.
            Err(Errno::EINVAL | Errno::ENOSYS) => {}
            Err(e) => return Err(StoreError::io(to)(e.into())),
        }
    }
    if to.symlink_metadata().is_ok() {
        return Err(StoreError::Exists(name.into()));
    }
    fs::rename(from, to).map_err(StoreError::io(to))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::fixtures::*;
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn new_renders_the_seed_shape() {
        let np = NewProject {
            name: "frontend-redesign".into(),
            goal: "Do it.".into(),
            background: Some("Some context.".into()),
            constraints: None,
            model: Some("anthropic/claude-sonnet-4-20250514".into()),
            workdir: Some("/home/user/code/my-app".into()),
        };
        let p =
            ProjectFile::new(&np, Utc.with_ymd_and_hms(2026, 2, 28, 10, 0, 0).unwrap()).unwrap();
        assert_eq!(
            p.render(),
            "---\nname: frontend-redesign\nstatus: active\nmodel: anthropic/claude-sonnet-4-20250514\nworkdir: /home/user/code/my-app\ncreated: 2026-02-28T10:00:00Z\nsuspended: null\ncompleted: null\n---\n\n## Goal\n\nDo it.\n\n## Background\n\nSome context.\n"
        );
        let bad = NewProject {
            name: "Bad".into(),
            goal: "x".into(),
            ..Default::default()
        };
        assert!(ProjectFile::new(&bad, at(0))
            .unwrap_err()
            .to_string()
            .starts_with("invalid project name `Bad`: use 1-63"));
        let bad = NewProject {
            name: "ok".into(),
            goal: "x".into(),
            model: Some("m".into()),
            ..Default::default()
        };
        assert!(matches!(
            ProjectFile::new(&bad, at(0)),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn create_project_makes_the_tree_and_refuses_a_second_time() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let np = NewProject {
            name: "foo".into(),
            goal: "Ship it".into(),
            ..Default::default()
        };
        let made = create_project(&home, &np, at(0)).unwrap();
        let d = home.project_dir("foo");
        for sub in PROJECT_SUBDIRS {
            assert!(d.join(sub).is_dir(), "{sub}");
        }
        assert_eq!(ProjectFile::load(&d).unwrap(), made);
        assert_eq!(made.goal().as_deref(), Some("Ship it"));
        let e = create_project(&home, &np, at(0)).unwrap_err();
        assert!(e.to_string().starts_with(
            "project foo already exists: talk to it with `pegasusctl project send foo TEXT`"
        ));
        // No temp folders are left behind.
        let names: Vec<_> = fs::read_dir(home.projects_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("foo")]);
    }
}
