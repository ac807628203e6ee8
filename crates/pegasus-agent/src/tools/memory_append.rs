//! `memory_append{path, content}`: add lines to a memory file.

use crate::memory::append_text;
use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Appends to a memory file (created if missing); the usual way to record a new fact.
pub struct MemoryAppend;

impl TypedTool for MemoryAppend {
    type Args = super::MemoryText;

    fn name(&self) -> &str {
        "memory_append"
    }

    fn description(&self) -> &str {
        "Append text to a memory file (created if missing); `path` is relative to the memory folder."
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("path", ""), ("content", "")], &[])
    }

    async fn run(&self, args: super::MemoryText, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let path = super::memory_path(ctx, &args.path)?;
        if path.is_dir() {
            return Err(format!("{} is a folder", args.path));
        }
        append_text(&path, &args.content)
            .map_err(|e| format!("cannot append to memory {}: {e}", args.path))?;
        Ok(ToolOutput::ok(format!("appended to memory {}", args.path)))
    }
}
