//! `memory_read{path}`: one memory file.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput};

/// Reads a file of the project's memory.
pub struct MemoryRead;

#[derive(Deserialize)]
pub(crate) struct Args {
    path: String,
}

impl super::Builtin for MemoryRead {
    const NAME: &'static str = "memory_read";
    const DESCRIPTION: &'static str =
        "Read a memory file; `path` is relative to the memory folder (e.g. facts/context.md).";
    const CONCURRENT: bool = true;
    type Args = Args;

    fn schema() -> serde_json::Value {
        super::string_args(&[("path", "")], &[])
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        Ok(super::read_text(
            &super::memory_path(ctx, &args.path)?,
            &args.path,
        ))
    }
}
