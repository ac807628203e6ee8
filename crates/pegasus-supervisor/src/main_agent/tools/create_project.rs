//! `create_project{name, goal, background?, constraints?, model?, workdir?}`.

use super::{project_answer, request};
use crate::front_door::FrontDoor;
use pegasus_agent::{ToolCtx, ToolOutput, TypedTool};
use pegasus_proto::ctl::{CreateProject as Create, CtlRequest};
use serde::Deserialize;

pub(super) struct CreateProject(pub FrontDoor);

/// The arguments of `create_project`, as its schema describes them.
#[derive(Deserialize)]
pub(super) struct Args {
    name: String,
    goal: String,
    background: Option<String>,
    constraints: Option<String>,
    model: Option<String>,
    workdir: Option<String>,
}

impl TypedTool for CreateProject {
    type Args = Args;

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

    async fn run(&self, args: Args, _ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let req = CtlRequest::ProjectCreate(Create {
            name: args.name,
            goal: args.goal,
            background: args.background,
            constraints: args.constraints,
            model: args.model,
            workdir: args.workdir,
        });
        project_answer(request(&self.0, req).await?)
    }
}
