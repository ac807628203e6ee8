//! Crash-safe file replacement and directory durability, as the store's errors: the one
//! implementation is `pegasus_fs::atomic` (which `pegasus-code` uses too); these only say its
//! errors as [`StoreError`]s, with the same words.

use std::path::Path;

pub use pegasus_fs::atomic::remove_stale_temps;
pub(crate) use pegasus_fs::atomic::{parent_dir, unique_suffix};

use crate::error::{Result, StoreError};

impl From<pegasus_fs::FsError> for StoreError {
    fn from(e: pegasus_fs::FsError) -> StoreError {
        match e {
            pegasus_fs::FsError::Io { path, source } => StoreError::Io { path, source },
            e @ pegasus_fs::FsError::NotAFile(_) => StoreError::Invalid(e.to_string()),
        }
    }
}

/// Replaces `path` with `bytes` so that readers and crashes see either the old or the new file
/// (`pegasus_fs::write_atomic`: temp file, fsync, rename, fsync of the folder). Creates
/// nothing else; the directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(pegasus_fs::write_atomic(path, bytes)?)
}

/// Replaces a file atomically for readers but flushes nothing to disk, for caches rebuilt from
/// a durable truth after a machine crash (`pegasus_fs::replace_cache`).
pub fn replace_cache(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(pegasus_fs::replace_cache(path, bytes)?)
}

/// Flushes a directory's entries (creations, renames, removals) to disk
/// (`pegasus_fs::fsync_dir`).
pub fn fsync_dir(dir: &Path) -> Result<()> {
    Ok(pegasus_fs::fsync_dir(dir)?)
}

/// `create_dir_all` that also fsyncs the parent of every directory it creates
/// (`pegasus_fs::create_dir_all_durable`).
pub fn create_dir_all_durable(dir: &Path) -> Result<()> {
    Ok(pegasus_fs::create_dir_all_durable(dir)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn its_errors_are_store_errors_with_the_same_words() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope/state.txt");
        match write_atomic(&missing, b"x") {
            Err(StoreError::Io { path, .. }) => assert!(path.starts_with(dir.path().join("nope"))),
            other => panic!("{other:?}"),
        }
        match write_atomic(Path::new("/"), b"x") {
            Err(StoreError::Invalid(m)) => assert_eq!(m, "/: not a file path"),
            other => panic!("{other:?}"),
        }
    }
}
