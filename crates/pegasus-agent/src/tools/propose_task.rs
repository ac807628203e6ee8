//! `propose_task{title, goal, priority?, acceptance?}`: a task for the user to approve, in the
//! agent's own project (the maintenance roles' output, SPEC §10). It is created `planned`
//! with its spec frozen; `pegasusctl task approve ID` lets it run.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput};

pub struct ProposeTask;

#[derive(Deserialize)]
pub(crate) struct Args {
    title: String,
    goal: String,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    acceptance: Vec<String>,
}

impl super::Builtin for ProposeTask {
    const NAME: &'static str = "propose_task";
    const DESCRIPTION: &'static str =
        "Propose a task for this project: it is added as planned and runs only when the \
         user approves it. Give a one-line title, a goal precise enough to act on (files, \
         functions, why), and how to tell it is done.";
    type Args = Args;

    fn schema() -> serde_json::Value {
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
        if args.title.trim().is_empty() || args.goal.trim().is_empty() {
            return Err("`title` and `goal` must not be empty".into());
        }
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
        let made = tokio::task::spawn_blocking(move || {
            let store = pegasus_tasks::TaskStore::open(&dir, &project)?;
            store.create_frozen(
                pegasus_tasks::NewTask {
                    title: args.title.trim().chars().take(120).collect(),
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
