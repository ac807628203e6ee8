//! `list_projects{}`: every project with its status and worker.

use super::{project_json, request, unexpected};
use crate::front_door::FrontDoor;
use pegasus_agent::{Tool, ToolCtx, ToolOutput};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    llm::ToolSpec,
};
use std::{future::Future, pin::Pin};

pub(crate) struct ListProjects(pub FrontDoor);

impl Tool for ListProjects {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_projects".into(),
            description: "List every project with its status, worker state, model and cost, and what waits for the user (questions of blocked tasks, pending merges).".into(),
            input_schema_json: r#"{"type":"object","properties":{}}"#.into(),
        }
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn call<'a>(
        &'a self,
        _input: serde_json::Value,
        _ctx: &'a ToolCtx,
    ) -> Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>> {
        Box::pin(async move {
            match request(&self.0, CtlRequest::ProjectList { status: None }).await {
                Ok(CtlResponse::Projects(list)) => ToolOutput::ok(
                    serde_json::Value::Array(
                        list.iter()
                            .map(|p| {
                                let mut v = project_json(p);
                                let waiting = pegasus_tasks::waiting_on_user(
                                    &self.0.home().project_dir(&p.name),
                                    &p.name,
                                );
                                if let (Some(obj), false) = (v.as_object_mut(), waiting.is_empty())
                                {
                                    obj.insert("waiting".into(), serde_json::json!(waiting));
                                }
                                v
                            })
                            .collect(),
                    )
                    .to_string(),
                ),
                Ok(other) => unexpected(other),
                Err(e) => e,
            }
        })
    }
}
