//! `notify{text}`: tell the MainAgent something without being asked.

use serde::Deserialize;

use crate::outbox::Notice;
use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Sends a message to the supervisor (the MainAgent sees it on the project's channel): the
/// project's way to report progress or ask for help on its own initiative.
pub struct Notify;

/// The arguments of `notify`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    text: String,
}

impl TypedTool for Notify {
    type Args = Args;

    fn name(&self) -> &str {
        "notify"
    }

    fn description(&self) -> &str {
        "Send a short message to the MainAgent (progress, a question, a result worth knowing now)."
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("text", "")], &[])
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        if args.text.trim().is_empty() {
            return Err("`text` is empty".into());
        }
        crate::hooks::notify(ctx, &args.text, "notify");
        ctx.notices
            .send(Notice::Notify { text: args.text })
            .map_err(|_| "the supervisor is not listening; the message was not sent")?;
        Ok(ToolOutput::ok("sent"))
    }
}
