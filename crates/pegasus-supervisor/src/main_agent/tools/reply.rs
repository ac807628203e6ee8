//! `reply{channel_type, channel_id, text}`: the MainAgent speaks on a channel. On
//! `project/NAME` the text goes to that project's agent (its answer comes back on the same
//! channel); the user's own channel (`cli`) is answered by the MainAgent's final text.

use super::{arg, request, unexpected};
use crate::front_door::FrontDoor;
use pegasus_agent::{Tool, ToolCtx, ToolOutput};
use pegasus_proto::{
    ctl::{CtlRequest, CtlResponse},
    llm::ToolSpec,
};
use std::{future::Future, pin::Pin};

pub(crate) struct Reply(pub FrontDoor);

impl Tool for Reply {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "reply".into(),
            description: "Send text on a channel. channel_type \"project\" with channel_id = the project name delivers it to that project's agent; its answer arrives later on channel project/NAME.".into(),
            input_schema_json: serde_json::json!({
                "type": "object",
                "properties": {
                    "channel_type": {"type": "string", "enum": ["project", "cli"]},
                    "channel_id": {"type": "string"},
                    "text": {"type": "string"}
                },
                "required": ["channel_type", "channel_id", "text"]
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
            let args = (
                arg(&input, "channel_type"),
                arg(&input, "channel_id"),
                arg(&input, "text"),
            );
            let (kind, id, text) = match args {
                (Ok(k), Ok(i), Ok(t)) => (k, i, t),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return e,
            };
            match kind {
                "project" => {
                    let req = CtlRequest::ProjectSend {
                        name: id.to_string(),
                        text: text.to_string(),
                        wait: false,
                        client_id: None,
                    };
                    match request(&self.0, req).await {
                        Ok(CtlResponse::Sent { id: message_id }) => ToolOutput::ok(format!("delivered to project {id} (message {message_id}); its answer will arrive on channel project/{id}")),
                        Ok(other) => unexpected(other),
                        Err(e) => e,
                    }
                }
                "cli" => ToolOutput::ok(
                    "the user sees your final answer; put the text there".to_string(),
                ),
                other => ToolOutput::error(format!(
                    "unknown channel_type `{other}`: use project or cli"
                )),
            }
        })
    }
}
