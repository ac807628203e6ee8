//! MCP servers of a project (DESIGN.md §13), behind this one module: each server is a child process
//! (its own process group, a clean environment plus its `env`, dying with the worker, recorded
//! for pegasusd's sweep like `exec`'s commands) spoken to over stdio with the official SDK
//! (`rmcp`). Started at first use (or with the worker when `eager`), its tools are offered to
//! the agent as `mcp__NAME__TOOL`. A server that fails to start, hangs past its timeout or
//! dies is marked down, its error kept for `project show`, and started again at the next use
//! after a backoff that doubles (1 s … 60 s). Its state is written to `<project>/mcp.json`.
//!
//! What a server sends is bounded like any other input (DESIGN.md §12), so no server can make the
//! worker buffer without end or send pegasusd a frame past `MAX_FRAME` (tool specs travel in
//! every `LlmRequest`):
//! - one message (a line of JSON-RPC) is read whole up to [`MAX_MESSAGE_BYTES`] (a 15 MiB result
//!   is read, then cut). A longer one is never buffered: its rest is skipped as it streams by
//!   ([`LineGuard`]) and the call it answers gets an error saying so, the server kept running;
//!   only when the message names no request it answers is the server stopped (marked down with
//!   the reason, started again at next use);
//! - one server lists at most [`MAX_TOOLS_PER_SERVER`] tools in at most [`MAX_LIST_PAGES`]
//!   pages, [`MAX_SERVER_TOOLS_BYTES`] of names, descriptions and schemas in all: past any of
//!   these the server fails to start, with the reason in `project show`;
//! - one tool's name, description and schema together are at most [`MAX_TOOL_BYTES`]: a
//!   longer tool is refused by name (in `project show`), the server's other tools are offered;
//! - all servers of a project together list at most [`MAX_PROJECT_CATALOG_BYTES`]: a server
//!   whose tools would pass it is not offered (in `project show`);
//! - the tools offered with every call fit the budget (`mcp:` in config.yml, at most
//!   [`MAX_PROJECT_TOOLS_BYTES`]); the rest wait behind `tool_search` ([`crate::mcp_deferred`]);
//! - a tool result is cut like every tool result (`agent.max_tool_result_bytes`, head and tail
//!   kept), with a note that says how much was cut and that the server is fine.
//!
//! Tool names are cleaned to what providers accept ([`tool_name`]); tools whose cleaned names
//! collide all stay reachable: each one whose name changed gets a suffix made from its own name
//! (see [`offered_names`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pegasus_agent::{LateTools, Tool, ToolCtx, ToolOutput};
use pegasus_proto::llm::ToolSpec;
use pegasus_store::mcp::McpConfig;
use pegasus_store::mcp::{McpServerStatus as ServerStatus, MCP_STATUS_FILE as STATUS_FILE};
use pegasus_store::McpServerConfig;

use crate::mcp_deferred::{Deferred, DeferredTool};
use rmcp::model::{CallToolRequestParams, ContentBlock, PaginatedRequestParams};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceExt};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::sync::Mutex;

/// The longest wait before a down server is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// The longest message (one line of JSON-RPC) read whole from a server: a 5,000-tool list in one
/// page, a 15 MiB result. A longer one is skipped as it streams by, never buffered
/// ([`LineGuard`]): the hard cap of what one message may cost the worker's memory.
pub const MAX_MESSAGE_BYTES: usize = 32 << 20;
/// The most tools one server may list.
pub const MAX_TOOLS_PER_SERVER: usize = 10_000;
/// The most pages a server's tool list may come in.
pub const MAX_LIST_PAGES: usize = 1000;
/// The most bytes of one tool's name, description and input schema (JSON) together.
pub const MAX_TOOL_BYTES: usize = 32 << 10;
/// The most bytes of name, description and schema of all the tools one server lists.
pub const MAX_SERVER_TOOLS_BYTES: usize = 32 << 20;
/// The most bytes of name, description and schema of all the tools a project's servers list
/// (offered or deferred: the worker keeps them all).
pub const MAX_PROJECT_CATALOG_BYTES: usize = 64 << 20;
/// The most bytes of name, description and schema of the MCP tools offered with every model
/// call (whatever the budget): an eighth of `MAX_FRAME`, the rest left to the conversation.
pub const MAX_PROJECT_TOOLS_BYTES: usize = 2 << 20;
const _: () = assert!(MAX_PROJECT_TOOLS_BYTES <= pegasus_proto::MAX_FRAME / 8);
/// The JSON-RPC error code of the answer put in place of a message past [`MAX_MESSAGE_BYTES`]
/// (one of the codes JSON-RPC leaves to implementations).
const OVERSIZED_CODE: i32 = -32_088;
/// Bytes kept of each message's start, where its `id` is looked for.
const HEAD_BYTES: usize = 4096;
/// Room left in a cut result for the note (so the loop's own cap does not cut it again).
const NOTE_ROOM: usize = 600;
/// The most characters of a server's own words (an error message, a tool name) quoted in a
/// status line or an error.
const MAX_QUOTE_CHARS: usize = 200;
/// The most refused tools named in a status line (the rest are counted).
const MAX_REFUSED_NAMED: usize = 5;
/// The most bytes of one line of a server's stderr logged.
const MAX_STDERR_LINE: usize = 500;

struct Running {
    service: RunningService<RoleClient, ()>,
    child: tokio::process::Child,
    /// Increases with every start, so a failure is only acted on for the process it hit.
    generation: u64,
    /// Set when the server sent a message longer than [`MAX_MESSAGE_BYTES`] (the connection
    /// was cut there).
    oversized: Arc<AtomicBool>,
}

/// One tool as the agent is offered it.
#[derive(Clone)]
struct Offered {
    /// The server's own name for it (what a call sends).
    tool: String,
    spec: Arc<ToolSpec>,
    /// Bytes of its name, description and schema (what it adds to every model call).
    bytes: usize,
}

/// A server's tool list, checked.
#[derive(Default)]
struct Listing {
    offered: Vec<Offered>,
    /// Tools not offered, each `` `NAME` (why) ``.
    refused: Vec<String>,
}

#[derive(Default)]
struct State {
    running: Option<Running>,
    generation: u64,
    /// The tools of its last successful listing (kept while it is down, so the model can
    /// still call them and a call starts it again).
    tools: Vec<Offered>,
    /// The tools of that listing that are not offered, each `` `NAME` (why) ``.
    refused: Vec<String>,
    /// Why its tools are not offered although listed (the project's budget), set by `tools`.
    withheld: Option<String>,
    /// Its first tool past the budget (deferred, with all after it), set by `tools`; `None`:
    /// all offered.
    deferred_from: Option<usize>,
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
    /// The confinement of `exec`, which servers share (plus their own `writable` paths).
    sandbox: Option<pegasus_sandbox::SandboxPaths>,
    /// What `mcp.json` holds now: it is written only when the state changes, never per call.
    written: Mutex<String>,
    /// The budget of the offered tools.
    budget: McpConfig,
    /// The window assumed when the model's is not known.
    default_window: u64,
    /// The tools past the budget, and those found.
    deferred: Arc<Deferred>,
}

/// What the agent is offered of the project's MCP tools: the tools of every call, and the
/// deferred ones that join once found (DESIGN.md §13).
pub struct McpTools {
    /// Offered with every call: the tools within the budget, then `tool_search` and the tools
    /// found (when any are deferred).
    pub tools: Vec<Arc<dyn Tool>>,
    /// The deferred tools, when there are any.
    pub late: Option<Arc<dyn LateTools>>,
}

impl McpHub {
    /// A hub for `servers`; nothing starts yet. Writes the initial status file. `budget` and
    /// `default_window` (the window assumed when the model's is not known) decide how many
    /// tools are offered with every call.
    pub fn new(
        servers: BTreeMap<String, McpServerConfig>,
        project_dir: &Path,
        workdir: &Path,
        registry: Option<PathBuf>,
        sandbox: Option<pegasus_sandbox::SandboxPaths>,
        budget: McpConfig,
        default_window: u64,
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
            sandbox,
            written: Mutex::new(String::new()),
            budget,
            default_window,
            deferred: Deferred::load(project_dir),
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

    /// Every server's offered tools, servers in name order: each server is started if it never
    /// was (first use); one whose tools would take the project past [`MAX_PROJECT_CATALOG_BYTES`],
    /// or that offers a name an earlier server offers, is withheld (the reason kept for
    /// `project show`).
    async fn catalog(&self) -> Vec<(usize, Offered)> {
        let mut all: Vec<(usize, Offered)> = Vec::new();
        let mut total = 0usize;
        let mut taken: HashMap<String, String> = HashMap::new();
        for (index, s) in self.servers.iter().enumerate() {
            let mut st = s.state.lock().await;
            if !st.started_once {
                let _ = self.ensure_running(s, &mut st).await;
            }
            let bytes: usize = st.tools.iter().map(|t| t.bytes).sum();
            st.withheld = if total + bytes > MAX_PROJECT_CATALOG_BYTES {
                Some(format!(
                    "its tools are not offered: their {bytes} bytes would take the project's MCP \
                     tools past {MAX_PROJECT_CATALOG_BYTES} bytes (all servers together); remove \
                     a server from mcp_servers or have this one offer fewer tools"
                ))
            } else {
                st.tools
                    .iter()
                    .find_map(|t| taken.get(&t.spec.name).map(|other| (t, other)))
                    .map(|(t, other)| {
                        format!(
                            "its tools are not offered: `{}` is also a tool of server {other}; \
                             rename one of the servers",
                            t.spec.name
                        )
                    })
            };
            if st.withheld.is_some() {
                continue;
            }
            total += bytes;
            for t in &st.tools {
                taken.insert(t.spec.name.clone(), s.name.clone());
                all.push((index, t.clone()));
            }
        }
        all
    }

    /// The names of the project's servers.
    pub fn server_names(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.name.clone()).collect()
    }

    /// The servers' timeouts (`timeout_s`): all of them together (a first listing may start
    /// every server), and the longest (one call).
    pub fn timeouts(&self) -> (Duration, Duration) {
        let each = self.servers.iter().map(|s| s.cfg.timeout());
        (each.clone().sum(), each.max().unwrap_or_default())
    }

    /// The tools of server `server` for a harness's MCP proxy (DESIGN.md §15): all of them
    /// (a harness has its own tool search; nothing is deferred), named as the agent is offered
    /// them (`mcp__SERVER__TOOL`). A server that cannot start has none (its error is in
    /// `project show`).
    pub async fn harness_tools(&self, server: &str) -> Result<Vec<Arc<ToolSpec>>, String> {
        let index = self.index_of(server)?;
        let all = self.catalog().await;
        self.write_status().await;
        Ok(all
            .into_iter()
            .filter(|(i, _)| *i == index)
            .map(|(_, t)| t.spec)
            .collect())
    }

    /// Calls the tool a harness names `name` (`mcp__SERVER__TOOL`, as [`McpHub::harness_tools`]
    /// listed it) of server `server`, as the agent's call would be made (the server
    /// restarted if needed, its timeout, the result cut to `max_bytes`). The caller has
    /// asked the approval policy.
    pub async fn harness_call(
        &self,
        server: &str,
        name: &str,
        input: serde_json::Value,
        max_bytes: usize,
    ) -> ToolOutput {
        let s = match self.index_of(server) {
            Ok(i) => self.servers[i].clone(),
            Err(e) => return ToolOutput::error(e),
        };
        let tool = {
            let st = s.state.lock().await;
            if let Some(why) = &st.withheld {
                return ToolOutput::error(format!("MCP server {server}: {why}"));
            }
            st.tools
                .iter()
                .find(|t| t.spec.name == name)
                .map(|t| t.tool.clone())
        };
        match tool {
            Some(tool) => self.call(&s, &tool, input, max_bytes).await,
            None => ToolOutput::error(format!(
                "MCP server {server} has no tool {}; list its tools again",
                quote(name)
            )),
        }
    }

    fn index_of(&self, server: &str) -> Result<usize, String> {
        self.servers
            .iter()
            .position(|s| s.name == server)
            .ok_or_else(|| format!("the project has no MCP server {}", quote(server)))
    }

    /// The tools to offer: every server is started if it never was (first use), and its listed
    /// tools become `mcp__NAME__TOOL` ([`McpHub::catalog`]). The tools (in that order, each
    /// server's in its listing order) are offered while they fit the budget of a model of
    /// `window` tokens; the rest are deferred behind `tool_search` ([`crate::mcp_deferred`]).
    pub async fn tools(self: &Arc<Self>, window: Option<u64>) -> McpTools {
        let all = self.catalog().await;
        let window = window.unwrap_or(self.default_window);
        let offered = crate::mcp_deferred::split(
            all.iter().map(|(_, t)| t.spec.as_ref()),
            crate::mcp_deferred::budget_tokens(window, self.budget.tool_budget_share),
            self.budget.max_offered_tools,
            MAX_PROJECT_TOOLS_BYTES,
        );
        // Each server's first deferred tool, for `project show`.
        let mut seen = vec![0usize; self.servers.len()];
        let mut deferred_from: Vec<Option<usize>> = vec![None; self.servers.len()];
        for (i, (server, _)) in all.iter().enumerate() {
            if i >= offered && deferred_from[*server].is_none() {
                deferred_from[*server] = Some(seen[*server]);
            }
            seen[*server] += 1;
        }
        for (s, from) in self.servers.iter().zip(deferred_from) {
            s.state.lock().await.deferred_from = from;
        }
        let tool = |server: usize, t: &Offered| -> Arc<McpTool> {
            Arc::new(McpTool {
                hub: self.clone(),
                server: self.servers[server].clone(),
                tool: t.tool.clone(),
                spec: t.spec.clone(),
            })
        };
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        for (server, t) in &all[..offered] {
            out.push(tool(*server, t));
        }
        let later: Vec<DeferredTool> = all[offered..]
            .iter()
            .map(|(server, t)| DeferredTool {
                spec: t.spec.clone(),
                own_name: t.tool.clone(),
                tool: tool(*server, t),
            })
            .collect();
        let any_deferred = !later.is_empty();
        self.deferred.set(later, all.len());
        self.write_status().await;
        if !any_deferred {
            return McpTools {
                tools: out,
                late: None,
            };
        }
        out.push(self.deferred.search_tool());
        out.extend(self.deferred.found_tools());
        McpTools {
            tools: out,
            late: Some(self.deferred.clone() as Arc<dyn LateTools>),
        }
    }

    /// Starts the server if it is not running and its backoff allows. `Err` is one line.
    async fn ensure_running(&self, s: &Server, st: &mut State) -> Result<(), String> {
        if let Some(r) = st.running.as_mut() {
            match r.child.try_wait() {
                Ok(None) if !r.service.is_closed() => return Ok(()),
                _ => {
                    let why = if r.oversized.load(Ordering::SeqCst) {
                        oversized_reason()
                    } else {
                        "the server exited".to_string()
                    };
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
            Ok((service, child, listing, oversized)) => {
                st.generation += 1;
                st.running = Some(Running {
                    service,
                    child,
                    generation: st.generation,
                    oversized,
                });
                st.tools = listing.offered;
                st.refused = listing.refused;
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
            Listing,
            Arc<AtomicBool>,
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
            .kill_on_drop(true);
        for key in ["PATH", "HOME", "LANG"] {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.envs(&s.cfg.env);
        // Contained as `exec` is (own PID namespace, dies with the worker, Landlock), with the
        // server's own `writable` paths added.
        // Each path is resolved and judged again now (the server starts lazily and restarts,
        // long after the worker's start check): a folder swapped for a link into the home in
        // between is refused, and the sandbox gets the resolved form.
        let sandbox = match self.sandbox.clone() {
            Some(mut paths) => {
                for w in &s.cfg.writable {
                    let real = pegasus_store::home_guard::resolve_writable(
                        &paths.home,
                        &paths.own_dir,
                        &self.workdir,
                        w,
                    )
                    .map_err(|e| format!("mcp_servers.{}.writable: {e}", s.name))?;
                    paths.writable.push(real);
                }
                Some(paths)
            }
            None => None,
        };
        pegasus_sandbox::confine(
            cmd.as_std_mut(),
            pegasus_sandbox::Confinement {
                sandbox: sandbox.as_ref(),
                workdir: &self.workdir,
            },
        )?;
        let mut child = pegasus_sandbox::adopted::spawn_known(|| cmd.spawn(), |c| c.id())
            .map_err(|e| format!("cannot run `{}`: {e}", s.cfg.command))?;
        if let (Some(registry), Some(pid)) = (&self.registry, child.id()) {
            if let Err(e) = pegasus_sandbox::record_exec_group(registry, pid as i32) {
                tracing::warn!(server = %s.name, "cannot record the server's process group: {e}");
            }
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(log_stderr(s.name.clone(), err));
        }
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            kill_group(&mut child);
            return Err("no stdio pipes".into());
        };
        let timeout = s.cfg.timeout();
        let oversized = Arc::new(AtomicBool::new(false));
        let stdout = LineGuard::new(stdout, MAX_MESSAGE_BYTES, oversized.clone());
        // rmcp's own cap (16 MiB by default) is set past ours: what LineGuard lets through is
        // read whole.
        let transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, stdin)
            .with_max_line_length(MAX_MESSAGE_BYTES + 2);
        // `Err((true, why))`: the handshake failed; `Err((false, why))`: its tools are refused.
        let started = tokio::time::timeout(timeout, async {
            let service = ().serve(transport).await.map_err(|e| (true, quote(&e.to_string())))?;
            let listing = list_tools(&s.name, service.peer())
                .await
                .map_err(|why| (false, why))?;
            Ok::<_, (bool, String)>((service, listing))
        })
        .await;
        match started {
            Ok(Ok((service, listing))) => Ok((service, child, listing, oversized)),
            Ok(Err((handshake, e))) => {
                kill_group(&mut child);
                let status = child.try_wait().ok().flatten();
                Err(match status {
                    _ if oversized.load(Ordering::SeqCst) => oversized_reason(),
                    _ if !handshake => e,
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
    async fn call(
        &self,
        s: &Server,
        tool: &str,
        input: serde_json::Value,
        max_bytes: usize,
    ) -> ToolOutput {
        let args = match input {
            serde_json::Value::Object(m) => m,
            serde_json::Value::Null => serde_json::Map::new(),
            other => {
                return ToolOutput::error(format!(
                    "the arguments of an MCP tool must be a JSON object, not {other}"
                ))
            }
        };
        let (peer, generation, oversized): (Peer<RoleClient>, u64, Arc<AtomicBool>) = {
            let mut st = s.state.lock().await;
            if let Err(e) = self.ensure_running(s, &mut st).await {
                drop(st);
                self.write_status().await;
                return ToolOutput::error(e);
            }
            match st.running.as_ref() {
                Some(r) => (r.service.peer().clone(), r.generation, r.oversized.clone()),
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
                    ToolOutput::error(cut_result(
                        &s.name,
                        format!("MCP tool {} failed: {text}", quote(tool)),
                        max_bytes,
                    ))
                } else {
                    ToolOutput::ok(cut_result(&s.name, text, max_bytes))
                };
            }
            // The answer was past the hard cap: skipped as it came, the server stays up.
            Ok(Err(rmcp::ServiceError::McpError(e))) if e.code.0 == OVERSIZED_CODE => {
                tracing::warn!(server = %s.name, "{}", e.message);
                return ToolOutput::error(format!("MCP server {}: {}", s.name, e.message));
            }
            // A protocol-level error from a live server (unknown tool, bad arguments): the
            // server stays up.
            Ok(Err(rmcp::ServiceError::McpError(e))) => {
                return ToolOutput::error(format!(
                    "MCP server {} refused the call: {}",
                    s.name,
                    quote(&e.message)
                ))
            }
            Ok(Err(_)) if oversized.load(Ordering::SeqCst) => oversized_reason(),
            Ok(Err(e)) => format!("the server stopped answering: {}", quote(&e.to_string())),
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
        let found: HashSet<String> = self
            .deferred
            .found_tools()
            .iter()
            .map(|t| t.spec().name)
            .collect();
        for s in &self.servers {
            let st = s.state.lock().await;
            let state = if st.running.is_some() {
                "running"
            } else if st.started_once {
                "down"
            } else {
                "not started"
            };
            let mut notes: Vec<String> = st.error.iter().chain(&st.withheld).cloned().collect();
            if !st.refused.is_empty() {
                notes.push(refused_note(&st.refused));
            }
            // What the model is offered with every call: the tools within the budget and the
            // ones found; the rest are counted.
            let (tools, deferred) = if st.withheld.is_some() {
                (Vec::new(), 0)
            } else {
                let from = st.deferred_from.unwrap_or(st.tools.len());
                let (mut shown, mut deferred) = (Vec::new(), 0);
                for (i, t) in st.tools.iter().enumerate() {
                    if i < from || found.contains(&t.spec.name) {
                        shown.push(t.spec.name.clone());
                    } else {
                        deferred += 1;
                    }
                }
                (shown, deferred)
            };
            out.push(ServerStatus {
                name: s.name.clone(),
                state: state.to_string(),
                tools,
                deferred,
                error: (!notes.is_empty()).then(|| notes.join("; ")),
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

/// The names the agent is offered for a server's tools (given in listing order), in that
/// order: [`tool_name`] for each, except where cleaning makes names collide. Then the one tool
/// whose name needed no change (if any) keeps it, and every other gets `_` and six hex digits of
/// a hash of its own name (cut to leave room: still 64 characters at most), so each stays
/// reachable whatever the listing order. `Err` (a reason naming the tool) only for a tool whose
/// name is still taken after that (the same name listed twice, or a crafted hash clash).
pub fn offered_names(server: &str, tools: &[&str]) -> Vec<Result<String, String>> {
    let bases: Vec<String> = tools.iter().map(|t| tool_name(server, t)).collect();
    let mut count: HashMap<&str, usize> = HashMap::new();
    for b in &bases {
        *count.entry(b.as_str()).or_default() += 1;
    }
    // A name kept as it is: no collision, or the one tool of a collision that needed no change.
    let candidates: Vec<(bool, String)> = tools
        .iter()
        .zip(bases.iter())
        .map(|(t, b)| {
            if count.get(b.as_str()) == Some(&1) || *b == format!("mcp__{server}__{t}") {
                (true, b.clone())
            } else {
                let mut n = b.clone();
                n.truncate(64 - 7);
                (
                    false,
                    format!("{n}_{:06x}", fnv1a(t.as_bytes()) & 0xff_ffff),
                )
            }
        })
        .collect();
    let mut out: Vec<Result<String, String>> =
        candidates.iter().map(|(_, n)| Ok(n.clone())).collect();
    // Kept names are taken first, so a suffixed name never takes a kept one's place.
    let kept = (0..tools.len()).filter(|i| candidates[*i].0);
    let suffixed = (0..tools.len()).filter(|i| !candidates[*i].0);
    let mut taken: HashSet<&str> = HashSet::new();
    for i in kept.chain(suffixed) {
        let name = candidates[i].1.as_str();
        if !taken.insert(name) {
            out[i] = Err(format!(
                "`{}` (its name as offered, {name}, is taken by another tool of the server; \
                 rename one of them)",
                quote(tools[i])
            ));
        }
    }
    out
}

/// FNV-1a, 64 bits: a hash that is the same in every build (the suffix of a renamed tool must
/// not change between runs: sessions and role allowlists name it).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Lists a server's tools page by page, checking each page against the limits before asking
/// for the next. `Err` is one line saying what was too much.
async fn list_tools(server: &str, peer: &Peer<RoleClient>) -> Result<Listing, String> {
    let mut kept: Vec<(String, String, String)> = Vec::new();
    let mut refused = Vec::new();
    let (mut count, mut bytes) = (0usize, 0usize);
    let mut seen: HashSet<String> = HashSet::new();
    let mut cursor = None;
    for page in 0.. {
        if page == MAX_LIST_PAGES {
            return Err(format!(
                "its tool list comes in more than {MAX_LIST_PAGES} pages (the most Pegasus \
                 reads); configure the server to offer fewer tools"
            ));
        }
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let result = peer.list_tools(Some(params)).await.map_err(|e| match e {
            rmcp::ServiceError::McpError(e) if e.code.0 == OVERSIZED_CODE => format!(
                "a page of its tool list was past the {} MiB Pegasus reads of one MCP message; \
                 configure it to list its tools in smaller pages or to offer fewer",
                MAX_MESSAGE_BYTES >> 20
            ),
            e => format!("listing its tools failed: {}", quote(&e.to_string())),
        })?;
        for t in result.tools {
            count += 1;
            if count > MAX_TOOLS_PER_SERVER {
                return Err(format!(
                    "it lists more than {MAX_TOOLS_PER_SERVER} tools (the most one server may \
                     offer); configure it to offer fewer, or split it into several servers"
                ));
            }
            let name = t.name.to_string();
            let description = t.description.as_deref().unwrap_or("");
            let schema = serde_json::to_string(&*t.input_schema).unwrap_or_else(|_| "{}".into());
            let size = name.len() + description.len() + schema.len();
            if size > MAX_TOOL_BYTES {
                refused.push(format!(
                    "`{}` ({size} bytes of name, description and schema; at most {MAX_TOOL_BYTES})",
                    quote(&name)
                ));
                continue;
            }
            if !seen.insert(name.clone()) {
                refused.push(format!("`{}` (listed twice)", quote(&name)));
                continue;
            }
            bytes += size;
            if bytes > MAX_SERVER_TOOLS_BYTES {
                return Err(format!(
                    "its tool list passes {MAX_SERVER_TOOLS_BYTES} bytes of names, descriptions \
                     and schemas (the most one server may offer); configure it to offer fewer \
                     tools"
                ));
            }
            kept.push((name, description.to_string(), schema));
        }
        cursor = result.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let names: Vec<&str> = kept.iter().map(|(n, _, _)| n.as_str()).collect();
    let offered_as = offered_names(server, &names);
    let mut offered = Vec::new();
    for ((tool, description, schema), name) in kept.iter().zip(offered_as) {
        let name = match name {
            Ok(n) => n,
            Err(why) => {
                refused.push(why);
                continue;
            }
        };
        let origin = if name == format!("mcp__{server}__{tool}") {
            format!("[MCP server {server}]")
        } else {
            format!("[MCP server {server}, tool `{tool}`]")
        };
        let description = format!("{origin} {description}");
        offered.push(Offered {
            tool: tool.clone(),
            bytes: name.len() + description.len() + schema.len(),
            spec: Arc::new(ToolSpec {
                name,
                description,
                input_schema_json: schema.clone(),
            }),
        });
    }
    Ok(Listing { offered, refused })
}

/// Why a server that sent too long a message, answering no request Pegasus could tell, was
/// stopped.
fn oversized_reason() -> String {
    format!(
        "it sent a message of more than {} MiB (the most Pegasus reads of one MCP message) that \
         answers no request it could tell; it was stopped and restarts at next use: have its \
         tools answer less at a time",
        MAX_MESSAGE_BYTES >> 20
    )
}

/// The error put in place of an answer of `bytes` bytes, past [`MAX_MESSAGE_BYTES`].
fn oversized_answer(bytes: u64) -> String {
    format!(
        "its answer was {} MiB, past the {} MiB Pegasus reads of one MCP message, so nothing of \
         it is shown; the server is fine and still running: ask the tool for less at a time (a \
         narrower query, a page, a range)",
        bytes >> 20,
        MAX_MESSAGE_BYTES >> 20
    )
}

/// A result cut to `cap` bytes (head and tail kept) with a note saying how much was cut and
/// that the server is fine; within `cap` it is unchanged.
fn cut_result(server: &str, text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let keep = cap.saturating_sub(NOTE_ROOM).max(cap / 2);
    pegasus_agent::context::cut_middle(text, keep, |cut, total| {
        format!(
            "[... {cut} of {total} bytes cut here: a tool result shows at most {cap} bytes \
             (agent.max_tool_result_bytes, at most a quarter of the model's context window). \
             MCP server {server} is fine and still running; to see the middle, ask the tool for \
             less at a time (a narrower query, a page, a range) ...]"
        )
    })
}

/// The status line of refused tools: the first few named, the rest counted.
fn refused_note(refused: &[String]) -> String {
    let mut named = refused[..refused.len().min(MAX_REFUSED_NAMED)].join(", ");
    if refused.len() > MAX_REFUSED_NAMED {
        named.push_str(&format!(" and {} more", refused.len() - MAX_REFUSED_NAMED));
    }
    format!(
        "{} tool{} not offered: {named}",
        refused.len(),
        if refused.len() == 1 { "" } else { "s" }
    )
}

/// A server's own words, fit for one status or error line: control characters (newlines
/// included) become spaces, at most [`MAX_QUOTE_CHARS`] characters.
fn quote(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_QUOTE_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(MAX_QUOTE_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// Logs a server's stderr line by line, each cut at [`MAX_STDERR_LINE`] bytes (a line with no
/// end is never buffered whole).
async fn log_stderr(name: String, mut err: impl AsyncRead + Unpin) {
    let mut buf = vec![0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let emit = |line: &[u8]| {
        tracing::info!(server = %name, "mcp stderr: {}", String::from_utf8_lossy(line));
    };
    loop {
        let n = match err.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&line);
                line.clear();
            } else if line.len() < MAX_STDERR_LINE {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}

/// A server's stdout as rmcp reads it, each line (one JSON-RPC message) passed on up to `max`
/// bytes. A longer line is never buffered here nor by rmcp: once past `max` it is ended with a
/// newline (rmcp drops the unparsable start it got), its rest is skipped as it streams by, and
/// in its place comes a JSON-RPC error answering the same request ([`oversized_answer`]), so
/// the call waiting for it gets a clear error and the server keeps running. The request's `id`
/// is read from the line's start (its first [`HEAD_BYTES`]) or, for servers that write it last
/// (the TypeScript SDK's `{"result":…,"jsonrpc":"2.0","id":7}`), from its end (its last
/// [`HEAD_BYTES`]); a long line that names no `id` at either end ends the stream instead (an
/// error, `tripped` set): the server is stopped with [`oversized_reason`].
struct LineGuard<R> {
    inner: R,
    max: usize,
    tripped: Arc<AtomicBool>,
    /// Bytes of the current line passed on so far.
    line: usize,
    /// The current line's first [`HEAD_BYTES`].
    head: Vec<u8>,
    /// Skipping the rest of a line past `max`: its request's id (when its start named it) and
    /// its bytes so far.
    skipping: Option<(Option<serde_json::Value>, u64)>,
    /// The last [`HEAD_BYTES`] of a line being skipped, for an `id` written last.
    tail: Vec<u8>,
    /// Bytes made here, to hand out (from `handed`) before reading on.
    pending: Vec<u8>,
    handed: usize,
    /// Read from `inner`, not yet looked at.
    scratch: Box<[u8]>,
}

impl<R> LineGuard<R> {
    fn new(inner: R, max: usize, tripped: Arc<AtomicBool>) -> Self {
        LineGuard {
            inner,
            max,
            tripped,
            line: 0,
            head: Vec::new(),
            skipping: None,
            tail: Vec::new(),
            pending: Vec::new(),
            handed: 0,
            scratch: vec![0u8; 64 << 10].into_boxed_slice(),
        }
    }

    /// Looks at `input` (bytes just read), putting what rmcp gets in `self.pending`. `Err`
    /// when a line past `max` names no request.
    fn feed(&mut self, input: &[u8]) -> Result<(), ()> {
        let mut rest = input;
        while !rest.is_empty() {
            let newline = rest.iter().position(|b| *b == b'\n');
            let (segment, ends) = match newline {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            rest = &rest[segment.len() + usize::from(ends)..];
            if self.skipping.is_none() {
                let room = HEAD_BYTES
                    .saturating_sub(self.head.len())
                    .min(segment.len());
                self.head.extend_from_slice(&segment[..room]);
                if self.line + segment.len() <= self.max {
                    self.pending.extend_from_slice(segment);
                    self.line += segment.len();
                    if ends {
                        self.pending.push(b'\n');
                    }
                } else {
                    // rmcp gets the end of a line it cannot parse and drops it.
                    self.pending.push(b'\n');
                    self.skipping = Some((request_id(&self.head), self.line as u64));
                    self.tail.clear();
                }
            }
            if let Some((_, skipped)) = self.skipping.as_mut() {
                *skipped += segment.len() as u64 + u64::from(ends);
                keep_tail(&mut self.tail, segment);
            }
            if ends {
                // A skipped line is answered in its place once it ends.
                if let Some((id, bytes)) = self.skipping.take() {
                    let Some(id) = id.or_else(|| trailing_request_id(&self.tail)) else {
                        self.tripped.store(true, Ordering::SeqCst);
                        return Err(());
                    };
                    self.pending.extend_from_slice(&oversized_line(id, bytes));
                }
                self.line = 0;
                self.head.clear();
                self.tail.clear();
            }
        }
        Ok(())
    }
}

/// The JSON-RPC error line answering request `id` in place of a message of `bytes` bytes.
fn oversized_line(id: serde_json::Value, bytes: u64) -> Vec<u8> {
    let msg = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": OVERSIZED_CODE, "message": oversized_answer(bytes)},
    });
    let mut line = msg.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Keeps the last [`HEAD_BYTES`] of a line in `tail` as `segment` (its next bytes) goes by.
fn keep_tail(tail: &mut Vec<u8>, segment: &[u8]) {
    if segment.len() >= HEAD_BYTES {
        tail.clear();
        tail.extend_from_slice(&segment[segment.len() - HEAD_BYTES..]);
        return;
    }
    let over = (tail.len() + segment.len()).saturating_sub(HEAD_BYTES);
    tail.drain(..over.min(tail.len()));
    tail.extend_from_slice(segment);
}

/// The `id` member that ends the JSON object `tail` is the end of (`…,"id":7}`), a number or a
/// string: the last `"id"` key followed by its value and the object's one closing brace.
fn trailing_request_id(tail: &[u8]) -> Option<serde_json::Value> {
    let text = String::from_utf8_lossy(tail);
    let key = text.rfind("\"id\"")?;
    let after = text[key + 4..].trim_start().strip_prefix(':')?;
    let mut values = serde_json::Deserializer::from_str(after).into_iter::<serde_json::Value>();
    let value = values.next()?.ok()?;
    let rest = after[values.byte_offset()..].trim();
    (rest == "}" && (value.is_number() || value.is_string())).then_some(value)
}

/// The `id` member of the JSON object `head` starts (a number or a string), if it comes before
/// the head ends: a scan of the object's own members, skipping strings and nested values.
fn request_id(head: &[u8]) -> Option<serde_json::Value> {
    let text = String::from_utf8_lossy(head);
    let b = text.as_bytes();
    let (mut depth, mut i, mut expect_key) = (0usize, 0usize, false);
    while i < b.len() {
        match b[i] {
            b'"' => {
                let mut end = i + 1;
                while end < b.len() && b[end] != b'"' {
                    end += if b[end] == b'\\' { 2 } else { 1 };
                }
                if end >= b.len() {
                    return None;
                }
                if depth == 1 && expect_key {
                    expect_key = false;
                    if &text[i + 1..end] == "id" {
                        let after = text[end + 1..].trim_start().strip_prefix(':')?;
                        let value = serde_json::Deserializer::from_str(after)
                            .into_iter::<serde_json::Value>()
                            .next()?
                            .ok()?;
                        return (value.is_number() || value.is_string()).then_some(value);
                    }
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                expect_key = depth == 1 && b[i] == b'{';
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => expect_key = true,
            _ => {}
        }
        i += 1;
    }
    None
}

impl<R: AsyncRead + Unpin> AsyncRead for LineGuard<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let too_long = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "an MCP message longer than the limit that answers no request",
            )
        };
        let this = &mut *self;
        loop {
            if this.handed < this.pending.len() {
                let n = (this.pending.len() - this.handed).min(buf.remaining());
                buf.put_slice(&this.pending[this.handed..this.handed + n]);
                this.handed += n;
                if this.handed == this.pending.len() {
                    this.pending.clear();
                    this.handed = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.tripped.load(Ordering::SeqCst) {
                return Poll::Ready(Err(too_long()));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            let n = read.filled().len();
            if n == 0 {
                // End of stream; a line skipped without its id (unended) answers nothing.
                if matches!(this.skipping, Some((None, _))) {
                    this.tripped.store(true, Ordering::SeqCst);
                    return Poll::Ready(Err(too_long()));
                }
                return Poll::Ready(Ok(()));
            }
            let scratch = std::mem::take(&mut this.scratch);
            let fed = this.feed(&scratch[..n]);
            this.scratch = scratch;
            if fed.is_err() {
                return Poll::Ready(Err(too_long()));
            }
        }
    }
}

fn render(content: &[ContentBlock], structured: Option<&serde_json::Value>) -> String {
    let parts: Vec<String> = content
        .iter()
        .map(|c| match c {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(_) => "[an image, not shown]".into(),
            ContentBlock::Audio(_) => "[audio, not shown]".into(),
            ContentBlock::Resource(_) => "[an embedded resource, not shown]".into(),
            ContentBlock::ResourceLink(r) => format!("[resource {}]", r.uri),
            _ => "[content of a kind Pegasus does not show]".into(),
        })
        .collect();
    match structured {
        Some(v) if parts.is_empty() => v.to_string(),
        _ => parts.join("\n"),
    }
}

struct McpTool {
    hub: Arc<McpHub>,
    server: Arc<Server>,
    tool: String,
    spec: Arc<ToolSpec>,
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        (*self.spec).clone()
    }

    fn call<'a>(
        &'a self,
        input: serde_json::Value,
        ctx: &'a ToolCtx,
    ) -> pegasus_agent::tool::ToolFuture<'a> {
        let max_bytes = ctx.settings.tool_result_cap();
        Box::pin(self.hub.call(&self.server, &self.tool, input, max_bytes))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn tool_names_are_what_providers_accept() {
        assert_eq!(tool_name("gh", "create_issue"), "mcp__gh__create_issue");
        assert_eq!(tool_name("gh", "a.b/c d"), "mcp__gh__a_b_c_d");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), 64);
    }

    fn names(server: &str, tools: &[&str]) -> Vec<String> {
        offered_names(server, tools)
            .into_iter()
            .map(|n| n.unwrap())
            .collect()
    }

    fn provider_ok(n: &str) -> bool {
        n.len() <= 64
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn names_that_collide_once_cleaned_all_stay_reachable_whatever_the_order() {
        let tools = ["a.b", "a_b", "a b", "c"];
        let got = names("s", &tools);
        // The one that needed no cleaning keeps its name; the others get a suffix of their own.
        assert_eq!(got[1], "mcp__s__a_b");
        assert_eq!(got[3], "mcp__s__c");
        assert!(got[0].starts_with("mcp__s__a_b_") && got[0].len() == "mcp__s__a_b_".len() + 6);
        assert!(got[2].starts_with("mcp__s__a_b_"));
        assert_eq!(got.iter().collect::<HashSet<_>>().len(), 4, "{got:?}");
        assert!(got.iter().all(|n| provider_ok(n)), "{got:?}");
        // Deterministic: the listing order changes nothing, nor does running again.
        let rev: Vec<&str> = tools.iter().rev().copied().collect();
        let mut back = names("s", &rev);
        back.reverse();
        assert_eq!(back, got);
        assert_eq!(names("s", &tools), got);
        // No collision: names unchanged.
        assert_eq!(names("s", &["x.y"]), vec!["mcp__s__x_y"]);
    }

    #[test]
    fn long_names_cut_to_the_same_64_characters_are_told_apart() {
        let stem = "a".repeat(70);
        let (one, two) = (format!("{stem}_one"), format!("{stem}_two"));
        let got = names("srv", &[&one, &two]);
        assert_ne!(got[0], got[1]);
        assert!(got.iter().all(|n| provider_ok(n)), "{got:?}");
        assert!(
            got.iter().all(|n| n.starts_with("mcp__srv__aaaa")),
            "{got:?}"
        );
    }

    #[test]
    fn a_name_still_taken_after_the_suffix_is_refused_by_name() {
        // A tool crafted to carry exactly the name `a.b` would be renamed to.
        let renamed = names("s", &["a.b", "a_b"])[0].clone();
        let crafted = renamed.trim_start_matches("mcp__s__").to_string();
        let got = offered_names("s", &["a.b", "a_b", &crafted]);
        assert_eq!(got[1].as_deref(), Ok("mcp__s__a_b"));
        assert_eq!(got[2].as_deref(), Ok(renamed.as_str()));
        let why = got[0].clone().unwrap_err();
        assert!(why.starts_with("`a.b`") && why.contains("rename"), "{why}");
        assert_eq!(why.lines().count(), 1);
        // The same name listed twice: the second is refused.
        let twice = offered_names("s", &["x", "x"]);
        assert!(twice[0].is_ok() && twice[1].is_err(), "{twice:?}");
    }

    #[test]
    fn refusals_and_quotes_are_one_bounded_line() {
        let q = quote(&format!("bad\nthing{}", "y".repeat(1000)));
        assert!(
            !q.contains('\n') && q.chars().count() == MAX_QUOTE_CHARS + 1,
            "{q}"
        );
        let refused: Vec<String> = (0..8).map(|i| format!("`t{i}` (why)")).collect();
        let note = refused_note(&refused);
        assert!(
            note.starts_with("8 tools not offered: `t0` (why)"),
            "{note}"
        );
        assert!(
            note.ends_with("and 3 more") && !note.contains("t5"),
            "{note}"
        );
        assert_eq!(
            refused_note(&refused[..1]),
            "1 tool not offered: `t0` (why)"
        );
        assert!(!oversized_reason().contains('\n'));
    }

    async fn read_all(input: &[u8], max: usize) -> (Result<Vec<u8>, std::io::Error>, bool) {
        let tripped = Arc::new(AtomicBool::new(false));
        // A small buffer, so lines span reads.
        let mut r =
            tokio::io::BufReader::with_capacity(3, LineGuard::new(input, max, tripped.clone()));
        let mut out = Vec::new();
        let res = r.read_to_end(&mut out).await.map(|_| out);
        (res, tripped.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_unchanged() {
        let ok = b"12345\n1234\n\n12345";
        let (res, tripped) = read_all(ok, 5).await;
        assert_eq!(res.unwrap(), ok.to_vec());
        assert!(!tripped);
    }

    #[tokio::test]
    async fn a_line_past_the_limit_naming_no_request_ends_the_stream_and_says_so() {
        for bad in [&b"123456\n"[..], b"12\n1234567", b"1\n2\n123456789\n1\n"] {
            let (res, tripped) = read_all(bad, 5).await;
            assert!(res.is_err() && tripped, "{bad:?}");
        }
        // The id after the point where the head ends, or nested: not the message's own.
        let nested = br#"{"result":{"id":7,"x":"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"}}"#;
        let (res, tripped) = read_all(&[&nested[..], b"\n"].concat(), 30).await;
        assert!(res.is_err() && tripped);
    }

    #[tokio::test]
    async fn an_answer_past_the_limit_becomes_an_error_for_its_request_and_the_stream_goes_on() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}]}}}}\n",
            "x".repeat(500)
        );
        let next = "{\"jsonrpc\":\"2.0\",\"id\":43,\"result\":{}}\n";
        let input = format!("{big}{next}");
        let (res, tripped) = read_all(input.as_bytes(), 100).await;
        assert!(!tripped);
        let out = String::from_utf8(res.unwrap()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        // The start rmcp got (cut, unparsable: dropped), the error for id 42, the next message.
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines[0].len() <= 100 && serde_json::from_str::<serde_json::Value>(lines[0]).is_err()
        );
        let err: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(err["id"], 42);
        assert_eq!(err["error"]["code"], OVERSIZED_CODE);
        let msg = err["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("the server is fine and still running"),
            "{msg}"
        );
        assert_eq!(lines[2], next.trim_end());
        // A string id is kept as it is.
        let s = "{\"id\":\"a-1\",\"jsonrpc\":\"2.0\",\"result\":\"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\"}\n";
        let (res, _) = read_all(s.as_bytes(), 20).await;
        let out = String::from_utf8(res.unwrap()).unwrap();
        let err: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
        assert_eq!(err["id"], "a-1");
    }

    /// An endless answer streamed through: what the guard holds stays small.
    struct Endless {
        sent: u64,
        total: u64,
    }

    impl AsyncRead for Endless {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let head = br#"{"jsonrpc":"2.0","id":9,"result":{"content":[{"type":"text","text":""#;
            if self.sent == 0 {
                buf.put_slice(head);
                self.sent = head.len() as u64;
            } else if self.sent < self.total {
                let n = buf.remaining().min((self.total - self.sent) as usize);
                buf.put_slice(&vec![b'x'; n]);
                self.sent += n as u64;
            } else if self.sent == self.total {
                buf.put_slice(b"\"}]}}\n");
                self.sent += 1;
            }
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_100_mib_answer_streams_through_in_bounded_memory() {
        let tripped = Arc::new(AtomicBool::new(false));
        let source = Endless {
            sent: 0,
            total: 100 << 20,
        };
        let mut guard = LineGuard::new(source, 1 << 20, tripped.clone());
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 8192];
        let mut most_pending = 0;
        loop {
            let n = guard.read(&mut chunk).await.unwrap();
            most_pending = most_pending.max(guard.pending.capacity());
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
            // Only the part within the limit and the answer put in its place come out.
            assert!(out.len() < (1 << 20) + 4096);
        }
        assert!(!tripped.load(Ordering::SeqCst));
        assert!(most_pending <= 256 << 10, "{most_pending}");
        let text = String::from_utf8(out).unwrap();
        let err: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(err["id"], 9);
        let msg = err["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with("its answer was 100 MiB, past the 32 MiB"),
            "{msg}"
        );
    }

    #[test]
    fn the_request_id_is_the_objects_own() {
        let id = |s: &str| request_id(s.as_bytes());
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":5,"result":{"#),
            Some(serde_json::json!(5))
        );
        assert_eq!(
            id(r#"{ "result" : {"id": 1, "a": "}"}, "id" : "x\"y", "#),
            Some(serde_json::json!("x\"y"))
        );
        assert_eq!(id(r#"{"method":"notifications/x","params":{"id":3"#), None);
        assert_eq!(id(r#"{"id":{"a":1}}"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","result":"xxxx"#), None);
        let last = |s: &str| trailing_request_id(s.as_bytes());
        assert_eq!(
            last(r#"xxx"}]},"jsonrpc":"2.0","id":7}"#),
            Some(serde_json::json!(7))
        );
        assert_eq!(
            last(r#"x", "id" : "a-1" } "#),
            Some(serde_json::json!("a-1"))
        );
        assert_eq!(last(r#"yy","id":7}}"#), None, "a nested object's");
        assert_eq!(last(r#"{"id":7,"x":"yy"}"#), None, "not the last member");
    }

    #[tokio::test]
    async fn an_answer_past_the_limit_whose_id_comes_last_is_answered_in_its_place() {
        // The TypeScript SDK writes `id` after `result`.
        let big = format!(
            "{{\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}]}},\"jsonrpc\":\"2.0\",\"id\":42}}\n",
            "x".repeat(5_000)
        );
        let next = "{\"result\":{},\"jsonrpc\":\"2.0\",\"id\":43}\n";
        let (res, tripped) = read_all(format!("{big}{next}").as_bytes(), 100).await;
        assert!(!tripped);
        let out = String::from_utf8(res.unwrap()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        let err: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(
            (err["id"].clone(), err["error"]["code"].clone()),
            (serde_json::json!(42), serde_json::json!(OVERSIZED_CODE))
        );
        assert_eq!(lines[2], next.trim_end());
    }

    #[test]
    fn a_cut_result_says_how_much_and_that_the_server_is_fine_within_the_cap() {
        let text = format!("start{}end", "m".repeat(100_000));
        let cut = cut_result("srv", text.clone(), 32 * 1024);
        assert!(cut.len() <= 32 * 1024, "{}", cut.len());
        assert!(cut.starts_with("start") && cut.ends_with("end"));
        assert!(
            cut.contains("bytes cut here")
                && cut.contains("MCP server srv is fine and still running")
        );
        let total = format!("of {} bytes", text.len());
        assert!(cut.contains(&total), "{cut}");
        // The loop's own cap leaves it as it is.
        assert_eq!(
            pegasus_agent::context::cap_tool_result(cut.clone(), 32 * 1024),
            cut
        );
        assert_eq!(cut_result("srv", "short".into(), 1024), "short");
    }

    fn offered(server: &str, tool: &str, bytes: usize) -> Offered {
        Offered {
            tool: tool.into(),
            spec: Arc::new(ToolSpec {
                name: tool_name(server, tool),
                description: "d".repeat(bytes.min(1000)),
                input_schema_json: "{}".into(),
            }),
            bytes,
        }
    }

    fn hub_of(dir: &Path, names: &[&str], budget: McpConfig) -> Arc<McpHub> {
        let cfg = |c: &str| McpServerConfig {
            command: c.into(),
            args: vec![],
            env: BTreeMap::new(),
            timeout_s: None,
            eager: false,
            writable: vec![],
        };
        let servers: BTreeMap<String, McpServerConfig> = names
            .iter()
            .map(|n| (n.to_string(), cfg("/nonexistent")))
            .collect();
        McpHub::new(servers, dir, dir, None, None, budget, 128_000)
    }

    async fn listed(hub: &McpHub, listings: Vec<Vec<Offered>>) {
        for (s, tools) in hub.servers.iter().zip(listings) {
            let mut st = s.state.lock().await;
            st.started_once = true;
            st.tools = tools;
        }
    }

    fn names_of(tools: &[Arc<dyn Tool>]) -> Vec<String> {
        tools.iter().map(|t| t.spec().name).collect()
    }

    #[tokio::test]
    async fn servers_past_the_projects_catalog_or_reusing_a_name_are_withheld_and_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let everything = McpConfig {
            tool_budget_share: 1.0,
            max_offered_tools: 1000,
        };
        let hub = hub_of(dir.path(), &["a", "a_", "b", "c"], everything);
        let half = MAX_PROJECT_CATALOG_BYTES / 2;
        listed(
            &hub,
            vec![
                vec![offered("a", "_x", 10), offered("a", "y", half)],
                // `mcp__a___x` again, from another server.
                vec![offered("a_", "x", 10)],
                vec![offered("b", "z", half - 100)],
                vec![offered("c", "w", 200)],
            ],
        )
        .await;
        let got = hub.tools(None).await;
        assert_eq!(
            names_of(&got.tools),
            vec!["mcp__a___x", "mcp__a__y", "mcp__b__z"]
        );
        assert!(got.late.is_none());
        let status = hub.status().await;
        let err = |i: usize| status[i].error.clone().unwrap_or_default();
        assert!(
            err(1).contains("`mcp__a___x` is also a tool of server a"),
            "{status:?}"
        );
        assert!(status[1].tools.is_empty());
        assert!(err(2).is_empty(), "{status:?}");
        assert!(
            err(3).contains(&format!("past {MAX_PROJECT_CATALOG_BYTES} bytes")),
            "{status:?}"
        );
        // The status file holds the same.
        let file = pegasus_store::mcp::read_mcp_status(dir.path());
        assert_eq!(file, status);
    }

    #[tokio::test]
    async fn tools_past_the_budget_are_deferred_and_found_ones_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        let two = McpConfig {
            tool_budget_share: 0.1,
            max_offered_tools: 2,
        };
        let hub = hub_of(dir.path(), &["a", "b"], two);
        let a: Vec<Offered> = (0..3)
            .map(|i| offered("a", &format!("t{i}"), 100))
            .collect();
        let b: Vec<Offered> = (0..2)
            .map(|i| offered("b", &format!("u{i}"), 100))
            .collect();
        listed(&hub, vec![a, b]).await;
        let got = hub.tools(Some(200_000)).await;
        assert_eq!(
            names_of(&got.tools),
            ["mcp__a__t0", "mcp__a__t1", "tool_search"]
        );
        let search = got.tools[2].spec();
        assert!(
            search
                .description
                .contains("3 of its 5 MCP tools are deferred"),
            "{}",
            search.description
        );
        let late = got.late.unwrap();
        assert!(late.get("mcp__b__u0").is_some() && late.get("mcp__a__t0").is_none());
        assert!(late.system_note().unwrap().contains("(a, b)"));
        let status = hub.status().await;
        assert_eq!(
            (
                status[0].tools.len(),
                status[0].deferred,
                status[1].deferred
            ),
            (2, 1, 2)
        );
        // Found: offered after the others from then on, in `project show` too.
        assert_eq!(hub.deferred.search("u1", |_| true).len(), 1);
        let got = hub.tools(Some(200_000)).await;
        assert_eq!(
            names_of(&got.tools),
            ["mcp__a__t0", "mcp__a__t1", "tool_search", "mcp__b__u1"]
        );
        let status = hub.status().await;
        assert_eq!(status[1].tools, ["mcp__b__u1"]);
        assert_eq!(status[1].deferred, 1);
        // A small window: fewer offered (the budget is a share of it); a window so small
        // that nothing fits defers all.
        let tokens = hub.servers[0].state.lock().await.tools[0]
            .spec
            .estimated_tokens();
        let got = hub.tools(Some(tokens * 15)).await;
        assert_eq!(names_of(&got.tools)[..2], ["mcp__a__t0", "tool_search"]);
        let got = hub.tools(Some(1)).await;
        assert_eq!(names_of(&got.tools), ["tool_search", "mcp__b__u1"]);
    }
}
