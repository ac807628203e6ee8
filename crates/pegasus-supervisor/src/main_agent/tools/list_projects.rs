//! `list_projects{}`: every project with its status and worker.

use super::{project_json, request, unexpected};
use crate::front_door::FrontDoor;
use pegasus_agent::{ToolCtx, ToolOutput, TypedTool};
use pegasus_proto::ctl::{CtlRequest, CtlResponse};

pub(crate) struct ListProjects(pub FrontDoor);

impl TypedTool for ListProjects {
    /// Whatever the model passes is ignored.
    type Args = serde::de::IgnoredAny;

    fn name(&self) -> &str {
        "list_projects"
    }

    fn description(&self) -> &str {
        "List every project with its status, worker state, model and cost, and what waits for the user (questions of blocked tasks, pending merges)."
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {}})
    }

    fn concurrent(&self) -> bool {
        true
    }

    async fn run(&self, _: Self::Args, _ctx: &ToolCtx) -> Result<ToolOutput, String> {
        match request(&self.0, CtlRequest::ProjectList { status: None }).await? {
            CtlResponse::Projects(list) => Ok(ToolOutput::ok(
                serde_json::Value::Array(
                    list.iter()
                        .map(|p| {
                            let mut v = project_json(p);
                            let waiting = pegasus_tasks::waiting_on_user(
                                &self.0.home().project_dir(&p.name),
                                &p.name,
                            );
                            if let (Some(obj), false) = (v.as_object_mut(), waiting.is_empty()) {
                                obj.insert("waiting".into(), serde_json::json!(waiting));
                            }
                            v
                        })
                        .collect(),
                )
                .to_string(),
            )),
            other => Err(unexpected(other)),
        }
    }
}
