//! `pegasusctl mcp`: Pegasus as a Model Context Protocol server on stdio (DESIGN.md §16), so
//! another agent (Claude Code, Codex, any MCP client) can list projects, talk to them, read
//! their transcripts, add tasks, answer approvals, search and read spend.
//!
//! Each tool is the matching `pegasusctl` command and nothing more: the same requests over the
//! control socket through the same functions, the same files read directly for the read-only
//! ones (they work while pegasusd is down), the daemon's own refusal as the tool's one-line
//! error (`isError: true`). The answer is what the command prints (its text) and, where the
//! command has a `--json` form, that JSON as `structuredContent`.
//!
//! The protocol is `rmcp`'s server (the SDK the worker's MCP client already uses): it
//! negotiates the version (2024-11-05 through the newest it knows), answers `ping`, refuses
//! unknown methods with JSON-RPC's error and runs every request as its own task, so a
//! `send_message` that waits for an answer never holds up the calls that come after it on the
//! same connection; `notifications/cancelled` cancels that wait (the message itself stays
//! delivered). Standard output carries only the protocol; anything else goes to stderr. The
//! server ends when its input ends.

use super::{approvals, cost, log, project, search, send, task};
use crate::{cli::SearchKind, client::Client, CtlError};
use pegasus_proto::ctl::{AddTask, CtlRequest, CtlResponse};
use pegasus_store::Home;
use rmcp::{
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{
        CallToolResult, ContentBlock, Implementation, InitializeResult, ProgressNotificationParam,
        ServerCapabilities,
    },
    schemars, tool, tool_handler, tool_router, Peer, RoleServer, ServerHandler, ServiceExt,
};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The size past which `read_log` leaves the rest of a transcript for the next call (what an
/// MCP client hands its model has limits: Claude Code's is 25,000 tokens by default).
const LOG_PAGE_BYTES: usize = 40_000;
/// How long `send_message` waits for an answer when the call does not say.
const DEFAULT_WAIT_S: u64 = 600;
/// The longest wait a call may ask for.
const MAX_WAIT_S: u64 = 86_400;
/// How often a waiting `send_message` tells a client that asked for progress that it still
/// waits (some clients restart their own timeout on each).
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// Serves MCP on stdin/stdout until stdin ends.
pub async fn run(home: &Home) -> Result<(), CtlError> {
    eprintln!(
        "pegasusctl mcp: serving Pegasus of {} over MCP on stdio",
        home.root().display()
    );
    let server = PegasusMcp::new(home.clone());
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| CtlError::Failed(format!("MCP handshake failed: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| CtlError::Failed(format!("the MCP server stopped: {e}")))?;
    Ok(())
}

/// The server: one home, its tools.
#[derive(Clone)]
struct PegasusMcp {
    home: Home,
    tool_router: ToolRouter<PegasusMcp>,
}

/// An answer: what the command prints, and its `--json` form when it has one.
fn answer(text: impl Into<String>, structured: Option<Value>) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.into())]);
    result.structured_content = structured;
    result
}

/// A refusal or failure: one line, as `pegasusctl` says it.
fn refusal(e: CtlError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.to_string())])
}

/// Runs blocking file work (a scan, the search index) off the server's thread.
async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CtlError> + Send + 'static,
) -> Result<T, CtlError> {
    pegasus_fs::blocking(f).await.map_err(CtlError::failed)?
}

fn to_json(value: &impl serde::Serialize) -> Result<Value, CtlError> {
    serde_json::to_value(value).map_err(CtlError::failed)
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ListProjectsArgs {
    /// Only projects with this status: active, suspended, completed, archived or invalid.
    #[serde(default)]
    status: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct SendMessageArgs {
    /// The project's name (see list_projects), or `main` for Pegasus's MainAgent.
    project: String,
    /// The message to its agent, as a person would write it.
    text: String,
    /// Wait for the agent's answer and return its text. Without it the call returns once the
    /// project has the message (its answer then appears in read_log). A message to `main` is
    /// always answered before the call returns.
    #[serde(default)]
    wait: bool,
    /// With `wait`: give up waiting after this many seconds (default 600); the message stays
    /// with the project and its answer appears in read_log.
    #[serde(default)]
    #[schemars(range(min = 1, max = 86400))]
    timeout_s: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ReadLogArgs {
    /// The project's name.
    project: String,
    /// Where to start, as a record number of the session (0 = its beginning, the default):
    /// pass the `next` of the previous read_log (or the `since` a send_message returned) to
    /// read only what came after. Negative = that many records before the end (-20: the last
    /// 20).
    #[serde(default)]
    since: Option<i64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ProjectArgs {
    /// The project's name.
    project: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct AddTaskArgs {
    /// The project's name.
    project: String,
    /// What must be achieved.
    goal: String,
    /// How to tell the goal is met, one criterion per item.
    #[serde(default)]
    acceptance: Vec<String>,
    /// One line for listings (default: the goal's first line).
    #[serde(default)]
    title: Option<String>,
    /// 0 (most urgent) to 3; default 2.
    #[serde(default)]
    #[schemars(range(max = 3))]
    priority: Option<u8>,
    /// Tasks of the same project that must be done first (their ids).
    #[serde(default)]
    depends_on: Vec<String>,
    /// The role that runs it (as `pegasusctl role list` names them).
    #[serde(default)]
    role: Option<String>,
    /// Repos of the project (their PROJECT.md `repos:` ids) the task changes.
    #[serde(default)]
    repos: Vec<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ListApprovalsArgs {
    /// Only this project's requests.
    #[serde(default)]
    project: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct AnswerApprovalArgs {
    /// The request's id (like ap-k3m9x2q7rt), from list_approvals.
    id: String,
    /// true: the waiting call runs now; false: it is denied and the project's agent is told.
    approve: bool,
    /// With a denial: why, for the project's agent.
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct SearchArgs {
    /// The words to find (all of them, in any order).
    query: String,
    /// Only this project (`main` = the MainAgent).
    #[serde(default)]
    project: Option<String>,
    /// Only this kind of entry.
    #[serde(default)]
    kind: Option<SearchKind>,
    /// At most this many hits, 1 to 1000 (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    limit: Option<u16>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct CostArgs {
    /// Only calls on or after this UTC day (YYYY-MM-DD).
    #[serde(default)]
    since: Option<String>,
    /// Only this project (`main` = the MainAgent).
    #[serde(default)]
    project: Option<String>,
}

#[tool_router]
impl PegasusMcp {
    fn new(home: Home) -> PegasusMcp {
        PegasusMcp {
            home,
            tool_router: Self::tool_router(),
        }
    }

    /// A refusal as the CLI says it (a mistyped project name gains the nearest one).
    fn refused(&self, e: CtlError) -> CallToolResult {
        refusal(super::did_you_mean(&self.home, e))
    }

    #[tool(
        description = "List Pegasus's projects with their state: status, worker, model, spend, the task running and how many tool calls wait for approval. Works while pegasusd is down (from the files).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_projects(
        &self,
        Parameters(args): Parameters<ListProjectsArgs>,
    ) -> CallToolResult {
        let listed = async {
            let list = project::infos(&self.home, args.status).await?;
            Ok::<_, CtlError>(answer(
                crate::output::project_table(&list),
                Some(json!({"projects": to_json(&list)?})),
            ))
        };
        listed.await.unwrap_or_else(|e| self.refused(e))
    }

    #[tool(
        description = "Send a message to a project's agent (or to `main`, the MainAgent), as `pegasusctl project send` does. With wait: true, returns the agent's answer. Sending the same call again runs it again.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn send_message(
        &self,
        Parameters(args): Parameters<SendMessageArgs>,
        peer: Peer<RoleServer>,
        meta: rmcp::model::RequestMetaObject,
        ct: CancellationToken,
    ) -> CallToolResult {
        let progress = meta
            .get_progress_token()
            .map(|token| Progress { peer, token });
        self.send(args, progress, ct)
            .await
            .unwrap_or_else(|e| self.refused(e))
    }

    #[tool(
        description = "Read a project's session transcript (messages, tool calls and their results, tasks that stopped), from a point on. Long transcripts come in parts: pass the returned `next` as `since` to read on. Works while pegasusd is down.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn read_log(&self, Parameters(args): Parameters<ReadLogArgs>) -> CallToolResult {
        let home = self.home.clone();
        let ReadLogArgs { project, since } = args;
        let read = off_thread(move || {
            let t = log::transcript(&home, &project, since.unwrap_or(0), LOG_PAGE_BYTES)?;
            let mut text = t.text;
            if t.restarted {
                text.insert_str(
                    0,
                    "(the session was compacted since: read from its new beginning)\n",
                );
            }
            text.push_str(&if t.more {
                format!("(more: read on with since: {})\n", t.next)
            } else {
                format!(
                    "(end of the transcript; since: {} reads what comes next)\n",
                    t.next
                )
            });
            Ok(answer(
                text,
                Some(
                    json!({"project": project, "records": t.records, "next": t.next, "more": t.more, "restarted": t.restarted}),
                ),
            ))
        });
        read.await.unwrap_or_else(|e| self.refused(e))
    }

    #[tool(
        description = "List a project's tasks, newest first: id, state, type, priority, role, why it stopped or waits, title. Works while pegasusd is down.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_tasks(&self, Parameters(args): Parameters<ProjectArgs>) -> CallToolResult {
        let home = self.home.clone();
        let listed = off_thread(move || {
            let (tasks, shown) = task::listing(&home, &args.project)?;
            Ok(answer(shown, Some(json!({"tasks": to_json(&tasks)?}))))
        });
        listed.await.unwrap_or_else(|e| self.refused(e))
    }

    #[tool(
        description = "Add a task to a project, as `pegasusctl task add` does; it runs when its dependencies are done, most urgent first. Returns the task.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn add_task(&self, Parameters(args): Parameters<AddTaskArgs>) -> CallToolResult {
        let priority = args.priority.unwrap_or(2);
        if priority > 3 {
            return refusal(CtlError::Failed(format!(
                "priority {priority} is out of range: use 0 (most urgent) to 3"
            )));
        }
        let add = AddTask {
            project: args.project,
            goal: args.goal,
            title: args.title,
            role: args.role,
            repos: args.repos,
            depends_on: args.depends_on,
            priority,
            acceptance: args.acceptance,
            budget_usd: None,
        };
        match task::add_task(&self.home, add).await {
            Ok((message, task)) => match to_json(&task) {
                Ok(value) => answer(message, Some(value)),
                Err(e) => refusal(e),
            },
            Err(e) => self.refused(e),
        }
    }

    #[tool(
        description = "List the tool calls of Pegasus's projects that wait for a person's yes: id, project, task, tool, the call's summary (an exec's whole command line) and its whole input. Answer one with answer_approval. Works while pegasusd is down.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_approvals(
        &self,
        Parameters(args): Parameters<ListApprovalsArgs>,
    ) -> CallToolResult {
        let home = self.home.clone();
        let listed = off_thread(move || {
            let waiting = approvals::waiting(&home, args.project.as_deref())?;
            Ok(answer(
                approvals::table(&waiting, true),
                Some(json!({"approvals": to_json(&waiting)?})),
            ))
        });
        listed.await.unwrap_or_else(|e| self.refused(e))
    }

    #[tool(
        description = "Answer a tool call waiting for approval (see list_approvals), as `pegasusctl approve` / `pegasusctl deny` do: approve: true runs it now; false denies it, and the project's agent is told (with the reason, if given).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn answer_approval(
        &self,
        Parameters(args): Parameters<AnswerApprovalArgs>,
    ) -> CallToolResult {
        let answered = async {
            let req = approvals::answer_request(args.id.clone(), args.approve, false, args.reason)?;
            let message = super::done(&self.home, req).await?;
            Ok::<_, CtlError>(answer(
                message.clone(),
                Some(
                    json!({"ok": true, "id": args.id, "approved": args.approve, "message": message}),
                ),
            ))
        };
        answered.await.unwrap_or_else(|e| self.refused(e))
    }

    #[tool(
        description = "Full-text search over everything Pegasus remembers: every project's sessions, tasks and memory, and the MainAgent's; best first. Works while pegasusd is down.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn search(&self, Parameters(args): Parameters<SearchArgs>) -> CallToolResult {
        let limit = args.limit.unwrap_or(20);
        if !(1..=1000).contains(&limit) {
            return refusal(CtlError::Failed(format!(
                "limit {limit} is out of range: use 1 to 1000"
            )));
        }
        let home = self.home.clone();
        let found = off_thread(move || {
            let found = search::find(&home, args.query.clone(), args.project, args.kind, limit)?;
            for w in &found.warnings {
                eprintln!("pegasusctl mcp: warning: {w}");
            }
            Ok(answer(
                search::text(&args.query, &found.hits),
                Some(json!({"hits": to_json(&found.hits)?})),
            ))
        });
        found.await.unwrap_or_else(|e| self.refused(e))
    }

    #[tool(
        description = "LLM spending from Pegasus's cost ledger: totals, and by project, day and model. Works while pegasusd is down.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn cost(&self, Parameters(args): Parameters<CostArgs>) -> CallToolResult {
        let home = self.home.clone();
        let reported = off_thread(move || {
            let report = cost::report(&home, args.project.as_deref(), args.since.as_deref())?;
            Ok(answer(cost::text(&report), Some(to_json(&report)?)))
        });
        reported.await.unwrap_or_else(|e| self.refused(e))
    }
}

/// Where a waiting call's progress goes: the client asked for it with this token.
struct Progress {
    peer: Peer<RoleServer>,
    token: rmcp::model::ProgressToken,
}

impl Progress {
    async fn say(&self, step: u32, message: String) {
        let param = ProgressNotificationParam::new(self.token.clone(), f64::from(step))
            .with_message(message);
        let _ = self.peer.notify_progress(param).await;
    }
}

impl PegasusMcp {
    /// `send_message`: `project send` (with its client id and its one retry after an
    /// ambiguous failure), or `chat` for `main`.
    async fn send(
        &self,
        args: SendMessageArgs,
        progress: Option<Progress>,
        ct: CancellationToken,
    ) -> Result<CallToolResult, CtlError> {
        let SendMessageArgs {
            project: name,
            text,
            wait,
            timeout_s,
        } = args;
        let timeout_s = timeout_s.unwrap_or(DEFAULT_WAIT_S).clamp(1, MAX_WAIT_S);
        let home = &self.home;
        if name == pegasus_search::MAIN {
            let mut client = Client::connect(home).await?;
            let asked = client.request(CtlRequest::Chat { text });
            let reply = self.waiting(&name, asked, timeout_s, progress, ct).await;
            return match reply {
                Waited::Done(resp) => match crate::client::ok(resp?)? {
                    CtlResponse::Reply { text, .. } => Ok(answer(
                        text.clone(),
                        Some(json!({"project": name, "reply": text})),
                    )),
                    other => Err(unexpected(other)),
                },
                Waited::Cancelled => Err(CtlError::Failed(
                    "cancelled: the MainAgent still has the message".into(),
                )),
                Waited::TimedOut => Ok(answer(
                    format!("the MainAgent has not answered within {timeout_s} s; it still has the message"),
                    Some(json!({"project": name, "answered": false})),
                )),
            };
        }
        // Where the answer will be in the transcript, for a caller that does not wait for it.
        let since = {
            let (home, name) = (home.clone(), name.clone());
            off_thread(move || Ok(log::length(&home, &name).unwrap_or(0))).await?
        };
        let (req, client_id) = send::send_request(&name, text, wait, None);
        let first = Client::connect(home).await?;
        let sent = send::request(home, first, req, &client_id);
        if !wait {
            return match sent.await? {
                CtlResponse::Sent { id } => Ok(answer(
                    format!("sent to {name} (message {id}); its answer will be in read_log {{project: {name}, since: {since}}}"),
                    Some(json!({"project": name, "id": id, "since": since})),
                )),
                other => Err(unexpected(other)),
            };
        }
        match self.waiting(&name, sent, timeout_s, progress, ct).await {
            Waited::Done(resp) => match resp? {
                CtlResponse::Reply { id, text } => Ok(answer(
                    text.clone(),
                    Some(json!({"project": name, "id": id, "reply": text})),
                )),
                other => Err(unexpected(other)),
            },
            Waited::Cancelled => Err(CtlError::Failed(format!(
                "cancelled: project {name} may still have the message; see read_log {{project: {name}, since: {since}}}"
            ))),
            Waited::TimedOut => {
                let home2 = home.clone();
                let name2 = name.clone();
                let waiting = off_thread(move || approvals::waiting(&home2, Some(&name2)))
                    .await
                    .unwrap_or_default();
                let mut text = format!(
                    "project {name} has not answered within {timeout_s} s; it has the message, and its answer will be in read_log {{project: {name}, since: {since}}}"
                );
                for a in &waiting {
                    text.push_str(&format!("\n{}", mcp_approval_line(a)));
                }
                let ids: Vec<&str> = waiting.iter().map(|a| a.id.as_str()).collect();
                Ok(answer(
                    text,
                    Some(json!({"project": name, "answered": false, "since": since, "waiting_approvals": ids})),
                ))
            }
        }
    }

    /// Waits for `work` at most `timeout_s`, until `ct` is cancelled, telling a client that
    /// asked for progress which call of `project` waits for approval, and every
    /// [`PROGRESS_EVERY`] that it still waits.
    async fn waiting<T>(
        &self,
        project: &str,
        work: impl std::future::Future<Output = T>,
        timeout_s: u64,
        progress: Option<Progress>,
        ct: CancellationToken,
    ) -> Waited<T> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let watched = super::following(&self.home, project, work, |event| {
            if let pegasus_proto::WorkerEvent::Approval { request } = event {
                eprintln!("pegasusctl mcp: {}", super::approval_line(request));
                let _ = tx.send(mcp_approval_line(request));
            }
        });
        tokio::pin!(watched);
        let deadline = tokio::time::sleep(Duration::from_secs(timeout_s));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.tick().await;
        let started = std::time::Instant::now();
        let mut step = 0u32;
        loop {
            tokio::select! {
                out = &mut watched => return Waited::Done(out),
                () = &mut deadline => return Waited::TimedOut,
                () = ct.cancelled() => return Waited::Cancelled,
                Some(line) = rx.recv() => {
                    step += 1;
                    if let Some(p) = &progress {
                        p.say(step, line).await;
                    }
                }
                _ = tick.tick() => {
                    step += 1;
                    if let Some(p) = &progress {
                        let message = format!("waiting for {project}'s answer ({} s)", started.elapsed().as_secs());
                        p.say(step, message).await;
                    }
                }
            }
        }
    }
}

/// How a wait ended.
enum Waited<T> {
    Done(T),
    TimedOut,
    Cancelled,
}

/// A call waiting for approval, said to an MCP client: how to answer it with its tools.
fn mcp_approval_line(r: &pegasus_proto::ctl::ApprovalInfo) -> String {
    use pegasus_proto::shown::escape;
    format!(
        "waiting for approval {}: {} `{}` (task {}); answer it with answer_approval {{id: {}, approve: true|false}}",
        escape(&r.id),
        escape(&r.tool),
        escape(&r.summary),
        escape(&r.task),
        escape(&r.id)
    )
}

fn unexpected(other: CtlResponse) -> CtlError {
    CtlError::Failed(format!("unexpected answer from pegasusd: {other:?}"))
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PegasusMcp {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("pegasus", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Pegasus runs long-lived AI-agent projects. Use list_projects to see them, send_message to talk to one (wait: true for its answer), read_log for its transcript, list_tasks/add_task for its work, list_approvals/answer_approval for tool calls waiting for a person, search to find anything, cost for spend.",
            )
    }
}
