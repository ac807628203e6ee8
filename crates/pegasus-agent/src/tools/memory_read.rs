//! `memory_read{path}`: one memory file.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Reads a file of the project's memory.
pub struct MemoryRead;

/// The arguments of `memory_read`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    path: String,
}

impl TypedTool for MemoryRead {
    type Args = Args;

    fn name(&self) -> &str {
        "memory_read"
    }

    fn description(&self) -> &str {
        "Read a memory file; `path` is relative to the memory folder (e.g. facts/context.md)."
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("path", "")], &[])
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        Ok(super::read_text(
            &super::memory_path(ctx, &args.path)?,
            &args.path,
        ))
    }
}
