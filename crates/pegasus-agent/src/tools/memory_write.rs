//! `memory_write{path, content}`: create or replace a memory file.

use serde::Deserialize;

use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Writes a whole memory file.
pub struct MemoryWrite;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

impl Tool for MemoryWrite {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "memory_write",
            "Create or replace a memory file (markdown); `path` is relative to the memory folder, e.g. facts/decisions.md.",
            serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"]
            }),
        )
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("memory_write", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let path = match super::memory_path(ctx, &args.path) {
                Ok(p) => p,
                Err(e) => return e,
            };
            match super::write_text(&path, &args.content) {
                Ok(()) => ToolOutput::ok(format!("wrote memory {}", args.path)),
                Err(e) => ToolOutput::error(format!("cannot write memory {}: {e}", args.path)),
            }
        })
    }
}
