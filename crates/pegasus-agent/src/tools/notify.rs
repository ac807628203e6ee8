//! `notify{text}`: tell the MainAgent something without being asked.

use serde::Deserialize;

use crate::outbox::Notice;
use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Sends a message to the supervisor (the MainAgent sees it on the project's channel): the
/// project's way to report progress or ask for help on its own initiative.
pub struct Notify;

#[derive(Deserialize)]
struct Args {
    text: String,
}

impl Tool for Notify {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "notify",
            "Send a short message to the MainAgent (progress, a question, a result worth knowing now).",
            serde_json::json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            }),
        )
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("notify", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            if args.text.trim().is_empty() {
                return ToolOutput::error("`text` is empty");
            }
            match ctx.notices.send(Notice::Notify { text: args.text }) {
                Ok(()) => ToolOutput::ok("sent"),
                Err(_) => {
                    ToolOutput::error("the supervisor is not listening; the message was not sent")
                }
            }
        })
    }
}
