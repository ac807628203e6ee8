//! `list_projects{}`: every project with its status and worker.

use super::{project_json, upgrade};
use crate::supervisor::Supervisor;
use pegasus_agent::{Tool, ToolCtx, ToolOutput};
use pegasus_proto::llm::ToolSpec;
use std::{future::Future, pin::Pin, sync::Weak};

pub(crate) struct ListProjects(pub Weak<Supervisor>);

impl Tool for ListProjects {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_projects".into(),
            description: "List every project with its status, worker state, model and cost.".into(),
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
            let sup = match upgrade(&self.0) {
                Ok(s) => s,
                Err(e) => return e,
            };
            match crate::handlers::project::infos(&sup).map_err(|e| e.to_string()) {
                Ok(list) => ToolOutput::ok(
                    serde_json::Value::Array(list.iter().map(project_json).collect()).to_string(),
                ),
                Err(e) => ToolOutput::error(e),
            }
        })
    }
}
