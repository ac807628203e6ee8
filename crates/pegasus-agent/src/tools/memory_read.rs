//! `memory_read{path}`: one memory file.

use serde::Deserialize;

use crate::paths::resolve_inside;
use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Reads a file of the project's memory.
pub struct MemoryRead;

#[derive(Deserialize)]
struct Args {
    path: String,
}

impl Tool for MemoryRead {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "memory_read",
            "Read a memory file; `path` is relative to the memory folder (e.g. facts/context.md).",
            serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"]
            }),
        )
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("memory_read", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            if let Err(e) = std::fs::create_dir_all(&ctx.memory_dir) {
                return ToolOutput::error(format!("memory is not available: {e}"));
            }
            match resolve_inside(&ctx.memory_dir, &args.path, "memory folder") {
                Ok(p) => super::read_text(&p, &args.path),
                Err(e) => ToolOutput::error(e),
            }
        })
    }
}
