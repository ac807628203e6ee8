//! At most one worker serves a project (DESIGN.md §14): the worker holds an exclusive `flock` on
//! `<project>/worker.lock` for its whole life, and pegasusd starts no worker for a project
//! while that lock is held. With workers on other hosts this is what keeps two apart: a lost
//! link does not mean a dead worker, and both hosts see the project folder (NFS v4 carries
//! `flock` as a lock on the server). The kernel (or the NFS server's lease) releases the lock
//! when its holder dies.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pegasus_fs::{FileLock, LockKind, TryLockError};

/// The lock file, inside the project folder.
pub const WORKER_LOCK: &str = "worker.lock";

/// The lock of one project, held while this value lives.
#[derive(Debug)]
pub struct WorkerLock {
    _lock: FileLock,
}

/// Why the lock could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another worker holds the lock file at this path.
    #[error("another worker serves this project (it holds {0}); only one may run at a time")]
    Held(PathBuf),
    /// The lock file at this path could not be opened or locked.
    #[error("cannot lock {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

fn open(project_dir: &Path) -> Result<(PathBuf, File), LockError> {
    let path = project_dir.join(WORKER_LOCK);
    let file = FileLock::open(&path).map_err(|e| LockError::Io(path.clone(), e))?;
    Ok((path, file))
}

/// Takes the project's worker lock, waiting up to `patience` for a worker that is going away
/// (a killed one's lock is released a moment after its death, when pegasusd may already have
/// started the next).
pub fn hold(project_dir: &Path, patience: Duration) -> Result<WorkerLock, LockError> {
    let (path, file) = open(project_dir)?;
    match FileLock::try_for(
        file,
        LockKind::Exclusive,
        patience,
        Duration::from_millis(50),
    ) {
        Ok(lock) => Ok(WorkerLock { _lock: lock }),
        Err(TryLockError::Busy(_)) => Err(LockError::Held(path)),
        Err(TryLockError::Io(e)) => Err(LockError::Io(path, e)),
    }
}

/// Whether a worker holds the project's lock now (the file is locked and released again at
/// once when it is free). An unreadable lock counts as held: starting a second worker is the
/// worse mistake.
pub fn is_held(project_dir: &Path) -> bool {
    match hold(project_dir, Duration::ZERO) {
        Ok(_) => false,
        Err(LockError::Held(_)) => true,
        Err(LockError::Io(..)) => project_dir.is_dir(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_free_again_when_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_held(dir.path()));
        let lock = hold(dir.path(), Duration::ZERO).unwrap();
        assert!(is_held(dir.path()));
        let second = hold(dir.path(), Duration::from_millis(120));
        assert!(matches!(second, Err(LockError::Held(_))), "{second:?}");
        drop(lock);
        assert!(!is_held(dir.path()));
        let _again = hold(dir.path(), Duration::ZERO).unwrap();
    }

    #[test]
    fn a_waiting_worker_gets_the_lock_once_the_old_one_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let lock = hold(dir.path(), Duration::ZERO).unwrap();
        let path = dir.path().to_path_buf();
        let waiter = std::thread::spawn(move || hold(&path, Duration::from_secs(5)).is_ok());
        std::thread::sleep(Duration::from_millis(100));
        drop(lock);
        assert!(waiter.join().unwrap());
    }
}
