//! A role consulted once about a task (DESIGN.md §10): the review gate's reviewer reading a verified
//! diff, the planner splitting a goal. Not a turn of the task: a fresh transcript that is
//! neither recorded in the session nor seen by the task's agent, so what the role says reaches
//! the task only through what the caller makes of it. The role reads the task's instruction
//! files (AGENTS.md) as the task's agent does.
//!
//! The role's agent answers: the built-in loop, or the harness (Claude Code, Codex) the role's
//! assignment names — or the project's, when it names none — run read-only in the task's
//! folders (DESIGN.md §15). Either way the caller gets a [`LoopEnd`]: the final answer (stop
//! `Answered`), or the stop that says why there is none, which it reads the same way.

use std::path::PathBuf;

use super::{Agent, Workspace};
use crate::agent_loop::{run_loop, LoopEnd, LoopSpec};
use crate::error::AgentError;
use crate::harness::HarnessConsult;
use crate::roles::RoleRun;
use pegasus_proto::llm::{Block, Message, Role};
use pegasus_tasks::TaskState;

impl Agent {
    /// Asks `role` once about task `task_id`, reading the task's folders `workspace`: the
    /// question is `ask(reading)`, where `reading` tells the role's agent how it reads their
    /// files. The built-in loop runs with the role's prompt, tools and model settings, without
    /// `ask_user` (nobody answers a one-off question); a harness runs read-only in the folders,
    /// under the project's approval gate. Its calls are billed to `task_id`.
    pub async fn consult(
        &self,
        task_id: &str,
        role: RoleRun,
        ask: &(dyn Fn(&str) -> String + Sync),
        workspace: &Workspace,
    ) -> Result<LoopEnd, AgentError> {
        let harness = self.harness_of(role.agent);
        let text = ask(&how_to_read(harness.is_some(), &workspace.repos));
        let Some(harness) = harness else {
            return self.consult_builtin(task_id, role, text, workspace).await;
        };
        // The task cancelled: no use finishing. (A worker that is stopping lets the
        // consultation finish, as it lets the built-in one.)
        let store = self.board.store().clone();
        let watched = task_id.to_string();
        let cancelled = move || {
            store
                .get(&watched)
                .is_ok_and(|t| t.state == TaskState::Cancelled)
        };
        let (_, section) = self.instructions(&role.settings, Some(workspace));
        harness
            .consult(HarnessConsult {
                task_id,
                system: crate::instructions::with_section(&role.system, &section),
                role: role.role,
                prompt: text,
                repos: &workspace.repos,
                settings: &role.settings,
                approvals: self.approvals.clone(),
                cancelled: &cancelled,
            })
            .await
    }

    /// The built-in loop's answer to `text` as `role`.
    async fn consult_builtin(
        &self,
        task_id: &str,
        role: RoleRun,
        text: String,
        workspace: &Workspace,
    ) -> Result<LoopEnd, AgentError> {
        let workspace = Some(workspace);
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

/// How a consulted role reads the files of `repos` (`(id, folder)`): by the built-in file tools'
/// `repo-id:path`, or, for a harness, where they are.
fn how_to_read(harness: bool, repos: &[(String, PathBuf)]) -> String {
    if !harness {
        return "Read their files with read_file as `repo-id:path`.".to_string();
    }
    let mut s = String::from(
        "Read their files where they are (you work in the first folder); they are read-only to you:",
    );
    for (id, dir) in repos {
        s.push_str(&format!("\n- repo `{id}`: {}", dir.display()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_reads_by_repo_id_and_a_harness_by_folder() {
        let repos = vec![
            ("app".to_string(), PathBuf::from("/w/app")),
            ("lib".to_string(), PathBuf::from("/w/lib")),
        ];
        assert_eq!(
            how_to_read(false, &repos),
            "Read their files with read_file as `repo-id:path`."
        );
        assert_eq!(
            how_to_read(true, &repos),
            "Read their files where they are (you work in the first folder); they are read-only to you:\n- repo `app`: /w/app\n- repo `lib`: /w/lib"
        );
    }
}
