//! `reply{channel_type, channel_id, text}`: the MainAgent speaks on a channel. On
//! `project/NAME` the text goes to that project's agent (its answer comes back on the same
//! channel); the user's own channel (`cli`) is answered by the MainAgent's final text.

use super::{request, unexpected};
use crate::front_door::FrontDoor;
use pegasus_agent::{ToolCtx, ToolOutput, TypedTool};
use pegasus_proto::ctl::{CtlRequest, CtlResponse};
use serde::Deserialize;

pub(super) struct Reply(pub FrontDoor);

/// The arguments of `reply`, as its schema describes them.
#[derive(Deserialize)]
pub(super) struct Args {
    channel_type: String,
    channel_id: String,
    text: String,
}

impl TypedTool for Reply {
    type Args = Args;

    fn name(&self) -> &str {
        "reply"
    }

    fn description(&self) -> &str {
        "Send text on a channel. channel_type \"project\" with channel_id = the project name delivers it to that project's agent; its answer arrives later on channel project/NAME."
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "channel_type": {"type": "string", "enum": ["project", "cli"]},
                "channel_id": {"type": "string"},
                "text": {"type": "string"}
            },
            "required": ["channel_type", "channel_id", "text"]
        })
    }

    async fn run(&self, args: Args, _ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let name = args.channel_id;
        let req = match args.channel_type.as_str() {
            "project" => CtlRequest::ProjectSend {
                name: name.clone(),
                text: args.text,
                wait: false,
                client_id: None,
            },
            "cli" => {
                return Ok(ToolOutput::ok(
                    "the user sees your final answer; put the text there",
                ))
            }
            other => {
                return Err(format!(
                    "unknown channel_type `{other}`: use project or cli"
                ))
            }
        };
        match request(&self.0, req).await? {
            CtlResponse::Sent { id: message_id } => Ok(ToolOutput::ok(format!("delivered to project {name} (message {message_id}); its answer will arrive on channel project/{name}"))),
            other => Err(unexpected(other)),
        }
    }
}
