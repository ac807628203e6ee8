//! The per-repository lock: every worktree, branch and ref change of one repository runs while
//! holding an `flock` on `<git common dir>/pegasus.lock`. Several workers (one repo may belong
//! to several projects) and several threads of one worker exclude each other alike: the file
//! is opened afresh for each acquisition and flock belongs to the open file description. The
//! kernel releases it when its holder dies, so a `kill -9` never leaves it held.
//!
//! The git commands run while it is held inherit it ([`held_here`]): a worker killed while its
//! git changes the repository leaves that git to finish (it holds the lock until it exits), so
//! the next worker waits for it instead of racing it, and no git lock file is left behind.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use pegasus_fs::{FileLock, LockKind};

use crate::error::CodeError;

/// The lock file's name inside the git common dir.
pub const LOCK_FILE: &str = "pegasus.lock";

/// Held while one repository is being changed; dropping it unlocks.
#[derive(Debug)]
pub struct RepoLock {
    lock: FileLock,
}

thread_local! {
    /// The descriptors of the locks this thread holds.
    static HELD: RefCell<Vec<RawFd>> = const { RefCell::new(Vec::new()) };
}

/// The lock descriptors this thread holds now, for the git it is about to start.
pub(crate) fn held_here() -> Vec<RawFd> {
    HELD.with(|h| h.borrow().clone())
}

impl Drop for RepoLock {
    fn drop(&mut self) {
        let fd = self.lock.as_raw_fd();
        HELD.with(|h| h.borrow_mut().retain(|f| *f != fd));
    }
}

impl RepoLock {
    /// Blocks until the lock of the repository whose common dir is `common_dir` is ours.
    pub fn acquire(common_dir: &Path) -> Result<RepoLock, CodeError> {
        let path = common_dir.join(LOCK_FILE);
        let file = FileLock::open(&path).map_err(CodeError::io(&path))?;
        let lock = FileLock::wait(file, LockKind::Exclusive).map_err(CodeError::io(&path))?;
        HELD.with(|h| h.borrow_mut().push(lock.as_raw_fd()));
        Ok(RepoLock { lock })
    }
}
