//! Write and read confinement of model-run commands with Linux Landlock (DESIGN.md §6): an `exec`
//! command may write only beneath its workdir (or worktree), its private temp dir and the
//! extra paths the user allowed (`agent.exec_writable`), and may not read the Pegasus home
//! outside its own project folder (`run/` with the control socket, `costs/`, other projects'
//! sessions). It may not signal processes outside its own sandbox either (Landlock's signal
//! scope, kernel 6.12+), so `kill` cannot reach pegasusd or other workers.
//!
//! Landlock only grants, so "everything but the home" is granted piecewise: for each folder on
//! the way from `/` to the home, every entry that is not the next step is granted read access
//! (symbolic links are skipped: a link would grant its target, which may be the home).
//! Listing the folders on that way (`ls /`) stays possible, which also lets the names — never
//! the contents — of the home's entries be listed. Entries created in those folders after the
//! command started are not readable by it.
//!
//! The ruleset is built before the fork (opening paths allocates); the forked child only
//! calls `landlock_restrict_self` (see [`crate::contain`]). Where the kernel has no Landlock
//! the command runs without it, and [`crate::warn_if_unsupported`] says so once.

use std::path::{Path, PathBuf};

use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

/// The newest Landlock ABI this code knows; older kernels get what they support (best effort).
const ABI_USED: ABI = ABI::V6;

/// What a project's commands may touch, besides their workdir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPaths {
    /// The Pegasus home: hidden from reads, except `own_dir`.
    pub home: PathBuf,
    /// The project's (or MainAgent's) own folder: readable.
    pub own_dir: PathBuf,
    /// The private temp dir (created if missing; `TMPDIR` points at it): writable.
    pub tmp_dir: PathBuf,
    /// Extra writable paths from config (`agent.exec_writable`), e.g. a build cache.
    pub writable: Vec<PathBuf>,
}

/// Whether this kernel enforces Landlock (its ABI version, when it does).
pub fn landlock_abi() -> Option<i64> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns
    // the ABI version (or an error); it reads and writes no memory.
    let v = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    (v > 0).then_some(v)
}

/// The ruleset that confines one command running in `workdir`, ready for
/// [`RulesetCreated::restrict_self`] in the forked child. `Err` is one line for the model.
pub fn ruleset(paths: &SandboxPaths, workdir: &Path) -> Result<RulesetCreated, String> {
    std::fs::create_dir_all(&paths.tmp_dir).map_err(|e| {
        format!(
            "cannot create the temp dir {}: {e}",
            paths.tmp_dir.display()
        )
    })?;
    let read = AccessFs::from_read(ABI_USED);
    let all = AccessFs::from_all(ABI_USED);
    let fail = |e: landlock::RulesetError| format!("cannot set up the command's sandbox: {e}");
    let mut writable: Vec<PathBuf> = vec![workdir.to_path_buf(), paths.tmp_dir.clone()];
    writable.extend(paths.writable.iter().cloned());
    writable.push(PathBuf::from("/dev/null"));
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(fail)?
        .scope(Scope::from_all(ABI_USED))
        .map_err(fail)?
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(readable_around(&paths.home), read))
        .map_err(fail)?
        .add_rules(path_beneath_rules([&paths.own_dir], read))
        .map_err(fail)?
        // Folder names may be listed everywhere (`ls /`, `find`), contents only as above.
        .add_rules(path_beneath_rules(["/"], AccessFs::ReadDir))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&writable, all))
        .map_err(fail)?;
    Ok(created)
}

/// Everything readable when `hidden` must not be: each entry (not a symlink) of each folder
/// from `/` down to `hidden`'s parent that is not on the way to `hidden`, plus the folders on
/// the way themselves for listing (see the module doc). When `hidden` is `/` or relative,
/// nothing.
fn readable_around(hidden: &Path) -> Vec<PathBuf> {
    let hidden = std::fs::canonicalize(hidden).unwrap_or_else(|_| hidden.to_path_buf());
    let mut out = Vec::new();
    let mut ancestors: Vec<&Path> = hidden.ancestors().skip(1).collect();
    ancestors.reverse();
    for (i, dir) in ancestors.iter().enumerate() {
        let next = ancestors.get(i + 1).copied().unwrap_or(hidden.as_path());
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path == next || e.file_type().map(|t| t.is_symlink()).unwrap_or(true) {
                continue;
            }
            out.push(path);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn everything_around_the_hidden_folder_is_readable_but_not_it() {
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        for d in ["a/home/projects/p", "a/other", "b"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("a/file"), "x").unwrap();
        std::os::unix::fs::symlink(base.join("a/home"), base.join("a/link-to-home")).unwrap();
        let got = readable_around(&base.join("a/home"));
        for want in ["a/other", "a/file", "b"] {
            assert!(got.contains(&base.join(want)), "{want}: {got:?}");
        }
        for not in ["a/home", "a/link-to-home", "a/home/projects", "a"] {
            assert!(!got.contains(&base.join(not)), "{not}: {got:?}");
        }
        // Every folder on the way is covered by its parent's listing, except the way itself.
        assert!(got.iter().all(|p| !base.join("a/home").starts_with(p)));
    }
}
