//! `read_file{path}`: a text file of the workdir.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput};

/// Reads a file inside the workdir.
pub struct ReadFile;

#[derive(Deserialize)]
pub(crate) struct Args {
    path: String,
}

impl super::Builtin for ReadFile {
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str =
        "Read a text file. `path` is relative to the project's working directory.";
    const CONCURRENT: bool = true;
    type Args = Args;

    fn schema() -> serde_json::Value {
        super::string_args(&[("path", "file path relative to the workdir")], &[])
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        Ok(super::read_text(&ctx.resolve(&args.path)?, &args.path))
    }
}
