//! The one error of the crate. Every variant renders as one line that says what to do.

use std::path::PathBuf;

/// What went wrong with a repository operation.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// `git` cannot be started.
    #[error("cannot run git: {0}; install git 2.38 or newer")]
    NoGit(String),
    /// `git` is older than the commands used here need.
    #[error(
        "git {0} is too old: code projects need git 2.38 or newer (for `merge-tree --write-tree`)"
    )]
    OldGit(String),
    /// The repository is not usable as declared (not a repo, base branch missing, ...).
    #[error("repo {repo}: {msg}")]
    Repo {
        /// The repo's id in PROJECT.md.
        repo: String,
        /// One line saying what is wrong and what to do.
        msg: String,
    },
    /// A git command failed unexpectedly.
    #[error("`git {args}` in {dir} failed: {stderr}")]
    Git {
        /// The arguments, joined.
        args: String,
        /// Where it ran.
        dir: PathBuf,
        /// Its error output (trimmed, cut when long).
        stderr: String,
    },
    /// The `.git` of a folder Pegasus pinned is no longer the one it made (replaced by a
    /// directory, a gitfile pointing elsewhere, a link): nothing more runs there.
    #[error("tampered: the .git of {} was replaced since Pegasus made it; git will not run there again (the task's work is on its branch up to the last commit)", dir.display())]
    Tampered {
        /// The folder.
        dir: PathBuf,
    },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl CodeError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CodeError {
        let path = path.into();
        move |source| CodeError::Io { path, source }
    }

    pub(crate) fn repo(repo: &str, msg: impl Into<String>) -> CodeError {
        CodeError::Repo {
            repo: repo.to_string(),
            msg: msg.into(),
        }
    }
}

impl From<pegasus_fs::FsError> for CodeError {
    fn from(e: pegasus_fs::FsError) -> CodeError {
        match e {
            pegasus_fs::FsError::Io { path, source } => CodeError::Io { path, source },
            pegasus_fs::FsError::NotAFile(path) => CodeError::Io {
                path,
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
            },
        }
    }
}
