//! The Actor: runs the tool calls of one model turn and returns one result per call, in call
//! order.
//!
//! Calls of tools that say they are [`Tool::concurrent`] (read-only) run side by side, at most
//! `max_parallel_tools` at once; any other call runs alone, after everything the model asked
//! for before it and before everything after it, so a write is never raced by a read the model
//! meant to happen after it.

use std::sync::Arc;

use futures_util::future::join_all;
use pegasus_proto::llm::{tool_uses, Block};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::approvals::Gate;
use crate::hooks::{Input, Permission};
use crate::outbox::send_event;
use crate::tool::{Tool, ToolCtx, ToolOutput};
use crate::toolset::ToolSet;
use pegasus_approvals::PolicyDecision;
use pegasus_proto::WorkerEvent;
use pegasus_store::hooks::HookEvent;

/// One tool call as the model made it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Id the result must answer.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments, JSON text as the model wrote it.
    pub input_json: String,
}

impl Call {
    /// The calls in an assistant message, in order.
    pub fn from_blocks(blocks: &[Block]) -> Vec<Call> {
        tool_uses(blocks)
            .map(|(id, name, input_json)| Call {
                id: id.into(),
                name: name.into(),
                input_json: input_json.into(),
            })
            .collect()
    }

    /// A tool-result block answering this call.
    pub fn result(&self, out: ToolOutput) -> Block {
        Block::ToolResult {
            tool_use_id: self.id.clone(),
            content: out.content,
            is_error: out.is_error,
        }
    }
}

/// A call checked against the tool set and the approval policy: ready to run, waiting for a
/// person's yes first, or already answered with an error.
enum Prepared {
    Run(Arc<dyn Tool>, serde_json::Value),
    /// Asks a person first; with the reason a `PreToolUse` hook gave for asking, if one did.
    Ask(Arc<dyn Tool>, serde_json::Value, Option<String>),
    Refused(ToolOutput),
}

fn prepare(call: &Call, tools: &ToolSet, ctx: &ToolCtx) -> Prepared {
    let Some(tool) = tools.get(&call.name) else {
        return Prepared::Refused(ToolOutput::error(format!(
            "unknown tool `{}`; the tools you can call are: {}",
            call.name,
            tools.names().join(", ")
        )));
    };
    let input = if call.input_json.trim().is_empty() {
        serde_json::Value::Object(Default::default())
    } else {
        match serde_json::from_str::<serde_json::Value>(&call.input_json) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            Ok(_) => {
                return Prepared::Refused(ToolOutput::error(format!(
                    "arguments of {} must be a JSON object",
                    call.name
                )))
            }
            Err(e) => {
                return Prepared::Refused(ToolOutput::error(format!(
                    "arguments of {} are not valid JSON ({e}); send a JSON object",
                    call.name
                )))
            }
        }
    };
    decide(call, tool, input, ctx, None, None)
}

/// What the approval policy says of a call with `input`, after what its `PreToolUse` hooks
/// said (`hook`): a hook's `ask` asks even where the policy allows, and its `allow` skips
/// nothing of the policy (DESIGN.md §16, as Claude Code's ask and deny rules stand over a
/// hook's allow).
fn decide(
    call: &Call,
    tool: Arc<dyn Tool>,
    input: serde_json::Value,
    ctx: &ToolCtx,
    hook: Option<Permission>,
    hook_reason: Option<String>,
) -> Prepared {
    match ctx.approvals.as_ref().map(|g| g.check(&call.name, &input)) {
        None if hook == Some(Permission::Ask) => Prepared::Refused(ToolOutput::error(
            "not run: a PreToolUse hook asked for a person's approval, and nobody can be asked here",
        )),
        Some(Ok(PolicyDecision::Allow)) if hook == Some(Permission::Ask) => {
            Prepared::Ask(tool, input, hook_reason)
        }
        None | Some(Ok(PolicyDecision::Allow)) => Prepared::Run(tool, input),
        Some(Ok(PolicyDecision::Ask)) => Prepared::Ask(tool, input, hook_reason),
        Some(Ok(PolicyDecision::Deny(key))) => {
            Prepared::Refused(ToolOutput::error(format!("denied by policy: {key}")))
        }
        // PROJECT.md does not load: its rules are unknown, so nothing gated runs.
        Some(Err(refusal)) => Prepared::Refused(ToolOutput::error(refusal.to_string())),
    }
}

/// The call as its `PreToolUse` hooks leave it (DESIGN.md §16): blocked (the reason is the tool's
/// error result), with new arguments (checked by the policy again), asked, or as it was.
async fn pre_tool_use(call: &Call, prepared: &Prepared, run: &Run<'_>) -> Option<Prepared> {
    let ctx = run.ctx;
    let hooks = ctx
        .hooks
        .as_ref()
        .filter(|h| h.has(HookEvent::PreToolUse))?;
    let (Prepared::Run(tool, input) | Prepared::Ask(tool, input, _)) = prepared else {
        return None;
    };
    let verdict = hooks
        .fire(
            Input::PreToolUse {
                tool_name: &call.name,
                tool_input: input,
                tool_use_id: &call.id,
            },
            &ctx.workdir,
        )
        .await;
    run.stop_with(verdict.stop);
    if let Some(reason) = verdict.block {
        return Some(Prepared::Refused(ToolOutput::error(format!(
            "blocked by a PreToolUse hook: {reason}"
        ))));
    }
    if verdict.updated_input.is_none() && verdict.permission != Some(Permission::Ask) {
        return None;
    }
    let input = verdict.updated_input.unwrap_or_else(|| input.clone());
    let reason = verdict
        .ask_reason
        .filter(|_| verdict.permission == Some(Permission::Ask));
    Some(decide(
        call,
        tool.clone(),
        input,
        ctx,
        verdict.permission,
        reason,
    ))
}

/// The result as its `PostToolUse` hooks leave it: a block's reason and their context follow
/// the result, for the model.
async fn post_tool_use(
    call: &Call,
    input: &serde_json::Value,
    mut out: ToolOutput,
    run: &Run<'_>,
) -> ToolOutput {
    let ctx = run.ctx;
    let Some(hooks) = ctx.hooks.as_ref().filter(|h| h.has(HookEvent::PostToolUse)) else {
        return out;
    };
    let verdict = hooks
        .fire(
            Input::PostToolUse {
                tool_name: &call.name,
                tool_input: input,
                tool_response: serde_json::json!({"content": out.content, "is_error": out.is_error}),
                tool_use_id: &call.id,
            },
            &ctx.workdir,
        )
        .await;
    run.stop_with(verdict.stop);
    if let Some(reason) = verdict.block {
        out.content
            .push_str(&format!("\n\nPostToolUse hook feedback:\n{reason}"));
    }
    if let Some(text) = crate::hooks::context_text(HookEvent::PostToolUse, &verdict.context) {
        out.content.push_str(&format!("\n\n{text}"));
    }
    out
}

/// What [`act`] gives back.
pub struct Acted {
    /// One result per call, in call order.
    pub outputs: Vec<ToolOutput>,
    /// A call was left waiting for its approval because the process is stopping: the results
    /// must not be recorded (the call gets its real one after the restart).
    pub held: bool,
    /// A call was cut off by the deadline (its result says so).
    pub out_of_time: bool,
    /// Time spent waiting for people's answers: not the role's time, so the deadline moves
    /// by it.
    pub waited: std::time::Duration,
    /// A hook said not to continue (`continue: false`), with its `stopReason`.
    pub hook_stop: Option<String>,
}

/// `f`, unless `deadline` passes first (`None`).
async fn within<F: std::future::Future>(deadline: Option<Instant>, f: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, f).await.ok(),
        None => Some(f.await),
    }
}

/// The calls' shared state while they run.
struct Run<'a> {
    ctx: &'a ToolCtx,
    deadline: Option<Instant>,
    late: &'a str,
    held: AtomicBool,
    out_of_time: AtomicBool,
    waited: std::sync::Mutex<std::time::Duration>,
    hook_stop: std::sync::Mutex<Option<String>>,
}

impl Run<'_> {
    /// The first hook's `continue: false`, if any.
    fn hook_stop(&self) -> Option<String> {
        self.hook_stop
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Remembers a hook's `continue: false` (the first one counts).
    fn stop_with(&self, reason: Option<String>) {
        if let Some(reason) = reason {
            let mut stop = self.hook_stop.lock().unwrap_or_else(|p| p.into_inner());
            stop.get_or_insert(reason);
        }
    }

    fn waited(&self) -> std::time::Duration {
        *self.waited.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one call within the deadline (moved by the time waited for answers so far); a
    /// call cut off is dropped (an `exec` kills its process group) and answered with `late`.
    async fn call(&self, tool: &Arc<dyn Tool>, input: &serde_json::Value) -> ToolOutput {
        let deadline = self.deadline.map(|d| d + self.waited());
        match within(deadline, tool.call(input.clone(), self.ctx)).await {
            Some(out) => out,
            None => {
                self.out_of_time.store(true, Ordering::SeqCst);
                ToolOutput::error(self.late)
            }
        }
    }

    /// Runs one call that needs approval: asks, waits (not counted against the deadline), and
    /// runs it once if approved.
    async fn asked(
        &self,
        call: &Call,
        tool: &Arc<dyn Tool>,
        input: &serde_json::Value,
        hook_reason: Option<&str>,
    ) -> ToolOutput {
        let Some(gate) = self.ctx.approvals.as_ref() else {
            let out = self.call(tool, input).await;
            return post_tool_use(call, input, out, self).await;
        };
        let asked = Instant::now();
        // A person is wanted: the Notification hooks run while the request waits.
        let message = format!(
            "Pegasus needs your approval to use {}: {}",
            call.name,
            pegasus_approvals::summary(&call.name, input)
        );
        crate::hooks::notify(self.ctx, &message, "permission_prompt");
        let gate_says = gate
            .ask(
                self.ctx.task_id.as_deref(),
                &call.id,
                &call.name,
                input,
                hook_reason,
            )
            .await;
        *self.waited.lock().unwrap_or_else(|p| p.into_inner()) += asked.elapsed();
        match gate_says {
            Gate::Run(id) => {
                let out = self.call(tool, input).await;
                gate.done(&id);
                post_tool_use(call, input, out, self).await
            }
            Gate::Result(out) => out,
            Gate::Held => {
                self.held.store(true, Ordering::SeqCst);
                ToolOutput::error(
                    "not run: the project stopped while this call waited for approval",
                )
            }
        }
    }

    /// Whether a call (this turn's, or a subagent's inside one) was left waiting at a stop.
    fn holding(&self) -> bool {
        self.held.load(Ordering::SeqCst) || self.ctx.approvals.as_ref().is_some_and(|g| g.holding())
    }
}

/// What a started call is shown with: its input on one line, cut to 160 characters (a lone
/// string argument, such as an `exec` command or a path, without its JSON quoting).
pub(crate) fn summary(input: &serde_json::Value) -> String {
    let text = match input.as_object().map(|o| o.values().collect::<Vec<_>>()) {
        Some(values) if values.len() == 1 && values[0].is_string() => {
            values[0].as_str().unwrap_or_default().to_string()
        }
        _ => input.to_string(),
    };
    let one_line = text.replace(['\n', '\r'], " ");
    match one_line.char_indices().nth(160) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

/// Runs the calls (see the module doc) and reports each as a `tool_call` event. A call the
/// approval policy asks about runs alone, after its answer. A call still running at
/// `deadline` (moved by the time spent waiting for answers) is cut off with `late` as its
/// result.
pub async fn act(
    calls: &[Call],
    tools: &ToolSet,
    ctx: &ToolCtx,
    deadline: Option<Instant>,
    late: &str,
) -> Acted {
    let permits = Semaphore::new(ctx.settings.max_parallel_tools.max(1));
    let prepared: Vec<Prepared> = calls.iter().map(|c| prepare(c, tools, ctx)).collect();
    let run = Run {
        ctx,
        deadline,
        late,
        held: AtomicBool::new(false),
        out_of_time: AtomicBool::new(false),
        waited: Default::default(),
        hook_stop: Default::default(),
    };
    let mut outputs: Vec<Option<ToolOutput>> = vec![None; calls.len()];
    let mut i = 0;
    while i < prepared.len() {
        // A batch is a run of concurrent (or refused, i.e. instant) calls, or one exclusive call.
        let is_concurrent = |p: &Prepared| match p {
            Prepared::Run(t, _) => t.concurrent(),
            Prepared::Ask(..) => false,
            Prepared::Refused(_) => true,
        };
        let mut end = i + 1;
        if is_concurrent(&prepared[i]) {
            while end < prepared.len() && is_concurrent(&prepared[end]) {
                end += 1;
            }
        }
        let batch = (i..end).map(|k| {
            let permits = &permits;
            let p = &prepared[k];
            let run = &run;
            async move {
                if let Prepared::Run(_, input) | Prepared::Ask(_, input, _) = p {
                    if !run.holding() && !run.out_of_time.load(Ordering::SeqCst) {
                        send_event(
                            &ctx.notices,
                            WorkerEvent::ToolStart {
                                task: ctx.task_id.clone(),
                                depth: ctx.depth,
                                name: calls[k].name.clone(),
                                summary: summary(input),
                            },
                        );
                    }
                }
                let hooked = match p {
                    Prepared::Refused(_) => None,
                    _ if run.holding() || run.out_of_time.load(Ordering::SeqCst) => None,
                    _ => pre_tool_use(&calls[k], p, run).await,
                };
                let p = hooked.as_ref().unwrap_or(p);
                let out = match p {
                    Prepared::Refused(out) => out.clone(),
                    // Once one call is held or out of time, the ones after it are not run.
                    _ if run.holding() => ToolOutput::error("not run: the project stopped"),
                    _ if run.out_of_time.load(Ordering::SeqCst) => ToolOutput::error(late),
                    Prepared::Ask(tool, input, reason) => {
                        run.asked(&calls[k], tool, input, reason.as_deref()).await
                    }
                    Prepared::Run(tool, input) => {
                        // The semaphore is never closed, so acquire cannot fail; if it somehow
                        // did, running without a permit is better than dropping the call.
                        let _permit = permits.acquire().await.ok();
                        let out = run.call(tool, input).await;
                        post_tool_use(&calls[k], input, out, run).await
                    }
                };
                (k, out)
            }
        });
        for (k, out) in join_all(batch).await {
            outputs[k] = Some(out);
        }
        i = end;
    }
    let outputs = calls
        .iter()
        .zip(outputs)
        .map(|(call, out)| {
            let out = out.unwrap_or_else(|| ToolOutput::error("the call was not run"));
            send_event(
                &ctx.notices,
                WorkerEvent::ToolCall {
                    task: ctx.task_id.clone(),
                    depth: ctx.depth,
                    name: call.name.clone(),
                    is_error: out.is_error,
                },
            );
            out
        })
        .collect();
    Acted {
        outputs,
        held: run.holding(),
        out_of_time: run.out_of_time.load(Ordering::SeqCst),
        waited: run.waited(),
        hook_stop: run.hook_stop(),
    }
}
