//! `memory_list{}`: every memory file with its first line.

use crate::memory::memory_index;
use crate::tool::{Tool, ToolCtx, ToolFuture, ToolOutput};

/// Lists the project's memory.
pub struct MemoryList;

impl Tool for MemoryList {
    fn spec(&self) -> pegasus_proto::llm::ToolSpec {
        super::spec(
            "memory_list",
            "List the project's memory files (facts/, episodes/, ...) with their first line.",
            serde_json::json!({"type": "object", "properties": {}}),
        )
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, _input: serde_json::Value, ctx: &'a ToolCtx) -> ToolFuture<'a> {
        Box::pin(async move {
            let index = memory_index(&ctx.memory_dir);
            if index.is_empty() {
                return ToolOutput::ok("(memory is empty)");
            }
            ToolOutput::ok(
                index
                    .iter()
                    .map(|(p, line)| format!("{p}: {line}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        })
    }
}
