//! `create_project{name, goal, background?, constraints?, model?, workdir?}`.

use super::{arg, project_json, request, unexpected};
use crate::front_door::FrontDoor;
use pegasus_agent::{Tool, ToolCtx, ToolOutput};
use pegasus_proto::{
    ctl::{CreateProject as Create, CtlRequest, CtlResponse},
    llm::ToolSpec,
};
use std::{future::Future, pin::Pin};

pub(crate) struct CreateProject(pub FrontDoor);

impl Tool for CreateProject {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "create_project".into(),
            description: "Create a project (its PROJECT.md, folders and worker process). name: 1-63 lowercase letters, digits, dashes.".into(),
            input_schema_json: serde_json::json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"}, "goal": {"type": "string"},
                    "background": {"type": "string"}, "constraints": {"type": "string"},
                    "model": {"type": "string", "description": "provider/model"},
                    "workdir": {"type": "string", "description": "absolute path the project works in"}
                },
                "required": ["name", "goal"]
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
            let (name, goal) = match (arg(&input, "name"), arg(&input, "goal")) {
                (Ok(n), Ok(g)) => (n.to_string(), g.to_string()),
                (Err(e), _) | (_, Err(e)) => return e,
            };
            let opt = |k: &str| input.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let req = Create {
                name,
                goal,
                background: opt("background"),
                constraints: opt("constraints"),
                model: opt("model"),
                workdir: opt("workdir"),
            };
            match request(&self.0, CtlRequest::ProjectCreate(req)).await {
                Ok(CtlResponse::Project(info)) => ToolOutput::ok(project_json(&info).to_string()),
                Ok(other) => unexpected(other),
                Err(e) => e,
            }
        })
    }
}
