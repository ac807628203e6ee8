//! `memory_append{path, content}`: add lines to a memory file.

use crate::memory::append_text;
use crate::tool::{Tool, ToolCtx, ToolFuture, ToolOutput};

/// Appends to a memory file (created if missing); the usual way to record a new fact.
pub struct MemoryAppend;

impl Tool for MemoryAppend {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::memory_text_spec(
            "memory_append",
            "Append text to a memory file (created if missing); `path` is relative to the memory folder.",
        )
    }

    fn call<'a>(&'a self, input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let (args, path) = match super::memory_text("memory_append", input, ctx) {
                Ok(a) => a,
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
