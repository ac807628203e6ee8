//! The single-daemon guarantee: an exclusive `flock` on `<home>/pegasusd.pid`.
//!
//! A lock, not a check: the kernel drops it the instant the daemon dies, even under `kill -9`,
//! so a stale pid file never blocks a restart, and two daemons can never both believe they own
//! the home (a checked-but-unlocked pid file races and lies after pid reuse).

use crate::SupervisorError;
use pegasus_fs::{FileLock, LockKind, TryLockError};
use std::{
    fs::{File, OpenOptions},
    io::{Read, Seek, SeekFrom, Write},
    path::Path,
    time::Duration,
};

/// Held for the daemon's whole life; dropping it releases the lock.
pub struct PidLock {
    _lock: FileLock,
}

impl PidLock {
    /// Takes the lock and writes our pid into the file, or says who holds it.
    pub fn acquire(path: &Path, home_label: &str) -> Result<PidLock, SupervisorError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| SupervisorError::io("cannot open pid file", path, e))?;
        // `pegasusctl` peeks with a shared lock for an instant when the socket does not
        // answer (`pegasus_store::daemon_lock::peek`): a short retry never mistakes that for a
        // running daemon.
        let mut lock = match FileLock::try_for(
            file,
            LockKind::Exclusive,
            Duration::from_millis(200),
            Duration::from_millis(20),
        ) {
            Ok(lock) => lock,
            Err(TryLockError::Busy(mut file)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let (pid, stopping) = pegasus_store::daemon_lock::parse(&text);
                let pid = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
                let home = home_label.to_string();
                return Err(if stopping {
                    SupervisorError::Stopping { home, pid }
                } else {
                    SupervisorError::AlreadyRunning { home, pid }
                });
            }
            Err(TryLockError::Io(e)) => {
                return Err(SupervisorError::io("cannot lock pid file", path, e));
            }
        };
        let write = |f: &mut File| -> std::io::Result<()> {
            f.set_len(0)?;
            f.seek(SeekFrom::Start(0))?;
            writeln!(f, "{}", std::process::id())?;
            f.sync_all()
        };
        write(&mut lock).map_err(|e| SupervisorError::io("cannot write pid file", path, e))?;
        Ok(PidLock { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn second_lock_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pegasusd.pid");
        let _first = PidLock::acquire(&path, "h").unwrap();
        let err = PidLock::acquire(&path, "h").err().unwrap().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
    }

    #[test]
    fn a_second_lock_on_a_stopping_daemon_says_it_is_stopping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pegasusd.pid");
        let _first = PidLock::acquire(&path, "h").unwrap();
        pegasus_store::daemon_lock::mark_stopping(&path, std::process::id()).unwrap();
        let err = PidLock::acquire(&path, "h").err().unwrap().to_string();
        assert!(
            err.contains("is stopping") && err.contains("once it has exited"),
            "{err}"
        );
    }

    #[test]
    fn stale_pid_file_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pegasusd.pid");
        std::fs::write(&path, "999999\n").unwrap();
        let _lock = PidLock::acquire(&path, "h").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
    }
}
