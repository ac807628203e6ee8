//! `suspend_project{name}`, `resume_project{name}`, `complete_project{name}`,
//! `archive_project{name}`: one verb of the project lifecycle each (SPEC §4).

use super::{arg, project_json, upgrade};
use crate::supervisor::Supervisor;
use pegasus_agent::{Tool, ToolCtx, ToolOutput};
use pegasus_proto::llm::ToolSpec;
use pegasus_store::Verb;
use std::{future::Future, pin::Pin, sync::Weak};

pub(crate) struct Lifecycle {
    pub sup: Weak<Supervisor>,
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
            name: format!("{}_project", self.verb),
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
            let sup = match upgrade(&self.sup) {
                Ok(s) => s,
                Err(e) => return e,
            };
            let name = match arg(&input, "name") {
                Ok(n) => n,
                Err(e) => return e,
            };
            match crate::handlers::project::lifecycle(&sup, name, self.verb)
                .await
                .map_err(|e| e.to_string())
            {
                Ok(info) => ToolOutput::ok(project_json(&info).to_string()),
                Err(e) => ToolOutput::error(e),
            }
        })
    }
}
