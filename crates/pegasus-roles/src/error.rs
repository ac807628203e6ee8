//! The one error type of this crate.
//!
//! Every message is one line a user can act on: it names the file or role at fault, says what
//! is wrong and, where it can, what to change, so a CLI or the MainAgent can show it as is.

use std::path::PathBuf;

use pegasus_store::project::RolesProblem;

/// Everything that can go wrong reading, assigning or filling a role.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// An operating-system error on a named file or directory; the path says where to look.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A malformed role file, located to the line (and key) so it can be fixed by hand:
    /// `<file>:<line>: key `model.thinking`: unknown variant ...`.
    #[error("{origin}:{line}: {}{message}", pegasus_store::error::key_prefix(.key))]
    Parse {
        /// The file (or `built-in <id>`) that failed to parse.
        origin: String,
        /// 1-based line in that file.
        line: usize,
        /// The key at fault, dotted for nested keys (`model.thinking`), if one applies.
        key: Option<String>,
        /// What is wrong and, where possible, what to do.
        message: String,
    },
    /// The prompt template uses a `{{name}}` the role does not declare; caught at parse time
    /// so a typo never reaches a model as literal braces.
    #[error("{origin}: role {role}: the template uses {{{{{name}}}}} but declares no variable `{name}`: add it under variables")]
    UndeclaredPlaceholder {
        /// The file the role came from.
        origin: String,
        /// The role's id.
        role: String,
        /// The placeholder's name.
        name: String,
    },
    /// A declared variable with no default was not supplied when filling the template.
    #[error("role {role} needs variable `{name}`: pass it in the assignment")]
    MissingVariable {
        /// The role's id.
        role: String,
        /// The variable that has no value.
        name: String,
    },
    /// A value was supplied for a name the role does not declare; refused because it is
    /// almost always a misspelt variable whose real value would silently fall back to a default.
    #[error("role {role} has no variable `{name}`: remove it from the assignment or use one the role declares")]
    UnknownVariable {
        /// The role's id.
        role: String,
        /// The supplied name.
        name: String,
    },
    /// A string used as a role id that cannot be one (also keeps ids from becoming paths).
    #[error(transparent)]
    BadId(#[from] pegasus_store::project::BadRoleId),
    /// No built-in or user role has this id.
    #[error("no role `{0}`: see `pegasusctl role list`")]
    NotFound(String),
    /// An assignment that asks for a tool its role does not allow; an assignment can only
    /// narrow a role's tools, never widen them.
    #[error("role {role} does not allow tool `{tool}`: an assignment can only remove tools, so drop it or use a role that has it")]
    ToolNotAllowed {
        /// The role's id.
        role: String,
        /// The tool asked for.
        tool: String,
    },
    /// A bad `roles:` value (or entry of it) in a PROJECT.md (its [`RolesProblem`]).
    #[error("PROJECT.md {at}: {message}")]
    Assignment {
        /// Where: `roles` or `roles[2]`.
        at: String,
        /// What is wrong and what to do.
        message: String,
    },
}

impl From<RolesProblem> for RoleError {
    fn from(p: RolesProblem) -> Self {
        RoleError::Assignment {
            at: p.at,
            message: p.message,
        }
    }
}

impl RoleError {
    /// Wraps an I/O error with the path it happened on, for `map_err`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> RoleError {
        let path = path.into();
        move |source| RoleError::Io { path, source }
    }
}
