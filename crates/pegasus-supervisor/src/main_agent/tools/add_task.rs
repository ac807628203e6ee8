//! `add_task{project, goal, title?, role?, repos?, depends_on?, priority?, acceptance?}`: the
//! same as `pegasusctl task add`.

use super::{request, unexpected};
use crate::front_door::FrontDoor;
use pegasus_agent::{ToolCtx, ToolOutput, TypedTool};
use pegasus_proto::ctl::{AddTask as Add, CtlRequest, CtlResponse};
use serde::Deserialize;

pub(super) struct AddTask(pub FrontDoor);

/// The arguments of `add_task`, as its schema describes them; an absent (or null) list is
/// empty.
#[derive(Deserialize)]
pub(super) struct Args {
    project: String,
    goal: String,
    title: Option<String>,
    role: Option<String>,
    repos: Option<Vec<String>>,
    depends_on: Option<Vec<String>>,
    /// Checked in [`AddTask::run`], so the model is told the values it may give.
    #[serde(default = "default_priority")]
    priority: u64,
    acceptance: Option<Vec<String>>,
}

/// The priority of a task the model gave none.
fn default_priority() -> u64 {
    2
}

impl TypedTool for AddTask {
    type Args = Args;

    fn name(&self) -> &str {
        "add_task"
    }

    fn description(&self) -> &str {
        "Add a task to a project's task list; its worker runs it when the tasks it depends on are done, most urgent (priority 0) first. Give a role to have that role do it, repos (ids of the project's repos) for a code task."
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "project": {"type": "string"},
                "goal": {"type": "string", "description": "what must be achieved"},
                "title": {"type": "string", "description": "one line for listings"},
                "role": {"type": "string", "description": "coder, researcher, reviewer, ..."},
                "repos": {"type": "array", "items": {"type": "string"}},
                "depends_on": {"type": "array", "items": {"type": "string"}, "description": "task ids that must be done first"},
                "priority": {"type": "integer", "minimum": 0, "maximum": 3},
                "acceptance": {"type": "array", "items": {"type": "string"}, "description": "how to tell the goal is met"}
            },
            "required": ["project", "goal"]
        })
    }

    async fn run(&self, args: Args, _ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let priority = match u8::try_from(args.priority) {
            Ok(p) if p <= 3 => p,
            _ => return Err("`priority` must be 0, 1, 2 or 3".into()),
        };
        let req = CtlRequest::TaskAdd(Add {
            project: args.project,
            goal: args.goal,
            title: args.title,
            role: args.role,
            repos: args.repos.unwrap_or_default(),
            depends_on: args.depends_on.unwrap_or_default(),
            priority,
            acceptance: args.acceptance.unwrap_or_default(),
            budget_usd: None,
        });
        match request(&self.0, req).await? {
            CtlResponse::TaskAdded { id, message } => Ok(ToolOutput::ok(
                serde_json::json!({"id": id, "message": message}).to_string(),
            )),
            other => Err(unexpected(other)),
        }
    }
}
