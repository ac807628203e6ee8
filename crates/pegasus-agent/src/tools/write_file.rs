//! `write_file{path, content}`: create or replace a file of the workdir.

use serde::Deserialize;

use crate::tool::{ToolCtx, ToolOutput, TypedTool};

/// Writes a whole file inside the workdir (parent folders are created).
pub struct WriteFile;

/// The arguments of `write_file`, as its schema describes them.
#[derive(Deserialize)]
pub struct Args {
    path: String,
    content: String,
}

impl TypedTool for WriteFile {
    type Args = Args;

    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create or overwrite a file with `content`. `path` is relative to the working directory; missing folders are created."
    }

    fn schema(&self) -> serde_json::Value {
        super::string_args(
            &[
                ("path", "file path relative to the workdir"),
                ("content", "the whole new content"),
            ],
            &[],
        )
    }

    async fn run(&self, args: Args, ctx: &ToolCtx) -> Result<ToolOutput, String> {
        let path = ctx.resolve_for_write(&args.path)?;
        super::write_text(&path, &args.content)
            .map_err(|e| format!("cannot write {}: {e}", args.path))?;
        let len = args.content.len();
        Ok(ToolOutput::ok(format!(
            "wrote {len} bytes to {}",
            args.path
        )))
    }
}
