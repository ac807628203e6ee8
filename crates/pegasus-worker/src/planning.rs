//! Planning of code tasks (DESIGN.md §10, seed 003's Planner): with `plan: ROLE` in PROJECT.md, a
//! new code task's goal is first given to that role, which answers with subtasks linked by
//! `depends_on`:
//!
//! ```json
//! {"subtasks": [{"title": "...", "goal": "...", "acceptance": ["..."], "depends_on": []},
//!               {"title": "...", "goal": "...", "acceptance": ["..."], "depends_on": [1]}]}
//! ```
//!
//! `depends_on` numbers earlier subtasks from 1 (see [`pegasus_tasks::split`]). Two or more
//! subtasks: they are created ready, each a code task of its own (worktree, verify, review,
//! merge), run in dependency order, and the task itself waits for them and is done when they
//! all are. Exactly one: the goal needs no split and the task runs as it is. Anything the
//! rules refuse (not that JSON, an unknown field, a step without a goal, a reference to a
//! later step) fails the task with the reason; `pegasusctl task retry` plans it again.
//! Subtasks are never planned again. The planner is the role's agent ([`Agent::consult`]): the
//! built-in loop, or the harness its assignment names, whose final answer is read the same way.

use crate::project_ctx::ProjectCtx;
use pegasus_agent::{Agent, StopKind};
use pegasus_tasks::{check_steps, Step, Task};
use serde::Deserialize;

/// What planning did to a task.
#[derive(Debug, PartialEq)]
pub(crate) enum Planned {
    /// Split: the line for the task's messages.
    Split(String),
    /// One step: run the task as it is.
    Unsplit,
    /// The task cannot start: this line says why.
    Failed(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitDoc {
    subtasks: Vec<Step>,
}

/// The steps of a planner's answer, or why it cannot be used (one line).
pub(crate) fn parse_split(text: &str) -> Result<Vec<Step>, String> {
    let doc: SplitDoc = serde_json::from_str(pegasus_runs::plan::json_part(text)).map_err(|e| {
        format!(
            "expected {{\"subtasks\":[{{\"title\",\"goal\",\"acceptance\":[..],\"depends_on\":[..]}}]}} ({e})"
        )
    })?;
    check_steps(&doc.subtasks)?;
    Ok(doc.subtasks)
}

/// Has role `role_id` plan `task` (ready, never split, not a subtask), reading the repos of
/// `repos` (`(id, path)`); splits it when the plan says so.
pub(crate) async fn plan(
    agent: &Agent,
    ctx: &ProjectCtx,
    role_id: &str,
    task: &Task,
    repos: &[(String, std::path::PathBuf)],
) -> Planned {
    let Some(spec) = task.spec.clone() else {
        return Planned::Unsplit;
    };
    let role = match agent.role_run(task, role_id) {
        Ok(r) => r,
        Err(e) => return Planned::Failed(format!("plan role {role_id}: {e}")),
    };
    let ids: Vec<&str> = repos.iter().map(|(id, _)| id.as_str()).collect();
    let ask = |reading: &str| {
        let mut text = format!(
            "Plan code task {}: {}\n\nGoal:\n{}\n",
            task.id,
            task.title,
            spec.goal.trim()
        );
        text.push_str(&crate::work_queue::spec_lists(&spec));
        text.push_str(&format!(
            "\nRepos: {}. {reading}\n\n\
             Answer with only {{\"subtasks\": [{{\"title\", \"goal\", \"acceptance\": [..], \
             \"depends_on\": [numbers of earlier subtasks, from 1]}}]}}: one subtask if the goal is \
             one change, at most {} otherwise.",
            ids.join(", "),
            pegasus_tasks::MAX_STEPS
        ));
        text
    };
    let workspace = pegasus_agent::Workspace {
        repos: repos.to_vec(),
    };
    let answer = match agent.consult(&task.id, role, &ask, &workspace).await {
        Ok(end) if end.stop == StopKind::Answered => end.text,
        Ok(end) => {
            return Planned::Failed(format!(
                "plan: the planner ({role_id}) did not answer: {}",
                end.text
            ))
        }
        Err(e) => return Planned::Failed(format!("plan: the planner ({role_id}) failed: {e}")),
    };
    crate::code_task::keep_artifacts(ctx, &task.id, &[("plan.md".into(), answer.clone())]);
    let steps = match parse_split(&answer) {
        Ok(s) => s,
        Err(e) => {
            return Planned::Failed(format!("plan: the planner's answer cannot be used: {e}"))
        }
    };
    if steps.len() == 1 {
        tracing::info!(task = %task.id, "the planner kept the task whole");
        return Planned::Unsplit;
    }
    match ctx.desk.board.store().split(&task.id, &steps, "planner") {
        Ok(subs) => {
            let lines: Vec<String> = subs
                .iter()
                .map(|t| {
                    let after = if t.depends_on.is_empty() {
                        String::new()
                    } else {
                        format!(", after {}", t.depends_on.join(", "))
                    };
                    format!("- {} {}{after}", t.id, t.title)
                })
                .collect();
            Planned::Split(format!(
                "Planned: task {} is split into {} subtasks, run in dependency order; it is done when they all are.\n{}",
                task.id,
                subs.len(),
                lines.join("\n")
            ))
        }
        Err(e) => Planned::Failed(format!("plan: cannot split the task: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_plan_is_read_from_its_json_fenced_or_not() {
        let plain = r#"{"subtasks":[{"goal":"lexer"},{"title":"P","goal":"parser","acceptance":["parses"],"depends_on":[1]}]}"#;
        let fenced = format!("Here is the plan:\n```json\n{plain}\n```\n");
        for text in [plain, fenced.as_str()] {
            let steps = parse_split(text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(steps.len(), 2);
            assert_eq!(steps[1].depends_on, vec![1]);
            assert_eq!(steps[1].title.as_deref(), Some("P"));
        }
    }

    #[test]
    fn a_plan_the_rules_refuse_says_why_in_one_line() {
        let cases = [
            ("I would split it in two.", "expected {\"subtasks\""),
            (r#"{"steps":[{"goal":"a"}]}"#, "unknown field `steps`"),
            (
                r#"{"subtasks":[{"goal":"a","owner":"me"}]}"#,
                "unknown field `owner`",
            ),
            (
                r#"{"subtasks":[{"goal":"a","depends_on":[2]},{"goal":"b"}]}"#,
                "step 1 depends on step 2",
            ),
            (
                r#"{"subtasks":[{"goal":"a"},{"goal":"b","depends_on":[2]}]}"#,
                "step 2 depends on step 2",
            ),
            (r#"{"subtasks":[]}"#, "the plan has no steps"),
            (
                r#"{"subtasks":[{"goal":"a"},{"goal":""}]}"#,
                "step 2 has no goal",
            ),
            (
                r#"{"subtasks":[{"goal":"a","depends_on":[-1]}]}"#,
                "expected {\"subtasks\"",
            ),
        ];
        for (text, why) in cases {
            let err = parse_split(text).expect_err(text);
            assert!(err.contains(why) && !err.contains('\n'), "{text}: {err}");
        }
    }
}
