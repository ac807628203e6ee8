//! `memory_write{path, content}`: create or replace a memory file.

use crate::tool::{Tool, ToolCtx, ToolFuture, ToolOutput};

/// Writes a whole memory file.
pub struct MemoryWrite;

impl Tool for MemoryWrite {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::memory_text_spec(
            "memory_write",
            "Create or replace a memory file (markdown); `path` is relative to the memory folder, e.g. facts/decisions.md.",
        )
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let (args, path) = match super::memory_text("memory_write", input, ctx) {
                Ok(a) => a,
                Err(e) => return e,
            };
            match super::write_text(&path, &args.content) {
                Ok(()) => ToolOutput::ok(format!("wrote memory {}", args.path)),
                Err(e) => ToolOutput::error(format!("cannot write memory {}: {e}", args.path)),
            }
        })
    }
}
