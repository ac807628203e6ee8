//! MCP servers of a project (SPEC §13), behind this one module: each server is a child process
//! (its own process group, a clean environment plus its `env`, dying with the worker, recorded
//! for pegasusd's sweep like `exec`'s commands) spoken to over stdio with the official SDK
//! (`rmcp`). Started at first use (or with the worker when `eager`), its tools are offered to
//! the agent as `mcp__NAME__TOOL`. A server that fails to start, hangs past its timeout or
//! dies is marked down, its error kept for `project show`, and started again at the next use
//! after a backoff that doubles (1 s … 60 s). Its state is written to `<project>/mcp.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pegasus_agent::{Tool, ToolCtx, ToolOutput};
use pegasus_proto::llm::ToolSpec;
use pegasus_store::mcp::{McpServerStatus as ServerStatus, MCP_STATUS_FILE as STATUS_FILE};
use pegasus_store::McpServerConfig;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Mutex;

/// The longest wait before a down server is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Most characters of a tool's answer kept (the agent caps results again).
const MAX_RESULT_CHARS: usize = 256 * 1024;

struct Running {
    service: RunningService<RoleClient, ()>,
    child: tokio::process::Child,
    /// Increases with every start, so a failure is only acted on for the process it hit.
    generation: u64,
}

#[derive(Default)]
struct State {
    running: Option<Running>,
    generation: u64,
    /// The tools of its last successful listing (kept while it is down, so the model can
    /// still call them and a call starts it again).
    tools: Vec<rmcp::model::Tool>,
    started_once: bool,
    error: Option<String>,
    failures: u32,
    retry_at: Option<Instant>,
}

struct Server {
    name: String,
    cfg: McpServerConfig,
    state: Mutex<State>,
}

/// The project's MCP servers.
pub struct McpHub {
    servers: Vec<Arc<Server>>,
    status_path: PathBuf,
    workdir: PathBuf,
    registry: Option<PathBuf>,
    /// What `mcp.json` holds now: it is written only when the state changes, never per call.
    written: Mutex<String>,
}

impl McpHub {
    /// A hub for `servers`; nothing starts yet. Writes the initial status file.
    pub fn new(
        servers: BTreeMap<String, McpServerConfig>,
        project_dir: &Path,
        workdir: &Path,
        registry: Option<PathBuf>,
    ) -> Arc<McpHub> {
        let hub = Arc::new(McpHub {
            servers: servers
                .into_iter()
                .map(|(name, cfg)| {
                    Arc::new(Server {
                        name,
                        cfg,
                        state: Mutex::new(State::default()),
                    })
                })
                .collect(),
            status_path: project_dir.join(STATUS_FILE),
            workdir: workdir.to_path_buf(),
            registry,
            written: Mutex::new(String::new()),
        });
        if hub.servers.is_empty() {
            let _ = std::fs::remove_file(&hub.status_path);
        }
        hub
    }

    /// Whether any server is declared.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Starts the `eager` servers now.
    pub async fn start_eager(self: &Arc<Self>) {
        for s in &self.servers {
            if s.cfg.eager {
                let mut st = s.state.lock().await;
                let _ = self.ensure_running(s, &mut st).await;
            }
        }
        self.write_status().await;
    }

    /// The tools to offer: every server is started if it never was (first use), and its listed
    /// tools become `mcp__NAME__TOOL`.
    pub async fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        for s in &self.servers {
            let mut st = s.state.lock().await;
            if !st.started_once {
                let _ = self.ensure_running(s, &mut st).await;
            }
            for t in &st.tools {
                out.push(Arc::new(McpTool {
                    hub: self.clone(),
                    server: s.clone(),
                    tool: t.name.to_string(),
                    spec: ToolSpec {
                        name: tool_name(&s.name, &t.name),
                        description: format!(
                            "[MCP server {}] {}",
                            s.name,
                            t.description.as_deref().unwrap_or("")
                        ),
                        input_schema_json: serde_json::Value::Object((*t.input_schema).clone())
                            .to_string(),
                    },
                }));
            }
        }
        self.write_status().await;
        out
    }

    /// Starts the server if it is not running and its backoff allows. `Err` is one line.
    async fn ensure_running(&self, s: &Server, st: &mut State) -> Result<(), String> {
        if let Some(r) = st.running.as_mut() {
            match r.child.try_wait() {
                Ok(None) if !r.service.is_closed() => return Ok(()),
                _ => {
                    let why = "the server exited".to_string();
                    tracing::warn!(server = %s.name, "MCP server is down: {why}");
                    self.mark_down(st, why);
                }
            }
        }
        if let Some(at) = st.retry_at {
            if Instant::now() < at {
                return Err(format!(
                    "MCP server {} is down ({}); it is tried again in {} s",
                    s.name,
                    st.error.as_deref().unwrap_or("unknown error"),
                    at.saturating_duration_since(Instant::now())
                        .as_secs()
                        .max(1)
                ));
            }
        }
        st.started_once = true;
        match self.start(s).await {
            Ok((service, child, tools)) => {
                st.generation += 1;
                st.running = Some(Running {
                    service,
                    child,
                    generation: st.generation,
                });
                st.tools = tools;
                st.error = None;
                st.failures = 0;
                st.retry_at = None;
                tracing::info!(server = %s.name, tools = st.tools.len(), "MCP server started");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(server = %s.name, "MCP server cannot start: {e}");
                self.mark_down(st, e.clone());
                Err(format!("MCP server {} cannot start: {e}", s.name))
            }
        }
    }

    fn mark_down(&self, st: &mut State, why: String) {
        if let Some(mut r) = st.running.take() {
            kill_group(&mut r.child);
        }
        st.failures += 1;
        let backoff =
            Duration::from_secs(1u64 << st.failures.saturating_sub(1).min(6)).min(MAX_BACKOFF);
        st.retry_at = Some(Instant::now() + backoff);
        st.error = Some(why);
    }

    async fn start(
        &self,
        s: &Server,
    ) -> Result<
        (
            RunningService<RoleClient, ()>,
            tokio::process::Child,
            Vec<rmcp::model::Tool>,
        ),
        String,
    > {
        let mut cmd = tokio::process::Command::new(&s.cfg.command);
        cmd.args(&s.cfg.args)
            .env_clear()
            .current_dir(&self.workdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        for key in ["PATH", "HOME", "LANG"] {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.envs(&s.cfg.env);
        let parent = std::process::id();
        // SAFETY: runs in the forked child before exec; only async-signal-safe syscalls.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
                if nix::unistd::getppid().as_raw() as u32 != parent {
                    return Err(std::io::Error::other("parent exited"));
                }
                Ok(())
            });
        }
        let mut child = pegasus_store::adopted::spawn_known(|| cmd.spawn(), |c| c.id())
            .map_err(|e| format!("cannot run `{}`: {e}", s.cfg.command))?;
        if let (Some(registry), Some(pid)) = (&self.registry, child.id()) {
            if let Err(e) = pegasus_store::record_exec_group(registry, pid as i32) {
                tracing::warn!(server = %s.name, "cannot record the server's process group: {e}");
            }
        }
        if let Some(err) = child.stderr.take() {
            let name = s.name.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(err).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    tracing::info!(server = %name, "mcp stderr: {}", l.chars().take(500).collect::<String>());
                }
            });
        }
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            kill_group(&mut child);
            return Err("no stdio pipes".into());
        };
        let timeout = s.cfg.timeout();
        let started = tokio::time::timeout(timeout, async {
            let service = ().serve((stdout, stdin)).await.map_err(|e| e.to_string())?;
            let tools = service.list_all_tools().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((service, tools))
        })
        .await;
        match started {
            Ok(Ok((service, tools))) => Ok((service, child, tools)),
            Ok(Err(e)) => {
                kill_group(&mut child);
                let status = child.try_wait().ok().flatten();
                Err(match status {
                    Some(st) => format!("it exited ({st}) during the handshake: {e}"),
                    None => format!("the handshake failed: {e}"),
                })
            }
            Err(_) => {
                kill_group(&mut child);
                Err(format!(
                    "no answer to the handshake within {} s (timeout_s)",
                    timeout.as_secs()
                ))
            }
        }
    }

    /// One tool call: the server is (re)started if needed, the call bounded by its timeout.
    async fn call(&self, s: &Server, tool: &str, input: serde_json::Value) -> ToolOutput {
        let args = match input {
            serde_json::Value::Object(m) => m,
            serde_json::Value::Null => serde_json::Map::new(),
            other => {
                return ToolOutput::error(format!(
                    "the arguments of an MCP tool must be a JSON object, not {other}"
                ))
            }
        };
        let (peer, generation): (Peer<RoleClient>, u64) = {
            let mut st = s.state.lock().await;
            if let Err(e) = self.ensure_running(s, &mut st).await {
                drop(st);
                self.write_status().await;
                return ToolOutput::error(e);
            }
            match st.running.as_ref() {
                Some(r) => (r.service.peer().clone(), r.generation),
                None => return ToolOutput::error(format!("MCP server {} is not running", s.name)),
            }
        };
        self.write_status().await;
        let timeout = s.cfg.timeout();
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
        let result = tokio::time::timeout(timeout, peer.call_tool(params)).await;
        let failure = match result {
            Ok(Ok(r)) => {
                let text = render(&r.content, r.structured_content.as_ref());
                return if r.is_error == Some(true) {
                    ToolOutput::error(format!("MCP tool {tool} failed: {text}"))
                } else {
                    ToolOutput::ok(text)
                };
            }
            // A protocol-level error from a live server (unknown tool, bad arguments): the
            // server stays up.
            Ok(Err(rmcp::ServiceError::McpError(e))) => {
                return ToolOutput::error(format!("MCP server {} refused the call: {}", s.name, e.message))
            }
            Ok(Err(e)) => format!("the server stopped answering: {e}"),
            Err(_) => format!(
                "no answer within {} s (timeout_s); the server was stopped and restarts at next use",
                timeout.as_secs()
            ),
        };
        {
            let mut st = s.state.lock().await;
            if st.running.as_ref().map(|r| r.generation) == Some(generation) {
                tracing::warn!(server = %s.name, "MCP server is down: {failure}");
                self.mark_down(&mut st, failure.clone());
            }
        }
        self.write_status().await;
        ToolOutput::error(format!("MCP server {}: {failure}", s.name))
    }

    /// Every server's state, as `project show` lists it.
    pub async fn status(&self) -> Vec<ServerStatus> {
        let mut out = Vec::new();
        for s in &self.servers {
            let st = s.state.lock().await;
            let state = if st.running.is_some() {
                "running"
            } else if st.started_once {
                "down"
            } else {
                "not started"
            };
            out.push(ServerStatus {
                name: s.name.clone(),
                state: state.to_string(),
                tools: st
                    .tools
                    .iter()
                    .map(|t| tool_name(&s.name, &t.name))
                    .collect(),
                error: st.error.clone(),
            });
        }
        out
    }

    /// Writes `mcp.json` (atomically) when the state differs from what it holds; a failure is
    /// only logged.
    pub async fn write_status(&self) {
        if self.servers.is_empty() {
            return;
        }
        let status = self.status().await;
        let Ok(text) = serde_json::to_string_pretty(&status) else {
            return;
        };
        let mut written = self.written.lock().await;
        if *written == text {
            return;
        }
        match pegasus_store::write_atomic(&self.status_path, text.as_bytes()) {
            Ok(()) => *written = text,
            Err(e) => tracing::warn!("cannot write {}: {e}", self.status_path.display()),
        }
    }
}

fn kill_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.start_kill();
}

/// `mcp__SERVER__TOOL`, with characters a provider refuses in tool names made `_`, at most
/// 64 characters.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("mcp__{server}__{clean}");
    name.truncate(64);
    name
}

fn render(content: &[ContentBlock], structured: Option<&serde_json::Value>) -> String {
    let mut parts = Vec::new();
    for c in content {
        match c {
            ContentBlock::Text(t) => parts.push(t.text.clone()),
            ContentBlock::Image(_) => parts.push("[an image, not shown]".into()),
            ContentBlock::Audio(_) => parts.push("[audio, not shown]".into()),
            ContentBlock::Resource(_) => parts.push("[an embedded resource, not shown]".into()),
            ContentBlock::ResourceLink(r) => parts.push(format!("[resource {}]", r.uri)),
            _ => parts.push("[content of a kind Pegasus does not show]".into()),
        }
    }
    if parts.is_empty() {
        if let Some(v) = structured {
            parts.push(v.to_string());
        }
    }
    let mut text = parts.join("\n");
    if text.len() > MAX_RESULT_CHARS {
        let mut cut = MAX_RESULT_CHARS;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n[cut]");
    }
    text
}

struct McpTool {
    hub: Arc<McpHub>,
    server: Arc<Server>,
    tool: String,
    spec: ToolSpec,
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'a>(
        &'a self,
        input: serde_json::Value,
        _ctx: &'a ToolCtx,
    ) -> pegasus_agent::tool::ToolFuture<'a> {
        Box::pin(async move { self.hub.call(&self.server, &self.tool, input).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_what_providers_accept() {
        assert_eq!(tool_name("gh", "create_issue"), "mcp__gh__create_issue");
        assert_eq!(tool_name("gh", "a.b/c d"), "mcp__gh__a_b_c_d");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), 64);
    }
}
