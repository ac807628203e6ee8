//! Pegasus's file primitives, one of each, for every crate that touches files: the crash-safe
//! replacement of a file ([`atomic`]), the `flock` wrapper every lock of Pegasus is
//! ([`lock`]), what identifies one version of a file without reading it ([`stamp`]), and the one
//! way async code runs blocking work such as these on tokio's blocking pool ([`blocking`]).
//!
//! A crate of its own, below every other: `pegasus-store` (the formats and the home layout) and
//! `pegasus-code` (git, which must not depend on the store) both build on it, so none of these
//! is written twice. It knows no Pegasus file, format or error type; its errors name the path.

pub mod atomic;
pub mod blocking;
pub mod lock;
pub mod stamp;

pub use atomic::{
    create_dir_all_durable, fsync_dir, remove_stale_temps, replace_cache, write_atomic, FsError,
};
pub use blocking::{blocking, BlockingError};
pub use lock::{FileLock, LockKind, TryLockError};
pub use stamp::FileStamp;
