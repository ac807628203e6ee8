//! `propose_task{title, goal, priority?, acceptance?}`: a task for the user to approve, in the
//! agent's own project (the maintenance roles' output, DESIGN.md §10). It is created `planned`
//! with its spec frozen; `pegasusctl task approve ID` lets it run.

use std::sync::atomic::Ordering;

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Proposes a task in the agent's own project, created `planned` until the user approves it.
pub struct ProposeTask;

/// Tasks one task may propose (its sub-agents' proposals count with its own).
pub const MAX_PER_TASK: u32 = 5;
/// Proposed tasks a project may hold waiting for the user's approval.
pub const MAX_PLANNED: usize = 50;
/// Longest title, in characters.
pub const MAX_TITLE: usize = 120;
/// Longest goal, in characters.
pub const MAX_GOAL: usize = 8_000;
/// Most acceptance criteria.
pub const MAX_ACCEPTANCE: usize = 20;
/// Longest acceptance criterion, in characters.
pub const MAX_CRITERION: usize = 500;

/// Refuses a proposal too empty or too big, saying what to change.
fn check(args: &Args) -> Result<(), String> {
    if args.title.trim().is_empty() || args.goal.trim().is_empty() {
        return Err("`title` and `goal` must not be empty".into());
    }
    let n = args.title.trim().chars().count();
    if n > MAX_TITLE {
        return Err(format!(
            "`title` is {n} characters, at most {MAX_TITLE}: give a one-line title and put the detail in `goal`"
        ));
    }
    if args.title.trim().contains('\n') {
        return Err("`title` must be one line: put the detail in `goal`".into());
    }
    let n = args.goal.chars().count();
    if n > MAX_GOAL {
        return Err(format!(
            "`goal` is {n} characters, at most {MAX_GOAL}: say what to do and why, briefly"
        ));
    }
    if args.acceptance.len() > MAX_ACCEPTANCE {
        return Err(format!(
            "{} acceptance criteria, at most {MAX_ACCEPTANCE}: keep the ones that decide",
            args.acceptance.len()
        ));
    }
    if let Some(c) = args
        .acceptance
        .iter()
        .find(|c| c.chars().count() > MAX_CRITERION)
    {
        return Err(format!(
            "an acceptance criterion is {} characters, at most {MAX_CRITERION}: one checkable sentence each",
            c.chars().count()
        ));
    }
    if args.priority.is_some_and(|p| p > 3) {
        return Err("`priority` is 0 (highest) to 3".into());
    }
    Ok(())
}

/// The arguments of `propose_task`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    title: String,
    goal: String,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    acceptance: Vec<String>,
}

impl TypedTool for ProposeTask {
    type Args = Args;

    fn name(&self) -> &str {
        "propose_task"
    }

    fn description(&self) -> &str {
        "Propose a task for this project: it is added as planned and runs only when the \
         user approves it. Give a one-line title, a goal precise enough to act on (files, \
         functions, why), and how to tell it is done."
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "goal": {"type": "string"},
                "priority": {"type": "integer", "minimum": 0, "maximum": 3},
                "acceptance": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["title", "goal"]
        })
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        check(&args)?;
        let project = ctx
            .settings
            .project
            .clone()
            .ok_or("only a project's agent can propose its tasks")?;
        let dir = ctx
            .memory_dir
            .parent()
            .ok_or("the project folder is unknown")?
            .to_path_buf();
        ctx.proposed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_PER_TASK).then_some(n + 1)
            })
            .map_err(|_| {
                format!(
                    "this task already proposed {MAX_PER_TASK} tasks, the most one task may; put the rest in your answer for the user"
                )
            })?;
        let made = pegasus_fs::blocking(move || {
            let store = pegasus_tasks::TaskStore::open(&dir, &project)?;
            let planned = store
                .list()?
                .iter()
                .filter(|t| t.state == pegasus_tasks::TaskState::Planned)
                .count();
            if planned >= MAX_PLANNED {
                return Err(pegasus_tasks::TaskError::Invalid(format!(
                    "the project already has {planned} proposed tasks waiting for the user's approval (at most {MAX_PLANNED}); do not propose more until they are approved or cancelled"
                )));
            }
            store.create_frozen(
                pegasus_tasks::NewTask {
                    title: args.title.trim().to_string(),
                    kind: "task".into(),
                    priority: args.priority.unwrap_or(2),
                    role: None,
                    depends_on: Vec::new(),
                    messages: Vec::new(),
                },
                pegasus_tasks::TaskSpec {
                    goal: args.goal,
                    constraints: Vec::new(),
                    acceptance: args.acceptance,
                    role: None,
                    model_policy: None,
                    repos: Vec::new(),
                    budget_usd: None,
                },
                pegasus_tasks::TaskState::Planned,
                "agent",
                "proposed",
            )
        })
        .await;
        match made {
                Ok(Ok(t)) => Ok(ToolOutput::ok(format!(
                    "proposed as task {} (planned; the user approves it with `pegasusctl task approve {}`)",
                    t.id, t.id
                ))),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(format!("proposing failed: {e}")),
            }
    }
}
