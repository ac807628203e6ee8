//! `read_file{path}`: a text file of the workdir.

use serde::Deserialize;

use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Reads a file inside the workdir.
pub struct ReadFile;

#[derive(Deserialize)]
struct Args {
    path: String,
}

impl Tool for ReadFile {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "read_file",
            "Read a text file. `path` is relative to the project's working directory.",
            serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "file path relative to the workdir"}},
                "required": ["path"]
            }),
        )
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("read_file", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            match ctx.resolve(&args.path) {
                Ok(p) => super::read_text(&p, &args.path),
                Err(e) => ToolOutput::error(e),
            }
        })
    }
}
