//! The tool contract: what a tool is, what it may use and what it gives back.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use pegasus_proto::llm::ToolSpec;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;

use crate::model::ChatModel;
use crate::outbox::Notice;
use crate::settings::AgentSettings;

/// The future a [`Tool`] returns; boxed so tools can live in one list as trait objects.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>>;

/// One tool as the loop holds it: a trait object in a list. Every tool whose arguments are
/// known when it is written (the built-in tools here, the MainAgent's tools in pegasusd) is a
/// [`TypedTool`] and gets this impl from it; only a tool whose schema comes at run time (an MCP
/// server's) implements it itself.
///
/// A call never fails the turn: whatever goes wrong (bad arguments, a path outside the workdir,
/// a command that times out) is a [`ToolOutput::error`] the model reads and can react to.
pub trait Tool: Send + Sync {
    /// Name, description and JSON schema shown to the model. The name is the contract.
    fn spec(&self) -> ToolSpec;
    /// Whether this tool may run at the same time as other calls of the same turn. Only
    /// read-only tools say yes; anything that writes runs alone so the model's order holds.
    fn concurrent(&self) -> bool {
        false
    }
    /// Runs the call. `input` is the model's arguments, unchecked.
    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a>;
}

/// What a tool call gives back to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The text the model sees.
    pub content: String,
    /// Whether the call failed; providers show this to the model as an error result.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: false,
        }
    }

    /// A failed call, explained so the model can fix its next attempt.
    pub fn error(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: true,
        }
    }
}

/// What a tool call may use. Built per task by the loop; a subagent gets a copy one level
/// deeper.
#[derive(Clone)]
pub struct ToolCtx {
    /// Where file tools and `exec` act; nothing outside it is reachable through them.
    pub workdir: PathBuf,
    /// The project's `memory/`, the root of the memory tools.
    pub memory_dir: PathBuf,
    /// Skill folders, project skills first, then global ones: the first match wins.
    pub skill_dirs: Vec<PathBuf>,
    /// Where `notify` and events go.
    pub notices: UnboundedSender<Notice>,
    /// The task this call works for; subagents bill their spend to it.
    pub task_id: Option<String>,
    /// 0 for the agent itself, 1 for its subagents, and so on.
    pub depth: u32,
    /// Limits (exec timeout and output cap, subagent limits, ...).
    pub settings: AgentSettings,
    /// The model, for subagents.
    pub model: Arc<dyn ChatModel>,
    /// The project's description (PROJECT.md body), given to subagents as context.
    pub project_overview: String,
    /// Subagents spawned so far by this task, shared by every level so the count is per task.
    pub subagents_spawned: Arc<AtomicU32>,
    /// A code task's worktrees, `(repo id, folder)`; the first is also `workdir`. A path
    /// `id:rest` of a file tool resolves inside repo `id`'s worktree. Empty otherwise.
    pub repos: Vec<(String, PathBuf)>,
    /// The project's approval gate (DESIGN.md §11); `None` where nobody can be asked (the
    /// MainAgent, tests).
    pub approvals: Option<Arc<crate::approvals::Approvals>>,
    /// The tools of the loop this call is made in (set by the loop): a sub-agent gets at most
    /// these, never a tool its parent lacks. `None` outside a loop.
    pub offered: Option<crate::toolset::ToolSet>,
    /// Tasks proposed so far by this task (`propose_task`), shared by every level.
    pub proposed: Arc<AtomicU32>,
    /// The paths the file tools resolved, shared by every level: the loop looks for the
    /// instruction files of their folders (DESIGN.md §16).
    pub touched: crate::instructions::Touched,
    /// The project's lifecycle hooks (DESIGN.md §16); `None` when it has none.
    pub hooks: Option<Arc<crate::hooks::Hooks>>,
}

impl ToolCtx {
    /// Resolves a file tool's path: `repo-id:path` inside that repo's worktree (code tasks),
    /// anything else inside the workdir. The error is a sentence for the model.
    ///
    /// A path that resolves into the Pegasus home is refused (DESIGN.md §12), whatever the workdir:
    /// only the project's own default working folder (`<project>/workdir`) lies there.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let repo = path.split_once(':').and_then(|(id, rest)| {
            let (_, root) = self.repos.iter().find(|(r, _)| r == id)?;
            Some((id, root, rest))
        });
        let resolved = match repo {
            Some((id, root, rest)) => {
                crate::paths::resolve_inside(root, rest, &format!("worktree of repo {id}"))?
            }
            None => crate::paths::resolve_inside(&self.workdir, path, "workdir")?,
        };
        let resolved = self.outside_home(path, resolved)?;
        self.touched.note(&resolved);
        Ok(resolved)
    }

    /// `resolved` (the real path of the model's `path`) unless it lies in the Pegasus home
    /// outside the project's own working folder.
    fn outside_home(&self, path: &str, resolved: PathBuf) -> Result<PathBuf, String> {
        let Some(sandbox) = &self.settings.sandbox else {
            return Ok(resolved);
        };
        let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        if !resolved.starts_with(real(&sandbox.home)) {
            return Ok(resolved);
        }
        let own = real(
            &sandbox
                .own_dir
                .join(pegasus_store::home_guard::DEFAULT_WORKDIR),
        );
        if resolved.starts_with(&own) {
            return Ok(resolved);
        }
        Err(format!(
            "{path}: resolves into the Pegasus home, which the file tools never touch; refused (work in your workdir)"
        ))
    }

    /// [`ToolCtx::resolve`] for a tool that writes: a path into a `.git` (a repository's own
    /// folder or a worktree's `.git` file, whatever the spelling or the links on the way) is
    /// refused, so a model can never hand git a configuration of its own.
    pub fn resolve_for_write(&self, path: &str) -> Result<PathBuf, String> {
        let resolved = self.resolve(path)?;
        let inside_git = resolved.components().any(|c| {
            c.as_os_str()
                .to_str()
                .is_some_and(|s| s.eq_ignore_ascii_case(".git"))
        });
        if inside_git {
            return Err(format!(
                "{path}: `.git` belongs to git and Pegasus, and the file tools do not write there (Pegasus commits your work when you answer)"
            ));
        }
        Ok(resolved)
    }
}

/// A tool whose arguments are one serde type: what every built-in tool of a project agent and
/// every tool of the MainAgent implements. Its [`Tool`] impl parses the model's arguments into
/// [`TypedTool::Args`] (bad ones are the model's "bad arguments" error, naming the argument) and
/// gives an `Err` of [`TypedTool::run`] to the model as a tool error, so no tool reads an
/// untyped value.
pub trait TypedTool: Send + Sync {
    /// The arguments the model gives, as [`TypedTool::schema`] describes them.
    type Args: DeserializeOwned + Send;
    /// The name the model calls it by; a contract with the model and with role allowlists.
    fn name(&self) -> &str;
    /// What the model is told the tool does.
    fn description(&self) -> &str;
    /// The JSON Schema of [`TypedTool::Args`] shown to the model, written out by hand (the
    /// model reads it: its words and order are chosen, not derived).
    fn schema(&self) -> serde_json::Value;
    /// See [`Tool::concurrent`]: only read-only tools say yes.
    fn concurrent(&self) -> bool {
        false
    }
    /// Runs a call whose arguments parsed; an `Err` is the tool error the model reads.
    fn run(
        &self,
        args: Self::Args,
        ctx: &ToolCtx,
    ) -> impl Future<Output = Result<ToolOutput, String>> + Send;
}

impl<T: TypedTool> Tool for T {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_string(),
            description: self.description().to_string(),
            input_schema_json: self.schema().to_string(),
        }
    }

    fn concurrent(&self) -> bool {
        TypedTool::concurrent(self)
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            match parse_args(self.name(), input) {
                Ok(args) => self.run(args, ctx).await.unwrap_or_else(ToolOutput::error),
                Err(e) => e,
            }
        })
    }
}

/// Parses a tool's arguments, or says to the model what was wrong with them and where
/// (`repos[1]: invalid type ...`).
fn parse_args<T: DeserializeOwned>(tool: &str, input: serde_json::Value) -> Result<T, ToolOutput> {
    serde_path_to_error::deserialize(input).map_err(|e| {
        ToolOutput::error(format!(
            "bad arguments for {tool}: {e}; see the tool's input schema"
        ))
    })
}
