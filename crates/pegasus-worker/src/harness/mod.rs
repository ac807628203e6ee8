//! Coding harnesses as a project's agent (DESIGN.md §15): Claude Code and Codex run as contained
//! commands of the worker, their event streams mirrored into the project's session.
//!
//! The pieces, one concern each:
//! * [`Driver`]: what differs between harnesses: the command line of one run ([`Driver::launch`])
//!   and the reading of its output ([`Parser`] into [`Event`]s). One per harness:
//!   `claude` (Claude Code), `codex` (Codex).
//! * `runner`: what is the same for all: the contained spawn, the line reader, the mirror
//!   into the session ([`pegasus_agent::Mirror`]), the durable session id, the approvals
//!   channel, cancellation and the end of a run. It is the [`pegasus_agent::Harness`] the agent
//!   hands a task to, and the worker a code task's review or plan ([`Work::Consult`]).
//! * `hook`: the approval channel: a loopback listener per run, and the `project-worker
//!   harness-hook` client a harness's permission hook runs, which asks it.
//! * `mcp_proxy`: the project's MCP servers for a harness: the `project-worker mcp-proxy NAME`
//!   stdio server it starts for each, and the worker's end, which asks the approval policy
//!   and calls the worker's [`crate::mcp::McpHub`].
//! * `sessions`: the harness session ids kept in the project, so every message resumes.
//! * [`build`]: the checks at the worker's start (binary, provider kind), one error naming the key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pegasus_proto::llm::{Block, Usage};
use pegasus_store::{AgentKind, Config, HarnessConfig, HarnessesConfig, ProjectFile};

mod claude;
mod codex;
pub mod hook;
pub mod mcp_proxy;
mod runner;
mod sessions;

pub use runner::Runner;

/// What one run of a harness is started with, as the [`Driver`] turns it into a command line.
pub struct Plan<'a> {
    /// What it is told.
    pub prompt: &'a str,
    /// What its own system prompt is extended with (the role's prompt, or the project's
    /// description).
    pub system: &'a str,
    /// The model, without the provider prefix (`claude-sonnet-4-5`).
    pub model: &'a str,
    /// `harnesses.<kind>`: its extra arguments and effort.
    pub config: &'a HarnessConfig,
    /// The harness's session to continue (its id), if it has one in this place.
    pub session: Option<&'a str>,
    /// A session id the runner chose for a new session, kept before the run starts (for a
    /// harness that takes one, see [`Driver::new_session_id`]).
    pub new_session: Option<&'a str>,
    /// The harness's own state folder (its config and sessions), writable to it.
    pub state_dir: &'a Path,
    /// The model endpoint it must use.
    pub endpoint: &'a Endpoint,
    /// How its permission hook reaches the worker.
    pub hook: &'a hook::HookCommand,
    /// The project's MCP servers, as proxies it starts (`None`: it gets none).
    pub mcp: Option<&'a mcp_proxy::McpCommand>,
    /// What the run is for.
    pub work: Work,
}

/// What a run is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// The project's own work (a message, a task, a run phase), in its workdir.
    Project,
    /// A code task's work in its worktrees: Pegasus commits, verifies and merges; the harness
    /// only edits files.
    CodeTask,
    /// A role asked once about a code task (its reviewer, its planner): it reads and answers,
    /// and nothing it reads is writable to it (DESIGN.md §15).
    Consult,
}

impl Work {
    /// What the harness's system prompt says of it, after the role's or project's own words.
    pub fn note(self) -> Option<&'static str> {
        match self {
            Work::Project => None,
            Work::CodeTask => Some(
                "You work in a git worktree of a Pegasus code task: edit the files; do not commit, \
                 branch or merge — Pegasus commits, verifies and merges your work when you answer.",
            ),
            Work::Consult => Some(
                "You are consulted about a Pegasus code task: read the files you need, change \
                 nothing (they are read-only to you), and answer in the form you are asked for; \
                 your final message is the answer.",
            ),
        }
    }
}

/// The loopback model endpoint a harness is pointed at (the worker's relay for this run), and
/// its credential (never a provider key).
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// The credential the endpoint takes.
    pub key: String,
}

/// A command line for one run.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Environment variables (on top of the clean environment the runner gives every run).
    pub env: Vec<(String, String)>,
    /// Files to write (atomically) before the run, e.g. the harness's settings, replacing what
    /// a run before may have changed.
    pub files: Vec<(PathBuf, String)>,
}

/// What a harness said, read off its output.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Its session id (to resume it next time). (Its model's text reaches followers as it
    /// streams through the relay, which pegasusd publishes; no event here repeats it.)
    Session(String),
    /// One whole assistant message: text and tool calls (`Block::Text`, `Block::ToolUse`).
    Assistant {
        /// Its blocks.
        blocks: Vec<Block>,
        /// The model that wrote it.
        model: String,
        /// What it used, when said.
        usage: Option<Usage>,
    },
    /// Results of tool calls: `(call id, tool name, output, is_error)`.
    Results(Vec<(String, String, String, bool)>),
    /// The run's end: its answer, or why it failed.
    Done(Result<String, Failure>),
}

/// Why a run ended without an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// A budget refused its model call (the endpoint's error, as it said it).
    Budget(String),
    /// Anything else (the harness's own words).
    Error(String),
}

/// A run's failure as its harness worded it: a budget refusal when the endpoint's error names
/// the budget, else another failure.
pub(crate) fn failure(why: String) -> Failure {
    if why.to_ascii_lowercase().contains("budget") {
        Failure::Budget(why)
    } else {
        Failure::Error(why)
    }
}

/// Reads one run's stdout, line by line.
pub trait Parser: Send {
    /// The events of one line (none for a line it does not use).
    fn line(&mut self, line: &str) -> Vec<Event>;
}

/// One harness: how it is started and how its output reads.
pub trait Driver: Send + Sync + 'static {
    /// Which harness.
    fn kind(&self) -> AgentKind;
    /// The API its model endpoint speaks (the relay serves it).
    fn api(&self) -> pegasus_proto::worker::RelayApi;
    /// A fresh session id, if this harness takes one chosen by its caller (Claude Code's
    /// `--session-id`): it is kept before the run starts, so a crash at any point resumes it.
    /// `None`: the harness names its session itself ([`Event::Session`]).
    fn new_session_id(&self) -> Option<String>;
    /// The command line of one run.
    fn launch(&self, plan: &Plan<'_>) -> Result<Launch, String>;
    /// A parser for one run's output.
    fn parser(&self) -> Box<dyn Parser>;
}

/// The project's agent and the harnesses it and its roles use, checked at the worker's start:
/// each harness's binary is found and answers `--version`, and the project's provider is of
/// the kind it speaks (`tasks`: the project's). `Err` is one line naming the key to fix.
/// `mcp`: the project's MCP servers, which its harnesses get as tools (none when `None`).
pub fn build(
    config: &Config,
    project: &ProjectFile,
    model: &str,
    project_dir: &Path,
    relay: &crate::relay::Relay,
    tasks: &pegasus_tasks::TaskStore,
    mcp: Option<Arc<crate::mcp::McpHub>>,
) -> Result<(AgentKind, Vec<Arc<dyn pegasus_agent::Harness>>), String> {
    let mut kinds = vec![project.agent()];
    if let Ok(roles) = project.roles() {
        kinds.extend(roles.iter().filter_map(|a| a.agent));
    }
    kinds.sort();
    kinds.dedup();
    let mut harnesses: Vec<Arc<dyn pegasus_agent::Harness>> = Vec::new();
    for kind in kinds {
        let Some(entry) = config.harnesses.of(kind) else {
            continue;
        };
        let program = find_program(kind, entry)?;
        check_provider(kind, config, model)?;
        let driver: Arc<dyn Driver> = match kind {
            AgentKind::ClaudeCode => Arc::new(claude::ClaudeCode),
            AgentKind::Codex => Arc::new(codex::Codex),
            AgentKind::Builtin => continue,
        };
        harnesses.push(Arc::new(Runner::new(
            driver,
            program,
            entry.clone(),
            project_dir.join("harness").join(kind.as_str()),
            relay.clone(),
            tasks.clone(),
            mcp.clone(),
        )));
    }
    Ok((project.agent(), harnesses))
}

/// The harness's program: an absolute path, or the first executable of that name on PATH;
/// it must answer `--version` within 20 s.
fn find_program(kind: AgentKind, entry: &HarnessConfig) -> Result<PathBuf, String> {
    let key = format!("{}.command", HarnessesConfig::key(kind));
    let install = match kind {
        AgentKind::ClaudeCode => "install Claude Code (`npm install -g @anthropic-ai/claude-code`)",
        _ => "install Codex (`npm install -g @openai/codex`)",
    };
    let program = if entry.command.starts_with('/') {
        PathBuf::from(&entry.command)
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join(&entry.command))
            .find(|p| is_executable(p))
            .ok_or_else(|| {
                format!(
                    "config.yml `{key}`: `{}` is not on PATH; {install} or set `{key}` to its absolute path",
                    entry.command
                )
            })?
    };
    if !is_executable(&program) {
        return Err(format!(
            "config.yml `{key}`: {} is not an executable file; {install} or correct `{key}`",
            program.display()
        ));
    }
    version_check(&program).map_err(|why| {
        format!(
            "config.yml `{key}`: {} does not run ({why}); {install} or correct `{key}`",
            program.display()
        )
    })?;
    Ok(program)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `program --version` (in its own process group, killed past 20 s).
fn version_check(program: &Path) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(program)
        .arg("--version")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("`--version` exited with {status}")),
            Ok(None) if std::time::Instant::now() > deadline => {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
                return Err("`--version` did not answer within 20 s".into());
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The project's model (`provider/model`) is on a provider of the kind the harness speaks.
fn check_provider(kind: AgentKind, config: &Config, model: &str) -> Result<(), String> {
    let Some(wanted) = kind.provider_kind() else {
        return Ok(());
    };
    let provider = model.split_once('/').map_or(model, |(p, _)| p);
    let Some(p) = config.providers.get(provider) else {
        return Err(format!(
            "the project's model `{model}` names provider `{provider}`, which config.yml `providers` does not define; `agent: {kind}` needs a provider of kind `{wanted}`"
        ));
    };
    if p.kind != wanted {
        return Err(format!(
            "`agent: {kind}` needs a provider of kind `{wanted}`, and the project's model `{model}` is on provider `{provider}` of kind `{}` (config.yml `providers.{provider}.kind`): set PROJECT.md `model:` (or config.yml `default_model`) to a model of a `{wanted}` provider",
            p.kind
        ));
    }
    Ok(())
}

/// `model` without its provider prefix (`fa/claude-x` is `claude-x`).
pub(crate) fn bare_model(model: &str) -> &str {
    model.split_once('/').map_or(model, |(_, m)| m)
}

/// 16 random bytes from the kernel, as lowercase hex; `None` when it cannot give them.
pub(crate) fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `given` is a loopback channel's token, compared in time that does not depend on
/// where they differ.
pub(crate) fn token_matches(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// How long a loopback channel (the permission hook's, the MCP proxy's) waits for a
/// connection's first line: its clients write it at once, so a connection that says nothing
/// is let go instead of held.
pub(crate) const FIRST_LINE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_harness_needs_a_provider_of_its_kind() {
        let config = Config::default();
        assert_eq!(
            check_provider(AgentKind::ClaudeCode, &config, "anthropic/claude-x"),
            Ok(())
        );
        let e = check_provider(AgentKind::ClaudeCode, &config, "openai/gpt-5").unwrap_err();
        assert!(e.contains("providers.openai.kind"), "{e}");
        assert!(e.contains("kind `anthropic`"), "{e}");
        let e = check_provider(AgentKind::ClaudeCode, &config, "nowhere/x").unwrap_err();
        assert!(e.contains("provider `nowhere`"), "{e}");
        assert_eq!(
            check_provider(AgentKind::Builtin, &config, "openai/x"),
            Ok(())
        );
    }

    #[test]
    fn a_missing_program_is_named_with_its_key() {
        let entry = HarnessConfig {
            command: "no-such-harness-binary-xyz".into(),
            args: vec![],
            effort: None,
        };
        let e = find_program(AgentKind::ClaudeCode, &entry).unwrap_err();
        assert!(
            e.starts_with("config.yml `harnesses.claude-code.command`"),
            "{e}"
        );
        assert!(e.contains("not on PATH"), "{e}");
        let entry = HarnessConfig {
            command: "/nonexistent/claude".into(),
            ..entry
        };
        let e = find_program(AgentKind::ClaudeCode, &entry).unwrap_err();
        assert!(e.contains("is not an executable file"), "{e}");
        let entry = HarnessConfig {
            command: "/bin/false".into(),
            ..entry
        };
        let e = find_program(AgentKind::ClaudeCode, &entry).unwrap_err();
        assert!(e.contains("does not run"), "{e}");
        assert_eq!(bare_model("fa/claude-x"), "claude-x");
    }
}
