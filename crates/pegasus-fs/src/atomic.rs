//! Crash-safe file replacement and directory durability.
//!
//! Every state file of Pegasus is written through [`write_atomic`], so a crash at any point
//! leaves either the old or the new content, never a mix. This is the only place in the
//! project that knows the temp-file/fsync/rename/fsync-dir dance.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a file could not be written, naming the file or folder at fault.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// An operating-system error on a named file or directory; the path says where to look.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A path that names no file (it ends in `..` or is a root).
    #[error("{}: not a file path", .0.display())]
    NotAFile(PathBuf),
}

impl FsError {
    /// Wraps an I/O error with the path it happened on: `.map_err(FsError::io(path))`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> FsError {
        let path = path.into();
        move |source| FsError::Io { path, source }
    }
}

/// Distinguishes temp files made by concurrent writers inside one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The directory holding `path`, with `""` (a bare file name) meaning the cwd, so relative paths
/// can be fsynced too.
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A name no other writer (thread or process) will pick, so two writers never share a temp file.
pub fn unique_suffix() -> String {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{nanos}", std::process::id())
}

/// Replaces `path` with `bytes` so that readers and crashes see either the old or the new file.
///
/// Writes a uniquely named temp file in the same directory (a rename is only atomic within one
/// file system), fsyncs it, renames it over the target and fsyncs the directory so the rename
/// itself survives a power cut. Creates nothing else; the directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    replace(path, bytes, true)?;
    fsync_dir(&parent_dir(path))
}

/// Replaces a file atomically for readers (temp file, rename) but flushes nothing to disk: for
/// caches that are rebuilt from a durable truth after a machine crash, such as the task index.
/// A reader never sees a half-written file; after a power loss the file may be old or empty.
pub fn replace_cache(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    replace(path, bytes, false)
}

/// Writes `bytes` to a uniquely named temp file beside `path` (fsynced if `sync`) and renames
/// it over `path`; the temp file is removed when a step fails.
fn replace(path: &Path, bytes: &[u8], sync: bool) -> Result<(), FsError> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| FsError::NotAFile(path.to_path_buf()))?;
    let tmp = parent_dir(path).join(format!(".{file_name}.tmp-{}", unique_suffix()));
    let result = write_then_rename(&tmp, path, bytes, sync);
    if result.is_err() {
        // Best effort: a leftover temp file is harmless but untidy.
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn write_then_rename(tmp: &Path, path: &Path, bytes: &[u8], sync: bool) -> Result<(), FsError> {
    // 0600: sessions, ledgers and PROJECT.md are the user's alone (DESIGN.md §12).
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)
        .map_err(FsError::io(tmp))?;
    file.write_all(bytes).map_err(FsError::io(tmp))?;
    if sync {
        file.sync_all().map_err(FsError::io(tmp))?;
    }
    drop(file);
    fs::rename(tmp, path).map_err(FsError::io(path))
}

/// Removes the temp files [`write_atomic`] and [`replace_cache`] leave in `dir` when the
/// process is killed between writing and renaming (`.<name>.tmp-<suffix>`), if older than
/// `min_age` — a younger one may belong to a write in progress in another process. Returns
/// how many it removed. For the start of a process that owns the folder.
pub fn remove_stale_temps(dir: &Path, min_age: std::time::Duration) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with('.') && name.contains(".tmp-")) {
            continue;
        }
        let old = e
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if old && fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Flushes a directory's entries (creations, renames, removals) to disk; without it a rename can
/// be lost on power failure even though the file data was synced.
pub fn fsync_dir(dir: &Path) -> Result<(), FsError> {
    let d = File::open(dir).map_err(FsError::io(dir))?;
    d.sync_all().map_err(FsError::io(dir))
}

/// `create_dir_all` that also fsyncs the parent of every directory it creates, so a freshly
/// made tree is still there after a crash.
pub fn create_dir_all_durable(dir: &Path) -> Result<(), FsError> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = parent_dir(dir);
    if dir.parent().is_some_and(|p| !p.as_os_str().is_empty()) {
        create_dir_all_durable(&parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => fsync_dir(&parent),
        // Someone else made it meanwhile: fine, that is what we wanted.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(FsError::io(dir)(e)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn write_atomic_replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.txt")]);
    }

    #[test]
    fn stale_temp_files_are_removed_and_young_ones_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        fs::write(p.join(".index.jsonl.tmp-123-abc"), b"half").unwrap();
        fs::write(p.join("index.jsonl"), b"real").unwrap();
        fs::write(p.join(".hidden"), b"keep").unwrap();
        // Young: kept (another process may be about to rename it).
        assert_eq!(
            remove_stale_temps(p, std::time::Duration::from_secs(3600)),
            0
        );
        assert_eq!(remove_stale_temps(p, std::time::Duration::ZERO), 1);
        assert!(!p.join(".index.jsonl.tmp-123-abc").exists());
        assert!(p.join("index.jsonl").exists() && p.join(".hidden").exists());
    }

    #[test]
    fn write_atomic_into_missing_dir_fails_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope/state.txt");
        let err = write_atomic(&p, b"x").unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        assert!(matches!(err, FsError::Io { .. }), "{err:?}");
    }

    #[test]
    fn a_path_that_names_no_file_is_refused() {
        let err = write_atomic(Path::new("/"), b"x").unwrap_err();
        assert!(matches!(err, FsError::NotAFile(_)), "{err:?}");
        assert_eq!(err.to_string(), "/: not a file path");
    }

    #[test]
    fn create_dir_all_durable_makes_nested_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/c");
        create_dir_all_durable(&p).unwrap();
        assert!(p.is_dir());
        create_dir_all_durable(&p).unwrap();
    }
}
