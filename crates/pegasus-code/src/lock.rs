//! The per-repository lock: every worktree, branch and ref change of one repository runs while
//! holding an `flock` on `<git common dir>/pegasus.lock`. Several workers (one repo may belong
//! to several projects) and several threads of one worker exclude each other alike: the file
//! is opened afresh for each acquisition and flock belongs to the open file description. The
//! kernel releases it when its holder dies, so a `kill -9` never leaves it held.

use std::fs::{File, OpenOptions};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::CodeError;

/// The lock file's name inside the git common dir.
pub const LOCK_FILE: &str = "pegasus.lock";

/// Held while one repository is being changed; dropping it unlocks.
#[derive(Debug)]
pub struct RepoLock {
    _lock: Flock<File>,
}

impl RepoLock {
    /// Blocks until the lock of the repository whose common dir is `common_dir` is ours.
    pub fn acquire(common_dir: &Path) -> Result<RepoLock, CodeError> {
        let path = common_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(CodeError::io(&path))?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => return Ok(RepoLock { _lock: lock }),
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(CodeError::Io {
                        path,
                        source: std::io::Error::from(errno),
                    })
                }
            }
        }
    }
}
