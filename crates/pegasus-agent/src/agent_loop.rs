//! The agent loop (DESIGN.md §6): Thinker → Actor → results → repeat until a final answer, with the
//! guards that stop it. Shared by [`crate::Agent::run`] (which persists every turn) and by
//! subagents (which keep their short transcript in memory only).

use pegasus_proto::llm::{Block, Message, Role, StopReason, Usage};

use crate::actor::{act, Call};
use crate::compaction::Compactor;
use crate::context;
use crate::error::AgentError;
use crate::guards::RepeatGuard;
use crate::instructions::TaskInstructions;
use crate::outbox::send_event;
use crate::outcome::StopKind;
use crate::session_writer::{persist, SessionHandle};
use crate::thinker;
use crate::tool::{ToolCtx, ToolOutput};
use crate::toolset::ToolSet;
use crate::transcript::{assistant_record, push_user, tool_record};
use pegasus_proto::{Stage, WorkerEvent};
use tokio::time::Instant;

/// What one loop works with.
pub struct LoopSpec<'a, 'c> {
    /// The system prompt.
    pub system: &'a str,
    /// The tools the model may call.
    pub tools: &'a ToolSet,
    /// Model, settings, task and everything a tool call may use.
    pub ctx: &'a ToolCtx,
    /// Where turns are persisted; `None` for a subagent.
    pub session: Option<&'a SessionHandle>,
    /// Role of the calls, for the ledger.
    pub role: Option<String>,
    /// Asked at the top of every turn: has the task been cancelled from outside?
    pub cancelled: Option<&'a (dyn Fn() -> bool + Send + Sync)>,
    /// Compacts the session when a request nears the context window or the provider refuses
    /// one as too long; `None` (a subagent) never compacts.
    pub compactor: Option<&'a mut Compactor<'c>>,
    /// The task's instruction files (AGENTS.md, CLAUDE.md): the nested ones join the
    /// conversation as the file tools touch their folders, and again after a compaction;
    /// `None` (a subagent) joins none itself (its parent's loop sees what it touched).
    pub instructions: Option<&'a mut TaskInstructions>,
}

/// How a loop ended.
#[derive(Debug, Clone)]
pub struct LoopEnd {
    /// The answer, or a one-line explanation of the stop.
    pub text: String,
    /// Why it stopped.
    pub stop: StopKind,
    /// Model calls made.
    pub turns: u32,
    /// Sum of known response costs.
    pub cost_usd: f64,
    /// Usage of the last response (compaction looks at it).
    pub last_usage: Option<Usage>,
    /// The answer was cut by `max_tokens`.
    pub token_capped: bool,
    /// The transcript was compacted during the loop (it no longer holds the task's turns).
    pub compacted: bool,
}

fn stage(ctx: &ToolCtx, stage: Stage) {
    send_event(
        &ctx.notices,
        WorkerEvent::Stage {
            task: ctx.task_id.clone(),
            depth: ctx.depth,
            stage,
        },
    );
}

/// One line saying why a run stopped without an answer.
fn explain(stop: &StopKind, turns: u32, looped: &str, limit: u32) -> String {
    match stop {
        StopKind::Answered => String::new(),
        StopKind::TurnCapped => {
            format!("Stopped after {turns} turns without a final answer (max_turns).")
        }
        StopKind::LoopCapped => format!(
            "Stopped: the model made the same `{looped}` call {limit} times in a row (loop_repeat_limit)."
        ),
        StopKind::Budget(msg) => format!("Stopped: {msg}"),
        StopKind::ModelError(msg) => format!("Stopped: the model call failed: {msg}"),
        StopKind::Cancelled => "Stopped: the task was cancelled.".to_string(),
        StopKind::TimedOut(s) => {
            format!("Stopped: the role's time limit of {s} s ran out (model.timeout_s).")
        }
        StopKind::Question(q) => format!("Waiting for your answer: {q}"),
        StopKind::Held => {
            "Waiting for approval: the call goes on when the project is back.".to_string()
        }
        StopKind::Hook(msg) => format!("Stopped by a hook: {msg}"),
        StopKind::ContextTooLong(msg) => format!(
            "Stopped: {msg}; shorten the request, or use a model with a larger context window."
        ),
    }
}

/// `f`, unless `deadline` passes first (`None`).
async fn within<F: std::future::Future>(deadline: Option<Instant>, f: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, f).await.ok(),
        None => Some(f.await),
    }
}

/// After a compaction: the nested instruction files the task had go back into the
/// conversation, after the kept request, and into the new session file.
async fn rejoin(
    instructions: Option<&mut TaskInstructions>,
    session: Option<&SessionHandle>,
    transcript: &mut Vec<Message>,
) -> Result<(), AgentError> {
    let Some(ins) = instructions else {
        return Ok(());
    };
    let blocks: Vec<Block> = ins
        .rejoin()
        .into_iter()
        .map(|text| Block::Text { text })
        .collect();
    if blocks.is_empty() {
        return Ok(());
    }
    push_user(transcript, blocks.clone());
    if let Some(session) = session {
        persist(session, vec![tool_record(&blocks)], true).await?;
    }
    Ok(())
}

/// Runs the loop on `transcript`, which must end with a user message, and leaves it valid
/// (every call answered) whatever happens. Only a failed session write is an `Err`.
///
/// Each assistant message is persisted before its calls run, so a crash mid-tool leaves a
/// dangling call that the loader closes as cancelled; the turn's results are then persisted as
/// one tool record.
pub async fn run_loop(
    mut spec: LoopSpec<'_, '_>,
    transcript: &mut Vec<Message>,
) -> Result<LoopEnd, AgentError> {
    // What this loop offers is what a sub-agent it spawns may have at most.
    let owned = ToolCtx {
        offered: Some(spec.tools.clone()),
        ..spec.ctx.clone()
    };
    let ctx = &owned;
    let settings = &ctx.settings;
    // Deferred MCP tools (DESIGN.md §13): the system prompt says how many and how to find them,
    // the same words for the whole loop.
    let system = match spec.tools.system_note() {
        Some(note) => format!("{}\n\n{note}", spec.system.trim_end()),
        None => spec.system.to_string(),
    };
    let mut guard = RepeatGuard::new(settings.loop_repeat_limit);
    // Times in a row the Stop hooks sent the answer back.
    let mut stop_blocks = 0u32;
    let mut deadline = settings
        .run_timeout_s
        .map(|s| Instant::now() + std::time::Duration::from_secs(s));
    let timed_out = StopKind::TimedOut(settings.run_timeout_s.unwrap_or(0));
    let mut end = LoopEnd {
        text: String::new(),
        stop: StopKind::Answered,
        turns: 0,
        cost_usd: 0.0,
        last_usage: None,
        token_capped: false,
        compacted: false,
    };
    loop {
        if spec.cancelled.is_some_and(|c| c()) {
            end.stop = StopKind::Cancelled;
            end.text = explain(&end.stop, end.turns, "", 0);
            return Ok(end);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            end.stop = timed_out;
            end.text = explain(&end.stop, end.turns, "", 0);
            return Ok(end);
        }
        if end.turns >= settings.max_turns {
            end.stop = StopKind::TurnCapped;
            end.text = explain(&end.stop, end.turns, "", 0);
            return Ok(end);
        }
        stage(ctx, Stage::Reasoning);
        let request = |t: &[Message]| {
            thinker::request(ctx, &system, t, spec.tools.specs(), spec.role.clone())
        };
        let mut req = request(transcript);
        // Compact first when the request nears the window (DESIGN.md §6), so it is never sent to
        // be refused.
        if let Some(c) = spec.compactor.as_deref_mut() {
            c.set_prompt_tokens(request(&[]).estimated_input_tokens());
            let window = c.learned_window().or(settings.context_window);
            if context::needs_compaction(&req, window) {
                let (done, cost) = c.run(ctx, transcript, end.turns > 0).await;
                end.cost_usd += cost;
                if done {
                    end.compacted = true;
                    rejoin(spec.instructions.as_deref_mut(), spec.session, transcript).await?;
                    req = request(transcript);
                }
            }
        }
        // A model call cut off by the deadline is dropped (and cancelled at the supervisor);
        // the transcript has nothing of it, so it stays valid. A context-length refusal (the
        // provider counts tokens its own way) compacts and tries once more.
        let mut retried = false;
        let resp = loop {
            let estimated = req.estimated_input_tokens();
            match within(deadline, thinker::think_streaming(ctx, req))
                .await
                .unwrap_or(Err(timed_out.clone()))
            {
                Ok(r) => break r,
                Err(StopKind::ContextTooLong(msg)) if !retried && spec.compactor.is_some() => {
                    retried = true;
                    let mut done = false;
                    if let Some(c) = spec.compactor.as_deref_mut() {
                        // The window is smaller than believed: the one the refusal names, else
                        // less than this request (the estimate runs high, so three quarters).
                        let real = context::window_in_refusal(&msg).unwrap_or(estimated * 3 / 4);
                        if settings.context_window.is_none_or(|w| real < w) {
                            c.lower_window(real);
                        }
                        let (d, cost) = c.run(ctx, transcript, end.turns > 0).await;
                        end.cost_usd += cost;
                        done = d;
                    }
                    if !done {
                        end.stop = StopKind::ContextTooLong(msg);
                        end.text = explain(&end.stop, end.turns, "", 0);
                        return Ok(end);
                    }
                    tracing::info!(
                        "the provider refused the request as too long; compacted, trying again"
                    );
                    end.compacted = true;
                    rejoin(spec.instructions.as_deref_mut(), spec.session, transcript).await?;
                    req = request(transcript);
                }
                Err(stop) => {
                    end.text = explain(&stop, end.turns, "", 0);
                    end.stop = stop;
                    return Ok(end);
                }
            }
        };
        end.turns += 1;
        end.cost_usd += resp.cost_usd.unwrap_or(0.0);
        end.last_usage = Some(resp.usage);

        // Results inside a response and empty text blocks would make the transcript invalid.
        let blocks: Vec<Block> = resp
            .content
            .iter()
            .filter(|b| match b {
                Block::ToolResult { .. } => false,
                Block::Text { text } => !text.is_empty(),
                // Thinking blocks go back to the provider unchanged within the tool loop.
                Block::ToolUse { .. } | Block::Thinking { .. } | Block::RedactedThinking { .. } => {
                    true
                }
            })
            .cloned()
            .collect();
        let calls = Call::from_blocks(&blocks);
        if !blocks.is_empty() {
            transcript.push(Message {
                role: Role::Assistant,
                content: blocks.clone(),
            });
            if let Some(session) = spec.session {
                // A response with tool calls is the first half of its turn: written now, so a
                // crash while the tools run leaves the calls to be closed as cancelled, and made
                // durable with the results (one fdatasync per turn).
                persist(
                    session,
                    vec![assistant_record(&blocks, &resp)],
                    calls.is_empty(),
                )
                .await?;
            }
        }
        if calls.is_empty() {
            end.text = pegasus_proto::llm::text_of(&blocks);
            end.token_capped = resp.stop_reason == StopReason::MaxTokens;
            // The Stop (a subagent's: SubagentStop) hooks may make it go on (DESIGN.md §16).
            match stop_hooks(ctx, &end.text, &mut stop_blocks).await {
                StopHooks::End => return Ok(end),
                StopHooks::Stopped(reason) => {
                    end.stop = StopKind::Hook(reason);
                    end.text = explain(&end.stop, end.turns, "", 0);
                    return Ok(end);
                }
                StopHooks::GoOn(feedback) => {
                    let text = format!("{} hook feedback:\n{feedback}", stop_event(ctx));
                    push_user(transcript, vec![Block::Text { text: text.clone() }]);
                    if let Some(session) = spec.session {
                        let record = pegasus_store::SessionRecord::Message(
                            pegasus_store::SessionMessage::new(
                                pegasus_store::Role::User,
                                vec![pegasus_store::ContentBlock::Text { text }],
                            ),
                        );
                        persist(session, vec![record], true).await?;
                    }
                    continue;
                }
            }
        }

        let looped = calls
            .iter()
            .find(|c| guard.observe(&c.name, &c.input_json))
            .map(|c| c.name.clone());
        let mut out_of_time = false;
        let mut held = false;
        let mut hook_stop = None;
        let outputs = match &looped {
            // The calls are still answered, so the transcript stays valid for the next task.
            Some(_) => calls
                .iter()
                .map(|_| {
                    ToolOutput::error("not run: this call repeated too often; the task was stopped")
                })
                .collect(),
            None => {
                stage(ctx, Stage::Acting);
                // Tools cut off by the deadline are dropped (an `exec` kills its process
                // group when dropped) and answered, so the transcript stays valid. Time spent
                // waiting for a person's answer does not count: the deadline moves by it.
                let late = format!("not finished: {}", explain(&timed_out, 0, "", 0));
                let acted = act(&calls, spec.tools, ctx, deadline, &late).await;
                held = acted.held;
                out_of_time = acted.out_of_time;
                hook_stop = acted.hook_stop;
                deadline = deadline.map(|d| d + acted.waited);
                acted.outputs
            }
        };
        // Stopping while a call waits for its approval: nothing of this turn's results is
        // recorded; the next start answers the call (DESIGN.md §11).
        if held {
            end.stop = StopKind::Held;
            end.text = explain(&end.stop, end.turns, "", 0);
            return Ok(end);
        }
        // No one result may fill the context window (DESIGN.md §6).
        let mut results: Vec<Block> = calls
            .iter()
            .zip(outputs)
            .map(|(c, out)| {
                c.result(ToolOutput {
                    content: context::cap_tool_result(out.content, settings.tool_result_cap()),
                    is_error: out.is_error,
                })
            })
            .collect();
        // The instruction files of the folders this turn worked in that the conversation does
        // not have yet, after the results (DESIGN.md §16).
        if let Some(ins) = spec.instructions.as_deref_mut() {
            let touched = ctx.touched.take();
            if !touched.is_empty() {
                let joined = ins.joined_now(&touched, transcript);
                results.extend(joined.into_iter().map(|text| Block::Text { text }));
            }
        }
        push_user(transcript, results.clone());
        if let Some(session) = spec.session {
            persist(session, vec![tool_record(&results)], true).await?;
        }
        // The clarification loop: a question asked ends the run; the task waits for it.
        let asked = calls.iter().zip(&results).find_map(|(c, r)| match r {
            Block::ToolResult {
                is_error: false, ..
            } if c.name == crate::tools::ask_user::NAME => {
                crate::tools::ask_user::question_of(&c.input_json)
            }
            _ => None,
        });
        if let Some(question) = asked {
            end.stop = StopKind::Question(question);
            end.text = explain(&end.stop, end.turns, "", 0);
            return Ok(end);
        }
        if out_of_time {
            end.stop = timed_out;
            end.text = explain(&end.stop, end.turns, "", 0);
            return Ok(end);
        }
        if let Some(name) = looped {
            end.stop = StopKind::LoopCapped;
            end.text = explain(&end.stop, end.turns, &name, settings.loop_repeat_limit);
            return Ok(end);
        }
        if let Some(reason) = hook_stop {
            end.stop = StopKind::Hook(reason);
            end.text = explain(&end.stop, end.turns, "", 0);
            return Ok(end);
        }
    }
}

/// Times in a row the Stop hooks may send the agent back to work before its answer stands
/// (Claude Code caps it too): a hook that ignores `stop_hook_active` cannot loop forever.
pub const STOP_HOOK_BLOCK_CAP: u32 = 3;

/// What the Stop hooks said of an answer.
enum StopHooks {
    /// It stands.
    End,
    /// A hook said not to continue at all (`continue: false`).
    Stopped(String),
    /// Go on, with this feedback.
    GoOn(String),
}

/// `Stop` for the agent itself, `SubagentStop` for a subagent.
fn stop_event(ctx: &ToolCtx) -> pegasus_store::hooks::HookEvent {
    match ctx.depth {
        0 => pegasus_store::hooks::HookEvent::Stop,
        _ => pegasus_store::hooks::HookEvent::SubagentStop,
    }
}

/// Runs the Stop (or SubagentStop) hooks of an answer; `blocks` counts the times in a row they
/// sent it back (`stop_hook_active` once it is not 0), capped by [`STOP_HOOK_BLOCK_CAP`].
async fn stop_hooks(ctx: &ToolCtx, answer: &str, blocks: &mut u32) -> StopHooks {
    let event = stop_event(ctx);
    let Some(hooks) = ctx.hooks.as_ref().filter(|h| h.has(event)) else {
        return StopHooks::End;
    };
    let active = *blocks > 0;
    let agent_id = format!(
        "{}-{}",
        ctx.task_id.as_deref().unwrap_or("subagent"),
        ctx.depth
    );
    let input = match event {
        pegasus_store::hooks::HookEvent::Stop => crate::hooks::Input::Stop {
            stop_hook_active: active,
            last_assistant_message: answer,
        },
        _ => crate::hooks::Input::SubagentStop {
            stop_hook_active: active,
            last_assistant_message: answer,
            agent_id: &agent_id,
        },
    };
    let verdict = hooks.fire(input, &ctx.workdir).await;
    if let Some(reason) = verdict.stop {
        return StopHooks::Stopped(reason);
    }
    let Some(reason) = verdict.block else {
        *blocks = 0;
        return StopHooks::End;
    };
    if *blocks >= STOP_HOOK_BLOCK_CAP {
        let note = format!(
            "a {event} hook blocked the end {blocks} times in a row; the answer stands (check `stop_hook_active` in the hook)"
        );
        hooks.note(event, &note, Vec::new()).await;
        *blocks = 0;
        return StopHooks::End;
    }
    *blocks += 1;
    StopHooks::GoOn(reason)
}
