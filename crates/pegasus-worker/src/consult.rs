//! A role consulted once about a code task (DESIGN.md §10): the reviewer of a verified change,
//! the planner of a new task. The role's agent answers: the built-in loop
//! ([`Agent::consult`]), or the harness (Claude Code, Codex) the role's assignment names — or
//! the project's, when the assignment names none — run read-only in the task's folders
//! (DESIGN.md §15). Either way the caller gets a [`LoopEnd`]: the final answer (stop
//! `Answered`), or the stop that says why there is none, which it reads the same way.

use std::path::PathBuf;
use std::sync::Arc;

use pegasus_agent::agent_loop::LoopEnd;
use pegasus_agent::{Agent, AgentError, Harness, HarnessConsult, RoleRun, Workspace};
use pegasus_tasks::TaskState;

use crate::project_ctx::ProjectCtx;

/// Who answers a consultation: the role's harness, or the built-in loop (`None`).
pub(crate) struct Consultant(Option<Arc<dyn Harness>>);

impl Consultant {
    /// The agent that does `role`'s work in `agent`'s project.
    pub(crate) fn of(agent: &Agent, role: &RoleRun) -> Consultant {
        Consultant(agent.harness_of(role.agent))
    }

    /// How the prompt tells it to read the files of `repos` (`(id, folder)`).
    pub(crate) fn reading(&self, repos: &[(String, PathBuf)]) -> String {
        how_to_read(self.0.is_some(), repos)
    }

    /// Asks `role` about task `task_id` of `ctx`'s project once: `text` is the question, `repos`
    /// (`(id, folder)`) what it reads. Its calls are billed to the task.
    pub(crate) async fn ask(
        self,
        agent: &Agent,
        ctx: &ProjectCtx,
        task_id: &str,
        role: RoleRun,
        text: String,
        repos: &[(String, PathBuf)],
    ) -> Result<LoopEnd, AgentError> {
        let workspace = Workspace {
            repos: repos.to_vec(),
        };
        let Some(harness) = self.0 else {
            return agent.consult(task_id, role, text, Some(&workspace)).await;
        };
        // The task cancelled: no use finishing. (A worker that is stopping lets the
        // consultation finish, as it lets the built-in one.)
        let store = ctx.desk.board.store().clone();
        let watched = task_id.to_string();
        let cancelled = move || {
            store
                .get(&watched)
                .is_ok_and(|t| t.state == TaskState::Cancelled)
        };
        harness
            .consult(HarnessConsult {
                task_id,
                system: agent.with_instructions(&role.system, &role.settings, Some(&workspace)),
                role: role.role,
                prompt: text,
                repos,
                settings: &role.settings,
                approvals: Some(ctx.gate.clone()),
                cancelled: &cancelled,
            })
            .await
    }
}

/// How a consulted role reads the files of `repos`: by the built-in file tools' `repo-id:path`,
/// or, for a harness, where they are.
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
