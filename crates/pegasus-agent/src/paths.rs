//! Confinement of tool paths to one folder: the workdir for file tools, `memory/` for memory
//! tools. The one place that decides whether a path the model gave may be touched.
//!
//! The model's path is taken as untrusted text: absolute paths and `..` are refused outright
//! (no lexical games), and symlinks are followed for real by canonicalising the deepest part of
//! the path that exists. Without that last step a symlink inside the workdir pointing at `/etc`
//! (or a dangling one pointing anywhere) would let a write land outside.

use std::path::{Component, Path, PathBuf};

/// Resolves `rel` inside `root` and returns the real path to use: the canonical form of the
/// part that exists, plus the components that do not exist yet (which therefore cannot be
/// symlinks). `label` names the root in errors (`workdir`, `memory`). The error is a sentence
/// for the model.
pub fn resolve_inside(root: &Path, rel: &str, label: &str) -> Result<PathBuf, String> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!(
                    "{rel}: `..` is not allowed; give a path inside the {label}"
                ))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "{rel}: absolute paths are not allowed; give a path relative to the {label}"
                ))
            }
        }
    }
    let canon_root = root
        .canonicalize()
        .map_err(|e| format!("the {label} {} is not usable: {e}", root.display()))?;
    let mut existing = canon_root.clone();
    existing.extend(&parts);
    // Walk up to the deepest entry that exists (a dangling symlink counts as existing, so it
    // is caught below instead of being written through).
    let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        match parts.pop() {
            Some(p) => {
                missing.push(p);
                existing.pop();
            }
            None => break,
        }
    }
    let real = existing.canonicalize().map_err(|e| {
        format!("{rel}: cannot resolve (a symlink that points nowhere?): {e}; refused")
    })?;
    if !real.starts_with(&canon_root) {
        return Err(format!(
            "{rel}: resolves outside the {label} (through a symlink); refused"
        ));
    }
    let mut out = real;
    out.extend(missing.iter().rev());
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn plain_paths_resolve_inside_and_missing_parts_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("a")).unwrap();
        let canon = root.canonicalize().unwrap();
        assert_eq!(
            resolve_inside(root, "a", "workdir").unwrap(),
            canon.join("a")
        );
        assert_eq!(
            resolve_inside(root, "./a/new/file.txt", "workdir").unwrap(),
            canon.join("a/new/file.txt")
        );
        assert_eq!(resolve_inside(root, "", "workdir").unwrap(), canon);
        assert_eq!(resolve_inside(root, ".", "workdir").unwrap(), canon);
    }

    #[test]
    fn escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path();
        symlink(outside.path(), root.join("out")).unwrap();
        symlink("/nonexistent/target", root.join("dangling")).unwrap();
        for bad in [
            "../x",
            "a/../../x",
            "a/..",
            "/etc/passwd",
            "out/x",
            "out",
            "dangling",
        ] {
            assert!(resolve_inside(root, bad, "workdir").is_err(), "{bad}");
        }
    }

    #[test]
    fn symlinks_staying_inside_are_fine() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("real")).unwrap();
        symlink(root.join("real"), root.join("alias")).unwrap();
        let canon = root.canonicalize().unwrap();
        assert_eq!(
            resolve_inside(root, "alias/f", "workdir").unwrap(),
            canon.join("real/f")
        );
    }
}
