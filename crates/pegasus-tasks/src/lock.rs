//! The project-wide task lock (`tasks/.lock`).
//!
//! Every read-check-write of a task (a compare-and-set transition, a freeze, an index rewrite)
//! runs while holding it, so the worker, pegasusd and any number of threads can never
//! interleave one. It is an `flock` on a file opened afresh for each acquisition: flock
//! belongs to the open file description, so two threads of one process exclude each other
//! exactly like two processes do, and the kernel releases it when a holder dies.

use std::fs::{File, OpenOptions};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::TaskError;

/// Held for the duration of one store operation; dropping it unlocks.
#[derive(Debug)]
pub(crate) struct ProjectLock {
    _lock: Flock<File>,
}

impl ProjectLock {
    /// Blocks until the exclusive lock on `path` is ours (creating the file if missing).
    pub(crate) fn acquire(path: &Path) -> Result<Self, TaskError> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(TaskError::io(path))?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => return Ok(ProjectLock { _lock: lock }),
                // A signal interrupted the wait; waiting again is all that is needed.
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(TaskError::Io {
                        path: path.to_path_buf(),
                        source: std::io::Error::from(errno),
                    })
                }
            }
        }
    }
}
