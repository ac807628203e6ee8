//! `memory_append{path, content}`: add lines to a memory file.

use serde::Deserialize;

use crate::memory::append_text;
use crate::tool::{parse_args, Tool, ToolCtx, ToolFuture, ToolOutput};

/// Appends to a memory file (created if missing); the usual way to record a new fact.
pub struct MemoryAppend;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

impl Tool for MemoryAppend {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "memory_append",
            "Append text to a memory file (created if missing); `path` is relative to the memory folder.",
            serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"]
            }),
        )
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("memory_append", input) {
                Ok(a) => a,
                Err(e) => return e,
            };
            let path = match super::memory_path(ctx, &args.path) {
                Ok(p) => p,
                Err(e) => return e,
            };
            if path.is_dir() {
                return ToolOutput::error(format!("{} is a folder", args.path));
            }
            match append_text(&path, &args.content) {
                Ok(()) => ToolOutput::ok(format!("appended to memory {}", args.path)),
                Err(e) => ToolOutput::error(format!("cannot append to memory {}: {e}", args.path)),
            }
        })
    }
}
