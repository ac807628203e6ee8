//! The home is never inside a project (DESIGN.md §12): a workdir, a repo path or a path a project's
//! commands may write (`agent.exec_writable`, an MCP entry's `writable`) that is, contains or
//! lies inside the Pegasus home would hand a model the home's files (its own PROJECT.md, the
//! approvals, `tls/ca.key`, every other project), so it is refused wherever it can come in:
//! `project create`, every worker start, the MainAgent's tools, config.yml.
//!
//! Paths are compared as the kernel would resolve them: both sides canonicalised (a home
//! reached through a symlink, `..`), the part of a path that does not exist yet kept as
//! written (it cannot be a symlink). A path is refused when either its canonical form or its
//! plain absolute form overlaps the home, so a symlink inside the home pointing out is refused
//! too.

use std::path::{Component, Path, PathBuf};

use crate::home::Home;
use crate::mcp::McpServerConfig;
use crate::project::ProjectFile;

/// `path` as the kernel would resolve it: the canonical form of its deepest existing ancestor,
/// then the rest with `.` and `..` applied as text (none of it exists, so none of it is a link).
/// A relative `path` is taken from `base`.
pub fn real_path(base: &Path, path: &Path) -> PathBuf {
    let absolute = base.join(path);
    let mut existing = absolute.clone();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(canon) = existing.canonicalize() {
            let mut out = canon;
            for part in rest.iter().rev() {
                match Path::new(part).components().next() {
                    Some(Component::ParentDir) => {
                        out.pop();
                    }
                    Some(Component::CurDir) | None => {}
                    _ => out.push(part),
                }
            }
            return out;
        }
        let Some(last) = existing.components().next_back() else {
            return lexical(&absolute);
        };
        if matches!(last, Component::RootDir | Component::Prefix(_)) {
            return lexical(&absolute);
        }
        rest.push(last.as_os_str().to_os_string());
        existing.pop();
    }
}

/// `path` with `.` and `..` applied as text.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// How `path` overlaps the home whose real path is `home_real`, if it does.
fn overlap(home_real: &Path, home_plain: &Path, path: &Path) -> Option<&'static str> {
    let plain = lexical(path);
    let real = real_path(Path::new("/"), path);
    for (p, h) in [
        (&real, home_real),
        (&plain, home_plain),
        (&real, home_plain),
    ] {
        if p == h {
            return Some("is");
        }
        if p.starts_with(h) {
            return Some("lies inside");
        }
        if h.starts_with(p) {
            return Some("contains");
        }
    }
    None
}

/// Refuses `path` (`what`, e.g. `workdir`) when it is, contains or lies inside the home; a
/// relative `path` is taken from `base`. The error is one line saying what to do.
pub fn check_outside_home(home: &Path, what: &str, base: &Path, path: &Path) -> Result<(), String> {
    let home_plain = lexical(&std::path::absolute(home).unwrap_or_else(|_| home.to_path_buf()));
    let home_real = real_path(Path::new("/"), &home_plain);
    // Not `lexical`: `..` after a symlink is the kernel's to apply (`l/..` where `l` points
    // into the home is the home), so the path goes to `overlap` as written.
    let absolute = base.join(path);
    match overlap(&home_real, &home_plain, &absolute) {
        None => Ok(()),
        Some(how) => Err(format!(
            "{what} {} {how} the Pegasus home {}; a project may not reach the home's files: choose a folder outside it",
            path.display(),
            home_real.display()
        )),
    }
}

/// The working folder of a project without `workdir:`, inside its own folder.
pub const DEFAULT_WORKDIR: &str = "workdir";

fn workdir_is_default(file: &ProjectFile) -> bool {
    file.workdir().is_none()
}

/// The folder a project's file tools and commands work in: its `workdir` (a relative one
/// taken from the project folder), else its own `workdir/`.
pub fn project_workdir(project_dir: &Path, file: &ProjectFile) -> PathBuf {
    match file.workdir() {
        Some(w) => project_dir.join(w),
        None => project_dir.join(DEFAULT_WORKDIR),
    }
}

/// Where an MCP entry's `writable` path `w` points for a project working in `workdir`: `~/...`
/// from `$HOME`, a relative one from the workdir. The one reading of it, for the check here and
/// for the server's spawn, so both judge the same folder.
pub fn writable_path(workdir: &Path, w: &str) -> PathBuf {
    match w.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(rest))
            .unwrap_or_else(|| workdir.join(w)),
        None => workdir.join(w),
    }
}

/// An MCP server's `writable` path `w` as its spawn gives it to the sandbox: resolved now (so a
/// folder swapped for a link later does not move it), and refused when it reaches the home,
/// unless it lies inside the project's own default workdir, which its commands write anyway.
pub fn resolve_writable(
    home: &Path,
    project_dir: &Path,
    workdir: &Path,
    w: &str,
) -> Result<PathBuf, String> {
    let real = real_path(Path::new("/"), &writable_path(workdir, w));
    let own = real_path(Path::new("/"), &project_dir.join(DEFAULT_WORKDIR));
    if real.starts_with(&own) {
        return Ok(real);
    }
    check_outside_home(home, "writable path", Path::new("/"), &real)?;
    Ok(real)
}

/// The writable paths of MCP entries, each with the key that names it.
fn mcp_writable<'a>(
    servers: impl IntoIterator<Item = (&'a String, &'a McpServerConfig)>,
) -> impl Iterator<Item = (String, &'a str)> {
    servers.into_iter().flat_map(move |(name, s)| {
        s.writable
            .iter()
            .map(move |w| (format!("mcp_servers.{name}.writable"), w.as_str()))
    })
}

/// Every path of project `file` (in `project_dir` of `home`) that must stay clear of the home:
/// `workdir`, each `repos[].path`, each `mcp_servers.*.writable`. The first one that does not
/// is the error, naming the key.
pub fn check_project(home: &Home, project_dir: &Path, file: &ProjectFile) -> Result<(), String> {
    let where_ = project_dir.join(crate::PROJECT_FILE);
    let at = |key: &str, e: String| format!("{}: key `{key}`: {e}", where_.display());
    if let Some(w) = file.workdir() {
        check_outside_home(home.root(), "workdir", project_dir, w).map_err(|e| at("workdir", e))?;
    }
    for path in &file.code().repo_paths {
        check_outside_home(home.root(), "repo path", project_dir, Path::new(path))
            .map_err(|e| at("repos", e))?;
    }
    check_mcp_writable(home, project_dir, file, file.mcp_servers())
        .map_err(|e| format!("{}: {e}", where_.display()))?;
    Ok(())
}

/// The `writable` paths of `servers` (PROJECT.md's, or merged with config.yml's) of project
/// `file`: relative ones are taken from the workdir (as the worker does), and inside the
/// project's own default workdir, which its commands may write anyway, is fine.
pub fn check_mcp_writable(
    home: &Home,
    project_dir: &Path,
    file: &ProjectFile,
    servers: &std::collections::BTreeMap<String, McpServerConfig>,
) -> Result<(), String> {
    let own = real_path(Path::new("/"), &project_dir.join(DEFAULT_WORKDIR));
    let base = project_workdir(project_dir, file);
    for (key, w) in mcp_writable(servers) {
        let path = writable_path(&base, w);
        if workdir_is_default(file) && real_path(Path::new("/"), &path).starts_with(&own) {
            continue;
        }
        check_outside_home(home.root(), "writable path", Path::new("/"), &path)
            .map_err(|e| format!("key `{key}`: {e}"))?;
    }
    Ok(())
}

/// [`ProjectFile::load`] of `dir`, then [`check_project`]: how pegasusd and `pegasusctl` load a
/// project they may start or list, so one whose paths reach the home shows as invalid, with the
/// reason, and is never started.
pub fn load_checked(home: &Home, dir: &Path) -> crate::Result<ProjectFile> {
    let file = ProjectFile::load(dir)?;
    check_project(home, dir, &file).map_err(crate::StoreError::Invalid)?;
    Ok(file)
}

/// config.yml's writable paths (`agent.exec_writable`, `mcp_servers.*.writable`) against the
/// home. Relative MCP paths are taken from each project's workdir, so only absolute ones can
/// be judged here; the worker judges the rest at its start.
pub fn check_config(home: &Home, config: &crate::Config) -> Result<(), String> {
    for w in &config.agent.exec_writable {
        check_outside_home(home.root(), "path", Path::new("/"), Path::new(w))
            .map_err(|e| format!("config.yml: key `agent.exec_writable`: {e}"))?;
    }
    for (key, w) in mcp_writable(&config.mcp_servers) {
        let path = writable_path(Path::new(""), w);
        if path.is_absolute() {
            check_outside_home(home.root(), "writable path", Path::new("/"), &path)
                .map_err(|e| format!("config.yml: key `{key}`: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_home_itself_what_contains_it_and_what_lies_inside_it_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = base.join("user/.local/share/pegasus");
        std::fs::create_dir_all(home.join("projects/p")).unwrap();
        std::fs::create_dir_all(base.join("code")).unwrap();
        std::os::unix::fs::symlink(&home, base.join("link-to-home")).unwrap();
        std::os::unix::fs::symlink(base.join("code"), home.join("projects/p/out")).unwrap();
        std::os::unix::fs::symlink(home.join("projects"), base.join("code/l")).unwrap();
        let root = Path::new("/");
        let refused = [
            (home.clone(), "is"),
            (base.join("user"), "contains"),
            (base.clone(), "contains"),
            (PathBuf::from("/"), "contains"),
            (home.join("projects/p/workdir"), "lies inside"),
            (home.join("not/yet/made"), "lies inside"),
            (base.join("link-to-home"), "is"),
            (base.join("link-to-home/projects"), "lies inside"),
            (base.join("code/../user/./.local"), "contains"),
            // Plainly inside the home, even though the link points out of it.
            (home.join("projects/p/out"), "lies inside"),
            // `..` after a link is the kernel's: `code/l/..` with `l` -> the home's projects
            // is the home itself, not `code`.
            (base.join("code/l/.."), "is"),
        ];
        for (p, how) in refused {
            let e = check_outside_home(&home, "workdir", root, &p).unwrap_err();
            assert!(
                e.contains(how) && e.contains("choose a folder outside"),
                "{p:?}: {e}"
            );
        }
        for ok in [
            base.join("code"),
            base.join("code/new/dir"),
            base.join("user2"),
        ] {
            check_outside_home(&home, "workdir", root, &ok).unwrap();
        }
        // A home given through its link is the same home.
        let e = check_outside_home(
            &base.join("link-to-home"),
            "workdir",
            root,
            &base.join("user"),
        );
        assert!(e.unwrap_err().contains("contains"));
        // Relative paths are taken from the base.
        assert!(check_outside_home(&home, "workdir", &home, Path::new("x")).is_err());
        assert!(check_outside_home(&home, "workdir", &home, Path::new("../../../..")).is_err());
        check_outside_home(&home, "workdir", &home, Path::new("../../../../../code")).unwrap();
    }

    #[test]
    fn a_projects_workdir_repos_and_mcp_writable_paths_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = Home::new(base.join("home"));
        let pdir = home.project_dir("p");
        std::fs::create_dir_all(&pdir).unwrap();
        let md = |extra: &str| {
            format!("---\nname: p\nstatus: active\ncreated: 2026-01-01T00:00:00Z\nsuspended: null\ncompleted: null\n{extra}---\n\n## Goal\n\nx\n")
        };
        let load = |extra: &str| ProjectFile::parse(&md(extra), &pdir.join("PROJECT.md")).unwrap();
        check_project(&home, &pdir, &load("")).unwrap();
        check_project(
            &home,
            &pdir,
            &load(&format!("workdir: {}\n", base.join("w").display())),
        )
        .unwrap();
        let cases = [
            (format!("workdir: {}\n", base.display()), "workdir"),
            ("workdir: sub\n".to_string(), "workdir"),
            (
                format!("repos:\n  - {{id: a, path: {}}}\n", home.root().display()),
                "repos",
            ),
            (
                "mcp_servers:\n  fs: {command: x, writable: [../PROJECT.md]}\n".to_string(),
                "mcp_servers.fs.writable",
            ),
        ];
        // Inside the project's own default workdir is what its commands write anyway.
        let cache = "mcp_servers:\n  fs: {command: x, writable: [cache]}\n";
        check_project(&home, &pdir, &load(cache)).unwrap();
        for (extra, key) in cases {
            let e = check_project(&home, &pdir, &load(&extra)).unwrap_err();
            assert!(
                e.contains("PROJECT.md: key `") && e.contains(key),
                "{extra}: {e}"
            );
        }
    }
}
