//! `memory_list{}`: every memory file with its first line.

use crate::memory::memory_index;
use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Lists the project's memory.
pub struct MemoryList;

impl TypedTool for MemoryList {
    /// Whatever the model passes is ignored.
    type Args = serde::de::IgnoredAny;

    fn name(&self) -> &str {
        "memory_list"
    }

    fn description(&self) -> &str {
        "List the project's memory files (facts/, episodes/, ...) with their first line."
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {}})
    }

    async fn run(&self, _: Self::Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let index = memory_index(&ctx.memory_dir);
        if index.is_empty() {
            return Ok(ToolOutput::ok("(memory is empty)"));
        }
        let lines: Vec<String> = index.iter().map(|(p, l)| format!("{p}: {l}")).collect();
        Ok(ToolOutput::ok(lines.join("\n")))
    }
}
