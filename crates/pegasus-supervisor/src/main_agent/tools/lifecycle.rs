//! `suspend_project{name}`, `resume_project{name}`, `complete_project{name}`,
//! `archive_project{name}`: one verb of the project lifecycle each (DESIGN.md §4).

use super::{project_answer, request};
use crate::front_door::FrontDoor;
use pegasus_agent::{ToolCtx, ToolOutput, TypedTool};
use pegasus_proto::ctl::{CtlRequest, LifecycleVerb as Verb};
use serde::Deserialize;

pub(super) struct Lifecycle(pub FrontDoor, pub Verb);

/// The arguments of a lifecycle tool, as its schema describes them.
#[derive(Deserialize)]
pub(super) struct Args {
    name: String,
}

impl TypedTool for Lifecycle {
    type Args = Args;

    fn name(&self) -> &str {
        match self.1 {
            Verb::Suspend => "suspend_project",
            Verb::Resume => "resume_project",
            Verb::Complete => "complete_project",
            Verb::Archive => "archive_project",
        }
    }

    fn description(&self) -> &str {
        match self.1 {
            Verb::Suspend => {
                "Suspend an active project: its worker stops gracefully, its state is kept."
            }
            Verb::Resume => {
                "Resume a suspended (or crash-looping) project: its worker starts again."
            }
            Verb::Complete => "Mark a project completed and stop its worker.",
            Verb::Archive => "Archive a completed project; nothing is deleted.",
        }
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
    }

    async fn run(&self, args: Args, _ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let req = CtlRequest::ProjectLifecycle {
            name: args.name,
            verb: self.1,
        };
        project_answer(request(&self.0, req).await?)
    }
}
