//! `add_task{project, goal, title?, role?, repos?, depends_on?, priority?, acceptance?}`: the
//! same as `pegasusctl task add`.

use super::{arg, request, unexpected};
use crate::front_door::FrontDoor;
use pegasus_agent::{Tool, ToolCtx, ToolOutput};
use pegasus_proto::{
    ctl::{AddTask as Add, CtlRequest, CtlResponse},
    llm::ToolSpec,
};
use std::{future::Future, pin::Pin};

pub(crate) struct AddTask(pub FrontDoor);

/// A list-of-strings argument; absent is empty.
fn strings(input: &serde_json::Value, key: &str) -> Result<Vec<String>, ToolOutput> {
    match input.get(key) {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ToolOutput::error(format!("`{key}` must be a list of strings")))
            })
            .collect(),
        Some(_) => Err(ToolOutput::error(format!(
            "`{key}` must be a list of strings"
        ))),
    }
}

impl Tool for AddTask {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "add_task".into(),
            description: "Add a task to a project's task list; its worker runs it when the tasks it depends on are done, most urgent (priority 0) first. Give a role to have that role do it, repos (ids of the project's repos) for a code task.".into(),
            input_schema_json: serde_json::json!({
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
            .to_string(),
        }
    }

    fn call<'a>(
        &'a self,
        input: serde_json::Value,
        _ctx: &'a ToolCtx,
    ) -> Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>> {
        Box::pin(async move {
            let (project, goal) = match (arg(&input, "project"), arg(&input, "goal")) {
                (Ok(p), Ok(g)) => (p.to_string(), g.to_string()),
                (Err(e), _) | (_, Err(e)) => return e,
            };
            let opt = |k: &str| input.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let priority = match input.get("priority").map(|v| v.as_u64()) {
                None => 2,
                Some(Some(p)) if p <= 3 => p as u8,
                Some(_) => return ToolOutput::error("`priority` must be 0, 1, 2 or 3"),
            };
            let (repos, depends_on, acceptance) = match (
                strings(&input, "repos"),
                strings(&input, "depends_on"),
                strings(&input, "acceptance"),
            ) {
                (Ok(r), Ok(d), Ok(a)) => (r, d, a),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return e,
            };
            let req = Add {
                project,
                goal,
                title: opt("title"),
                role: opt("role"),
                repos,
                depends_on,
                priority,
                acceptance,
            };
            match request(&self.0, CtlRequest::TaskAdd(req)).await {
                Ok(CtlResponse::TaskAdded { id, message }) => {
                    ToolOutput::ok(serde_json::json!({"id": id, "message": message}).to_string())
                }
                Ok(other) => unexpected(other),
                Err(e) => e,
            }
        })
    }
}
