//! `add_task{project, goal, title?, role?, repos?, depends_on?, priority?, acceptance?}`: the
//! same as `pegasusctl task add`.

use super::{arg, opt, spec, unexpected, DoorCall};
use pegasus_agent::ToolOutput;
use pegasus_proto::{
    ctl::{AddTask as Add, CtlRequest, CtlResponse},
    llm::ToolSpec,
};
use serde::Deserialize;
use serde_json::Value;

pub(super) struct AddTask;

/// A list-of-strings argument; absent is empty.
fn strings(input: &Value, key: &str) -> Result<Vec<String>, ToolOutput> {
    Option::<Vec<String>>::deserialize(input.get(key).unwrap_or(&Value::Null))
        .map(Option::unwrap_or_default)
        .map_err(|_| ToolOutput::error(format!("`{key}` must be a list of strings")))
}

impl DoorCall for AddTask {
    fn spec(&self) -> ToolSpec {
        spec(
            "add_task",
            "Add a task to a project's task list; its worker runs it when the tasks it depends on are done, most urgent (priority 0) first. Give a role to have that role do it, repos (ids of the project's repos) for a code task.",
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
            }),
        )
    }

    fn ask(&self, input: &Value) -> Result<CtlRequest, ToolOutput> {
        let (project, goal) = (arg(input, "project")?, arg(input, "goal")?);
        let priority = match input.get("priority").map(|v| v.as_u64()) {
            None => 2,
            Some(Some(p)) if p <= 3 => p as u8,
            Some(_) => return Err(ToolOutput::error("`priority` must be 0, 1, 2 or 3")),
        };
        Ok(CtlRequest::TaskAdd(Add {
            project,
            goal,
            title: opt(input, "title"),
            role: opt(input, "role"),
            repos: strings(input, "repos")?,
            depends_on: strings(input, "depends_on")?,
            priority,
            acceptance: strings(input, "acceptance")?,
        }))
    }

    fn read(&self, _input: &Value, resp: CtlResponse) -> ToolOutput {
        match resp {
            CtlResponse::TaskAdded { id, message } => {
                ToolOutput::ok(serde_json::json!({"id": id, "message": message}).to_string())
            }
            other => unexpected(other),
        }
    }
}
