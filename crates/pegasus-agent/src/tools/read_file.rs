//! `read_file{path}`: a text file of the workdir.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Reads a file inside the workdir.
pub struct ReadFile;

/// The arguments of `read_file`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    path: String,
}

impl TypedTool for ReadFile {
    type Args = Args;

    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file. `path` is relative to the project's working directory."
    }

    fn concurrent(&self) -> bool {
        true
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(&[("path", "file path relative to the workdir")], &[])
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        Ok(super::read_text(&ctx.resolve(&args.path)?, &args.path))
    }
}
