//! The project-wide task lock (`tasks/.lock`).
//!
//! Every read-check-write of a task (a compare-and-set transition, a freeze, an index rewrite)
//! runs while holding it, so the worker, pegasusd and any number of threads can never
//! interleave one. It is an `flock` on a file opened afresh for each acquisition: flock
//! belongs to the open file description, so two threads of one process exclude each other
//! exactly like two processes do, and the kernel releases it when a holder dies.

use std::path::Path;

use pegasus_fs::{FileLock, LockKind};

use crate::error::TaskError;

/// Held for the duration of one store operation; dropping it unlocks.
#[derive(Debug)]
pub(crate) struct ProjectLock {
    _lock: FileLock,
}

impl ProjectLock {
    /// Blocks until the exclusive lock on `path` is ours (creating the file if missing).
    pub(crate) fn acquire(path: &Path) -> Result<Self, TaskError> {
        let file = FileLock::open(path).map_err(TaskError::io(path))?;
        let lock = FileLock::wait(file, LockKind::Exclusive).map_err(TaskError::io(path))?;
        Ok(ProjectLock { _lock: lock })
    }
}
