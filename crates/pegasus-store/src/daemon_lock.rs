//! What the pid file of a home says about its daemon, read without the daemon's help: whether
//! a pegasusd holds the home (its `flock` on `<home>/pegasusd.pid`), its pid, and whether it is
//! stopping. `pegasusctl` asks when the control socket does not answer, so that `status`,
//! `stop` and a second `pegasusd` tell the same story while a daemon finishes its workers.
//!
//! The file holds `PID\n` while the daemon serves and `PID stopping\n` once it stops (written
//! over the same bytes, so a reader never sees an empty file); the lock, not the text, says
//! whether anybody holds the home.

use pegasus_fs::{FileLock, LockKind, TryLockError};
use std::fs::OpenOptions;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// The word after the pid once the daemon stops.
pub const STOPPING: &str = "stopping";

/// Who holds a home, as its pid file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonLock {
    /// Nobody: no daemon runs on this home.
    Free,
    /// A daemon holds the home; `pid` as its file says (`None` when unreadable).
    Held {
        /// The daemon's pid, as its file says; `None` when the file does not hold one.
        pid: Option<u32>,
        /// Whether the daemon wrote that it is stopping (finishing its workers).
        stopping: bool,
    },
}

/// Parses the pid file's text: the pid, and whether the daemon said it is stopping.
pub fn parse(text: &str) -> (Option<u32>, bool) {
    let mut words = text.split_whitespace();
    let pid = words.next().and_then(|w| w.parse().ok());
    (pid, words.any(|w| w == STOPPING))
}

/// Whether a daemon holds the home of `pid_file`. The test takes a shared lock for an instant
/// when the file is not held; a daemon starting in that instant retries (see pegasusd's pid
/// lock), so the look never keeps one from starting.
pub fn peek(pid_file: &Path) -> DaemonLock {
    let Ok(file) = OpenOptions::new().read(true).open(pid_file) else {
        return DaemonLock::Free;
    };
    match FileLock::try_for(file, LockKind::Shared, Duration::ZERO, Duration::ZERO) {
        Ok(lock) => {
            drop(lock);
            DaemonLock::Free
        }
        Err(TryLockError::Busy(mut file)) => {
            let mut text = String::new();
            let _ = file.by_ref().take(64).read_to_string(&mut text);
            let (pid, stopping) = parse(&text);
            DaemonLock::Held { pid, stopping }
        }
        // Cannot tell (a file system without flock): say nobody, as before.
        Err(TryLockError::Io(_)) => DaemonLock::Free,
    }
}

/// Marks the pid file of a stopping daemon (`PID stopping`), written over its `PID` so the
/// file is never seen empty. Informational: the lock is what counts.
pub fn mark_stopping(pid_file: &Path, pid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new().write(true).open(pid_file)?;
    file.write_all_at(format!("{pid} {STOPPING}\n").as_bytes(), 0)?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_pid_and_the_stopping_mark_are_read_back() {
        assert_eq!(parse("123\n"), (Some(123), false));
        assert_eq!(parse("123 stopping\n"), (Some(123), true));
        assert_eq!(parse(""), (None, false));
        assert_eq!(parse("x"), (None, false));
    }

    #[test]
    fn a_held_file_is_seen_held_with_its_mark_and_a_free_one_free() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pegasusd.pid");
        assert_eq!(peek(&path), DaemonLock::Free);
        std::fs::write(&path, "4242\n").unwrap();
        assert_eq!(peek(&path), DaemonLock::Free);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let held = FileLock::wait(file, LockKind::Exclusive).unwrap();
        assert_eq!(
            peek(&path),
            DaemonLock::Held {
                pid: Some(4242),
                stopping: false
            }
        );
        mark_stopping(&path, 4242).unwrap();
        assert_eq!(
            peek(&path),
            DaemonLock::Held {
                pid: Some(4242),
                stopping: true
            }
        );
        drop(held);
        assert_eq!(peek(&path), DaemonLock::Free);
    }
}
