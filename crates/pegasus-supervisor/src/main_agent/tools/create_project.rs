//! `create_project{name, goal, background?, constraints?, model?, workdir?}`.

use super::{arg, opt, spec, DoorCall};
use pegasus_agent::ToolOutput;
use pegasus_proto::{
    ctl::{CreateProject as Create, CtlRequest},
    llm::ToolSpec,
};
use serde_json::Value;

pub(super) struct CreateProject;

impl DoorCall for CreateProject {
    fn spec(&self) -> ToolSpec {
        spec(
            "create_project",
            "Create a project (its PROJECT.md, folders and worker process). name: 1-63 lowercase letters, digits, dashes.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"}, "goal": {"type": "string"},
                    "background": {"type": "string"}, "constraints": {"type": "string"},
                    "model": {"type": "string", "description": "provider/model"},
                    "workdir": {"type": "string", "description": "absolute path the project works in, outside the Pegasus home"}
                },
                "required": ["name", "goal"]
            }),
        )
    }

    fn ask(&self, input: &Value) -> Result<CtlRequest, ToolOutput> {
        Ok(CtlRequest::ProjectCreate(Create {
            name: arg(input, "name")?,
            goal: arg(input, "goal")?,
            background: opt(input, "background"),
            constraints: opt(input, "constraints"),
            model: opt(input, "model"),
            workdir: opt(input, "workdir"),
        }))
    }
}
