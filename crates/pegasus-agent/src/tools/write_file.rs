//! `write_file{path, content}`: create or replace a file of the workdir.

use serde::Deserialize;

use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Writes a whole file inside the workdir (parent folders are created).
pub struct WriteFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

impl Tool for WriteFile {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "write_file",
            "Create or overwrite a file with `content`. `path` is relative to the working directory; missing folders are created.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "file path relative to the workdir"},
                    "content": {"type": "string", "description": "the whole new content"}
                },
                "required": ["path", "content"]
            }),
        )
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("write_file", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let path = match ctx.resolve_for_write(&args.path) {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e),
            };
            match super::write_text(&path, &args.content) {
                Ok(()) => ToolOutput::ok(format!(
                    "wrote {} bytes to {}",
                    args.content.len(),
                    args.path
                )),
                Err(e) => ToolOutput::error(format!("cannot write {}: {e}", args.path)),
            }
        })
    }
}
