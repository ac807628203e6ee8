//! What the work queue, code tasks, merges, reviews and plans use of their project, made once
//! when the worker starts: the desk it shares with its agent (folder, name, task board, stop
//! flag), the approval gate, the containment of its commands and its roles folder. Each of them
//! is handed this, and the agent only when it runs the agent; nobody asks the agent for parts.

use std::path::PathBuf;
use std::sync::Arc;

use pegasus_agent::{Approvals, Desk};
use pegasus_sandbox::SandboxPaths;

/// One project's parts, for the worker's own code.
pub struct ProjectCtx {
    /// The project folder, its name, its task board and the stop flag.
    pub desk: Desk,
    /// The project's approval gate (DESIGN.md §11).
    pub gate: Arc<Approvals>,
    /// Where the project's commands may write, for git and verify commands.
    pub sandbox: Option<SandboxPaths>,
    /// The home's roles folder.
    pub roles_dir: PathBuf,
}
