//! `memory_write{path, content}`: create or replace a memory file.

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Writes a whole memory file.
pub struct MemoryWrite;

impl TypedTool for MemoryWrite {
    type Args = super::MemoryText;

    fn name(&self) -> &str {
        "memory_write"
    }

    fn description(&self) -> &str {
        "Create or replace a memory file (markdown); `path` is relative to the memory folder, e.g. facts/decisions.md."
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("path", ""), ("content", "")], &[])
    }

    async fn run(&self, args: super::MemoryText, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let path = super::memory_path(ctx, &args.path)?;
        super::write_text(&path, &args.content)
            .map_err(|e| format!("cannot write memory {}: {e}", args.path))?;
        Ok(ToolOutput::ok(format!("wrote memory {}", args.path)))
    }
}
