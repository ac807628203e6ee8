//! `suspend_project{name}`, `resume_project{name}`, `complete_project{name}`,
//! `archive_project{name}`: one verb of the project lifecycle each (SPEC §4).

use super::{arg, spec, DoorCall};
use pegasus_agent::ToolOutput;
use pegasus_proto::{
    ctl::{CtlRequest, LifecycleVerb as Verb},
    llm::ToolSpec,
};
use serde_json::Value;

pub(super) struct Lifecycle(pub Verb);

impl DoorCall for Lifecycle {
    fn spec(&self) -> ToolSpec {
        let what = match self.0 {
            Verb::Suspend => {
                "Suspend an active project: its worker stops gracefully, its state is kept."
            }
            Verb::Resume => {
                "Resume a suspended (or crash-looping) project: its worker starts again."
            }
            Verb::Complete => "Mark a project completed and stop its worker.",
            Verb::Archive => "Archive a completed project; nothing is deleted.",
        };
        spec(
            format!("{}_project", self.0.as_str()),
            what,
            serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        )
    }

    fn ask(&self, input: &Value) -> Result<CtlRequest, ToolOutput> {
        Ok(CtlRequest::ProjectLifecycle {
            name: arg(input, "name")?,
            verb: self.0,
        })
    }
}
