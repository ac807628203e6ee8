//! The one error type of this crate.
//!
//! Every message is a single line a user can act on: it names the file (and line and key when
//! there is one) and says what is wrong, so a CLI can print it as is.

use std::path::PathBuf;

use crate::lifecycle::Verb;
use crate::project::ProjectStatus;

/// Everything that can go wrong reading or writing Pegasus files.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An operating-system error on a named file or directory; the path says where to look.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A malformed PROJECT.md or config.yml, located to the line (and key) so the user can fix
    /// it by hand: `<file>:<line>: key `status`: unknown status ...`.
    #[error("{}:{line}: {}{message}", .path.display(), key_prefix(.key))]
    Parse {
        /// The file that failed to parse.
        path: PathBuf,
        /// 1-based line in that file.
        line: usize,
        /// The key at fault, dotted for nested keys (`llm.max_concurrency`), if one applies.
        key: Option<String>,
        /// What is wrong and, where possible, what to do.
        message: String,
    },
    /// Bad input that is not a file (a project name, a path too long for a socket, ...).
    #[error("{0}")]
    Invalid(String),
    /// A lifecycle verb refused by the state machine (see [`crate::lifecycle::transition`]).
    #[error("cannot {verb} project {name}: it is {status}")]
    Transition {
        /// The verb that was refused.
        verb: Verb,
        /// The project it was applied to.
        name: String,
        /// The status the project is in.
        status: ProjectStatus,
    },
    /// `create` on a project folder that is already there.
    #[error("project {0} already exists: talk to it with `pegasusctl project send {0} TEXT`, or choose another name")]
    Exists(String),
    /// A project that has no folder (or no PROJECT.md).
    #[error("project {0} not found: see `pegasusctl project list`")]
    NotFound(String),
}

/// `key `K`: ` before a parse message about key `K`, nothing when there is none (also how
/// pegasus-roles words its parse errors).
pub fn key_prefix(key: &Option<String>) -> String {
    match key {
        Some(k) => format!("key `{k}`: "),
        None => String::new(),
    }
}

impl StoreError {
    /// Wraps an I/O error with the path it happened on; used with `map_err` everywhere so no
    /// I/O error reaches the user without saying which file.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StoreError {
        let path = path.into();
        move |source| StoreError::Io { path, source }
    }

    /// A [`StoreError::Parse`] about the file as a whole (no key) at `line`.
    pub fn parse_at(path: impl Into<PathBuf>, line: usize, message: impl Into<String>) -> Self {
        StoreError::Parse {
            path: path.into(),
            line,
            key: None,
            message: message.into(),
        }
    }
}

/// Result with [`StoreError`] as the default error.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_error_names_file_line_and_key() {
        let e = StoreError::Parse {
            path: PathBuf::from("p/PROJECT.md"),
            line: 3,
            key: Some("status".into()),
            message: "unknown status `actve`".into(),
        };
        assert_eq!(
            e.to_string(),
            "p/PROJECT.md:3: key `status`: unknown status `actve`"
        );
        let e = StoreError::Parse {
            path: PathBuf::from("config.yml"),
            line: 1,
            key: None,
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "config.yml:1: bad");
    }

    #[test]
    fn transition_error_text_is_exact() {
        let e = StoreError::Transition {
            verb: Verb::Resume,
            name: "foo".into(),
            status: ProjectStatus::Active,
        };
        assert_eq!(e.to_string(), "cannot resume project foo: it is active");
    }
}
