//! What identifies one version of a file without reading it, for the caches that re-read a
//! file only when it changed (PROJECT.md for the listing rows in pegasusd and the gateway's
//! budgets, a project's task index for what waits for the user).
//!
//! Same device, inode, size, modification and status-change times: every write Pegasus makes
//! is a rename of a new file (a new inode), and an edit in place moves the status-change time,
//! which no user can set back. What a stamp cannot see is a second edit within one tick of a
//! coarse file-system clock; a cache that must never miss one keeps only files that have
//! [`FileStamp::settled`] (git's "racy" files).

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a file must have been left alone before a stamp stands for its content.
pub const SETTLE: Duration = Duration::from_secs(2);

/// One version of a file, from its metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of the file `meta` was read from.
    pub fn of(meta: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether both times lie at least [`SETTLE`] before `now`: a later edit can then not
    /// leave the stamp as it is. (It reads this machine's clock: on a network file system
    /// whose server clock lags by more than [`SETTLE`], an edit can be seen a little late.)
    pub fn settled(&self, now: SystemTime) -> bool {
        let Ok(now) = now.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let limit = now.saturating_sub(SETTLE);
        let at = |(s, ns): (i64, i64)| {
            u64::try_from(s)
                .ok()
                .map(|s| Duration::new(s, u32::try_from(ns).unwrap_or(0)))
        };
        [self.mtime, self.ctime]
            .into_iter()
            .all(|t| at(t).is_some_and(|t| t <= limit))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_file_settles_once_both_its_times_are_old_enough() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "a").unwrap();
        let stamp = FileStamp::of(&std::fs::metadata(&path).unwrap());
        assert!(!stamp.settled(SystemTime::now()), "just written");
        assert!(stamp.settled(SystemTime::now() + SETTLE + Duration::from_secs(1)));
        // An old modification time is not enough: the status change is recent.
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(60))
            .unwrap();
        let aged = FileStamp::of(&std::fs::metadata(&path).unwrap());
        assert_ne!(aged, stamp);
        assert!(!aged.settled(SystemTime::now()));
    }
}
