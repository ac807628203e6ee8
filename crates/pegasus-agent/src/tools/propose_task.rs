//! `propose_task{title, goal, priority?, acceptance?}`: a task for the user to approve, in the
//! agent's own project (the maintenance roles' output, SPEC §10). It is created `planned`
//! with its spec frozen; `pegasusctl task approve ID` lets it run.

use serde::Deserialize;

use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

pub struct ProposeTask;

#[derive(Deserialize)]
struct Args {
    title: String,
    goal: String,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    acceptance: Vec<String>,
}

impl Tool for ProposeTask {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "propose_task",
            "Propose a task for this project: it is added as planned and runs only when the \
             user approves it. Give a one-line title, a goal precise enough to act on (files, \
             functions, why), and how to tell it is done.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "goal": {"type": "string"},
                    "priority": {"type": "integer", "minimum": 0, "maximum": 3},
                    "acceptance": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["title", "goal"]
            }),
        )
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("propose_task", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            if args.title.trim().is_empty() || args.goal.trim().is_empty() {
                return ToolOutput::error("`title` and `goal` must not be empty");
            }
            let Some(project) = ctx.settings.project.clone() else {
                return ToolOutput::error("only a project's agent can propose its tasks");
            };
            let Some(dir) = ctx.memory_dir.parent().map(|p| p.to_path_buf()) else {
                return ToolOutput::error("the project folder is unknown");
            };
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
                Ok(Ok(t)) => ToolOutput::ok(format!(
                    "proposed as task {} (planned; the user approves it with `pegasusctl task approve {}`)",
                    t.id, t.id
                )),
                Ok(Err(e)) => ToolOutput::error(e.to_string()),
                Err(e) => ToolOutput::error(format!("proposing failed: {e}")),
            }
        })
    }
}
