//! `create_project{name, goal, background?, constraints?, model?, workdir?}`.

use super::{project_answer, request};
use crate::front_door::FrontDoor;
use pegasus_agent::{ToolCtx, ToolOutput, TypedTool};
use pegasus_proto::ctl::{CreateProject as Create, CtlRequest};

pub(super) struct CreateProject(pub FrontDoor);

impl TypedTool for CreateProject {
    /// The request's own arguments: the tool takes exactly what `project create` takes.
    type Args = Create;

    fn name(&self) -> &str {
        "create_project"
    }

    fn description(&self) -> &str {
        "Create a project (its PROJECT.md, folders and worker process). name: 1-63 lowercase letters, digits, dashes."
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"}, "goal": {"type": "string"},
                "background": {"type": "string"}, "constraints": {"type": "string"},
                "model": {"type": "string", "description": "provider/model"},
                "workdir": {"type": "string", "description": "absolute path the project works in, outside the Pegasus home"}
            },
            "required": ["name", "goal"]
        })
    }

    async fn run(&self, args: Create, _ctx: &ToolCtx) -> Result<ToolOutput, String> {
        project_answer(request(&self.0, CtlRequest::ProjectCreate(args)).await?)
    }
}
