//! The one `flock` wrapper: every lock Pegasus takes on a file (the daemon's pid file, a
//! project's worker lock, the task store's lock, a repository's lock) is a [`FileLock`].
//!
//! `flock` belongs to the open file description, so a file opened afresh for each acquisition
//! makes two threads of one process exclude each other exactly like two processes do, and the
//! kernel releases the lock when its holder dies, even under `kill -9`.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Which lock to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// One holder at a time, sharing with nobody.
    Exclusive,
    /// Any number of shared holders, but no exclusive one.
    Shared,
}

/// A lock on a file, held while this value lives; dropping it unlocks. It derefs to the
/// locked file, so a holder can read or write it.
#[derive(Debug)]
pub struct FileLock {
    lock: Flock<File>,
}

/// Why [`FileLock::try_for`] did not get the lock.
#[derive(Debug)]
pub enum TryLockError {
    /// Somebody else held it for the whole patience. The file comes back, so the caller can
    /// read what the holder wrote in it.
    Busy(File),
    /// The lock could not be taken at all (a file system without `flock`, ...).
    Io(std::io::Error),
}

impl FileLock {
    /// Opens (creating it if missing, never truncating) the file at `path` for locking.
    pub fn open(path: &Path) -> std::io::Result<File> {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
    }

    /// Blocks until the lock of `kind` on `file` is ours. A signal interrupting the wait only
    /// makes it wait again.
    pub fn wait(file: File, kind: LockKind) -> std::io::Result<FileLock> {
        let arg = match kind {
            LockKind::Exclusive => FlockArg::LockExclusive,
            LockKind::Shared => FlockArg::LockShared,
        };
        let mut file = file;
        loop {
            match Flock::lock(file, arg) {
                Ok(lock) => return Ok(FileLock { lock }),
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => return Err(std::io::Error::from(errno)),
            }
        }
    }

    /// Tries the lock of `kind` on `file`, again every `every` while somebody else holds it,
    /// for at most `patience` (`Duration::ZERO`: one try).
    pub fn try_for(
        file: File,
        kind: LockKind,
        patience: Duration,
        every: Duration,
    ) -> Result<FileLock, TryLockError> {
        let arg = match kind {
            LockKind::Exclusive => FlockArg::LockExclusiveNonblock,
            LockKind::Shared => FlockArg::LockSharedNonblock,
        };
        let until = Instant::now() + patience;
        let mut file = file;
        loop {
            match Flock::lock(file, arg) {
                Ok(lock) => return Ok(FileLock { lock }),
                Err((f, Errno::EINTR)) => file = f,
                Err((f, Errno::EWOULDBLOCK)) => {
                    if Instant::now() >= until {
                        return Err(TryLockError::Busy(f));
                    }
                    file = f;
                    std::thread::sleep(every);
                }
                Err((_, errno)) => return Err(TryLockError::Io(std::io::Error::from(errno))),
            }
        }
    }
}

impl std::ops::Deref for FileLock {
    type Target = File;

    fn deref(&self) -> &File {
        &self.lock
    }
}

impl std::ops::DerefMut for FileLock {
    fn deref_mut(&mut self) -> &mut File {
        &mut self.lock
    }
}

impl AsRawFd for FileLock {
    fn as_raw_fd(&self) -> RawFd {
        self.lock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io::{Read, Write};

    const TICK: Duration = Duration::from_millis(10);

    fn open(path: &Path) -> File {
        FileLock::open(path).unwrap()
    }

    #[test]
    fn an_exclusive_lock_shuts_out_every_other_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = FileLock::wait(open(&path), LockKind::Exclusive).unwrap();
        for kind in [LockKind::Exclusive, LockKind::Shared] {
            let r = FileLock::try_for(open(&path), kind, Duration::ZERO, TICK);
            assert!(matches!(r, Err(TryLockError::Busy(_))), "{kind:?}: {r:?}");
        }
        drop(held);
        let _again =
            FileLock::try_for(open(&path), LockKind::Exclusive, Duration::ZERO, TICK).unwrap();
    }

    #[test]
    fn shared_locks_share_and_keep_an_exclusive_one_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let one = FileLock::wait(open(&path), LockKind::Shared).unwrap();
        let two = FileLock::try_for(open(&path), LockKind::Shared, Duration::ZERO, TICK).unwrap();
        let r = FileLock::try_for(open(&path), LockKind::Exclusive, Duration::ZERO, TICK);
        assert!(matches!(r, Err(TryLockError::Busy(_))), "{r:?}");
        drop((one, two));
        FileLock::try_for(open(&path), LockKind::Exclusive, Duration::ZERO, TICK).unwrap();
    }

    #[test]
    fn patience_waits_for_the_holder_to_let_go_and_gives_up_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = FileLock::wait(open(&path), LockKind::Exclusive).unwrap();
        let started = Instant::now();
        let r = FileLock::try_for(
            open(&path),
            LockKind::Exclusive,
            Duration::from_millis(100),
            TICK,
        );
        assert!(matches!(r, Err(TryLockError::Busy(_))), "{r:?}");
        assert!(started.elapsed() >= Duration::from_millis(100));
        let p = path.clone();
        let waiter = std::thread::spawn(move || {
            FileLock::try_for(open(&p), LockKind::Exclusive, Duration::from_secs(5), TICK).is_ok()
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn a_blocking_wait_returns_once_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = FileLock::wait(open(&path), LockKind::Exclusive).unwrap();
        let p = path.clone();
        let waiter =
            std::thread::spawn(move || FileLock::wait(open(&p), LockKind::Exclusive).is_ok());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished());
        drop(held);
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn the_holder_writes_through_its_lock_and_a_busy_try_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.pid");
        let mut held = FileLock::wait(open(&path), LockKind::Exclusive).unwrap();
        writeln!(held, "42").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        match FileLock::try_for(file, LockKind::Shared, Duration::ZERO, TICK) {
            Err(TryLockError::Busy(mut f)) => {
                let mut text = String::new();
                f.read_to_string(&mut text).unwrap();
                assert_eq!(text, "42\n");
            }
            other => panic!("{other:?}"),
        }
        assert!(held.as_raw_fd() >= 0);
    }
}
