//! `reply{channel_type, channel_id, text}`: the MainAgent speaks on a channel. On
//! `project/NAME` the text goes to that project's agent (its answer comes back on the same
//! channel); the user's own channel (`cli`) is answered by the MainAgent's final text.

use super::{arg, spec, unexpected, DoorCall};
use pegasus_agent::ToolOutput;
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    llm::ToolSpec,
};
use serde_json::Value;

pub(super) struct Reply;

impl DoorCall for Reply {
    fn spec(&self) -> ToolSpec {
        spec(
            "reply",
            "Send text on a channel. channel_type \"project\" with channel_id = the project name delivers it to that project's agent; its answer arrives later on channel project/NAME.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "channel_type": {"type": "string", "enum": ["project", "cli"]},
                    "channel_id": {"type": "string"},
                    "text": {"type": "string"}
                },
                "required": ["channel_type", "channel_id", "text"]
            }),
        )
    }

    fn ask(&self, input: &Value) -> Result<CtlRequest, ToolOutput> {
        let (kind, name, text) = (
            arg(input, "channel_type")?,
            arg(input, "channel_id")?,
            arg(input, "text")?,
        );
        match kind.as_str() {
            "project" => Ok(CtlRequest::ProjectSend {
                name,
                text,
                wait: false,
                client_id: None,
            }),
            "cli" => Err(ToolOutput::ok(
                "the user sees your final answer; put the text there",
            )),
            other => Err(ToolOutput::error(format!(
                "unknown channel_type `{other}`: use project or cli"
            ))),
        }
    }

    fn read(&self, input: &Value, resp: CtlResponse) -> ToolOutput {
        let id = input["channel_id"].as_str().unwrap_or_default();
        match resp {
            CtlResponse::Sent { id: message_id } => ToolOutput::ok(format!("delivered to project {id} (message {message_id}); its answer will arrive on channel project/{id}")),
            other => unexpected(other),
        }
    }
}
