//! One harness run, the same for every harness (DESIGN.md §15): the session id kept before the
//! start, the approval channel opened, the command spawned contained exactly like `exec`
//! (PID namespace, Landlock with writes to the workdir or the task's worktrees and the
//! harness's own folder, `.git` read-only, the project's cgroup), its output read line by line
//! and mirrored as it arrives, and its end turned into the task's stop. Dropping the run (the
//! worker stopping, a cancel) kills the harness and everything it started.
//!
//! A consultation (a code task's reviewer or planner, [`Work::Consult`]) is the same run with
//! no mirror and no kept session, confined as if it worked in the harness's own folder while it
//! runs in the folder it reads, so nothing it reads is writable to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pegasus_agent::agent_loop::LoopEnd;
use pegasus_agent::approvals::Handed;
use pegasus_agent::{
    AgentError, AgentSettings, Approvals, HarnessConsult, HarnessFuture, HarnessTurn, Mirror,
    StopKind,
};
use pegasus_approvals::PolicyDecision;
use pegasus_store::{AgentKind, HarnessConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::hook::{Decide, HookServer, Question, Ruling};
use super::mcp_proxy::McpEndpoint;
use super::sessions::{self, Sessions};
use super::{bare_model, Driver, Endpoint, Event, Failure, Plan, Work};
use crate::mcp::McpHub;
use crate::relay::Relay;

/// The longest line of a harness's output read (a tool's whole output can be in one).
const MAX_LINE: usize = 32 << 20;
/// How often a run looks at its task (cancelled?) and its deadline.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The bytes of the harness's stderr kept for the error of a run that ends without a result.
const STDERR_TAIL: usize = 2000;

/// A harness the agent can hand tasks to: a [`Driver`] and how to start it.
pub struct Runner {
    driver: Arc<dyn Driver>,
    program: PathBuf,
    config: HarnessConfig,
    state_dir: PathBuf,
    relay: Relay,
    tasks: pegasus_tasks::TaskStore,
    mcp: Option<Arc<McpHub>>,
}

impl Runner {
    /// `program` started as `driver` says, with `config`'s arguments, keeping its own state in
    /// `state_dir` (`<project>/harness/<kind>/`), its model endpoint one `relay` starts for
    /// each run; `tasks` are the project's (a code task's session is forgotten once it is over);
    /// the servers of `mcp` (if it has any) are its MCP servers.
    pub fn new(
        driver: Arc<dyn Driver>,
        program: PathBuf,
        config: HarnessConfig,
        state_dir: PathBuf,
        relay: Relay,
        tasks: pegasus_tasks::TaskStore,
        mcp: Option<Arc<McpHub>>,
    ) -> Runner {
        Runner {
            driver,
            program,
            config,
            state_dir,
            relay,
            tasks,
            mcp: mcp.filter(|hub| !hub.is_empty()),
        }
    }
}

impl pegasus_agent::Harness for Runner {
    fn kind(&self) -> AgentKind {
        self.driver.kind()
    }

    fn run<'a>(&'a self, turn: HarnessTurn<'a>) -> HarnessFuture<'a> {
        let ctx = turn.ctx;
        Box::pin(self.work(One {
            task_id: turn.task_id,
            role: turn.role,
            prompt: turn.prompt,
            system: turn.system,
            work: if turn.code_task {
                Work::CodeTask
            } else {
                Work::Project
            },
            dir: &ctx.workdir,
            settings: &ctx.settings,
            approvals: ctx.approvals.clone(),
            cancelled: turn.cancelled,
            mirror: Some(turn.mirror),
        }))
    }

    fn consult<'a>(&'a self, consult: HarnessConsult<'a>) -> HarnessFuture<'a> {
        Box::pin(async move {
            let Some((_, dir)) = consult.repos.first() else {
                let why = "no folder to read was given".to_string();
                return Ok(loop_end(
                    format!("Stopped: {}: {why}", self.name()),
                    StopKind::ModelError(why),
                    0,
                ));
            };
            self.work(One {
                task_id: consult.task_id,
                role: Some(consult.role),
                prompt: consult.prompt,
                system: consult.system,
                work: Work::Consult,
                dir,
                settings: consult.settings,
                approvals: consult.approvals,
                cancelled: consult.cancelled,
                mirror: None,
            })
            .await
        })
    }
}

/// One run, a task's turn or a consultation, as [`Runner::work`] takes it.
struct One<'a> {
    task_id: &'a str,
    role: Option<String>,
    prompt: String,
    system: String,
    work: Work,
    /// Where it runs: the workdir, a code task's first worktree, or the first folder a
    /// consulted role reads.
    dir: &'a Path,
    /// Its model, time limit and sandbox (a code task's already lets it write its worktrees).
    settings: &'a AgentSettings,
    approvals: Option<Arc<Approvals>>,
    cancelled: &'a (dyn Fn() -> bool + Send + Sync),
    /// Where a task's turn is written; a consultation is written nowhere.
    mirror: Option<Mirror<'a>>,
}

/// How a run ended, before it is told to the agent.
enum End {
    Done(Result<String, Failure>),
    Cancelled,
    TimedOut(u64),
    Held,
    Exited(String),
}

impl Runner {
    fn name(&self) -> &'static str {
        match self.driver.kind() {
            AgentKind::ClaudeCode => "Claude Code",
            AgentKind::Codex => "Codex",
            AgentKind::Builtin => "the agent",
        }
    }

    async fn work(&self, one: One<'_>) -> Result<LoopEnd, AgentError> {
        let name = self.name();
        let failed = |why: String| {
            let stop = StopKind::ModelError(why.clone());
            Ok(loop_end(
                format!("Stopped: {name} could not start: {why}"),
                stop,
                0,
            ))
        };
        if let Err(e) = std::fs::create_dir_all(&self.state_dir) {
            return failed(format!("cannot create {}: {e}", self.state_dir.display()));
        }
        // The session this place continues, or a new one kept before it starts. A consultation
        // starts a session of its own every time and keeps none.
        let sessions =
            (one.work != Work::Consult).then(|| Sessions::new(&self.state_dir, &self.tasks));
        let place = sessions::place(one.task_id, one.work == Work::CodeTask);
        let session = sessions.as_ref().and_then(|s| s.get(&place));
        let fresh = match session {
            Some(_) => None,
            None => self.driver.new_session_id(),
        };
        if let (Some(sessions), Some(id)) = (&sessions, &fresh) {
            if let Err(e) = sessions.set(&place, id) {
                return failed(format!("cannot keep its session id: {e}"));
            }
        }
        // Its permission hook asks the project's approval policy (and a person) through here.
        let timeout_s = one
            .approvals
            .as_ref()
            .and_then(|g| g.policy().ok())
            .map_or(3600, |p| p.timeout())
            + 60;
        // The project's MCP servers, through proxies that ask the worker (not for a consulted
        // role, which only reads). Each call is put to the policy there; the hook lets the
        // servers' tools through to it, so nobody is asked twice (DESIGN.md §15).
        let hub = self.mcp.as_ref().filter(|_| one.work != Work::Consult);
        let mcp = match hub {
            Some(hub) => {
                let decide = decider(one.approvals.clone(), name, one.task_id.to_string());
                match McpEndpoint::start(
                    hub.clone(),
                    decide,
                    timeout_s,
                    one.settings.tool_result_cap(),
                )
                .await
                {
                    Ok(endpoint) => Some(endpoint),
                    Err(e) => return failed(e),
                }
            }
            None => None,
        };
        let passed = hub.map(|h| h.server_names()).unwrap_or_default();
        let server = match HookServer::start(
            let_through(
                decider(one.approvals.clone(), name, one.task_id.to_string()),
                passed,
            ),
            timeout_s,
        )
        .await
        {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        // Its model endpoint: the worker's relay, for this run and task alone (pegasusd checks
        // the budgets, adds the real key, meters every call).
        let relayed = match self.relay.start(
            self.driver.api(),
            Some(one.task_id.to_string()),
            one.role.clone(),
        ) {
            Ok(r) => r,
            Err(e) => return failed(format!("cannot open its model endpoint: {e}")),
        };
        let endpoint = Endpoint {
            base_url: relayed.base_url.clone(),
            key: relayed.key.clone(),
        };
        let plan = Plan {
            prompt: &one.prompt,
            system: &one.system,
            model: bare_model(&one.settings.model),
            config: &self.config,
            session: session.as_deref(),
            new_session: fresh.as_deref(),
            state_dir: &self.state_dir,
            endpoint: &endpoint,
            hook: &server.command,
            mcp: mcp.as_ref().map(|m| &m.command),
            work: one.work,
        };
        let launch = match self.driver.launch(&plan) {
            Ok(l) => l,
            Err(e) => return failed(e),
        };
        for (path, text) in &launch.files {
            let written = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    pegasus_store::write_atomic(path, text.as_bytes()).map_err(|e| e.to_string())
                });
            if let Err(e) = written {
                return failed(format!("cannot write {}: {e}", path.display()));
            }
        }
        let mut cmd = std::process::Command::new(&self.program);
        cmd.args(&launch.args)
            .current_dir(one.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.state_dir)
            .env("LANG", "C.UTF-8")
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // Contained as `exec` is, with its own folder writable besides the workdir (and a code
        // task's worktrees, which the agent already added). A consulted role runs where it
        // reads, but is confined as if it worked in its own folder: nothing it reads is
        // writable to it (DESIGN.md §15).
        let mut sandbox = one.settings.sandbox.clone();
        if let Some(s) = sandbox.as_mut() {
            s.writable.push(self.state_dir.clone());
        }
        let writable_dir = match one.work {
            Work::Consult => self.state_dir.as_path(),
            Work::Project | Work::CodeTask => one.dir,
        };
        if let Err(e) = pegasus_sandbox::confine(
            &mut cmd,
            pegasus_sandbox::Confinement {
                sandbox: sandbox.as_ref(),
                workdir: writable_dir,
            },
        ) {
            return failed(e);
        }
        let mut child = match tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return failed(format!("{}: {e}", self.program.display())),
        };
        if let (Some(registry), Some(pid)) = (&one.settings.exec_registry, child.id()) {
            if let Err(e) = pegasus_sandbox::record_exec_group(registry, pid as i32) {
                tracing::warn!("cannot record the harness's process group: {e}");
            }
        }
        tracing::info!(harness = %self.driver.kind(), task = one.task_id, work = ?one.work, pid = ?child.id(), resume = session.is_some(), "harness started");
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return failed("its output could not be read".into());
        };
        let (lines_tx, mut lines) = tokio::sync::mpsc::channel::<String>(64);
        let reader = tokio::spawn(async move {
            let mut out = tokio::io::BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match (&mut out)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut buf)
                    .await
                {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf).into_owned();
                        // A line past the cap is dropped whole; its rest is read on.
                        if buf.last() != Some(&b'\n') && buf.len() >= MAX_LINE {
                            continue;
                        }
                        if lines_tx.send(line).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let tail = tokio::spawn(async move {
            let mut err = tokio::io::BufReader::new(stderr);
            let mut kept = Vec::new();
            let mut buf = Vec::new();
            while let Ok(n) = err.read_until(b'\n', &mut buf).await {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&buf);
                buf.clear();
                if kept.len() > STDERR_TAIL * 2 {
                    kept.drain(..kept.len() - STDERR_TAIL);
                }
            }
            let text = String::from_utf8_lossy(&kept).trim().to_string();
            let cut = text.len().saturating_sub(STDERR_TAIL);
            let start = (cut..text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            text[start..].to_string()
        });

        let mut parser = self.driver.parser();
        let mut mirror = one.mirror;
        if let Some(m) = &mirror {
            m.reasoning();
        }
        let mut turns = 0u32;
        let deadline = one
            .settings
            .run_timeout_s
            .map(|s| (s, tokio::time::Instant::now() + Duration::from_secs(s)));
        let mut look = tokio::time::interval(LOOK_EVERY);
        let mut end = None;
        while end.is_none() {
            tokio::select! {
                line = lines.recv() => {
                    let Some(line) = line else { break };
                    for event in parser.line(&line) {
                        match event {
                            Event::Session(id) => {
                                let Some(sessions) = &sessions else { continue };
                                if session.as_deref() != Some(&id) && fresh.as_deref() != Some(&id) {
                                    if let Err(e) = sessions.set(&place, &id) {
                                        tracing::warn!("cannot keep the harness's session id: {e}");
                                    }
                                }
                            }
                            Event::Assistant { blocks, model, usage } => {
                                turns += 1;
                                if let Some(m) = &mut mirror {
                                    m.assistant(blocks, &model, usage).await?;
                                }
                            }
                            Event::Results(results) => {
                                if let Some(m) = &mut mirror {
                                    m.results(results).await?;
                                    // Back to its model with the results.
                                    m.reasoning();
                                }
                            }
                            Event::Done(result) => end = Some(End::Done(result)),
                        }
                    }
                }
                _ = look.tick() => {
                    let held = one.approvals.as_ref().is_some_and(|g| g.holding());
                    if held {
                        end = Some(End::Held);
                    } else if (one.cancelled)() {
                        end = Some(End::Cancelled);
                    } else if let Some((s, at)) = deadline {
                        if tokio::time::Instant::now() >= at {
                            end = Some(End::TimedOut(s));
                        }
                    }
                }
            }
        }
        // The harness and all it started go now, whatever they were doing; a call still
        // waiting for its approval is let go with its hook or proxy (withdrawn, or held if the
        // process stops).
        server.close().await;
        if let Some(mcp) = mcp {
            mcp.close().await;
        }
        // A budget pegasusd refused a call for stops the task as `budget`, whatever the
        // harness made of the refusal.
        let budget = relayed.budget_refusal();
        drop(relayed);
        let status = match end {
            Some(End::Done(_)) => {
                // It said its last word: a moment to exit on its own, then killed.
                match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                    Ok(s) => s.ok(),
                    Err(_) => {
                        let _ = child.start_kill();
                        child.wait().await.ok()
                    }
                }
            }
            Some(_) => {
                let _ = child.start_kill();
                child.wait().await.ok()
            }
            None => child.wait().await.ok(),
        };
        reader.abort();
        let stderr = match tokio::time::timeout(Duration::from_secs(2), tail).await {
            Ok(Ok(t)) => t,
            _ => String::new(),
        };
        let end = end.unwrap_or_else(|| {
            let status = status.map_or("an unknown status".to_string(), |s| s.to_string());
            End::Exited(if stderr.is_empty() {
                format!("{name} exited ({status}) without a result")
            } else {
                format!("{name} exited ({status}) without a result: {stderr}")
            })
        });
        tracing::info!(harness = %self.driver.kind(), task = one.task_id, turns, "harness ended");
        if matches!(end, End::Held) {
            // The task stays blocked on its request; the next start settles it.
            return Ok(loop_end(
                "Waiting for approval: the call goes on when the project is back.".into(),
                StopKind::Held,
                turns,
            ));
        }
        if let Some(m) = &mut mirror {
            m.close_open(&format!(
                "not finished: {name} stopped before reporting this result"
            ))
            .await?;
            m.flush().await?;
        }
        if let Some(refusal) = budget {
            let why = refusal.to_string();
            return Ok(loop_end(
                format!("Stopped: {why}"),
                StopKind::Budget(why),
                turns,
            ));
        }
        Ok(match end {
            End::Done(Ok(text)) => loop_end(text, StopKind::Answered, turns),
            End::Done(Err(Failure::Budget(why))) => {
                loop_end(format!("Stopped: {why}"), StopKind::Budget(why), turns)
            }
            End::Done(Err(Failure::Error(why))) | End::Exited(why) => loop_end(
                format!("Stopped: {name} failed: {why}"),
                StopKind::ModelError(why),
                turns,
            ),
            End::Cancelled => loop_end(
                "Stopped: the task was cancelled.".into(),
                StopKind::Cancelled,
                turns,
            ),
            End::TimedOut(s) => loop_end(
                format!("Stopped: the role's time limit of {s} s ran out (model.timeout_s)."),
                StopKind::TimedOut(s),
                turns,
            ),
            End::Held => loop_end(String::new(), StopKind::Held, turns),
        })
    }
}

fn loop_end(text: String, stop: StopKind, turns: u32) -> LoopEnd {
    LoopEnd {
        text,
        stop,
        turns,
        cost_usd: 0.0,
        last_usage: None,
        token_capped: false,
        compacted: false,
    }
}

/// The approval decision of the calls of harness `name` for task `task`.
pub(super) fn decider(gate: Option<Arc<Approvals>>, name: &'static str, task: String) -> Decide {
    Arc::new(move |q: Question| {
        let (gate, task) = (gate.clone(), task.clone());
        Box::pin(async move { decide(gate.as_ref(), name, &task, q).await })
    })
}

/// `decide`, but the tools of the `passed` MCP servers are let through undecided: their calls
/// reach the run's MCP endpoint, which puts them to the policy itself (DESIGN.md §15), so a
/// person is asked once.
fn let_through(decide: Decide, passed: Vec<String>) -> Decide {
    Arc::new(move |q: Question| {
        if passed
            .iter()
            .any(|s| q.tool.starts_with(&format!("mcp__{s}__")))
        {
            return Box::pin(async { Ruling::Allow });
        }
        decide(q)
    })
}

/// A harness's tool call as Pegasus's policy names it: its shell tool is `exec` (with the
/// command line), every other tool its own name (`Write`, `Edit`, `WebFetch`, `mcp__*`).
pub(crate) fn policy_call(tool: &str, input: &serde_json::Value) -> (String, serde_json::Value) {
    match tool {
        "Bash" => (
            "exec".into(),
            serde_json::json!({ "command": input["command"].as_str().unwrap_or_default() }),
        ),
        _ => (tool.to_string(), input.clone()),
    }
}

async fn decide(gate: Option<&Arc<Approvals>>, name: &str, task: &str, q: Question) -> Ruling {
    let Some(gate) = gate else {
        return Ruling::Allow;
    };
    let (tool, input) = policy_call(&q.tool, &q.input);
    match gate.check(&tool, &input) {
        Ok(PolicyDecision::Allow) => Ruling::Allow,
        Ok(PolicyDecision::Deny(key)) => Ruling::Deny(format!("denied by policy: {key}")),
        Err(refusal) => Ruling::Deny(refusal.to_string()),
        // The harness runs it, once its hook has the approval in hand.
        Ok(PolicyDecision::Ask) => match gate.hand_off(name, task, &q.call_id, &tool, &input).await
        {
            Handed::Approved(handoff) => Ruling::Approved(handoff),
            Handed::Refused(why) => Ruling::Deny(why),
            Handed::Held => Ruling::Deny(
                "not run: the project stopped while this call waited for approval".into(),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_tool_is_exec_and_others_keep_their_names() {
        let (tool, input) = policy_call(
            "Bash",
            &serde_json::json!({"command": "rm -rf x", "description": "d"}),
        );
        assert_eq!(tool, "exec");
        assert_eq!(input, serde_json::json!({"command": "rm -rf x"}));
        let (tool, input) = policy_call("Write", &serde_json::json!({"file_path": "/w/a"}));
        assert_eq!(tool, "Write");
        assert_eq!(input["file_path"], "/w/a");
    }
}
