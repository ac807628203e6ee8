//! `suspend_project{name}`, `resume_project{name}`, `complete_project{name}`,
//! `archive_project{name}`: one verb of the project lifecycle each (SPEC §4).

use super::{arg, project_json, request, unexpected};
use crate::front_door::FrontDoor;
use pegasus_agent::{Tool, ToolCtx, ToolOutput};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse, LifecycleVerb as Verb},
    llm::ToolSpec,
};
use std::{future::Future, pin::Pin};

pub(crate) struct Lifecycle {
    pub door: FrontDoor,
    pub verb: Verb,
}

impl Tool for Lifecycle {
    fn spec(&self) -> ToolSpec {
        let what = match self.verb {
            Verb::Suspend => {
                "Suspend an active project: its worker stops gracefully, its state is kept."
            }
            Verb::Resume => {
                "Resume a suspended (or crash-looping) project: its worker starts again."
            }
            Verb::Complete => "Mark a project completed and stop its worker.",
            Verb::Archive => "Archive a completed project; nothing is deleted.",
        };
        ToolSpec {
            name: format!("{}_project", self.verb.as_str()),
            description: what.into(),
            input_schema_json:
                r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}"#
                    .into(),
        }
    }

    fn call<'a>(
        &'a self,
        input: serde_json::Value,
        _ctx: &'a ToolCtx,
    ) -> Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>> {
        Box::pin(async move {
            let name = match arg(&input, "name") {
                Ok(n) => n,
                Err(e) => return e,
            };
            let req = CtlRequest::ProjectLifecycle {
                name: name.to_string(),
                verb: self.verb,
            };
            match request(&self.door, req).await {
                Ok(CtlResponse::Project(info)) => ToolOutput::ok(project_json(&info).to_string()),
                Ok(other) => unexpected(other),
                Err(e) => e,
            }
        })
    }
}
