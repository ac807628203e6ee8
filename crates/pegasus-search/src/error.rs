//! The one error type of this crate.
//!
//! A damaged index is not an error a caller sees: it is rebuilt (see [`crate::index`]). What is
//! left is the user's query saying nothing searchable, and the machine refusing the index
//! folder or the database (a full disk, a read-only home, a lock held too long).

use std::path::PathBuf;

/// Why a search or a catch-up failed. Each message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The query has no word or number in it (only punctuation or spaces).
    #[error("nothing to search for in `{0}`: give at least one word or number")]
    EmptyQuery(String),
    /// A file or folder of the index could not be made, read or removed.
    #[error("{}: {source}: check that the home is writable", .path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// SQLite refused something that is not damage to the index (the database stayed locked
    /// past the busy timeout, the disk is full).
    #[error("the search index {}: {source}: try again; if it persists, delete {} (it is rebuilt from the files)", .path.display(), .path.display())]
    Db {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
}

impl SearchError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> SearchError + '_ {
        move |source| SearchError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
