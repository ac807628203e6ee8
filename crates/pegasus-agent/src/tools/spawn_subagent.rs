//! `spawn_subagent{task, role?}`: delegate a one-off piece of work to a nested agent.

use std::sync::atomic::Ordering;

use pegasus_proto::llm::{Block, Message, Role};
use serde::Deserialize;

use crate::agent_loop::{run_loop, LoopSpec};
use crate::outcome::StopKind;
use crate::tool::{ToolCtx, ToolOutput, TypedTool};
use crate::toolset::ToolSet;

/// Runs a one-off agent inside the worker: a fresh transcript holding only the task, the same
/// model, its parent's tools (with a role, those of them the role allows), one level deeper. Its calls carry the parent's task id, so its
/// spend is the parent task's (DESIGN.md §5). Depth and per-task count are limited, since each
/// level multiplies cost.
pub struct SpawnSubagent;

/// The arguments of `spawn_subagent`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    task: String,
    #[serde(default)]
    role: Option<String>,
}

/// The system prompt of a subagent.
pub fn subagent_system(role: Option<&str>, overview: &str) -> String {
    let mut s = String::from("You are a focused sub-agent");
    if let Some(r) = role.filter(|r| !r.trim().is_empty()) {
        s.push_str(&format!(" acting as {}", r.trim()));
    }
    s.push_str(
        ". You were given one task by the project's agent. Do it with the tools you have, \
         then reply with the result only: the agent that asked will read your final answer, \
         nothing else.",
    );
    if !overview.trim().is_empty() {
        s.push_str("\n\n## Project overview\n");
        s.push_str(overview.trim());
    }
    s
}

impl TypedTool for SpawnSubagent {
    type Args = Args;

    fn name(&self) -> &str {
        "spawn_subagent"
    }

    fn description(&self) -> &str {
        "Delegate a self-contained sub-task to a sub-agent with its own short context and the same tools. Give it everything it needs in `task`; it returns its final answer."
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(
            &[("task", "the complete task description")],
            &[("role", "optional role, e.g. researcher, coder, reviewer")],
        )
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        if args.task.trim().is_empty() {
            return Err("`task` is empty; describe what the sub-agent should do".into());
        }
        let s = &ctx.settings;
        let depth = ctx.depth + 1;
        if depth > s.max_subagent_depth {
            return Err(format!(
                "sub-agents may nest at most {} deep; do this yourself",
                s.max_subagent_depth
            ));
        }
        let max = s.max_subagents_per_task;
        ctx.subagents_spawned
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
                .map_err(|_| format!(
                    "this task already spawned {max} sub-agents (max_subagents_per_task); do the rest yourself"
                ))?;
        // At most the parent's tools (its role's, its MCP tools), never one it lacks; and only
        // a task's own agent may ask the user (and block the task).
        let parent = ctx.offered.clone().unwrap_or_else(ToolSet::project_tools);
        let mut tools = parent.without(crate::tools::ask_user::NAME);
        if depth >= s.max_subagent_depth {
            tools = tools.without("spawn_subagent");
        }
        let mut child = ctx.clone();
        child.depth = depth;
        // With a role, the sub-agent works as it: the role's prompt, tools and model.
        let system = match args.role.as_deref().filter(|r| !r.trim().is_empty()) {
            Some(role) => {
                let r = crate::roles::prepare_role(
                    role.trim(),
                    &s.role_assignments,
                    s,
                    &tools,
                    &ctx.project_overview,
                    &ctx.memory_dir,
                    &ctx.skill_dirs,
                    &args.task,
                    &[],
                )?;
                tools = r.tools;
                // Nor a skill its parent may not load.
                let mut settings = r.settings;
                settings.skills = match (s.skills.clone(), settings.skills) {
                    (Some(parent), Some(role)) => {
                        Some(role.into_iter().filter(|k| parent.contains(k)).collect())
                    }
                    (Some(parent), None) => Some(parent),
                    (None, role) => role,
                };
                child.settings = settings;
                r.system
            }
            None => subagent_system(None, &ctx.project_overview),
        };
        let mut transcript = vec![Message {
            role: Role::User,
            content: vec![Block::Text { text: args.task }],
        }];
        let spec = LoopSpec {
            system: &system,
            tools: &tools,
            ctx: &child,
            session: None,
            role: args.role,
            cancelled: None,
            compactor: None,
            instructions: None,
        };
        match run_loop(spec, &mut transcript).await {
            Ok(end) if end.stop == StopKind::Answered => Ok(ToolOutput::ok(end.text)),
            Ok(end) => Err(format!("the sub-agent did not finish: {}", end.text)),
            Err(e) => Err(format!("the sub-agent failed: {e}")),
        }
    }
}
