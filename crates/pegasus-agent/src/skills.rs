//! Skills: `skills/<name>/SKILL.md` files (frontmatter `name`, `description` + a markdown body)
//! found in the project's folder and the home's global folder (DESIGN.md §6).
//!
//! Skills are discovered by scanning, with no index file, so dropping a folder in is enough.
//! The system prompt lists only names and descriptions; the model pulls a body in with
//! `use_skill` when it needs it. A project skill overrides a global one of the same name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pegasus_store::{split_frontmatter, strip_bom};
use serde::Deserialize;

/// One skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// Its name (frontmatter `name`, else the folder name).
    pub name: String,
    /// One line on when to use it.
    pub description: String,
    /// The instructions.
    pub body: String,
    /// The SKILL.md it came from.
    pub path: PathBuf,
}

#[derive(Deserialize, Default)]
struct Frontmatter {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// The largest SKILL.md read (256 KiB).
const MAX_SKILL_FILE: u64 = 256 * 1024;

/// Reads one SKILL.md; `folder` names the skill when the frontmatter does not. A file that
/// cannot be read is skipped (logged), a frontmatter that does not parse is treated as absent:
/// one bad skill must not hide the others.
pub fn load_skill(path: &Path, folder: &str) -> Option<Skill> {
    // A regular file only, never through a symlink, never past the cap: a FIFO named SKILL.md
    // must not block the worker, and a link must not make `use_skill` show a file the sandbox
    // hides.
    let text = match pegasus_store::read_text_nofollow(path, MAX_SKILL_FILE) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "skipping unreadable skill");
            return None;
        }
    };
    let (fm, body) = match split_frontmatter(&text) {
        Ok(split) => (Some(split.yaml), split.body),
        // A SKILL.md without a (closed) frontmatter is still a skill: all of it is the
        // instructions, and the folder names it.
        Err(_) => (None, strip_bom(&text)),
    };
    let fm: Frontmatter = match fm.map(serde_norway::from_str::<Frontmatter>) {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            tracing::warn!(path = %path.display(), error = %e, "skill frontmatter does not parse");
            Frontmatter::default()
        }
        None => Frontmatter::default(),
    };
    Some(Skill {
        name: fm
            .name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| folder.to_string()),
        description: fm.description.unwrap_or_default().trim().to_string(),
        body: body.trim().to_string(),
        path: path.to_path_buf(),
    })
}

fn skills_in(dir: &Path) -> Vec<Skill> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    // A skill is a real folder holding a regular SKILL.md: symlinks are not followed.
    let mut folders: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    folders.sort();
    folders
        .into_iter()
        .filter_map(|f| {
            let file = f.join("SKILL.md");
            if !std::fs::symlink_metadata(&file).is_ok_and(|m| m.file_type().is_file()) {
                return None;
            }
            let folder = f.file_name()?.to_string_lossy().into_owned();
            load_skill(&file, &folder)
        })
        .collect()
}

/// Every visible skill, by name; for a name found in several folders the first folder of
/// `dirs` wins (project skills come first).
pub fn discover(dirs: &[PathBuf]) -> BTreeMap<String, Skill> {
    let mut out = BTreeMap::new();
    for dir in dirs {
        for skill in skills_in(dir) {
            out.entry(skill.name.clone()).or_insert(skill);
        }
    }
    out
}

/// The skill called `name` (by its name, else by its folder name), with the same precedence.
pub fn find(dirs: &[PathBuf], name: &str) -> Option<Skill> {
    let all = discover(dirs);
    if let Some(s) = all.get(name) {
        return Some(s.clone());
    }
    all.into_values().find(|s| {
        s.path
            .parent()
            .and_then(|p| p.file_name())
            .is_some_and(|f| f == name)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn skill_from(text: &str) -> Skill {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("SKILL.md");
        std::fs::write(&path, text).unwrap();
        load_skill(&path, "folder").unwrap()
    }

    #[test]
    fn frontmatter_and_body_are_split() {
        let s = skill_from("---\nname: a\ndescription: d\n---\nhello\n");
        assert_eq!((s.name.as_str(), s.description.as_str()), ("a", "d"));
        assert_eq!(s.body, "hello");
        let s = skill_from("no fm");
        assert_eq!((s.name.as_str(), s.body.as_str()), ("folder", "no fm"));
        let s = skill_from("---\nunclosed");
        assert_eq!(
            (s.name.as_str(), s.body.as_str()),
            ("folder", "---\nunclosed")
        );
    }

    #[test]
    fn skill_file_with_a_byte_order_mark_and_crlf_loads() {
        let s =
            skill_from("\u{feff}---\r\nname: deploy\r\ndescription: ship it\r\n--- \r\nSteps.\r\n");
        assert_eq!(s.name, "deploy");
        assert_eq!(s.description, "ship it");
        assert_eq!(s.body, "Steps.");
        let s = skill_from("\u{feff}Just steps.\n");
        assert_eq!(
            (s.name.as_str(), s.body.as_str()),
            ("folder", "Just steps.")
        );
    }

    #[test]
    fn project_skill_overrides_global_by_name() {
        let proj = tempfile::tempdir().unwrap();
        let global = tempfile::tempdir().unwrap();
        let write = |root: &Path, folder: &str, text: &str| {
            std::fs::create_dir_all(root.join(folder)).unwrap();
            std::fs::write(root.join(folder).join("SKILL.md"), text).unwrap();
        };
        write(
            global.path(),
            "deploy",
            "---\nname: deploy\ndescription: global\n---\nG",
        );
        write(global.path(), "lint", "---\ndescription: lint it\n---\nL");
        write(
            proj.path(),
            "dep",
            "---\nname: deploy\ndescription: project\n---\nP",
        );
        write(proj.path(), "broken", "---\nname: [oops\n---\nB");
        let dirs = vec![proj.path().to_path_buf(), global.path().to_path_buf()];
        let all = discover(&dirs);
        assert_eq!(all["deploy"].description, "project");
        assert_eq!(all["lint"].body, "L");
        assert_eq!(all["broken"].body, "B");
        assert_eq!(find(&dirs, "deploy").unwrap().body, "P");
        assert_eq!(find(&dirs, "dep").unwrap().body, "P");
        assert!(find(&dirs, "nope").is_none());
    }

    #[test]
    fn a_skill_behind_a_symlink_is_not_a_skill() {
        let root = tempfile::tempdir().unwrap();
        let hidden = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(hidden.path().join("secret")).unwrap();
        std::fs::write(hidden.path().join("secret/SKILL.md"), "the CA key").unwrap();
        std::fs::write(hidden.path().join("key"), "the CA key").unwrap();
        // A linked folder, and a real folder whose SKILL.md is a link.
        std::os::unix::fs::symlink(hidden.path().join("secret"), root.path().join("linked"))
            .unwrap();
        std::fs::create_dir(root.path().join("file-linked")).unwrap();
        std::os::unix::fs::symlink(
            hidden.path().join("key"),
            root.path().join("file-linked/SKILL.md"),
        )
        .unwrap();
        let dirs = vec![root.path().to_path_buf()];
        assert!(discover(&dirs).is_empty());
        assert!(find(&dirs, "linked").is_none() && find(&dirs, "file-linked").is_none());
        assert!(load_skill(&root.path().join("file-linked/SKILL.md"), "x").is_none());
    }
}
