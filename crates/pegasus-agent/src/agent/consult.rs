//! A role consulted once about a task (DESIGN.md §10): the review gate's reviewer reading a verified
//! diff, the planner splitting a goal. Not a turn of the task: a fresh transcript that is
//! neither recorded in the session nor seen by the task's agent, so what the role says reaches
//! the task only through what the caller makes of it. The role reads the task's instruction
//! files (AGENTS.md) as the task's agent does.

use super::{Agent, Workspace};
use crate::agent_loop::{run_loop, LoopEnd, LoopSpec};
use crate::error::AgentError;
use crate::roles::RoleRun;
use pegasus_proto::llm::{Block, Message, Role};

impl Agent {
    /// Runs `role` once on `text`: the role's prompt, tools and model settings, without
    /// `ask_user` (nobody answers a one-off question), its calls billed to `task_id`. With a
    /// `workspace`, its file tools read the task's worktrees (`repo-id:path`).
    pub async fn consult(
        &self,
        task_id: &str,
        role: RoleRun,
        text: String,
        workspace: Option<&Workspace>,
    ) -> Result<LoopEnd, AgentError> {
        let place = workspace.and_then(|w| {
            w.repos
                .first()
                .map(|(_, first)| (first.clone(), w.repos.clone()))
        });
        // The reviewer and the planner judge by the repos' instruction files too (DESIGN.md §16).
        let (mut instructions, section) = self.instructions(&role.settings, workspace);
        let system = crate::instructions::with_section(&role.system, &section);
        let mut ctx = self.tool_ctx(task_id.to_string(), role.settings, place);
        ctx.project_overview = crate::instructions::with_section(&ctx.project_overview, &section);
        let tools = role.tools.without(crate::tools::ask_user::NAME);
        let mut transcript = vec![Message {
            role: Role::User,
            content: vec![Block::Text { text }],
        }];
        let spec = LoopSpec {
            system: &system,
            tools: &tools,
            ctx: &ctx,
            session: None,
            role: Some(role.role),
            cancelled: None,
            compactor: None,
            instructions: Some(&mut instructions),
        };
        run_loop(spec, &mut transcript).await
    }
}
